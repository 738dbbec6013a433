"""Shapes on every edge, without the weights in memory.

ONNX shape inference needs the *values* of small shape-like tensors (Reshape
targets, Slice bounds) but only the *dims* of weights. So we run it on the
weight-less proto with small external tensors read back in (they are a few
bytes each), and keep symbolic dims as they are.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto

from studio.core.jobs import JobContext, JobOutput, job
from studio.core.ort_symbolic import symbolic_shapes
from studio.core.protowalk import iter_graphs
from studio.core.sandbox import run_job
from studio.core.tensor_safety import validate_tensors
from studio.core.types import TensorInfo, pin_inputs, type_info
from studio.core.types import dtype_name
from studio.core.errors import StudioError

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


def infer_shapes(model: ModelProto, folder: Path | None = None,
                 input_shapes: Mapping[str, Sequence[int]] | None = None, *,
                 data_prop: bool = True) -> tuple[ModelProto, str | None]:
    """Run ONNX shape inference (with data propagation). Returns the inferred
    model (or the input on failure) and the error text, if any. ``input_shapes``
    pins the inputs (:func:`pin_inputs`) so every shape inference can reach comes out concrete.
    ``data_prop=False``: no shapes computed from values (Shape -> Concat -> Reshape), as ONNX Runtime
    infers them when it loads a model (the memory plan's load-time types)."""
    prepared = shape_inference_view(model, folder)
    if input_shapes is not None:
        pin_inputs(prepared, input_shapes)
    try:
        inferred = onnx.shape_inference.infer_shapes(prepared, check_type=False, strict_mode=False,
                                                     data_prop=data_prop)
        return with_contrib_shapes(inferred), None
    except Exception as exc:  # onnx raises InferenceError, ValidationError, RuntimeError...
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:300]
        log.info("shape inference failed: %s", first)
        try:
            return onnx.shape_inference.infer_shapes(prepared, check_type=False, strict_mode=False,
                                                     data_prop=False), f"{type(exc).__name__}: {first}"
        except Exception:
            return model, f"{type(exc).__name__}: {first}"


CONTRIB_DOMAINS = frozenset({"com.microsoft"})


def with_contrib_shapes(inferred: ModelProto) -> ModelProto:
    """``inferred`` with the main graph's shapes ONNX inference cannot know -- outputs of ONNX Runtime's
    contrib ops (GroupQueryAttention, MatMulNBits, RotaryEmbedding, SkipSimplifiedLayerNormalization...)
    and what follows them -- filled in by ONNX Runtime's own symbolic shape inference, which implements
    those ops' shape rules. Only values ONNX left without a full shape are added; on any failure the
    model comes back as it was."""
    if not any(n.domain in CONTRIB_DOMAINS for n in inferred.graph.node):
        return inferred
    extra = symbolic_shapes(inferred, auto_merge=True, guess_output_rank=False)
    if extra is None:
        return inferred

    def full(vi) -> bool:
        t = vi.type.tensor_type
        return vi.type.WhichOneof("value") == "tensor_type" and t.elem_type != 0 and t.HasField("shape") and all(
            d.HasField("dim_value") or d.dim_param for d in t.shape.dim)

    have = {vi.name: vi for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    out = ModelProto()
    out.CopyFrom(inferred)
    index = {vi.name: i for i, vi in enumerate(out.graph.value_info)}
    outputs = {vo.name: vo for vo in out.graph.output}
    for vi in extra.graph.value_info:
        old = have.get(vi.name)
        if not full(vi) or (old is not None and full(old)):
            continue
        if vi.name in outputs:
            outputs[vi.name].type.CopyFrom(vi.type)
        elif vi.name in index:
            out.graph.value_info[index[vi.name]].CopyFrom(vi)
        else:
            out.graph.value_info.append(vi)
    for vo in extra.graph.output:
        old = have.get(vo.name)
        if full(vo) and vo.name in outputs and not (old is not None and full(old)):
            outputs[vo.name].type.CopyFrom(vo.type)
    return out


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
    """Symbolic shapes, and (when ``input_shapes`` is given) shapes with the inputs pinned
    to them. A model without free input dims is inferred once, pinned (its declared
    intermediate shapes may be stale)."""
    path = Path(args["model_path"])
    model = onnx.load_model(str(path), load_external_data=False)
    ctx.set_stage("shape inference")
    pinned = args.get("input_shapes")
    concrete = None
    if pinned is not None:
        concrete = _table_to_json(shape_table(*infer_shapes(model, path.parent, input_shapes=pinned)))
    if args.get("static") and concrete is not None:
        # one table serves as both: shipped (encoded, piped, decoded) once, not twice (1.5 MB on a 10k-node model)
        return JobOutput(data={"symbolic": concrete, "concrete": None, "concrete_is_symbolic": True})
    inferred, error = infer_shapes(model, path.parent, data_prop=bool(args.get("data_prop", True)))
    return JobOutput(data={"symbolic": _table_to_json(shape_table(inferred, error)), "concrete": concrete})


def declared_table(model: ModelProto) -> ShapeTable:
    """Only what the file declares (no inference): the fallback when inference crashed."""
    return shape_table(model)


def sandboxed_shapes(model_path: Path, model: ModelProto, input_shapes: Mapping[str, Sequence[int]] | None,
                     *, static: bool = False, pool_key: str = "default",
                     data_prop: bool = True) -> tuple[ShapeTable, ShapeTable | None]:
    """(symbolic, concrete-or-None) tables computed in a worker; declared shapes
    and the worker's error message when inference itself dies. ``static``: the model
    has no free input dims (one pinned inference serves as both). ``data_prop=False``: the
    symbolic table without shapes computed from values (:func:`infer_shapes`)."""
    pinned = None if input_shapes is None else {k: [int(d) for d in v] for k, v in input_shapes.items()}
    try:
        res = run_job("inspect.shapes", {"model_path": str(model_path), "input_shapes": pinned,
                                         "static": bool(static), "data_prop": bool(data_prop)},
                      stage="shape inference", pool_key=pool_key)
    except StudioError as exc:
        fallback = declared_table(model)
        return ShapeTable(fallback.values, f"shape inference failed in the worker: {exc}"), None
    symbolic = _table_from_json(res.data["symbolic"])
    if res.data.get("concrete_is_symbolic"):       # a static model: the pinned inference is both tables
        return symbolic, ShapeTable(dict(symbolic.values), symbolic.error)
    concrete = res.data.get("concrete")
    return symbolic, (_table_from_json(concrete) if concrete else None)
