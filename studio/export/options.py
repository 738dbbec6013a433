"""What an export was asked to do: targets, precision, shapes, per-target knobs.

Parsing of the user-facing spellings lives here too (``--target ort,openvino``,
``--shapes input=1x3x224x224:4x3x224x224:8x3x224x224``) so the CLI, the UI and
the facade accept exactly the same things.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from pathlib import Path

from studio.core.bounds import bounded_int
from studio.core.choices import comma_items
from studio.core.engines.table import ENGINES
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

TARGETS: tuple[str, ...] = ("onnxruntime", "openvino", "tensorrt", "triton")
# Device formats, converted by their engines' converters (the engine table's converted rows with an export
# label): each asked by name; "mobile" is those in the defaults (mnn, litert); "all" keeps its meaning.
CONVERTED_TARGETS: tuple[str, ...] = tuple(r.name for r in ENGINES if r.converted and r.export_label)
MOBILE_TARGETS: tuple[str, ...] = tuple(r.name for r in ENGINES if r.name in CONVERTED_TARGETS and r.default_check)
_ORDER: tuple[str, ...] = ("onnxruntime", "openvino", "tensorrt", *CONVERTED_TARGETS, "triton")
_ALIASES = {**{a.lower(): r.name for r in ENGINES if r.name in TARGETS or r.name in CONVERTED_TARGETS
               for a in (r.name, *r.aliases)}, "triton": "triton"}
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
OV_PRECISIONS: tuple[str, ...] = ("fp32", "fp16")     # OpenVINO IR weights: as they are, or FP16-compressed
CALIBRATION_METHODS: tuple[str, ...] = ("minmax", "entropy", "percentile")   # passes.quant_tools.METHODS
ORT_LEVELS: tuple[str, ...] = ("basic", "extended", "all")
PORTABLE_ORT_LEVELS: tuple[str, ...] = ("basic", "extended")

Shape = tuple[int, ...]
_SHAPE = re.compile(r"^\d+(x\d+)*$")


@dataclass(frozen=True)
class ShapeRange:
    """min/opt/max shapes of one input (TensorRT profile, OpenVINO bounds, verification at ``opt``)."""

    min: Shape
    opt: Shape
    max: Shape

    def __post_init__(self) -> None:
        if not (len(self.min) == len(self.opt) == len(self.max)):
            raise StudioError("shape range: min, opt and max must have the same rank", code=ErrorCode.BAD_OPTION)
        if any(d < 0 for d in (*self.min, *self.opt, *self.max)):
            raise StudioError("shape range: dims cannot be negative", code=ErrorCode.BAD_OPTION)
        if not all(a <= b <= c for a, b, c in zip(self.min, self.opt, self.max)):
            raise StudioError(f"shape range {self.text()}: needs min <= opt <= max on every axis",
                              code=ErrorCode.BAD_OPTION)

    @property
    def static(self) -> bool:
        return self.min == self.opt == self.max

    def text(self) -> str:
        return ":".join("x".join(map(str, s)) for s in (self.min, self.opt, self.max))

    def to_dict(self) -> dict:
        return {"min": list(self.min), "opt": list(self.opt), "max": list(self.max)}


def _shape(text: str, what: str) -> Shape:
    text = text.strip().lower().replace(",", "x")
    if not _SHAPE.match(text):
        raise StudioError(f"{what}: '{text[:40]}' is not a shape like 1x3x224x224", code=ErrorCode.BAD_OPTION)
    return _bounded(tuple(int(d) for d in text.split("x")), what)


def _bounded(shape: Shape, what: str) -> Shape:
    """``shape`` when every dim is from 1 to 2^31 - 1, as --dim takes them: a 0 dim passed here and crashed
    the engines' verification runs (ONNX Runtime SIGABRT, MNN SIGSEGV) instead of one line."""
    for axis, d in enumerate(shape):
        bounded_int(d, f"{what} dim {axis}")
    return shape


def parse_shape_spec(spec: str) -> tuple[str, ShapeRange]:
    """``NAME=MIN:OPT:MAX`` (or ``NAME=SHAPE`` for a static shape) -> (name, ShapeRange).

    The name is everything before the last ``=``, so input names with ``=`` or
    ``:`` in them still work."""
    name, sep, shapes = spec.rpartition("=")
    if not sep or not name or not shapes:
        raise StudioError(f"--shapes expects NAME=MIN:OPT:MAX or NAME=SHAPE, got '{spec[:60]}'",
                          code=ErrorCode.BAD_OPTION)
    parts = shapes.split(":")
    if len(parts) == 1:
        s = _shape(parts[0], f"--shapes {name[:40]}")
        return name, ShapeRange(s, s, s)
    if len(parts) != 3:
        raise StudioError(f"--shapes {name[:40]}: give MIN:OPT:MAX (three shapes) or one shape",
                          code=ErrorCode.BAD_OPTION)
    lo, opt, hi = (_shape(p, f"--shapes {name[:40]}") for p in parts)
    return name, ShapeRange(lo, opt, hi)


def parse_shapes(specs: Iterable[str] | Mapping[str, object] | None) -> dict[str, ShapeRange]:
    """Specs from the CLI/UI (strings) or a mapping name -> ShapeRange / (min, opt, max) / shape."""
    if not specs:
        return {}
    out: dict[str, ShapeRange] = {}
    if isinstance(specs, Mapping):
        for name, value in specs.items():
            if isinstance(value, ShapeRange):
                out[str(name)] = value
            elif isinstance(value, str):
                out.update([parse_shape_spec(f"{name}={value}")])
            else:
                seq = list(value)  # type: ignore[arg-type]
                what = f"shapes for {str(name)[:40]!r}"
                if seq and all(isinstance(d, int) for d in seq):
                    s = _bounded(tuple(seq), what)
                    out[str(name)] = ShapeRange(s, s, s)
                elif len(seq) == 3:
                    out[str(name)] = ShapeRange(*(_bounded(tuple(int(d) for d in s), what) for s in seq))
                else:
                    raise StudioError(f"shapes for {str(name)[:40]!r}: give (min, opt, max) or one shape",
                                      code=ErrorCode.BAD_OPTION)
        return out
    for spec in specs:
        name, rng = parse_shape_spec(str(spec))
        out[name] = rng
    return out


def resolve_targets(targets: str | Iterable[str]) -> tuple[str, ...]:
    """'all', 'ort,openvino', ['trt', 'triton'] -> canonical target names in a fixed order."""
    wanted: set[str] = set()
    for name in (raw.lower() for raw in comma_items(targets)):
        if name == "all":
            wanted.update(TARGETS)
            continue
        if name == "mobile":
            wanted.update(MOBILE_TARGETS)
            continue
        if name not in _ALIASES:
            raise StudioError(f"unknown export target '{name[:30]}'; choose from ort, openvino, tensorrt, "
                              f"triton, {', '.join(CONVERTED_TARGETS)}, all or mobile", code=ErrorCode.BAD_OPTION)
        wanted.add(_ALIASES[name])
    if not wanted:
        raise StudioError("no export target given; choose from ort, openvino, tensorrt, triton or all",
                          code=ErrorCode.BAD_OPTION)
    return tuple(t for t in _ORDER if t in wanted)


def parse_ov_precisions(value: str | Iterable[str]) -> tuple[str, ...]:
    """'fp32,fp16' / ['fp16'] -> ('fp32', 'fp16') in the order given, duplicates dropped."""
    out: list[str] = []
    for name in (raw.lower() for raw in comma_items(value)):
        if name not in OV_PRECISIONS:
            raise StudioError(f"OpenVINO IR precision must be fp32 or fp16, got {name[:20]!r}",
                              code=ErrorCode.BAD_OPTION)
        if name not in out:
            out.append(name)
    if not out:
        raise StudioError("give at least one OpenVINO IR precision: fp32, fp16 or fp32,fp16", code=ErrorCode.BAD_OPTION)
    return tuple(out)


@dataclass(frozen=True)
class ExportOptions:
    """Everything that shapes the artifacts. Defaults are the portable, verified choice."""

    targets: tuple[str, ...] = TARGETS
    preset: str | None = None                   # optimization preset run first (the deploy model)
    precision: str = "fp32"                     # fp32 | fp16 | int8
    calibration: Path | None = None             # calibration data for int8 (quantize-int8-static)
    calibration_method: str = "minmax"          # minmax | entropy | percentile (int8 calibration)
    shapes: Mapping[str, ShapeRange] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)   # the model's dims setting: verification sizes, profile opt
    name: str | None = None                     # bundle / Triton model name (sanitized)
    ort_level: str = "extended"                 # basic | extended (portable) | all (hardware-specific)
    ort_format: bool = True                     # also write the .ort format
    external_data: bool | None = None           # None: by size (see onnxruntime.py)
    max_batch: int = 8                          # Triton max_batch_size, TensorRT profile max for batch dims
    preferred_batch_sizes: tuple[int, ...] | None = None   # Triton dynamic batcher (None: derived)
    queue_delay_us: int = 100                   # Triton dynamic batcher max queue delay
    instances: int = 1                          # Triton instance_group count
    plugins: tuple[Path, ...] = ()              # TensorRT plugin libraries to ship and load
    ov_precisions: tuple[str, ...] | None = None   # OpenVINO IRs to write: fp32 and/or fp16 (None: from precision)
    ort_custom_ops: tuple[Path, ...] = ()       # ONNX Runtime custom-op libraries (register_custom_ops_library)
    ov_extensions: tuple[Path, ...] = ()        # OpenVINO extension libraries (core.add_extension)
    workspace_mib: int = 4096                   # TensorRT builder workspace
    bench_runs: int = 5                         # timed inferences per artifact (benchmark figures)
    zip: bool = True                            # also write <bundle>.zip
    request: Mapping[str, Any] | None = field(default=None, compare=False)   # the ExportRequest (manifest provenance)

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise StudioError(f"precision must be one of {', '.join(PRECISIONS)}, got {str(self.precision)[:20]!r}",
                              code=ErrorCode.BAD_OPTION)
        if self.calibration_method not in CALIBRATION_METHODS:
            raise StudioError(f"calibration method must be one of {', '.join(CALIBRATION_METHODS)}, "
                              f"got {str(self.calibration_method)[:20]!r}", code=ErrorCode.BAD_OPTION)
        if self.ort_level not in ORT_LEVELS:
            raise StudioError(f"ORT optimization level must be one of {', '.join(ORT_LEVELS)}, "
                              f"got {str(self.ort_level)[:20]!r}", code=ErrorCode.BAD_OPTION)
        for label, value, low in (("max_batch", self.max_batch, 1), ("instances", self.instances, 1),
                                  ("workspace_mib", self.workspace_mib, 16), ("bench_runs", self.bench_runs, 1),
                                  ("queue_delay_us", self.queue_delay_us, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise StudioError(f"{label} must be an integer >= {low}, got {value!r}", code=ErrorCode.BAD_OPTION)
        for key, value in dict(self.dims).items():
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise StudioError(f"dim '{str(key)[:40]}' must be a positive integer, got {value!r}",
                                  code=ErrorCode.BAD_OPTION)
        object.__setattr__(self, "dims", dict(self.dims))
        object.__setattr__(self, "targets", resolve_targets(self.targets))
        object.__setattr__(self, "shapes", parse_shapes(self.shapes))
        object.__setattr__(self, "plugins", tuple(Path(p) for p in self.plugins))
        for label in ("ort_custom_ops", "ov_extensions"):
            libs = tuple(Path(p) for p in getattr(self, label))
            for lib in libs:
                if not lib.is_file():
                    raise StudioError(f"{label.replace('_', ' ')}: library '{lib.name[:60]}' does not exist or is "
                                      "not a file", code=ErrorCode.BAD_OPTION)
            object.__setattr__(self, label, libs)
        if self.ov_precisions is not None:
            object.__setattr__(self, "ov_precisions", parse_ov_precisions(self.ov_precisions))
        if self.preferred_batch_sizes is not None:
            sizes = tuple(int(b) for b in self.preferred_batch_sizes)
            if any(b < 1 or b > self.max_batch for b in sizes):
                raise StudioError("preferred batch sizes must lie in 1..max_batch", code=ErrorCode.BAD_OPTION)
            object.__setattr__(self, "preferred_batch_sizes", sizes)

    @property
    def openvino_precisions(self) -> tuple[str, ...]:
        """The IRs the OpenVINO target writes: ``ov_precisions``, else FP16-compressed for ``--precision fp16``
        and FP32 otherwise. The first one is the main IR (``model.xml``, the one Triton serves)."""
        if self.ov_precisions:
            return self.ov_precisions
        return ("fp16",) if self.precision == "fp16" else ("fp32",)

    @property
    def ort_portable(self) -> bool:
        return self.ort_level in PORTABLE_ORT_LEVELS

    def to_dict(self) -> dict:
        return {"targets": list(self.targets), "preset": self.preset, "precision": self.precision,
                "calibration": self.calibration.name if self.calibration else None,
                "calibration_method": self.calibration_method,
                "shapes": {k: v.to_dict() for k, v in self.shapes.items()}, "dims": dict(self.dims), "name": self.name,
                "ort_level": self.ort_level, "ort_format": self.ort_format, "external_data": self.external_data,
                "max_batch": self.max_batch, "preferred_batch_sizes": list(self.preferred_batch_sizes or ()),
                "queue_delay_us": self.queue_delay_us, "instances": self.instances,
                "plugins": [p.name for p in self.plugins], "workspace_mib": self.workspace_mib,
                "ov_precisions": list(self.openvino_precisions),
                "ort_custom_ops": [p.name for p in self.ort_custom_ops],
                "ov_extensions": [p.name for p in self.ov_extensions],
                "bench_runs": self.bench_runs, "zip": self.zip}
