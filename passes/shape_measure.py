"""Shapes ONNX shape inference cannot compute, measured by one ONNX Runtime run, written
into an onnx-ir model (fix-input-shapes), and the proof that the result loads with
ONNX Runtime's optimizer on (constant folding reads the static shapes it is given: a
wrong one makes ``TopK`` refuse its k at load time)."""

from __future__ import annotations

from collections.abc import Mapping

import onnx_ir as ir

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, ort_cause
from studio.core.model_io import to_proto, weight_bytes
from studio.core.feeds import input_specs, random_feeds
from studio.inspect.edge_shapes import measure_shapes
from studio.inspect.value_dependence import value_dependent_shapes

MAX_MEASURE_BYTES = 1536 * 2**20     # weights loaded into the worker to measure shapes


def _open_values(model: ir.Model) -> list[ir.Value]:
    seen, out = set(), []
    for v in [*(o for n in model.graph for o in n.outputs), *model.graph.outputs]:
        if v.name and v.name not in seen and (v.shape is None or not all(isinstance(d, int) for d in v.shape)):
            if v.type is None or isinstance(v.type, ir.TensorType):
                seen.add(v.name)
                out.append(v)
    return out


def measure_open_shapes(model: ir.Model, dims: Mapping[str, int]) -> tuple[int, str | None]:
    """Write the run's shapes into the model's still-open main-graph values (not those whose size
    depends on the input values). Returns (how many were measured, a note or None). Raises a
    one-line StudioError when the static model would not load in ONNX Runtime."""
    from onnx_ir.external_data import load_to_model

    todo = _open_values(model)
    free = [v.name for v in model.graph.inputs if v.shape is None or not all(isinstance(d, int) for d in v.shape)]
    if not todo:
        return 0, None
    if free:
        return 0, (f"{len(todo)} shape(s) left dynamic: input(s) {', '.join(n[:40] for n in free[:3])} keep free "
                   "dims (fix every input dim to measure them)")
    if weight_bytes(model) > MAX_MEASURE_BYTES:
        return 0, f"{len(todo)} shape(s) left dynamic: the model is too large to measure them by a run here"
    load_to_model(model)
    proto = to_proto(model)
    known = {v.name for n in model.graph for v in n.outputs if v.name and v.shape is not None
             and all(isinstance(d, int) for d in v.shape)}
    varying = value_dependent_shapes(proto, known)
    names = [v.name for v in todo if v.name not in varying]
    if not names:
        return 0, None
    try:
        feeds = random_feeds(input_specs(proto), dict(dims))
        measured = measure_shapes(proto, feeds, names)
    except StudioError as exc:
        return 0, f"{len(names)} shape(s) left dynamic: {exc}"
    except Exception as exc:   # the engine's own errors: the model may need real inputs or custom ops
        return 0, f"{len(names)} shape(s) left dynamic: a run to measure them failed ({ort_cause(exc, 300)})"
    by_name = {v.name: v for v in todo}
    for name, (shape, _dtype) in measured.items():
        by_name[name].shape = ir.Shape(list(shape))
    problem = _load_check(model)
    if problem:
        raise StudioError(problem, code=ErrorCode.FIX_FAILED)
    return len(measured), f"{len(measured)} shape(s) measured by an ONNX Runtime run at the fixed dims"


def _load_check(model: ir.Model) -> str:
    """'' when ONNX Runtime loads the model with its basic optimizations (constant folding over
    the static shapes), else the one-line reason."""
    import onnxruntime as ort

    if weight_bytes(model) > MAX_MEASURE_BYTES:
        return ""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    try:
        ort.InferenceSession(to_proto(model).SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return f"fix-input-shapes: the static model does not load in ONNX Runtime: {ort_cause(exc, 300)}"
    return ""
