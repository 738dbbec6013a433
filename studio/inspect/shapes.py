"""Shapes on every edge, without the weights in memory.

ONNX shape inference needs the *values* of small shape-like tensors (Reshape
targets, Slice bounds) but only the *dims* of weights. So we run it on the
weight-less proto with small external tensors read back in (they are a few
bytes each), and keep symbolic dims as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from collections.abc import Mapping
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto

from studio.core.jobs import JobContext, JobOutput, job
from studio.core.protowalk import iter_graphs
from studio.core.sandbox import run_job
from studio.core.tensor_safety import validate_tensors
from studio.core.types import TensorInfo, type_info

log = logging.getLogger(__name__)

SMALL_TENSOR_BYTES = 64 * 1024


@dataclass(frozen=True)
class ShapeTable:
    """Type/shape per value name (scoped names for subgraph values), and what went wrong."""

    values: dict[str, TensorInfo] = field(default_factory=dict)
    error: str | None = None

    def get(self, name: str) -> TensorInfo | None:
        return self.values.get(name)


def _copy_fields(src, dst, skip: str) -> None:
    for fd, value in src.ListFields():
        if fd.name == skip:
            continue
        if fd.is_repeated:
            getattr(dst, fd.name).extend(value)
        elif fd.message_type is not None:
            getattr(dst, fd.name).CopyFrom(value)
        else:
            setattr(dst, fd.name, value)


def _metadata_only(t: TensorProto) -> TensorProto:
    stub = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
    stub.data_location = TensorProto.EXTERNAL
    stub.external_data.add(key="location", value="__weights_not_loaded__")
    return stub


def shape_inference_view(model: ModelProto, folder: Path | None) -> ModelProto:
    """A copy of ``model`` fit for shape inference: main-graph initializers over
    64 KiB become metadata only (never copied), smaller external ones are read
    in so data propagation can see shape values. Locations are validated first."""
    refs = {}
    if folder is not None:
        refs = {r.tensor: r for r in validate_tensors(model, folder).external}
    view = ModelProto()
    _copy_fields(model, view, skip="graph")
    _copy_fields(model.graph, view.graph, skip="initializer")
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL:
            r = refs.get(t.name)
            if r is None or r.length > SMALL_TENSOR_BYTES:
                view.graph.initializer.append(_metadata_only(t))
                continue
            small = TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
            with open(r.file, "rb") as fh:
                fh.seek(r.offset)
                small.raw_data = fh.read(r.length)
            view.graph.initializer.append(small)
        elif t.ByteSize() > SMALL_TENSOR_BYTES:
            view.graph.initializer.append(_metadata_only(t))
        else:
            view.graph.initializer.append(t)
    return view


def fix_input_dims(view: ModelProto, dims: Mapping[str, int], default: int = 1) -> bool:
    """Replace symbolic/unknown graph-input dims in ``view`` (a copy) in place; True if any changed."""
    changed = False
    for vi in view.graph.input:
        if vi.type.WhichOneof("value") != "tensor_type":
            continue
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = int(dims.get(d.dim_param, default)) if d.dim_param else default
                changed = True
    if changed:
        # Declared intermediate/output shapes still carry the symbols: let inference redo them.
        del view.graph.value_info[:]
        for vi in view.graph.output:
            if vi.type.WhichOneof("value") == "tensor_type":
                vi.type.tensor_type.ClearField("shape")
    return changed


def infer_shapes(model: ModelProto, folder: Path | None = None,
                 fixed_dims: Mapping[str, int] | None = None) -> tuple[ModelProto, str | None]:
    """Run ONNX shape inference (with data propagation). Returns the inferred
    model (or the input on failure) and the error text, if any. ``fixed_dims``
    pins symbolic input dims (unset ones to 1) so every shape comes out concrete."""
    prepared = shape_inference_view(model, folder)
    if fixed_dims is not None:
        fix_input_dims(prepared, fixed_dims)
    try:
        inferred = onnx.shape_inference.infer_shapes(prepared, check_type=False, strict_mode=False,
                                                     data_prop=True)
        return inferred, None
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError...
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        log.info("shape inference failed: %s", first)
        try:
            return onnx.shape_inference.infer_shapes(prepared, check_type=False, strict_mode=False,
                                                     data_prop=False), f"{type(exc).__name__}: {first}"
        except Exception:
            return model, f"{type(exc).__name__}: {first}"


def shape_table(inferred: ModelProto, error: str | None = None) -> ShapeTable:
    """Collect every known type/shape: graph inputs/outputs, value_info, initializers."""
    values: dict[str, TensorInfo] = {}
    for ref in iter_graphs(inferred):
        g = ref.graph
        for t in g.initializer:
            values.setdefault(t.name, _initializer_info(t))
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value") is not None:
                info = type_info(vi.name, vi.type)
                # Prefer the more specific entry when a name appears twice.
                old = values.get(vi.name)
                if old is None or (old.shape is None and info.shape is not None):
                    values[vi.name] = info
    return ShapeTable(values, error)


def _initializer_info(t: TensorProto) -> TensorInfo:
    from studio.core.types import dtype_name

    return TensorInfo(t.name, dtype_name(t.data_type), tuple(int(d) for d in t.dims), "tensor", t.data_type)


# ---------------------------------------------------------------------------- sandboxed inference
# Shape inference is C++ working on an untrusted graph: it runs in a sandbox
# worker, and a crash there leaves the summary with declared shapes only.

def _table_to_json(table: ShapeTable) -> dict:
    return {"error": table.error,
            "values": [[t.name, t.dtype, t.kind, t.elem_type, None if t.shape is None else list(t.shape)]
                       for t in table.values.values()]}


def _table_from_json(data: dict) -> ShapeTable:
    values = {name: TensorInfo(name, dtype, None if shape is None else tuple(shape), kind, elem)
              for name, dtype, kind, elem, shape in data["values"]}
    return ShapeTable(values, data.get("error"))


@job("inspect.shapes")
def shapes_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Symbolic shapes, and (when ``fixed_dims`` is given) shapes with those dims pinned."""
    path = Path(args["model_path"])
    model = onnx.load_model(str(path), load_external_data=False)
    ctx.set_stage("shape inference")
    inferred, error = infer_shapes(model, path.parent)
    out = {"symbolic": _table_to_json(shape_table(inferred, error))}
    if args.get("fixed_dims") is not None:
        concrete, cerr = infer_shapes(model, path.parent, fixed_dims=args["fixed_dims"])
        out["concrete"] = _table_to_json(shape_table(concrete, cerr))
    return JobOutput(data=out)


def declared_table(model: ModelProto) -> ShapeTable:
    """Only what the file declares (no inference): the fallback when inference crashed."""
    return shape_table(model)


def sandboxed_shapes(model_path: Path, model: ModelProto, fixed_dims: Mapping[str, int] | None,
                     *, pool_key: str = "default") -> tuple[ShapeTable, ShapeTable | None]:
    """(symbolic, concrete-or-None) tables computed in a worker; declared shapes
    and the worker's error message when inference itself dies."""
    from studio.core.errors import StudioError

    try:
        res = run_job("inspect.shapes", {"model_path": str(model_path),
                                         "fixed_dims": None if fixed_dims is None else dict(fixed_dims)},
                      stage="shape inference", pool_key=pool_key)
    except StudioError as exc:
        fallback = declared_table(model)
        return ShapeTable(fallback.values, f"shape inference failed in the worker: {exc}"), None
    concrete = res.data.get("concrete")
    return _table_from_json(res.data["symbolic"]), (_table_from_json(concrete) if concrete else None)


# ---------------------------------------------------------------------------- dims that flow
# With the input dims set, every edge should read as numbers: concrete inference
# first, then the formulas exporters write into value_info (``floor(height/2 - 1/2)``)
# evaluated with those dims, then what a real ORT run reports for the rest.

def _resolved_shape(concrete: TensorInfo | None, declared: TensorInfo | None,
                    env: Mapping[str, int]) -> tuple | None:
    from studio.core.dimexpr import evaluate

    c = None if concrete is None else concrete.shape
    d = None if declared is None else declared.shape
    if c is not None and all(isinstance(x, int) for x in c):
        return c
    base = c if c is not None else d
    if base is None:
        return None
    out = []
    for i, dim in enumerate(base):
        if isinstance(dim, int):
            out.append(dim)
            continue
        # the other table may have a number, or a formula, at this position
        alt = d[i] if d is not None and len(d) == len(base) else None
        for cand in (dim, alt):
            if isinstance(cand, int):
                dim = cand
                break
            if isinstance(cand, str):
                value = evaluate(cand, env)
                if value is not None:
                    dim = value
                    break
        out.append(dim)
    return tuple(out)


def resolve_table(symbolic: ShapeTable, concrete: ShapeTable | None, env: Mapping[str, int]) -> ShapeTable:
    """One table whose shapes are as numeric as inference and the model's own dim
    formulas allow, given ``env`` (a value for every input dim)."""
    values: dict[str, TensorInfo] = {}
    cvals = concrete.values if concrete is not None else {}
    for name in {**symbolic.values, **cvals}:
        c, s = cvals.get(name), symbolic.values.get(name)
        info = c or s
        shape = _resolved_shape(c, s, env)
        values[name] = TensorInfo(info.name, info.dtype, shape, info.kind, info.elem_type)
    return ShapeTable(values, (concrete.error if concrete is not None else None) or symbolic.error)


def open_values(table: ShapeTable, names: set[str]) -> list[str]:
    """Names (of ``names``) whose shape is still unknown or not fully numeric."""
    out = []
    for n in sorted(names):
        t = table.values.get(n)
        if t is None or t.kind != "tensor" or t.shape is None or not all(isinstance(d, int) for d in t.shape):
            out.append(n)
    return out


MAX_RUN_FILL_BYTES = 1536 * 2**20    # weights read into the worker to measure shapes by a run


@job("inspect.run_shapes")
def run_shapes_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Shapes of ``names`` as ONNX Runtime produces them on seeded inputs of the given dims."""
    import onnxruntime as ort

    from studio.core.feeds import input_specs, random_feeds

    path = Path(args["model_path"])
    model = onnx.load_model(str(path), load_external_data=False)
    specs = input_specs(model)
    feeds = random_feeds(specs, args["dims"])
    if args.get("external"):
        onnx.load_external_data_for_model(model, str(path.parent))
    existing = {o.name for o in model.graph.output}
    elem = {k: v for k, v in args["elem_types"].items()}
    for name in args["names"]:
        if name not in existing and elem.get(name):
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, int(elem[name]), None))
    ctx.set_stage("ONNX Runtime run for shapes")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in sess.get_outputs() if o.name in set(args["names"])]
    got = sess.run(wanted, feeds)
    return JobOutput(data={"shapes": {n: list(getattr(v, "shape", ())) for n, v in zip(wanted, got)}})


def fill_from_run(model_path: Path, model: ModelProto, table: ShapeTable, env: Mapping[str, int], *,
                  total_bytes: int, pool_key: str = "default") -> tuple[ShapeTable, str | None]:
    """Fill the main graph's still-open shapes from one real ONNX Runtime run at ``env``.
    Returns the table and a note when the run could not be made (the table unchanged)."""
    from studio.core.errors import StudioError

    produced = {o for n in model.graph.node for o in n.output if o}
    todo = open_values(table, produced | {o.name for o in model.graph.output})
    if not todo:
        return table, None
    if total_bytes > MAX_RUN_FILL_BYTES:
        return table, f"{len(todo)} shape(s) left open: the model is too large to measure them by a run here"
    elem_types = {}
    for n in todo:
        t = table.values.get(n)
        if t is not None and t.kind == "tensor" and t.elem_type:
            elem_types[n] = t.elem_type
    if not elem_types:
        return table, f"{len(todo)} shape(s) left open (no element type known to measure them)"
    external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    try:
        res = run_job("inspect.run_shapes", {"model_path": str(model_path), "names": sorted(elem_types),
                                              "elem_types": elem_types, "dims": dict(env), "external": external},
                      stage="ONNX Runtime run for shapes", pool_key=pool_key)
    except StudioError as exc:
        return table, f"{len(todo)} shape(s) left open: a run to measure them failed ({exc})"
    values = dict(table.values)
    for name, shape in res.data["shapes"].items():
        old = values.get(name)
        if old is not None:
            values[name] = TensorInfo(old.name, old.dtype, tuple(int(d) for d in shape), old.kind, old.elem_type)
    filled = ShapeTable(values, table.error)
    left = open_values(filled, set(todo))
    note = f"{len(todo) - len(left)} shape(s) measured by an ONNX Runtime run" + (
        f"; {len(left)} still open" if left else "")
    return filled, note
