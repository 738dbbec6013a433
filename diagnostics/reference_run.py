"""Reference outputs from ``onnx.reference`` with the studio's reference ops,
for models ONNX Runtime cannot run because of a custom op or repeated node
names (so a fix such as ``legalize-grid-sampler`` or ``rename-duplicate-nodes``
is still verified numerically). Runs in a worker:
the evaluator is Python over an untrusted graph and can be slow or allocate a
lot, so the sandbox's timeout and memory limit apply.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from diagnostics.custom_ops import detect_custom_ops
from diagnostics.reference_ops import has_reference
from studio.core.errors import engine_message
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.protowalk import iter_graphs
from diagnostics.reference_ops import reference_evaluator
from studio.core.engines.base import rekey_arrays, unpack_feed_sets, encode_outputs

__all__ = ["EVALUATOR_LABEL", "evaluator_can_run", "evaluator_outputs_job"]

EVALUATOR_LABEL = "onnx.reference evaluator with the studio's reference ops (ONNX Runtime cannot run the original)"


def evaluator_can_run(model: onnx.ModelProto) -> bool:
    """Something the evaluator tolerates keeps ONNX Runtime from running the model (a custom op, node
    names repeated within a graph), and every custom op of the model has a reference implementation."""
    customs = detect_custom_ops(model)
    if not all(has_reference(c.domain, c.op_type) for c in customs):
        return False
    return bool(customs) or _repeats_node_names(model)


def _repeats_node_names(model: onnx.ModelProto) -> bool:
    for ref in iter_graphs(model):
        names = [n.name for n in ref.graph.node if n.name]
        if len(names) != len(set(names)):
            return True
    return False


@job("diagnostics.reference_outputs")
def evaluator_outputs_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Same protocol as ``passes.reference_outputs`` (per-set outputs or errors)."""
    ctx.set_stage("reference evaluator")
    model = onnx.load_model(str(args["model_path"]))   # by path: external data next to the model
    evaluator = reference_evaluator(model)
    names = [o.name for o in model.graph.output]
    data: dict = {"check": None, "sets": []}
    out_arrays: dict[str, np.ndarray] = {}
    for i, feeds in enumerate(unpack_feed_sets(arrays, int(args["count"]))):
        try:
            values = evaluator.run(None, feeds)
        except Exception as exc:  # noqa: BLE001 - reported per set
            data["sets"].append({"error": f"{type(exc).__name__}: {engine_message(exc, 300)}"})
            continue
        encoded, arrs = encode_outputs(names, [np.asarray(v) for v in values])
        for item in encoded:
            rekey_arrays(item[1], f"s{i}.", arrs, out_arrays)
        data["sets"].append({"outputs": encoded})
    return JobOutput(data=data, arrays=out_arrays)


def evaluator_model_path_ok(path: Path) -> bool:
    try:
        return evaluator_can_run(onnx.load_model(str(path), load_external_data=False))
    except Exception:  # noqa: BLE001
        return False
