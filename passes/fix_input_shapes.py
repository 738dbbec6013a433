"""fix-input-shapes: symbolic input dims  ⇒  the values the user gave (option dims={name: value}).

Specializing dims is how TensorRT's builder and shape folding get static
shapes. It changes the model's interface on purpose (``changes_interface``):
verification then accepts exactly these dims becoming these values, nothing
else; unknown dim names are reported.

Every other shape is *computed*, never copied from the file: the dim formulas an
exporter wrote into ``value_info`` are a hint, and some are wrong (an Ultralytics
NMS-free head says 58 where the model makes 60; written as a static shape, that
makes ONNX Runtime refuse the TopK that reads it). So the declared shapes over the
fixed dims are dropped, ONNX shape inference recomputes them, one ONNX Runtime
run at the new input shapes measures what inference cannot (a TopK whose k comes
from a Shape), and the result must load in ONNX Runtime with its optimizer on.
Shapes that depend on the input *values* (NonZero, Expand to a fed shape) stay dynamic.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_ir.passes.common import ShapeInferencePass

from passes.base import Change, PassResult, StudioPass, result
from passes.ir_helpers import graphs_of
from passes.base import register
from studio.core.dimexpr import evaluate, free_names
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from passes.shape_measure import measure_open_shapes

MAX_NAMED = 3                     # wrong formulas named in the notes (all are counted)


def _over(dim: object, fixed: set[str]) -> bool:
    names = free_names(dim) if isinstance(dim, str) and dim else None
    return bool(names and names & fixed)


def _drop_formulas(shape: ir.Shape | None, fixed: set[str]) -> ir.Shape | None:
    """The shape with every dim that names a fixed dim (a formula over it, or the name) unknown:
    inference and the run recompute it. None when nothing changes."""
    if shape is None or not any(isinstance(d, ir.SymbolicDim) and _over(d.value, fixed) for d in shape):
        return None
    return ir.Shape([None if isinstance(d, ir.SymbolicDim) and _over(d.value, fixed) else d for d in shape])


def _static_left(model: ir.Model) -> list[ir.Value]:
    """Values of the main graph whose shape is still unknown or symbolic."""
    return [v for n in model.graph for v in n.outputs
            if v.name and (v.shape is None or not all(isinstance(d, int) for d in v.shape))]


def _declared_formulas(model: ir.Model, fixed: set[str]) -> dict[str, list[tuple[int, str]]]:
    """(axis, formula) the file declares over the fixed dims, per main-graph value."""
    out: dict[str, list[tuple[int, str]]] = {}
    for v in [*model.graph.outputs, *(o for n in model.graph for o in n.outputs)]:
        if v.name and v.shape is not None and v.name not in out:
            for axis, d in enumerate(v.shape):
                if isinstance(d, ir.SymbolicDim) and _over(d.value, fixed):
                    out.setdefault(v.name, []).append((axis, str(d.value)))
    return out


@register
class FixInputShapes(StudioPass):
    """Symbolic dims (batch, sequence...)  ⇒  fixed values chosen by the user."""

    name = "fix-input-shapes"
    summary = "Make dynamic dims static with the values you give (--dim NAME=VALUE); helps TensorRT and folding."
    changes_interface = True
    calls_engines = True          # ...in a sandbox worker

    def call(self, model: ir.Model) -> PassResult:
        dims = {str(k): v for k, v in dict(self.options.get("dims") or {}).items()}
        for k, v in dims.items():
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise StudioError(f"fix-input-shapes: dim '{k[:40]}' must be a positive integer",
                                  code=ErrorCode.BAD_OPTION)
        if not dims:
            return result(model, [], notes=["no dims given: nothing to fix (use --dim NAME=VALUE)"])
        declared = {d.value for v in model.graph.inputs if v.shape is not None
                    for d in v.shape if isinstance(d, ir.SymbolicDim) and d.value}
        unknown = sorted(set(dims) - declared)
        used = {k: v for k, v in dims.items() if k in declared}
        notes = [f"dim '{k}' is not a dim of any input" for k in unknown]
        if not used:
            return result(model, [], notes=notes)
        fixed = set(used)
        said = _declared_formulas(model, fixed)
        fixed_inputs = []
        for v in model.graph.inputs:
            if v.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value in used for d in v.shape):
                v.shape = ir.Shape([used[d.value] if isinstance(d, ir.SymbolicDim) and d.value in used else d
                                    for d in v.shape])
                fixed_inputs.append(v.name)
        for graph in graphs_of(model):
            values = list(graph.outputs) + [o for n in graph for o in n.outputs]
            if graph is not model.graph:
                values += list(graph.inputs)
            for v in values:
                new = _drop_formulas(v.shape, fixed)
                if new is not None:
                    v.shape = new
        # Inference recomputes every shape it can from the new inputs...
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
        # ...one run measures the rest, and the result must load with ONNX Runtime's optimizer on.

        measured, run_note = measure_open_shapes(model, used)
        if run_note:
            notes.append(run_note)
        unchecked = _outputs_from_formulas(model, said, used)
        if unchecked:
            notes.append(f"{unchecked} output dim(s) taken from the exporter's dim formulas, unchecked (neither "
                         "inference nor a run could compute them)")
        wrong = _wrong_formulas(model, said, used)
        if wrong:
            shown = "; ".join(wrong[:MAX_NAMED]) + (f" (+{len(wrong) - MAX_NAMED} more)" if len(wrong) > MAX_NAMED
                                                    else "")
            notes.append(f"{len(wrong)} dim formula(s) the exporter declared are wrong and were replaced by the "
                         f"real sizes: {shown}")
        left = _static_left(model)
        if left:
            notes.append(f"{len(left)} intermediate value(s) keep a dynamic shape (their size depends on the "
                         "input values, or no run could measure it)")
        text = ", ".join(f"{k}={v}" for k, v in used.items())
        return result(model, [Change("changed", (), f"inputs {', '.join(fixed_inputs)}: {text}")], notes=notes,
                      dims_fixed=len(used), shapes_measured=measured, formulas_wrong=len(wrong))


def _outputs_from_formulas(model: ir.Model, said: dict[str, list[tuple[int, str]]], dims: dict[str, int]) -> int:
    """Graph-output dims still unknown get the exporter's formula value (the interface keeps a size;
    the hint is the best there is when no run could measure it). Returns how many."""
    n = 0
    for v in model.graph.outputs:
        if v.shape is None or v.name not in said:
            continue
        new = list(v.shape)
        for axis, formula in said[v.name]:
            value = evaluate(formula, dims)
            unknown = axis < len(new) and isinstance(new[axis], ir.SymbolicDim) and (
                new[axis].value is None or new[axis].value.startswith("unk__"))     # inference's own "don't know"
            if unknown and value is not None:
                new[axis] = value
                n += 1
        if new != list(v.shape):
            v.shape = ir.Shape(new)
    return n


def _wrong_formulas(model: ir.Model, said: dict[str, list[tuple[int, str]]], dims: dict[str, int]) -> list[str]:
    values = {v.name: v for v in [*model.graph.outputs, *(o for n in model.graph for o in n.outputs)] if v.name}
    out = []
    for name, formulas in said.items():
        v = values.get(name)
        if v is None or v.shape is None:
            continue
        for axis, formula in formulas:
            real = v.shape[axis] if axis < len(v.shape) else None
            value = evaluate(formula, dims)
            if isinstance(real, int) and value is not None and value != real:
                out.append(f"'{name[:60]}' axis {axis}: '{formula[:80]}' = {value}, real {real}")
    return out
