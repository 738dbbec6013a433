"""onnxsim: onnx-simplifier run as one pass  ⇒  its result, checked by our own verification.

onnxsim's own check is off by default and its success flag says nothing about
If-subgraph outer-scope references or grown files; here its result goes
through the pipeline's verification like any other pass. It runs in a sandbox
worker (it can die with SIGFPE on a Conv with strides=0) and is skipped, with
the reason, when onnxsim is not importable.
"""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, count_ops, label_diff, labels, result
from passes.registry import register


@register
class OnnxSim(StudioPass):
    """Whatever onnx-simplifier does (folding, its fusions)  ⇒  its result, verified by the studio."""

    name = "onnxsim"
    summary = "Run onnx-simplifier in a sandbox and keep its result only if the studio's verification passes."
    calls_engines = True

    def call(self, model: ir.Model) -> PassResult:
        try:
            import onnxsim
        except Exception as exc:   # ImportError, or a broken native extension
            return result(model, [], notes=[f"onnxsim is not available here ({type(exc).__name__}); skipped"])
        before, before_ops = labels(model), count_ops(model)
        from onnx_ir.external_data import load_to_model

        proto = ir.serde.serialize_model(load_to_model(model))   # weights in memory: onnxsim needs them
        simplified, _check_ok = onnxsim.simplify(proto, check_n=0, perform_optimization=True)
        new = ir.serde.deserialize_model(simplified)
        changes = label_diff(before, new, "rewritten by onnxsim")
        if not changes and count_ops(new) != before_ops:
            changes.append(Change("changed", (), "op counts changed"))
        return result(new, changes, nodes_removed=sum(len(c.nodes) for c in changes if c.kind == "removed"),
                      nodes_added=sum(len(c.nodes) for c in changes if c.kind == "added"))
