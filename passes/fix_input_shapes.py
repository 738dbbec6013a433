"""fix-input-shapes: symbolic input dims  ⇒  the values the user gave (option dims={name: value}).

Specializing dims is how TensorRT's builder and shape folding get static
shapes. It changes the model's interface on purpose (``changes_interface``):
verification then accepts exactly these dims becoming these values, nothing
else. The dim is replaced everywhere it is declared (inputs, outputs,
value_info), so the model stays consistent; unknown dim names are reported.
"""

from __future__ import annotations

import onnx_ir as ir

from onnx_ir.passes.common import ShapeInferencePass

from passes.base import Change, PassResult, StudioPass, result
from passes.ir_helpers import graphs_of
from passes.registry import register
from studio.core.dimexpr import evaluate, free_names
from studio.core.errors import StudioError


def _specialize(shape: ir.Shape | None, dims: dict[str, int]) -> ir.Shape | None:
    """The shape with every dim named in ``dims``, and every exporter formula over them
    (``floor(height/2 - 1/2) + 1``), made a number; a formula over a fixed dim that
    cannot be evaluated becomes unknown rather than naming a dim that no longer exists."""
    if shape is None:
        return None
    new = []
    for d in shape:
        if isinstance(d, ir.SymbolicDim) and d.value:
            if d.value in dims:
                d = dims[d.value]
            else:
                names = free_names(d.value)
                if names and names & dims.keys():
                    value = evaluate(d.value, dims)
                    d = value if value is not None else None
        new.append(d)
    return None if new == list(shape) else ir.Shape(new)


def _static_left(model: ir.Model) -> int:
    """Values of the main graph whose shape is still unknown or symbolic."""
    return sum(1 for n in model.graph for v in n.outputs
               if v.name and (v.shape is None or not all(isinstance(d, int) for d in v.shape)))


@register
class FixInputShapes(StudioPass):
    """Symbolic dims (batch, sequence...)  ⇒  fixed values chosen by the user."""

    name = "fix-input-shapes"
    summary = "Make dynamic dims static with the values you give (--dim NAME=VALUE); helps TensorRT and folding."
    changes_interface = True
    needs_weights = False

    def call(self, model: ir.Model) -> PassResult:
        dims = {str(k): v for k, v in dict(self.options.get("dims") or {}).items()}
        for k, v in dims.items():
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise StudioError(f"fix-input-shapes: dim '{k[:40]}' must be a positive integer", code="BAD-OPTION")
        if not dims:
            return result(model, [], notes=["no dims given: nothing to fix (use --dim NAME=VALUE)"])
        declared = {d.value for v in model.graph.inputs if v.shape is not None
                    for d in v.shape if isinstance(d, ir.SymbolicDim) and d.value}
        unknown = sorted(set(dims) - declared)
        used = {k: v for k, v in dims.items() if k in declared}
        fixed_inputs = []
        for graph in graphs_of(model):
            values = list(graph.inputs) + list(graph.outputs) + [o for n in graph for o in n.outputs]
            for v in values:
                new = _specialize(v.shape, used)
                if new is not None:
                    v.shape = new
                    if graph is model.graph and v in model.graph.inputs:
                        fixed_inputs.append(v.name)
        notes = [f"dim '{k}' is not a dim of any input" for k in unknown]
        if not fixed_inputs:
            return result(model, [], notes=notes)
        # Every value_info static and consistent: inference fills what the formulas did not.
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
        left = _static_left(model)
        if left:
            notes.append(f"{left} intermediate value(s) keep a dynamic shape (data-dependent ops)")
        text = ", ".join(f"{k}={v}" for k, v in used.items())
        return result(model, [Change("changed", (), f"inputs {', '.join(fixed_inputs)}: {text}")], notes=notes,
                      dims_fixed=len(used))
