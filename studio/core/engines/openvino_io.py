"""Reading a user's ONNX file into OpenVINO, and the compile settings every OpenVINO runner uses.

Owns: the ONNX-frontend-only read (no other frontend may claim a file given as ONNX), its retry at
the run's input shapes for a model with a tensor of unknown rank (a copy in the runner's scratch), the studio's
own IR read, feeds by OpenVINO input index (renamed parameters included), the ``compile_model``
config (``INFERENCE_PRECISION_HINT`` pinned to f32 unless asked) and OpenVINO's element types as
text. Worker side only: it imports ``openvino`` inside its functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import engine_message
from studio.core.save import save_scratch
from studio.core.types import pin_inputs

__all__ = ["UNKNOWN_RANK", "UNKNOWN_RANK_ADVICE", "NotOnnxModel", "UnknownRank", "check_onnx_for_openvino",
           "onnx_frontend", "onnx_output_names", "openvino_inputs", "ov_config", "precision_name", "read_onnx_at_shapes", "read_onnx_for_run",
           "read_onnx_model", "read_studio_ir"]


def openvino_inputs(ports: list, feeds: Mapping[str, Any]) -> dict[int, Any]:
    """Feeds by OpenVINO input index: by tensor name; then, for parameters OpenVINO renamed (a
    sequence folded away hands a parameter its output's name: ONNX ``Y`` becomes ``out``), the
    unmatched feeds in graph order, when exactly as many remain and each shape fits the port."""
    import openvino as ov

    matched = {i: next((n for n in p.get_names() if n in feeds), None) for i, p in enumerate(ports)}
    loose = [i for i, n in matched.items() if n is None]
    rest = [n for n in feeds if n not in matched.values()]
    if loose and len(rest) == len(loose) and all(
            ports[i].get_partial_shape().compatible(ov.PartialShape(list(np.shape(feeds[n]))))
            for i, n in zip(loose, rest)):
        matched.update(zip(loose, rest))
    missing = [sorted(ports[i].get_names())[:3] or i for i, n in matched.items() if n is None]
    if missing:
        raise KeyError(f"missing feed for model input {missing[0]}")
    return {i: feeds[n] for i, n in matched.items()}


class NotOnnxModel(ValueError):
    """OpenVINO's ONNX frontend does not accept the file."""


def onnx_frontend() -> Any:
    from openvino.frontend import FrontEndManager

    frontend = FrontEndManager().load_by_framework("onnx")
    if frontend is None:
        raise RuntimeError("OpenVINO's ONNX frontend is not available in this installation")
    return frontend


def check_onnx_for_openvino(path: str | Path) -> Any:
    """The ONNX frontend, after checking it accepts ``path``: no other frontend (IR, TFLite,
    Paddle...) may ever claim a file given to the studio as ONNX."""
    frontend = onnx_frontend()
    if not frontend.supported(str(path)):
        raise NotOnnxModel(f"{Path(path).name} is not an ONNX model (OpenVINO's ONNX frontend does not accept "
                           "it); other formats are not read")
    return frontend


# The ONNX frontend's words for a tensor whose rank (or shape) it must know and does not (Silero's Conv and
# ReduceMean after a Reshape to a computed shape): fixing the input shapes is what lets it convert.
UNKNOWN_RANK = re.compile(r"rank has to be known|rank\(\)\.is_static|Unsupported input type dynamic", re.I)
UNKNOWN_RANK_ADVICE = ("OpenVINO cannot convert a tensor of unknown rank: fix the input shapes first "
                       "(onnx-studio optimize MODEL --passes fix-input-shapes --dim NAME=VALUE -o fixed.onnx, "
                       "or export --target openvino --shapes NAME=SHAPE)")


class UnknownRank(RuntimeError):
    """OpenVINO's ONNX frontend stopped at a tensor of unknown rank; the message leads with
    :data:`UNKNOWN_RANK_ADVICE`. A runner that knows the run's input shapes converts at them instead
    (:func:`read_onnx_at_shapes`)."""


def read_onnx_model(path: str | Path, extensions: list[str] | None = None) -> Any:
    """An ``ov.Model`` read through the ONNX frontend only (with the custom-op ``extensions`` libraries). A
    conversion that stops at a tensor of unknown rank raises :class:`UnknownRank`, led by what to do (the
    engine's words follow)."""
    frontend = check_onnx_for_openvino(path)
    for lib in extensions or []:
        frontend.add_extension(str(lib))
    try:
        return frontend.convert(frontend.load(str(path)))
    except Exception as exc:
        if UNKNOWN_RANK.search(str(exc)):
            raise UnknownRank(f"{UNKNOWN_RANK_ADVICE}; OpenVINO said: {engine_message(exc, 300)}") from exc
        raise


def read_onnx_at_shapes(path: str | Path, shapes: Mapping[str, Any], folder: Path,
                        extensions: list[str] | None = None) -> tuple[Any, str] | None:
    """``path`` converted with its dynamic inputs fixed at ``shapes`` (the run's feed shapes), for a model whose
    plain read raised :class:`UnknownRank`: the copy (inputs pinned by :func:`studio.core.types.pin_inputs`,
    weights alongside) is written in ``folder``, the runner's own scratch, never beside the user's file, and
    removed once read. Returns (model, the note that says so), or None when no input was dynamic (nothing to
    fix: the caller keeps its error); raises :class:`UnknownRank` when the copy still stops at one."""
    import onnx

    model = onnx.load_model(str(path), load_external_data=True)
    fixed = pin_inputs(model, {n: [int(d) for d in s] for n, s in shapes.items()})
    if not fixed:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / "ov_fixed_shapes.onnx"
    data = folder / "ov_fixed_shapes.onnx.data"
    try:
        save_scratch(model, copy, external=True)   # the runner's own folder; external data: over 2 GiB saves too
        del model
        read = read_onnx_model(copy, extensions)
    except UnknownRank as exc:      # the rank does not follow from the input shapes: the advice would not help
        said = str(exc).split("OpenVINO said: ", 1)[-1]
        raise UnknownRank(f"OpenVINO cannot convert a tensor of unknown rank, even at the input shapes "
                          f"{_shapes_text(shapes, fixed)}: use another engine; OpenVINO said: {said}") from None
    finally:
        copy.unlink(missing_ok=True)  # scratch: the runner's own folder
        data.unlink(missing_ok=True)  # scratch: the runner's own folder
    return read, (f"converted at the input shapes {_shapes_text(shapes, fixed)}: OpenVINO cannot convert a tensor "
                  "of unknown rank")


def read_onnx_for_run(path: str | Path, shapes: Mapping[str, Any] | None, folder: Path,
                      extensions: list[str] | None = None) -> tuple[Any, str | None]:
    """:func:`read_onnx_model`, and where it stops at a tensor of unknown rank and the run's input ``shapes`` are
    known, :func:`read_onnx_at_shapes` in ``folder`` (the job's scratch): (model, the note that says so, or None).
    For jobs that read once at known shapes (NNCF's calibration); the runner re-reads per feed shapes itself."""
    try:
        return read_onnx_model(path, extensions), None
    except UnknownRank:
        read = read_onnx_at_shapes(path, shapes, folder, extensions) if shapes else None
        if read is None:
            raise
        return read


def _shapes_text(shapes: Mapping[str, Any], names: list[str]) -> str:
    return ", ".join(f"{n}={[int(d) for d in shapes[n]]}" for n in names)


def read_studio_ir(path: str | Path, core: Any = None) -> Any:
    """An ``ov.Model`` from an OpenVINO IR the studio itself wrote (an NNCF result, an export) or a user's IR
    the parent checked first (:func:`studio.core.engines.openvino_ir.read_ir`: .bin present and long enough,
    no DTD); user files given as ONNX always go through :func:`read_onnx_model`. ``core``: the runner's own
    (its extensions added), else a fresh one."""
    import openvino as ov

    xml = Path(path)
    if xml.suffix != ".xml" or not xml.with_suffix(".bin").is_file():
        raise ValueError("an OpenVINO IR is an .xml file with its .bin beside it")
    return (core or ov.Core()).read_model(str(xml), str(xml.with_suffix(".bin")))


def precision_name(value: Any) -> str:
    """OpenVINO's element type as text ('f32', 'bf16')."""
    for attr in ("to_string", "get_type_name"):
        fn = getattr(value, attr, None)
        if callable(fn):
            try:
                return str(fn())
            except Exception:  # noqa: BLE001
                continue
    return str(value)


def execution_precisions(compiled: Any) -> dict[str, int]:
    """How many of the compiled model's runtime ops execute in each precision (``runtimePrecision`` of
    ``get_runtime_model()``: f32, bf16, i8, u8...): the engine's own report of what it computes in on
    this machine; {} where the device does not report it."""
    counts: dict[str, int] = {}
    try:
        ops = compiled.get_runtime_model().get_ops()
    except Exception:  # noqa: BLE001 - not every device has a runtime model
        return counts
    for op in ops:
        info = op.get_rt_info()
        if "runtimePrecision" not in info:
            continue
        try:
            name = str(info["runtimePrecision"].astype(str))
        except Exception:  # noqa: BLE001
            name = str(info["runtimePrecision"])
        counts[name] = counts.get(name, 0) + 1
    return counts


def onnx_output_names(path: str | Path) -> list[str] | None:
    """The model's output names in ONNX order (OpenVINO's order may differ)."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        return [o.name for o in model.graph.output]
    except Exception:  # noqa: BLE001 - fall back to OpenVINO's own order
        return None


def ov_config(*, precision: str = "f32", hint: str | None = None, threads: int | None = None,
              perf_counters: bool = False, cache_dir: Path | None = None,
              dynamic_quantization: bool = True) -> dict[str, Any]:
    """compile_model config: precision pinned (f32 unless asked; "default" leaves the plugin's
    choice, bf16 on CPUs that have it), hint, threads, per-layer counters, model cache.
    ``dynamic_quantization=False``: the CPU plugin's dynamic quantization of activations off. It is on by default
    for every MatMul whose weights are stored compressed (int8 -> Convert -> Multiply, NNCF's compress_weights),
    f32 pinned or not: corpus minilm_l6_v2_int8 gives max abs 0.052 vs ONNX Runtime with it, 2.9e-6 without."""
    config: dict[str, Any] = {}
    if precision != "default":
        config["INFERENCE_PRECISION_HINT"] = precision
    if not dynamic_quantization:
        config["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = 0
    if hint:
        config["PERFORMANCE_HINT"] = str(hint)
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if perf_counters:
        config["PERF_COUNT"] = True
    if cache_dir is not None:
        config["CACHE_DIR"] = str(cache_dir)
    return config
