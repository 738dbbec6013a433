"""onnxsim: onnx-simplifier run as one pass  ⇒  its result, checked by our own verification.

onnxsim's own check is off by default and its success flag says nothing about
If-subgraph outer-scope references or grown files; here its result goes
through the pipeline's verification like any other pass, and a result more
than ``max_growth`` (default 1.1) times the size of its input is refused
(onnxsim folds ConstantOfShape/Expand weights into files of hundreds of MB), and
so is a result with fewer random ops than its input (onnxsim folds Bernoulli). It runs in a sandbox
worker (it can die with SIGFPE on a Conv with strides=0) and is skipped, with
the reason, when onnxsim is not importable.
"""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, all_nodes, count_ops, label_diff, labels, result
from passes.nondeterministic import random_op_counts
from passes.registry import register

# Below this, growth is noise (a folded shape tensor), not a file-size problem.
_GROWTH_FLOOR_BYTES = 64 * 1024


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

        from passes.model_io import from_proto, to_proto

        proto = to_proto(load_to_model(model))   # weights in memory: onnxsim needs them; map types back
        simplified, _check_ok = onnxsim.simplify(proto, check_n=0, perform_optimization=True)
        max_growth = float(self.options.get("max_growth", 1.1))
        size_in, size_out = proto.ByteSize(), simplified.ByteSize()
        if size_out > max(max_growth * size_in, size_in + _GROWTH_FLOOR_BYTES):
            return PassResult(model, False, (), {}, (), (
                f"onnxsim's result is {_mb(size_out)} vs {_mb(size_in)} for its input (> {max_growth:g}x: it folded "
                f"large constants); kept the input. Set onnxsim.max_growth to accept a larger file",))
        new = from_proto(simplified)
        lost = random_op_counts(all_nodes(new))
        kept = random_op_counts(all_nodes(model))
        if any(lost[op] < n for op, n in kept.items()):
            gone = ", ".join(f"{op} {n} -> {lost[op]}" for op, n in sorted(kept.items()) if lost[op] < n)
            return PassResult(model, False, (), {}, (), (
                f"onnxsim folded or removed random ops ({gone}): a folded draw is one frozen sample; "
                "kept the input",))
        changes = label_diff(before, new, "rewritten by onnxsim")
        if not changes and count_ops(new) != before_ops:
            changes.append(Change("changed", (), "op counts changed"))
        return result(new, changes, nodes_removed=sum(len(c.nodes) for c in changes if c.kind == "removed"),
                      nodes_added=sum(len(c.nodes) for c in changes if c.kind == "added"))


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.1f} KB"
