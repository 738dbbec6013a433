"""Triton target: a model repository with one model per backend.

    triton/model_repository/
      <name>_onnxruntime/config.pbtxt   1/model.onnx   (1/model.onnx/ directory when weights are external)
      <name>_openvino/config.pbtxt      1/model.xml 1/model.bin
      <name>_tensorrt/config.pbtxt      1/model.plan (built on a GPU machine; README.md says how)

``config.pbtxt`` is built with Triton's own ``ModelConfig`` protobuf
(``tritonclient.grpc.model_config_pb2``) and written with
``google.protobuf.text_format``, then parsed back with the same schema and its
fields checked against the model. Inputs and outputs carry Triton dtypes and
dims (``-1`` where dynamic); when every input and output starts with the same
dynamic dim, that dim is the batch: ``max_batch_size`` is set, the dims leave it
out and the dynamic batcher is on. Scalars become ``dims: [1]`` with an empty
``reshape``. Each model file is run through its engine and compared with the
original (the TensorRT plan only where TensorRT and a GPU exist).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.errors import StudioError
from studio.core.model import model_weight_bytes
from studio.core.paths import atomic_write_text, safe_name
from studio.core.types import TensorInfo
from studio.export.context import ExportContext
from studio.export.files import copy_file, link_or_copy, write_model_copy
from studio.export.reference import criteria_for, verify_outputs
from studio.export.results import ERROR, FAILED, NOT_VERIFIED, PASSED, Artifact, TargetResult, Verification
from studio.inspect.shapes import sandboxed_shapes
from studio.export import openvino as ov_target
from studio.export import tensorrt as trt_target
from studio.export.results import target_result
from studio.export.customops import TRITON_MOUNT, ship
from studio.core.save import EXTERNAL_DATA_THRESHOLD
from studio.export.onnxruntime import run_artifact
from studio.core.engines.tensorrt import TensorRtEngine
from studio.core.error_codes import ErrorCode

TRITON_DTYPES: dict[str, str] = {
    "bool": "TYPE_BOOL", "uint8": "TYPE_UINT8", "uint16": "TYPE_UINT16", "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64", "int8": "TYPE_INT8", "int16": "TYPE_INT16", "int32": "TYPE_INT32", "int64": "TYPE_INT64",
    "float16": "TYPE_FP16", "float32": "TYPE_FP32", "float64": "TYPE_FP64", "string": "TYPE_STRING",
    "bfloat16": "TYPE_BF16",
}
# Triton's backends the bundle serves, with the model config's `platform` each needs ("" where none).
PLATFORMS = {"onnxruntime": "onnxruntime_onnx", "openvino": "", "tensorrt": "tensorrt_plan"}
BACKENDS = tuple(PLATFORMS)


def model_config_pb2() -> Any:
    """Triton's ModelConfig schema (tritonclient[grpc]); a clear error when it is missing."""
    try:
        from tritonclient.grpc import model_config_pb2 as pb
    except Exception as exc:  # ImportError, or tritonclient without its grpc extra (RuntimeError)
        raise StudioError("Triton export needs Triton's model-config schema: pip install 'tritonclient[grpc]' "
                          f"({type(exc).__name__})", code=ErrorCode.MISSING_DEPENDENCY) from None
    return pb


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str                     # TYPE_FP32...
    dims: tuple[int, ...]          # without the batch dim when batching
    scalar: bool = False           # rank 0: dims [1] + empty reshape


@dataclass(frozen=True)
class IoPlan:
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    notes: tuple[str, ...] = ()


def triton_dtype(info: TensorInfo) -> str:
    dtype = TRITON_DTYPES.get(info.dtype) if info.kind == "tensor" else None
    if dtype is None:
        raise StudioError(f"{info.name[:60]!r} has dtype {info.dtype}, which Triton has no type for",
                          code=ErrorCode.TRITON_DTYPE)
    return dtype


def io_plan(inputs: Sequence[TensorInfo], outputs: Sequence[TensorInfo], max_batch: int,
            fixed: dict[str, tuple[int, ...]] | None = None, batch_limit: int | None = None) -> IoPlan:
    """Triton dims for the model's I/O. ``fixed``: per input, a static shape the artifact was
    built with (its dims become concrete). ``batch_limit`` caps max_batch_size (a TensorRT profile)."""
    fixed = fixed or {}
    notes: list[str] = []

    def dims_of(info: TensorInfo) -> list[int] | None:
        if info.shape is None:
            return None
        if info.name in fixed:
            return list(fixed[info.name])
        return [d if isinstance(d, int) else -1 for d in info.shape]

    everything = [*inputs, *outputs]
    leads = {(i.shape[0] if i.shape else None) for i in everything}
    batch_symbol = next(iter(leads)) if len(leads) == 1 else None
    batching = (isinstance(batch_symbol, str) and all(i.shape and i.name not in fixed for i in inputs))
    mbs = min(max_batch, batch_limit) if batching and batch_limit else (max_batch if batching else 0)
    if batching and mbs < 1:
        batching, mbs = False, 0
    if not batching:
        notes.append("no batch dim shared by every input and output: max_batch_size 0, full shapes in dims")
    else:
        notes.append(f"dim '{batch_symbol}' is the batch of every input and output: max_batch_size {mbs}, "
                     "dynamic batching on")

    def spec(info: TensorInfo) -> TensorSpec:
        dims = dims_of(info)
        if dims is None:
            notes.append(f"rank of {info.name[:60]!r} unknown: dims [-1] (fill in the real rank)")
            return TensorSpec(info.name, triton_dtype(info), (-1,))
        if batching:
            dims = dims[1:]
        if not dims:
            return TensorSpec(info.name, triton_dtype(info), (1,), scalar=True)
        return TensorSpec(info.name, triton_dtype(info), tuple(dims))

    return IoPlan(mbs, tuple(spec(i) for i in inputs), tuple(spec(o) for o in outputs), tuple(notes))


def preferred_sizes(max_batch: int, given: Sequence[int] | None) -> list[int]:
    if given:
        return sorted(set(int(b) for b in given))
    return sorted({b for b in (max_batch // 2, max_batch) if b >= 2}) or [max_batch]


def build_config(name: str, backend: str, plan: IoPlan, *, instances: int, kind: str,
                 preferred: Sequence[int], queue_delay_us: int, op_libraries: Sequence[str] = ()) -> Any:
    """A ModelConfig message for one backend."""
    pb = model_config_pb2()
    cfg = pb.ModelConfig(name=name, max_batch_size=plan.max_batch_size)
    if backend not in PLATFORMS:
        raise StudioError(f"unknown Triton backend {backend!r}")
    platform = PLATFORMS[backend]
    if platform:
        cfg.platform = platform
    cfg.backend = backend
    for s in plan.inputs:
        i = cfg.input.add(name=s.name, data_type=getattr(pb, s.dtype), dims=list(s.dims))
        if s.scalar:
            i.reshape.SetInParent()
    for s in plan.outputs:
        o = cfg.output.add(name=s.name, data_type=getattr(pb, s.dtype), dims=list(s.dims))
        if s.scalar:
            o.reshape.SetInParent()
    if plan.max_batch_size > 0:
        cfg.dynamic_batching.preferred_batch_size.extend([b for b in preferred if b <= plan.max_batch_size])
        cfg.dynamic_batching.max_queue_delay_microseconds = int(queue_delay_us)
    if op_libraries:   # custom-op libraries: the ONNX Runtime backend registers them (RegisterCustomOpsLibrary)
        cfg.model_operations.op_library_filename.extend(list(op_libraries))
    group = cfg.instance_group.add(count=int(instances))
    group.kind = pb.ModelInstanceGroup.KIND_GPU if kind == "gpu" else pb.ModelInstanceGroup.KIND_CPU
    return cfg


def config_text(cfg: Any) -> str:
    from google.protobuf import text_format

    return text_format.MessageToString(cfg)


def parse_config(text: str) -> Any:
    """Parse config.pbtxt with Triton's schema (unknown fields are errors)."""
    from google.protobuf import text_format

    pb = model_config_pb2()
    return text_format.Parse(text, pb.ModelConfig())


def config_problems(cfg: Any, name: str, backend: str, plan: IoPlan) -> list[str]:
    """Differences between a parsed config and what the model needs."""
    pb = model_config_pb2()
    problems = []
    if cfg.name != name:
        problems.append(f"name {cfg.name!r} != model directory {name!r}")
    want_platform = {"onnxruntime": "onnxruntime_onnx", "tensorrt": "tensorrt_plan"}.get(backend, "")
    if cfg.platform != want_platform or cfg.backend != backend:
        problems.append(f"platform/backend {cfg.platform!r}/{cfg.backend!r} do not match {backend}")
    if cfg.max_batch_size != plan.max_batch_size:
        problems.append(f"max_batch_size {cfg.max_batch_size} != {plan.max_batch_size}")
    for kind, got, want in (("input", cfg.input, plan.inputs), ("output", cfg.output, plan.outputs)):
        if [t.name for t in got] != [s.name for s in want]:
            problems.append(f"{kind} names {[t.name for t in got][:5]} != model {[s.name for s in want][:5]}")
            continue
        for t, s in zip(got, want):
            if pb.DataType.Name(t.data_type) != s.dtype:
                problems.append(f"{kind} {t.name[:40]!r} type {pb.DataType.Name(t.data_type)} != {s.dtype}")
            if tuple(t.dims) != s.dims:
                problems.append(f"{kind} {t.name[:40]!r} dims {list(t.dims)} != {list(s.dims)}")
            if not t.dims:
                problems.append(f"{kind} {t.name[:40]!r} has empty dims (Triton needs rank >= 1)")
    if cfg.max_batch_size > 0 and not cfg.HasField("dynamic_batching"):
        problems.append("batching model without dynamic_batching")
    return problems


# ---------------------------------------------------------------------------- the target

def _output_infos(ctx: ExportContext, model: Path) -> tuple[TensorInfo, ...]:
    """Output types/shapes: declared, else inferred (sandboxed), else the reference's rank."""
    import onnx


    outputs = list(ctx.deploy_facts.outputs)
    if all(o.shape is not None for o in outputs):
        return tuple(outputs)
    proto = onnx.load_model(str(model), load_external_data=False)
    table, _ = sandboxed_shapes(model, proto, None, pool_key=ctx.pool_key)
    out = []
    for o in outputs:
        info = table.get(o.name) if o.shape is None else o
        if (info is None or info.shape is None) and ctx.reference.outputs and o.name in ctx.reference.outputs:
            import numpy as np

            rank = np.ndim(ctx.reference.outputs[o.name])
            info = TensorInfo(o.name, o.dtype, tuple(None for _ in range(rank)), o.kind, o.elem_type)
        out.append(info if info is not None and info.dtype not in ("undefined", "") else o)
    return tuple(out)


def _write_config(ctx: ExportContext, folder: Path, name: str, backend: str, plan: IoPlan, kind: str,
                  op_libraries: Sequence[str] = ()) -> tuple[Artifact, list[str]]:
    opts = ctx.options
    cfg = build_config(name, backend, plan, instances=opts.instances, kind=kind,
                       preferred=preferred_sizes(plan.max_batch_size or 1, opts.preferred_batch_sizes),
                       queue_delay_us=opts.queue_delay_us, op_libraries=op_libraries)
    path = folder / "config.pbtxt"
    atomic_write_text(path, config_text(cfg))
    problems = config_problems(parse_config(path.read_text()), name, backend, plan)
    v = Verification(FAILED if problems else PASSED,
                     problems[0] if problems else "parsed with Triton's ModelConfig schema; names, types, dims, "
                                                  "max_batch_size and batching match the model",
                     f"tritonclient {_tritonclient_version()}", "Triton ModelConfig protobuf schema")
    return ctx.artifact(path, "triton-config", f"Triton config ({backend})", verification=v,
                        notes=plan.notes), problems


def _tritonclient_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("tritonclient")
    except metadata.PackageNotFoundError:
        return "?"


def export_triton(ctx: ExportContext) -> TargetResult:
    started = time.perf_counter()
    opts = ctx.options
    repo = ctx.bundle / "triton" / "model_repository"
    base = safe_name(opts.name or ctx.source.name, default="model", max_len=60)
    notes: list[str] = []
    try:
        model_config_pb2()
        outputs = _output_infos(ctx, ctx.deploy)
    except StudioError as exc:
        return TargetResult("triton", ERROR, str(exc), seconds=time.perf_counter() - started)
    artifacts: list[Artifact] = []
    readme = ["# Triton model repository (generated by onnx-studio)", "",
              "Serve it with `tritonserver --model-repository=$(pwd)/model_repository`.", ""]

    # The portable deploy model (Triton's ORT backend optimizes at load); the IR of the openvino target
    # (converted here when that target was not run); the TensorRT plan when it was built here, else a
    # placeholder saying how to build it.
    for backend, refusal, write in (("onnxruntime", None, _onnxruntime_model),
                                    ("openvino", ov_target.refusal, _openvino_model),
                                    ("tensorrt", trt_target.refusal, _tensorrt_model)):
        name = f"{base}_{backend}"
        folder = repo / name
        ctx.progress("triton", f"{backend} backend")
        refused = refusal(ctx) if refusal else None
        said = None
        if refused:
            artifacts.append(_error_artifact(ctx, folder, backend, refused))
        else:
            try:
                said = write(ctx, folder, name, outputs, artifacts, notes)
            except StudioError as exc:
                artifacts.append(_error_artifact(ctx, folder, backend, str(exc)))
        if backend == "openvino" and opts.ov_extensions and not refused:
            _ship_ov_extensions(ctx, folder, artifacts, notes)
        readme.append(_readme_line(backend, name, opts.ort_custom_ops, opts.ov_extensions, said))
    atomic_write_text(repo.parent / "README.md", "\n".join(readme) + "\n")

    return target_result("triton", artifacts, notes, {}, started)


def _onnxruntime_model(ctx: ExportContext, folder: Path, name: str, outputs: Sequence[TensorInfo],
                       artifacts: list[Artifact], notes: list[str]) -> None:
    opts, inputs = ctx.options, ctx.deploy_facts.inputs
    plan = io_plan(inputs, outputs, opts.max_batch)
    op_libraries: list[str] = []
    if opts.ort_custom_ops:
        names, libs = ship(ctx, opts.ort_custom_ops, folder / "custom_ops", "ort-custom-ops",
                           "ONNX Runtime custom-op library for this Triton model")
        op_libraries = [f"{TRITON_MOUNT}/{name}/custom_ops/{n}" for n in names]
        notes.append(f"onnxruntime: config.pbtxt loads the custom-op libraries through model_operations "
                     f"{{ op_library_filename }} at {TRITON_MOUNT}/{name}/custom_ops/ (the repository mounted "
                     f"at {TRITON_MOUNT}; Triton does not resolve them relative to the model folder: edit the "
                     "paths if you mount it elsewhere)")
    art, _ = _write_config(ctx, folder, name, "onnxruntime", plan, "cpu", op_libraries)
    artifacts.append(art)
    artifacts.extend(libs if opts.ort_custom_ops else [])

    if model_weight_bytes(ctx.deploy) > EXTERNAL_DATA_THRESHOLD:
        # Weights over 2 GiB must be external; Triton wants a model.onnx directory holding both files.
        written = write_model_copy(ctx.deploy, folder / "1" / "model.onnx" / "model.onnx", external=True)
        notes.append("onnxruntime: weights are external (over 2 GiB), so 1/model.onnx is a directory holding "
                     "model.onnx and its data file (Triton's layout for multi-file ONNX models)")
    else:
        written = write_model_copy(ctx.deploy, folder / "1" / "model.onnx", external=False)

    got, timing, error = run_artifact(ctx, written[0], level="all", stage="ONNX Runtime (verify Triton model)")
    v = verify_outputs(ctx.reference, got, ctx.criteria, engine=f"onnxruntime {timing.get('version', '')}",
                       error=None if error is None else f"ONNX Runtime cannot run it: {error}")
    artifacts.append(ctx.artifact(written[0], "triton-model", "model for Triton's onnxruntime backend",
                                  companions=tuple(written[1:]), precision=ctx.deploy_precision, portable=True,
                                  verification=v))


def _openvino_model(ctx: ExportContext, folder: Path, name: str, outputs: Sequence[TensorInfo],
                    artifacts: list[Artifact], notes: list[str]) -> str | None:
    """The IR for Triton's OpenVINO backend, verified pinned to f32; returns what it gives at OpenVINO's default
    precision when that is not f32 here (the backend's config cannot pin f32), for the README, or None."""
    opts, inputs = ctx.options, ctx.deploy_facts.inputs
    fixed = {n: r.opt for n, r in opts.shapes.items() if r.static}
    plan = io_plan(inputs, outputs, opts.max_batch, fixed=fixed)
    if any(not r.static for r in opts.shapes.values()):
        notes.append("openvino: the IR has bounded dims from --shapes; the config lists them as -1")
    art, _ = _write_config(ctx, folder, name, "openvino", plan, "cpu")
    artifacts.append(art)
    version = folder / "1"
    shared = ctx.shared.get("openvino")
    if shared and Path(shared["xml"]).exists():
        link_or_copy(shared["xml"], version / "model.xml")
        link_or_copy(shared["bin"], version / "model.bin")
    else:
        ov_target.convert(ctx, ctx.deploy, version,
                          compress_to_fp16=opts.openvino_precisions[0] == "fp16")
    pinned = ov_target.run_ir(ctx, version / "model.xml", runs=0, stage="OpenVINO (verify Triton model)")
    got, timing, error = pinned.outputs, pinned.timing, pinned.error
    precision = (shared["precision"] if shared else "int8" if ctx.deploy_precision == "int8"
                 else "fp16" if opts.openvino_precisions[0] == "fp16" else ctx.deploy_precision)
    criteria = criteria_for(precision, quantized_model=ctx.deploy_facts.quantized)
    v = verify_outputs(ctx.reference, got, criteria, engine=f"openvino {timing.get('version', '')}".strip(),
                       error=None if error is None else f"OpenVINO cannot run it: {error}")
    # the same IR file as the openvino target's main one: its default-precision figure, else measured here
    said = (shared.get("default_note") if shared and Path(shared["xml"]).exists() and "default_note" in shared
            else ov_target.default_precision_note(ctx, version / "model.xml", pinned, v, criteria))
    if said:
        notes.append(f"openvino: {said}")
    artifacts.append(ctx.artifact(version / "model.xml", "triton-model", "model for Triton's openvino backend",
                                  companions=(version / "model.bin",), precision=precision, portable=True,
                                  verification=v, notes=(said,) if said else ()))
    return said


def _ship_ov_extensions(ctx: ExportContext, folder: Path, artifacts: list[Artifact], notes: list[str]) -> None:
    _, libs = ship(ctx, ctx.options.ov_extensions, folder / "extensions", "openvino-extension",
                   "OpenVINO extension the IR needs (not loaded by Triton's config)")
    artifacts.extend(libs)
    notes.append("openvino: Triton's model config has no field that loads OpenVINO extensions "
                 "(model_operations is read by the ONNX Runtime and TensorFlow backends), so the IR's custom ops "
                 "need the extension made available to the OpenVINO backend by other means; the library is "
                 "shipped in extensions/")


def _tensorrt_model(ctx: ExportContext, folder: Path, name: str, outputs: Sequence[TensorInfo],
                    artifacts: list[Artifact], notes: list[str]) -> None:
    opts, inputs = ctx.options, ctx.deploy_facts.inputs
    shared = ctx.shared.get("tensorrt") or {}
    profiles = shared.get("profiles")
    if profiles is None:
        profiles, _ = trt_target.derive_profiles(inputs, opts.shapes, ctx.input_shapes, opts.max_batch)
    fixed = {n: r.opt for n, r in profiles.items() if r.static}
    first = [r.max[0] for r in profiles.values() if r.max]
    plan = io_plan(inputs, outputs, opts.max_batch, fixed=fixed, batch_limit=min(first) if first else None)
    art, _ = _write_config(ctx, folder, name, "tensorrt", plan, "gpu")
    artifacts.append(art)
    plan_file = shared.get("plan")
    if plan_file and Path(plan_file).exists():  # pragma: no cover - needs TensorRT and a GPU
        copy_file(Path(plan_file), folder / "1" / "model.plan")
        artifacts.append(ctx.artifact(folder / "1" / "model.plan", "triton-model",
                                      "TensorRT plan for Triton's tensorrt backend", portable=False,
                                      verification=Verification(PASSED, "same plan as tensorrt/model.plan, "
                                                                "verified there", "tensorrt")))
    else:
        note = folder / "README.md"
        atomic_write_text(note, _plan_placeholder(name))

        reason = TensorRtEngine().available().reason or "the engine was not built"
        artifacts.append(ctx.artifact(
            note, "triton-placeholder", "placeholder: build 1/model.plan on the GPU that will serve it",
            verification=Verification(NOT_VERIFIED, f"no plan here: {reason}", "tensorrt", reason=reason)))


def _readme_line(backend: str, name: str, ort_custom_ops: Sequence, ov_extensions: Sequence,
                 said: str | None = None) -> str:
    """The repository README's line for one backend's model folder (``said``: what the model gives at its
    engine's default precision, which the backend's config cannot change)."""
    if backend == "onnxruntime":
        return (f"- `{name}`: ONNX Runtime backend (CPU instances; change `instance_group` for GPUs)."
                + (f" Custom ops: `custom_ops/` holds the libraries, loaded by `model_operations` in its "
                   f"config.pbtxt from `{'{'}mount{'}'}/{name}/custom_ops/` (written for `-v ...:/models`)."
                   if ort_custom_ops else ""))
    if backend == "openvino":
        return (f"- `{name}`: OpenVINO backend (CPU)."
                + (" Its IR needs the OpenVINO extension in `extensions/`; Triton's model config cannot load it "
                   "(`model_operations` is read by the ONNX Runtime and TensorFlow backends only)."
                   if ov_extensions else "") + (f" {said}." if said else ""))
    return (f"- `{name}`: TensorRT backend (GPU). A plan is specific to one GPU model and TensorRT version: "
            "build `1/model.plan` there (see its README.md).")


def _plan_placeholder(name: str) -> str:
    return (f"# {name}: build the TensorRT plan here\n\n"
            "No plan could be built where this bundle was made (TensorRT needs an NVIDIA GPU). On the GPU machine "
            "that will serve the model:\n\n"
            "```bash\n"
            f"python ../../../tensorrt/build_engine.py --plan 1/model.plan    # from model_repository/{name}/\n"
            "```\n\n"
            "A plan only runs on the GPU model and TensorRT version it was built with.\n")


def _error_artifact(ctx: ExportContext, folder: Path, backend: str, message: str) -> Artifact:
    """A note file recording why a backend's model could not be exported (the report shows it first)."""
    folder.mkdir(parents=True, exist_ok=True)
    note = folder / "EXPORT_ERROR.txt"
    atomic_write_text(note, f"{backend}: {message}\n")
    return ctx.artifact(note, "triton-error", f"{backend} backend not exported",
                        verification=Verification(ERROR, f"{backend}: {message}", backend))
