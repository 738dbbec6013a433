"""What gets profiled: engine configurations and (model version x engine) variants.

An engine is named by a short spec a user can type (``ort``, ``ort:cuda``,
``ov``, ``ov:bf16``, ``trt:fp16``); :class:`EngineSpec` is its parsed form and
travels to the worker as JSON (:meth:`EngineSpec.to_args`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from studio.core.choices import comma_items
from studio.core.engines import ENGINES, engine_row, get_engine, resolve_engine_name
from studio.core.errors import StudioError
from studio.core.engines.openvino_ir import IrFile
from studio.core.error_codes import ErrorCode
from studio.core.model import ModelHandle

__all__ = ["EngineSpec", "ProfileTarget", "Variant", "available_engine_specs", "choice_label", "parse_engine",
           "parse_engines", "unavailable_reason"]

_ORT_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
                  "trt": "TensorrtExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
_OV_PRECISIONS = ("f32", "bf16", "f16", "default")
_TRT_PRECISIONS = ("f32", "f16", "bf16")
# converted engine -> the precisions its conversion offers (the engine table's rows)
_CONVERTED_PRECISIONS = {r.name: r.precisions for r in ENGINES if r.converted}
_HINTS = ("LATENCY", "THROUGHPUT")
_OPT_LEVELS = ("disable", "basic", "extended", "all")


@dataclass(frozen=True)
class EngineSpec:
    """One engine configuration.

    ``engine``: onnxruntime | openvino | tensorrt | a converted engine of the table (mnn, litert,
    ...; ``precision``: their conversion's, f32 / f16 / int8 where the row offers it). ``device``: the ORT execution
    provider (cpu, cuda, trt) or the OpenVINO device (CPU). ``precision``:
    OpenVINO's ``INFERENCE_PRECISION_HINT`` (f32 pinned by default; "default"
    lets the plugin choose, bf16 on CPUs that have it) or TensorRT's builder
    precision. ``hint``: OpenVINO's ``PERFORMANCE_HINT``. ``threads``: intra-op
    threads (ORT) / ``INFERENCE_NUM_THREADS`` (OpenVINO); None: engine default.
    ``opt_level``: ORT graph optimization level.
    """

    engine: str
    device: str = "cpu"
    precision: str = "f32"
    hint: str | None = "LATENCY"
    threads: int | None = None
    opt_level: str = "all"

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", resolve_engine_name(self.engine))
        if self.engine == "onnxruntime" and self.device not in _ORT_PROVIDERS:
            raise StudioError(f"unknown ONNX Runtime device {self.device!r}; use cpu, cuda or trt",
                              code=ErrorCode.BAD_OPTION)
        if self.engine == "openvino" and self.precision not in _OV_PRECISIONS:
            raise StudioError(f"OpenVINO precision must be one of {', '.join(_OV_PRECISIONS)}, got "
                              f"{self.precision!r}", code=ErrorCode.BAD_OPTION)
        if self.engine == "tensorrt" and self.precision not in _TRT_PRECISIONS:
            raise StudioError(f"TensorRT precision must be one of {', '.join(_TRT_PRECISIONS)}, got "
                              f"{self.precision!r}", code=ErrorCode.BAD_OPTION)
        if self.engine in _CONVERTED_PRECISIONS and self.precision not in _CONVERTED_PRECISIONS[self.engine]:
            raise StudioError(f"{self.engine} precision must be one of "
                              f"{', '.join(_CONVERTED_PRECISIONS[self.engine])}, got {self.precision!r}",
                              code=ErrorCode.BAD_OPTION)
        if self.hint is not None and self.hint not in _HINTS:
            raise StudioError(f"performance hint must be LATENCY or THROUGHPUT, got {self.hint!r}", code=ErrorCode.BAD_OPTION)
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise StudioError(f"threads must be a positive integer, got {self.threads!r}", code=ErrorCode.BAD_OPTION)
        if self.opt_level not in _OPT_LEVELS:
            raise StudioError(f"opt level must be one of {', '.join(_OPT_LEVELS)}", code=ErrorCode.BAD_OPTION)

    @property
    def key(self) -> str:
        """The spec as typed on the command line (round-trips through :func:`parse_engine`)."""
        if self.engine == "onnxruntime":
            base = "ort" if self.device == "cpu" else f"ort:{'trt' if self.device == 'tensorrt' else self.device}"
        elif self.engine == "openvino":
            base = "ov" if self.precision == "f32" else f"ov:{self.precision}"
            if self.hint == "THROUGHPUT":
                base += ":throughput"
        elif self.engine in _CONVERTED_PRECISIONS:
            base = self.engine if self.precision == "f32" else f"{self.engine}:{self.precision.replace('f16', 'fp16')}"
        else:
            base = "trt" if self.precision == "f32" else f"trt:{self.precision}"
        return base

    @property
    def label(self) -> str:
        if self.engine == "onnxruntime":
            return {"cpu": "ONNX Runtime CPU", "cuda": "ONNX Runtime CUDA"}.get(self.device, "ONNX Runtime TensorRT EP")
        if self.engine == "openvino":
            return (f"OpenVINO CPU {'default precision' if self.precision == 'default' else self.precision}"
                    + (" throughput hint" if self.hint == "THROUGHPUT" else ""))
        if self.engine in _CONVERTED_PRECISIONS:
            return f"{engine_row(self.engine).label} CPU {self.precision}" + (" weights" if self.precision != "f32" else "")
        return f"TensorRT {self.precision}"

    @property
    def ort_providers(self) -> tuple[str, ...]:
        chain = {"cpu": ("CPUExecutionProvider",),
                 "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
                 "trt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
                 "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")}
        return chain[self.device]

    @property
    def needs_gpu(self) -> bool:
        return self.engine == "tensorrt" or (self.engine == "onnxruntime" and self.device != "cpu")

    def with_threads(self, threads: int | None) -> EngineSpec:
        return replace(self, threads=threads)

    def to_args(self) -> dict:
        return {"engine": self.engine, "device": self.device, "precision": self.precision, "hint": self.hint,
                "threads": self.threads, "opt_level": self.opt_level,
                "providers": list(self.ort_providers) if self.engine == "onnxruntime" else None}

    def to_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "engine": self.engine, "device": self.device,
                "precision": self.precision, "hint": self.hint, "threads": self.threads,
                "opt_level": self.opt_level}


def parse_engine(text: str) -> EngineSpec:
    """``ort``, ``ort:cuda``, ``ort:trt``, ``ov``, ``ov:bf16``, ``ov:default``,
    ``ov:throughput`` (``ov:bf16:throughput``), ``trt``, ``trt:fp16``, ``mnn``, ``mnn:fp16``,
    ``mnn:int8``, ``litert``, ``litert:fp16`` (long names
    ``onnxruntime``/``openvino``/``tensorrt`` too)."""
    raw = str(text).strip().lower()
    name, *parts = [p.strip() for p in raw.split(":")]
    engine = resolve_engine_name(name)
    hint = "THROUGHPUT" if "throughput" in parts else "LATENCY"
    rest = [p for p in parts if p not in ("latency", "throughput", "")]
    if len(rest) > 1:
        raise StudioError(f"engine spec {str(text)[:40]!r} has too many parts; e.g. ov:bf16:throughput",
                          code=ErrorCode.BAD_OPTION)
    variant = rest[0] if rest else ""
    precision = {"fp32": "f32", "fp16": "f16", "": "f32"}.get(variant, variant)
    if engine == "onnxruntime":
        if "throughput" in parts:
            raise StudioError("the throughput hint is an OpenVINO setting; use a concurrency sweep for ONNX Runtime",
                              code=ErrorCode.BAD_OPTION)
        return EngineSpec("onnxruntime", device=variant or "cpu")
    if engine == "openvino":
        return EngineSpec("openvino", precision=precision, hint=hint)
    if engine in _CONVERTED_PRECISIONS:
        if "throughput" in parts:
            raise StudioError("the throughput hint is an OpenVINO setting", code=ErrorCode.BAD_OPTION)
        return EngineSpec(engine, precision=precision, hint=None)
    return EngineSpec("tensorrt", precision=precision, hint=None)


def unavailable_reason(spec: EngineSpec) -> str | None:
    """Why ``spec`` cannot run here (one line), or None when it can."""
    adapter = get_engine(spec.engine)
    availability = adapter.available()
    if not availability:
        return f"{availability.reason or adapter.label + ' is not available'} (not available here)"
    if spec.engine == "onnxruntime" and spec.device != "cpu" and "CUDA" not in availability.devices:
        return (f"{spec.label} needs onnxruntime-gpu and an NVIDIA GPU; not available here "
                "(pip install onnxruntime-gpu on a GPU machine)")
    return None


def choice_label(key: str) -> str:
    """A spec's label for a picker, marked when it cannot run here."""
    spec = parse_engine(key)
    return spec.label + (" (not available here)" if unavailable_reason(spec) else "")


def available_engine_specs() -> list[EngineSpec]:
    """``all``: every engine that can run here (ORT CPU, ORT CUDA when the GPU
    package is installed, OpenVINO f32, TensorRT when available)."""
    specs: list[EngineSpec] = []
    ort = get_engine("onnxruntime").available()
    if ort:
        specs.append(EngineSpec("onnxruntime"))
        if "CUDA" in ort.devices:
            specs.append(EngineSpec("onnxruntime", device="cuda"))
    if get_engine("openvino").available():
        specs.append(EngineSpec("openvino"))
    if get_engine("tensorrt").available():
        specs.append(EngineSpec("tensorrt", hint=None))
    for name in _CONVERTED_PRECISIONS:     # the converted rows in the defaults (others: asked by name)
        if engine_row(name).default_check and get_engine(name).available():
            specs.append(EngineSpec(name, hint=None))
    return specs


def parse_engines(items: Iterable[str] | str) -> list[EngineSpec]:
    """A list of specs from strings (comma lists allowed); ``all`` expands to
    :func:`available_engine_specs`. Duplicates are dropped, order kept."""
    out: list[EngineSpec] = []
    for part in comma_items(items):
        specs = available_engine_specs() if part.lower() == "all" else [parse_engine(part)]
        for spec in specs:
            if spec not in out:
                out.append(spec)
    if not out:
        raise StudioError("no engine given; use ort, openvino (ov), tensorrt (trt) or all", code=ErrorCode.BAD_OPTION)
    return out


@dataclass(frozen=True)
class ProfileTarget:
    """A model version to profile: a label the user recognises and its loaded handle.

    ``openvino_ir``: an OpenVINO IR of this ONNX model (an NNCF int4 result) that OpenVINO runs in its
    place; the ONNX handle still gives the names and the decoder contract (only OpenVINO variants are made)."""

    label: str
    handle: ModelHandle
    openvino_ir: IrFile | None = None

    @property
    def path(self) -> Path:
        return self.handle.path


@dataclass(frozen=True)
class Variant:
    """One (version, engine) pair; ``id`` is stable within a profile ("t0-ort", "t1-ov:bf16")."""

    id: str
    target_index: int
    target_label: str
    model_name: str
    sha8: str
    engine: EngineSpec

    @property
    def label(self) -> str:
        return f"{self.target_label} · {self.engine.label}"

    def to_dict(self) -> dict:
        return {"id": self.id, "version": self.target_label, "model": self.model_name, "sha8": self.sha8,
                "engine": self.engine.to_dict(), "label": self.label}


def make_variants(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec]) -> list[Variant]:
    """Versions x engines, version-major (v0·ort, v0·ov, v1·ort, ...); an OpenVINO IR target on
    OpenVINO engines only."""
    variants = []
    for ti, target in enumerate(targets):
        for spec in engines:
            if target.openvino_ir is not None and spec.engine != "openvino":
                continue
            name = target.openvino_ir.xml.name if target.openvino_ir is not None else target.handle.name
            variants.append(Variant(f"t{ti}-{spec.key}", ti, target.label, name, target.handle.short_sha, spec))
    return variants
