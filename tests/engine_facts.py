"""What the engines report about this machine, for expectations that depend on the CPU
(R45): a test asks the engine instead of assuming the CPU it was written on."""

from __future__ import annotations

import functools


@functools.cache
def openvino_default_precision() -> str:
    """OpenVINO CPU's default inference precision here: "bf16" on CPUs with AVX512-BF16/AMX,
    "f16" on some ARM ones, "f32" on AVX2-only CPUs."""
    import openvino as ov

    from studio.core.engines.openvino_io import precision_name

    return precision_name(ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT"))


def openvino_reduces_precision_by_default() -> bool:
    """True when OpenVINO, left to itself, computes below float32 here (the check then warns)."""
    return openvino_default_precision() != "f32"


def gpu_stack_here() -> str | None:
    """What of NVIDIA's stack is installed here (TensorRT's module, ONNX Runtime's CUDA provider), or
    None: asked of the packages themselves, not of the studio's probes, so a test of a CPU-only
    machine can assert "unavailable" instead of passing whatever the studio said."""
    import importlib.util

    import onnxruntime as ort

    found = [name for name, here in (("tensorrt", importlib.util.find_spec("tensorrt") is not None),
                                     ("ORT CUDA", "CUDAExecutionProvider" in ort.get_available_providers()))
             if here]
    return ", ".join(found) or None
