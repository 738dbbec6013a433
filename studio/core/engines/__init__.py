"""Engine adapters: ONNX Runtime, OpenVINO, TensorRT, MNN, LiteRT (one module each).

``get_engine("ort")`` returns the adapter; every adapter runs its engine in a
sandbox worker, never in the calling process. Availability is read from package
metadata (no engine import) and cached; ``available(refresh=True)`` re-reads it.
"""

from __future__ import annotations

from studio.core.engines.base import Availability, EngineAdapter, RunOptions, RunOutput
from studio.core.errors import StudioError

__all__ = ["ENGINE_NAMES", "Availability", "EngineAdapter", "RunOptions", "RunOutput", "all_engines",
           "get_engine", "resolve_engine_name"]

ENGINE_NAMES: tuple[str, ...] = ("onnxruntime", "openvino", "tensorrt", "mnn", "litert")
_ALIASES = {
    "onnxruntime": "onnxruntime", "ort": "onnxruntime", "onnx-runtime": "onnxruntime", "onnx_runtime": "onnxruntime",
    "openvino": "openvino", "ov": "openvino",
    "tensorrt": "tensorrt", "trt": "tensorrt",
    "mnn": "mnn",
    "litert": "litert", "tflite": "litert", "lite-rt": "litert",
}
_instances: dict[str, EngineAdapter] = {}


def resolve_engine_name(name: str) -> str:
    """Canonical engine name for a name or alias; StudioError naming the valid ones."""
    key = str(name).strip().lower()
    if key not in _ALIASES:
        shown = str(name)[:40]
        raise StudioError(f"unknown engine {shown!r}; valid engines: onnxruntime (ort), openvino (ov), "
                          "tensorrt (trt), mnn, litert (tflite)", code="UNKNOWN-ENGINE")
    return _ALIASES[key]


def get_engine(name: str) -> EngineAdapter:
    canonical = resolve_engine_name(name)
    adapter = _instances.get(canonical)
    if adapter is None:
        if canonical == "onnxruntime":
            from studio.core.engines.onnxruntime import OnnxRuntimeEngine

            adapter = OnnxRuntimeEngine()
        elif canonical == "openvino":
            from studio.core.engines.openvino import OpenVinoEngine

            adapter = OpenVinoEngine()
        elif canonical == "mnn":
            from studio.core.engines.mnn import MnnEngine

            adapter = MnnEngine()
        elif canonical == "litert":
            from studio.core.engines.litert import LiteRtEngine

            adapter = LiteRtEngine()
        else:
            from studio.core.engines.tensorrt import TensorRtEngine

            adapter = TensorRtEngine()
        _instances[canonical] = adapter
    return adapter


def all_engines() -> list[EngineAdapter]:
    return [get_engine(name) for name in ENGINE_NAMES]
