"""Apply a checked script to a model in memory: each operation in order, a cycle check after each,
then the full checker and strict shape inference on the result. Nothing is written here, so
validation and the real run are the same code path and a refused edit leaves no file behind."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir

from studio.edit import graph as g
from studio.edit import ops_compose, ops_io, ops_nodes
from studio.edit.script import EditError, EditOp, EditScript
from studio.edit.state import EditState
from studio.core.model_io import to_proto
from studio.core.errors import engine_message
from studio.core.model_io import load_for_passes
from studio.verification.verifier import externals_as_inputs

OPERATIONS: dict[str, Callable[[EditState, EditOp], None]] = {
    "bypass": ops_nodes.bypass, "delete": ops_nodes.delete, "rename": ops_nodes.rename,
    "set_attr": ops_nodes.set_attr, "remove_attr": ops_nodes.remove_attr, "insert": ops_nodes.insert,
    "rewire": ops_nodes.rewire, "add_output": ops_io.add_output, "remove_outputs": ops_io.remove_outputs,
    "set_input": ops_io.set_input, "replace_initializer": ops_io.replace_initializer, "add_opset": ops_io.add_opset,
    "extract": ops_compose.extract, "split": ops_compose.split, "merge": ops_compose.merge,
}


@dataclass(frozen=True)
class AppliedEdits:
    """The edited model(s), in memory, and what each operation did."""

    models: tuple[ir.Model, ...]
    notes: tuple[str, ...]
    kinds: tuple[str, ...]
    renamed: dict[str, str]          # edited tensor name -> the original's name


def _check(model: ir.Model, which: str) -> None:
    """The full checker and strict shape inference, external weights seen as typed inputs (not read)."""
    proto = externals_as_inputs(to_proto(model))
    for stage, run in (("strict shape inference", lambda: onnx.shape_inference.infer_shapes(
                           proto, check_type=True, strict_mode=True, data_prop=True)),
                       ("onnx.checker full check", lambda: onnx.checker.check_model(proto, full_check=True))):
        try:
            run()
        except Exception as exc:  # ValidationError, InferenceError, C++ errors
            raise EditError(f"the edited {which} fails the {stage}: {engine_message(exc, 300)}; the edit is refused, "
                            "nothing was written") from None


def apply_script(model: ir.Model, script: EditScript, *, verify: bool = True,
                 pool_key: str = "default") -> AppliedEdits:
    """Run every operation on ``model`` (changed in place; load a fresh one per run). ``verify``: a merge
    runs its two parts and the merged model in ONNX Runtime and is refused when they disagree."""
    state = EditState(model, script, verify=verify, pool_key=pool_key)
    for op in script.ops:
        try:
            OPERATIONS[op.kind](state, op)
        except EditError:
            raise
        except (ValueError, TypeError, KeyError) as exc:     # onnx-ir refusing a graph change
            raise EditError(f"{op.where()}: {str(exc).splitlines()[0][:240] if str(exc) else type(exc).__name__}; "
                            "nothing was written") from None
        g.check_acyclic(state.model, op)
    models = (state.model, *state.extra)
    for i, m in enumerate(models):
        g.infer_types(m)            # new values (an inserted node's output, a cut's inputs) get their types
        _check(m, "model" if len(models) == 1 else f"model part {i + 1}")
    return AppliedEdits(models, tuple(state.notes), tuple(state.kinds), dict(state.renamed))


def load_model(path: Path) -> ir.Model:
    """The model as onnx-ir with its external weights left on disk (passes' loader)."""
    return load_for_passes(path)
