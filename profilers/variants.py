"""What gets profiled: engine configurations and (model version x engine) variants.

An engine is named by a short spec a user can type (``ort``, ``ort:cuda``,
``ov``, ``ov:bf16``, ``trt:fp16``); :class:`EngineSpec` is its parsed form and
travels to the worker as JSON (:meth:`EngineSpec.to_args`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

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
_ORT_CHAINS = {"cpu": ("CPUExecutionProvider",),
               "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
               "trt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
               "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")}
_HINTS = ("LATENCY", "THROUGHPUT")
_OPT_LEVELS = ("disable", "basic", "extended", "all")


def _bad(text: str) -> StudioError:
    return StudioError(text, code=ErrorCode.BAD_OPTION)


@dataclass(frozen=True)
class SpecRules:
    """How one engine's spec is checked, spelled, labelled and parsed (this layer's per-engine table,
    :data:`SPEC_RULES`; a converted row of the engine table uses :data:`CONVERTED_RULES`). Each function
    takes the spec (or, for ``parse``, the canonical name, the precision/device part and whether
    ``throughput`` was asked)."""

    check: Callable[[EngineSpec], None]
    key: Callable[[EngineSpec], str]
    label: Callable[[EngineSpec], str]
    parse: Callable[[str, str, str, bool], EngineSpec]      # (engine, variant, precision, throughput)
    needs_gpu: Callable[[EngineSpec], bool] = lambda spec: False
    providers: Callable[[EngineSpec], tuple[str, ...] | None] = lambda spec: None
    defaults: Callable[[str], list[EngineSpec]] = lambda engine: []   # what ``all`` runs where installed
    unavailable: Callable[[EngineSpec, Any], str | None] = lambda spec, availability: None


def _check_precision(spec: EngineSpec) -> None:
    """The precisions the engine's row says it computes in here."""
    row = engine_row(spec.engine)
    allowed = row.precisions if row is not None else ()
    if spec.precision not in allowed:
        name = spec.engine if row is None or row.converted else row.label
        raise _bad(f"{name} precision must be one of {', '.join(allowed)}, got {spec.precision!r}")


def _check_ort(spec: EngineSpec) -> None:
    if spec.device not in _ORT_PROVIDERS:
        raise _bad(f"unknown ONNX Runtime device {spec.device!r}; use cpu, cuda or trt")


def _parse_ort(engine: str, variant: str, precision: str, throughput: bool) -> EngineSpec:
    if throughput:
        raise _bad("the throughput hint is an OpenVINO setting; use a concurrency sweep for ONNX Runtime")
    return EngineSpec(engine, device=variant or "cpu")


def _ort_defaults(engine: str) -> list[EngineSpec]:
    found = get_engine(engine).available()
    if not found:
        return []
    return [EngineSpec(engine)] + ([EngineSpec(engine, device="cuda")] if "CUDA" in found.devices else [])


def _ort_unavailable(spec: EngineSpec, availability: Any) -> str | None:
    if spec.device != "cpu" and "CUDA" not in availability.devices:
        return (f"{spec.label} needs onnxruntime-gpu and an NVIDIA GPU; not available here "
                "(pip install onnxruntime-gpu on a GPU machine)")
    return None


def _ov_key(spec: EngineSpec) -> str:
    base = spec.short if spec.precision == "f32" else f"{spec.short}:{spec.precision}"
    return base + (":throughput" if spec.hint == "THROUGHPUT" else "")


def _parse_converted(engine: str, variant: str, precision: str, throughput: bool) -> EngineSpec:
    if throughput:
        raise _bad("the throughput hint is an OpenVINO setting")
    return EngineSpec(engine, precision=precision, hint=None)


def _if_available(engine: str, **kw: Any) -> list[EngineSpec]:
    return [EngineSpec(engine, **kw)] if get_engine(engine).available() else []


# This layer's per-engine table: each engine's spec rules (a converted row: CONVERTED_RULES).
SPEC_RULES: dict[str, SpecRules] = {
    "onnxruntime": SpecRules(
        check=_check_ort,
        key=lambda s: s.short if s.device == "cpu" else f"{s.short}:{'trt' if s.device == 'tensorrt' else s.device}",
        label=lambda s: {"cpu": "ONNX Runtime CPU", "cuda": "ONNX Runtime CUDA"}.get(s.device,
                                                                                   "ONNX Runtime TensorRT EP"),
        parse=_parse_ort, needs_gpu=lambda s: s.device != "cpu", providers=lambda s: _ORT_CHAINS[s.device],
        defaults=_ort_defaults, unavailable=_ort_unavailable),
    "openvino": SpecRules(
        check=_check_precision, key=_ov_key,
        label=lambda s: (f"OpenVINO CPU {'default precision' if s.precision == 'default' else s.precision}"
                         + (" throughput hint" if s.hint == "THROUGHPUT" else "")),
        parse=lambda engine, variant, precision, throughput: EngineSpec(
            engine, precision=precision, hint="THROUGHPUT" if throughput else "LATENCY"),
        defaults=_if_available),
    "tensorrt": SpecRules(
        check=_check_precision, key=lambda s: s.short if s.precision == "f32" else f"{s.short}:{s.precision}",
        label=lambda s: f"TensorRT {s.precision}",
        parse=lambda engine, variant, precision, throughput: EngineSpec(engine, precision=precision, hint=None),
        needs_gpu=lambda s: True, defaults=lambda engine: _if_available(engine, hint=None)),
}
CONVERTED_RULES = SpecRules(
    check=_check_precision,
    key=lambda s: s.engine if s.precision == "f32" else f"{s.engine}:{s.precision.replace('f16', 'fp16')}",
    label=lambda s: f"{engine_row(s.engine).label} CPU {s.precision}" + (" weights" if s.precision != "f32" else ""),
    parse=_parse_converted,
    # the converted rows in the defaults (others: asked by name)
    defaults=lambda engine: _if_available(engine, hint=None) if engine_row(engine).default_check else [])


def spec_rules(engine: str) -> SpecRules:
    """The rules of ``engine`` (canonical): its own, a converted row's, or a clear refusal."""
    row = engine_row(engine)
    rules = SPEC_RULES.get(engine) or (CONVERTED_RULES if row is not None and row.converted else None)
    if rules is None:
        raise _bad(f"engine {engine!r} cannot be profiled here (no spec rules)")
    return rules


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
    ``opt_level``: ORT graph optimization level. What each engine accepts: :data:`SPEC_RULES`.
    """

    engine: str
    device: str = "cpu"
    precision: str = "f32"
    hint: str | None = "LATENCY"
    threads: int | None = None
    opt_level: str = "all"

    def __post_init__(self) -> None:
        object.__setattr__(self, "engine", resolve_engine_name(self.engine))
        spec_rules(self.engine).check(self)
        if self.hint is not None and self.hint not in _HINTS:
            raise _bad(f"performance hint must be LATENCY or THROUGHPUT, got {self.hint!r}")
        if self.threads is not None and (not isinstance(self.threads, int) or self.threads < 1):
            raise _bad(f"threads must be a positive integer, got {self.threads!r}")
        if self.opt_level not in _OPT_LEVELS:
            raise _bad(f"opt level must be one of {', '.join(_OPT_LEVELS)}")

    @property
    def short(self) -> str:
        """The engine's name as command hints spell it (``ort``, ``ov``... from the engine table)."""
        row = engine_row(self.engine)
        return _SHORT.get(self.engine) or (row.short if row is not None else self.engine)

    @property
    def key(self) -> str:
        """The spec as typed on the command line (round-trips through :func:`parse_engine`)."""
        return spec_rules(self.engine).key(self)

    @property
    def label(self) -> str:
        return spec_rules(self.engine).label(self)

    @property
    def ort_providers(self) -> tuple[str, ...]:
        return _ORT_CHAINS[self.device]

    @property
    def needs_gpu(self) -> bool:
        return spec_rules(self.engine).needs_gpu(self)

    def with_threads(self, threads: int | None) -> EngineSpec:
        return replace(self, threads=threads)

    def to_args(self) -> dict:
        providers = spec_rules(self.engine).providers(self)
        return {"engine": self.engine, "device": self.device, "precision": self.precision, "hint": self.hint,
                "threads": self.threads, "opt_level": self.opt_level,
                "providers": list(providers) if providers is not None else None}

    def to_dict(self) -> dict:
        return {"key": self.key, "label": self.label, "engine": self.engine, "device": self.device,
                "precision": self.precision, "hint": self.hint, "threads": self.threads,
                "opt_level": self.opt_level}


# The profile spec's short name where it is not the row's command-hint name (OpenVINO's row spells itself
# "openvino" in hints; its spec keys have always been "ov").
_SHORT = {"openvino": "ov"}


def parse_engine(text: str) -> EngineSpec:
    """``ort``, ``ort:cuda``, ``ort:trt``, ``ov``, ``ov:bf16``, ``ov:default``,
    ``ov:throughput`` (``ov:bf16:throughput``), ``trt``, ``trt:fp16``, ``mnn``, ``mnn:fp16``,
    ``mnn:int8``, ``litert``, ``litert:fp16`` (long names
    ``onnxruntime``/``openvino``/``tensorrt`` too)."""
    raw = str(text).strip().lower()
    name, *parts = [p.strip() for p in raw.split(":")]
    engine = resolve_engine_name(name)
    rest = [p for p in parts if p not in ("latency", "throughput", "")]
    if len(rest) > 1:
        raise _bad(f"engine spec {str(text)[:40]!r} has too many parts; e.g. ov:bf16:throughput")
    variant = rest[0] if rest else ""
    precision = {"fp32": "f32", "fp16": "f16", "": "f32"}.get(variant, variant)
    return spec_rules(engine).parse(engine, variant, precision, "throughput" in parts)


def unavailable_reason(spec: EngineSpec) -> str | None:
    """Why ``spec`` cannot run here (one line), or None when it can."""
    adapter = get_engine(spec.engine)
    availability = adapter.available()
    if not availability:
        return f"{availability.reason or adapter.label + ' is not available'} (not available here)"
    return spec_rules(spec.engine).unavailable(spec, availability)


def choice_label(key: str) -> str:
    """A spec's label for a picker, marked when it cannot run here."""
    spec = parse_engine(key)
    return spec.label + (" (not available here)" if unavailable_reason(spec) else "")


def available_engine_specs() -> list[EngineSpec]:
    """``all``: every engine that can run here, in the engine table's order (ORT CPU, ORT CUDA when the GPU
    package is installed, OpenVINO f32, TensorRT when available, the converted rows checked by default)."""
    specs: list[EngineSpec] = []
    for row in ENGINES:
        specs.extend(spec_rules(row.name).defaults(row.name) if row.name in SPEC_RULES or row.converted else [])
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
            if target.openvino_ir is not None and engine_row(spec.engine).suffix != target.openvino_ir.xml.suffix:
                continue        # an IR target: the engines that read that file only
            name = target.openvino_ir.xml.name if target.openvino_ir is not None else target.handle.name
            variants.append(Variant(f"t{ti}-{spec.key}", ti, target.label, name, target.handle.short_sha, spec))
    return variants
