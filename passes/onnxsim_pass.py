"""onnxsim and onnxslim run as passes  ⇒  their results, checked by our own verification.

Neither peer's own check is trustworthy: onnxsim's is off by default (``check_n=0``) and
its success flag says nothing about If-subgraph outer-scope references (T7 of the corpus
fact sheet); onnxslim trusts a declared output shape that is wrong (T4) and crashes on a
model without a default-domain opset (T8). Here each result goes through the pipeline's
verification like any other pass (interface, full check, outputs on ORT, output shapes
before values). A result more than ``max_growth`` (default 1.1) times the size of its input
is refused: both peers fold ConstantOfShape weights or ``Cast(int8)·scale`` weights into
files of hundreds of MB (T3); the peer is then run once more with its own fold-size
threshold (``fold_limit_bytes``), so the folds that do not inflate are still kept. So is a
result with fewer random ops than its input (a folded Bernoulli is one frozen draw). Both
run in a sandbox worker (onnxsim can die with SIGFPE on a Conv with strides=0) and are
skipped, with the reason, when the library is not importable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, all_nodes, count_ops, label_diff, labels, result
from passes.nondeterministic import random_op_counts
from passes.base import register
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model_io import from_proto, to_proto

# Below this, growth is noise (a folded shape tensor), not a file-size problem.
_GROWTH_FLOOR_BYTES = 64 * 1024
# The second try's fold limit: no single folded tensor above this (a shape tensor or a small weight is).
_FOLD_LIMIT_BYTES = 256 * 1024


def run_tool(tool: str, proto, fold_limit: int | None = None):
    """One peer on an in-memory ``onnx.ModelProto``; ``fold_limit``: the largest tensor it may fold.

    onnxslim's symbolic shape inference refuses a model without a default-domain opset (an
    ai.onnx.ml-only classifier, T8): it then runs without shape inference."""
    if tool == "onnxsim":
        import onnxsim

        kw = {"tensor_size_threshold": f"{fold_limit}B"} if fold_limit else {}
        out, _check = onnxsim.simplify(proto, check_n=0, perform_optimization=True, **kw)
        return out
    if tool == "onnxslim":
        import onnxslim

        kw = {"size_threshold": int(fold_limit)} if fold_limit else {}
        if not any(o.domain in ("", "ai.onnx") for o in proto.opset_import):
            kw["no_shape_infer"] = True
        out = onnxslim.slim(proto, **kw)
        if out is None:     # onnxslim prints the reason and returns None (old opset, failed inference)
            raise RuntimeError("onnxslim returned no model")
        return out
    raise ValueError(f"unknown peer '{tool}'")


class PeerPass(StudioPass):
    """A peer optimizer's whole result, kept only where the studio's verification passes."""

    tool: ClassVar[str] = ""
    calls_engines = True

    def call(self, model: ir.Model) -> PassResult:
        try:
            __import__(self.tool)
        except Exception as exc:   # ImportError, or a broken native extension
            return result(model, [], notes=[f"{self.tool} is not available here ({type(exc).__name__}); skipped"])
        before, before_ops = labels(model), count_ops(model)
        from onnx_ir.external_data import load_to_model

        proto = to_proto(load_to_model(model))   # weights in memory: the peers need them; map types back
        max_growth = float(self.options.get("max_growth", 1.1))
        size_in = proto.ByteSize()
        cap = max(max_growth * size_in, size_in + _GROWTH_FLOOR_BYTES)
        notes: list[str] = []
        simplified = run_tool(self.tool, proto)
        size_out = simplified.ByteSize()
        if size_out > cap:
            limit = int(self.options.get("fold_limit_bytes", _FOLD_LIMIT_BYTES))
            first = f"{self.tool}'s result is {_mb(size_out)} vs {_mb(size_in)} for its input (> {max_growth:g}x: " \
                    "it folded large constants)"
            simplified = run_tool(self.tool, to_proto(load_to_model(model)), fold_limit=limit)
            size_out = simplified.ByteSize()
            if size_out > cap:
                return PassResult(model, False, (), {}, (), (
                    f"{first}; with folds capped at {_mb(limit)} still {_mb(size_out)}: kept the input. "
                    f"Set {self.tool}.max_growth to accept a larger file",))
            notes.append(f"{first}; run again with folds capped at {_mb(limit)}: {_mb(size_out)}")
        new = from_proto(simplified)
        lost = random_op_counts(all_nodes(new))
        kept = random_op_counts(all_nodes(model))
        if any(lost[op] < n for op, n in kept.items()):
            gone = ", ".join(f"{op} {n} -> {lost[op]}" for op, n in sorted(kept.items()) if lost[op] < n)
            return PassResult(model, False, (), {}, (), (
                f"{self.tool} folded or removed random ops ({gone}): a folded draw is one frozen sample; "
                "kept the input",))
        changes = label_diff(before, new, f"rewritten by {self.tool}")
        if not changes and count_ops(new) != before_ops:
            changes.append(Change("changed", (), "op counts changed"))
        return result(new, changes, notes=notes,
                      nodes_removed=sum(len(c.nodes) for c in changes if c.kind == "removed"),
                      nodes_added=sum(len(c.nodes) for c in changes if c.kind == "added"))


@register
class OnnxSim(PeerPass):
    """Whatever onnx-simplifier does (folding, its fusions)  ⇒  its result, verified by the studio."""

    name = "onnxsim"
    tool = "onnxsim"
    summary = "Run onnx-simplifier in a sandbox and keep its result only if the studio's verification passes."


@register
class OnnxSlim(PeerPass):
    """Whatever onnxslim does (folding, its pattern fusions)  ⇒  its result, verified by the studio."""

    name = "onnxslim"
    tool = "onnxslim"
    summary = "Run onnxslim in a sandbox and keep its result only if the studio's verification passes."


# The engine whose judgement picks among verified peer candidates -> what it counts (passes.pipeline reads it).
PEER_CRITERIA = {"onnxruntime": "fusions", "openvino": "compiled ops"}
PEER_ENGINES = tuple(PEER_CRITERIA)


def peer_engine(options: Mapping[str, object]) -> str:
    """The engine whose judgement picks among peer candidates (a candidate pass's ``engine`` option):
    onnxruntime (its fusions) unless a preset or ``--set best-of-peers.engine=openvino`` says otherwise."""
    engine = str(options.get("engine", PEER_ENGINES[0]))
    if engine not in PEER_ENGINES:
        raise StudioError(f"best-of-peers.engine must be {' or '.join(PEER_ENGINES)}, not {engine[:40]!r}",
                          code=ErrorCode.BAD_OPTION)
    return engine


@register
class BestOfPeers(StudioPass):
    """onnxsim and onnxslim as candidates  ⇒  the smallest verified one (nodes, then file size),
    only where it has fewer nodes (or the same nodes and a smaller file) than the input and
    costs the engine nothing: ONNX Runtime none of its own fusions, or with ``engine=openvino`` (the
    openvino preset) no more ops in OpenVINO's compiled model, the fewest of them winning. The
    pipeline runs, verifies and chooses (``passes.pipeline``); this pass alone changes nothing."""

    name = "best-of-peers"
    summary = ("Run onnxsim and onnxslim as verified candidates and keep the smallest verified result that "
               "costs the target engine nothing (ONNX Runtime's fusions; OpenVINO's compiled ops with "
               "engine=openvino); the studio's own rules then run on top.")
    candidates: ClassVar[tuple[str, ...]] = ("onnxsim", "onnxslim")
    calls_engines = True

    def __init__(self, **options) -> None:
        super().__init__(**options)
        peer_engine(options)        # a wrong engine is one line before anything runs

    def call(self, model: ir.Model) -> PassResult:
        return result(model, [], notes=["best-of-peers runs only inside a pipeline (it chooses among verified "
                                        "candidates)"])


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 else f"{n / 1024:.1f} KB"
