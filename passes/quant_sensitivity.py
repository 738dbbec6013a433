"""Per-layer quantization sensitivity and automatic float fallback (in a worker).

Ranking: the fp32 model and its fake-quantized QDQ twin run side by side,
chunk by chunk (the layer-wise machinery, ORT with optimizations off so the
QDQ graph runs as written); each quantized node's score is the error it *adds*:
the relative L2 error of its output minus the largest error among its inputs.
A float op's jump (a Tanh whose input was re-quantized) is charged to the
quantized nodes feeding it. One pass over the model instead of one
quantization per layer.

Fallback: the worst-ranked nodes are kept in float (``nodes_to_exclude``),
1, 2, 4, 8... of them, each step re-quantized from the cached calibration and
measured on held-out inputs, until the target cosine is met; then the count is
bisected down to the smallest that still meets it. Every step is reported.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from passes.quant_tools import (
    Prepared,
    Ranges,
    StaticConfig,
    accuracy,
    integer_differences,
    ort_outputs,
    quantize_static_config,
)
from studio.core.feeds import Feeds
from studio.core.protowalk import reachable
from studio.accuracy.layerwise import chunk_items, compare_chunk, plan_layers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NodeScore:
    node: str
    op_type: str
    added_error: float        # relative L2 error this node adds over its inputs
    output_error: float       # accumulated relative L2 error at its output

    def to_dict(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "added_error": round(self.added_error, 6),
                "output_error": round(self.output_error, 6)}


@dataclass(frozen=True)
class FallbackStep:
    excluded: int
    cosine: float
    meets_target: bool

    def to_dict(self) -> dict:
        return {"excluded": self.excluded, "cosine": round(self.cosine, 6), "meets_target": self.meets_target}


def quantizable_ops() -> set[str]:
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    return set(QDQRegistry) | set(QLinearOpsRegistry)


def rank_nodes(prepared: Path, qdq: Path, feeds: Feeds, ctx: Any, workdir: Path,
               chunk_bytes: int = 64 * 2**20) -> list[NodeScore]:
    """Quantizable nodes of ``prepared``, most damaging first (see module docs)."""
    ref = onnx.load_model(str(prepared), load_external_data=False)
    cand = onnx.load_model(str(qdq), load_external_data=False)
    shapes = {k: list(np.shape(v)) for k, v in feeds.items() if not isinstance(v, list)}
    plan = plan_layers(ref, cand, shapes)
    del cand
    items = plan["items"]
    itemsize = {onnx.TensorProto.FLOAT: 4, onnx.TensorProto.FLOAT16: 2, onnx.TensorProto.DOUBLE: 8,
                onnx.TensorProto.BFLOAT16: 2}
    errors: dict[str, float] = {}
    folder = workdir / "rank"
    (folder / "a").mkdir(parents=True, exist_ok=True)
    (folder / "b").mkdir(parents=True, exist_ok=True)
    for src, side in ((prepared, "a"), (qdq, "b")):
        for data in Path(src).parent.glob(Path(src).name + ".data"):
            shutil.copyfile(data, folder / side / data.name)  # scratch: the probe folder made above
    opts = {"graph_optimization_level": "disable"}
    for c, chunk in enumerate(chunk_items(items, chunk_bytes, itemsize)):
        res = compare_chunk(str(prepared), str(qdq), chunk, feeds, ctx, engine_a="onnxruntime",
                            engine_b="onnxruntime", options_a=opts, options_b=opts, dir_a=folder / "a",
                            dir_b=folder / "b", chunk=c)
        for tensor, r in res.items():
            errors[tensor] = r["rel_l2"] if r["rel_l2"] is not None else float("inf")
    shutil.rmtree(folder, ignore_errors=True)  # scratch: the probe folder made above
    return _score_nodes(ref, errors, quantizable_ops())


# Activations the QDQ quantizer folds into the range of the node before them: part of that node's unit.
_FOLDED = ("Relu", "Clip")


def _score_nodes(ref: onnx.ModelProto, errors: dict[str, float], ops: set[str]) -> list[NodeScore]:
    """Charge each measured output's error jump to the quantized nodes that caused it.

    A QDQ graph has no Q/DQ between a Conv and its Relu, so the Conv's own output is not
    measured: the jump at the Relu's output belongs to the unit (Conv, Relu) and is measured
    from the nearest *measured* tensors upstream, not from zero. The unit's compute op (the Conv)
    owns it; ``with_neighbours`` floats its producer and folded Relu with it."""
    produced_by = {o: n for n in ref.graph.node for o in n.output}
    added: dict[str, float] = {}
    out_err: dict[str, float] = {}
    kinds: dict[str, str] = {}

    def unit(node: onnx.NodeProto) -> tuple[list[onnx.NodeProto], float]:
        """The nodes from ``node`` back through unmeasured tensors, and the largest error at the
        measured tensors feeding them (0 for graph inputs and weights)."""
        span = reachable([node], lambda n: [produced_by[i] for i in n.input if i not in errors and i in produced_by],
                         limit=64)
        return span, max([0.0, *(errors[i] for n in span for i in n.input if i in errors)])

    for node in ref.graph.node:
        outs = [errors[o] for o in node.output if o in errors]
        if not outs:
            continue
        span, base = unit(node)
        jump = max(max(outs) - base, 0.0)
        quantized = [n for n in span if n.op_type in ops and n.name]
        owners = [n for n in quantized if n.op_type not in _FOLDED] or quantized
        if not owners:
            # A float op shows the damage its quantized inputs carry (Tanh after a MatMul whose
            # output was re-quantized): the jump belongs to the nodes that produced them.
            owners = [produced_by[i] for i in node.input
                      if i in produced_by and produced_by[i].op_type in ops and produced_by[i].name]
        for owner in owners:
            added[owner.name] = added.get(owner.name, 0.0) + jump / len(owners)
            kinds[owner.name] = owner.op_type
            out_err[owner.name] = max(out_err.get(owner.name, 0.0), max(outs))
        if node.name:
            out_err[node.name] = max(out_err.get(node.name, 0.0), max(outs))
    scores = [NodeScore(name, kinds[name], score, out_err.get(name, 0.0)) for name, score in added.items()]
    scores.sort(key=lambda s: (-s.added_error, -s.output_error))
    return scores


def fallback(prepared: Prepared, config: StaticConfig, ranges: Ranges, calib: Sequence[Feeds],
             holdout: Sequence[Feeds], reference: list[dict], ranked: Sequence[NodeScore], target: float,
             exclude: Sequence[str], workdir: Path, ctx: Any,
             on_step: Callable[[FallbackStep], None] | None = None,
             judge: Callable[[list[dict], list[dict]], tuple[float, Any]] | None = None,
             ) -> tuple[Path | None, list[str], list[FallbackStep]]:
    """Keep the worst nodes in float until the held-out cosine (or ``judge``'s task metric) meets ``target``.
    Returns (model, nodes kept in float, steps); the model is None when even
    excluding every ranked node does not meet the target, or when only a model with no INT8 layer left meets it."""
    steps: list[FallbackStep] = []
    cache: dict[int, tuple[Path, float]] = {}

    model = onnx.load_model(str(prepared.path), load_external_data=False)

    def trial(k: int) -> float:
        if k in cache:
            return cache[k][1]
        names = with_neighbours(model, list(exclude) + [s.node for s in ranked[:k]])
        out = workdir / f"fallback-{k}.onnx"
        quantize_static_config(prepared, out, config, ranges, calib, names)
        outputs = ort_outputs(out, holdout, ctx)
        cos, _ = (judge or accuracy)(reference, outputs)
        if integer_differences(reference, outputs) is not None:
            cos = 0.0                  # an integer output changed: this trial misses, whatever the cosine
        cache[k] = (out, cos)
        step = FallbackStep(k, cos, cos >= target)
        steps.append(step)
        if on_step:
            on_step(step)
        ctx.set_stage(f"INT8 fallback: {k} layer(s) kept in float, cosine {cos:.4f}")
        return cos

    n = len(ranked)
    k, good = 1, None
    while k <= n:
        if trial(k) >= target:
            good = k
            break
        if k == n:
            break
        k = min(n, k * 2)
    if good is None:
        return None, [], steps
    low = good // 2          # known (or assumed, for 0) to miss the target
    while good - low > 1:
        mid = (low + good) // 2
        if trial(mid) >= target:
            good = mid
        else:
            low = mid
    path = cache[good][0]
    if not any(n.op_type in INT8_OPS for n in onnx.load_model(str(path), load_external_data=False).graph.node):
        return None, [], steps      # every quantized layer back in float: no INT8 model at all, not a mixed one
    kept = with_neighbours(model, [s.node for s in ranked[:good]])
    return path, kept, steps


# What makes a model INT8: a node computing on quantized values (a QDQ pair's DequantizeLinear, a QOperator op).
INT8_OPS = frozenset({"DequantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm", "MatMulInteger", "ConvInteger",
                      "QLinearAdd", "QLinearMul", "DynamicQuantizeMatMul"})


def with_neighbours(model: onnx.ModelProto, names: Sequence[str]) -> list[str]:
    """What keeping ``names`` in float takes in a QDQ graph: each node, the nodes producing its
    activation inputs (a quantized producer re-quantizes its output, and the node would still
    read the rounded values), and the Relu/Clip right after it (folded into the quantization
    range of its output). One level only: excluding a node must not float the rest of the model."""
    keep = list(dict.fromkeys(names))
    chosen = set(keep)
    by_name = {n.name: n for n in model.graph.node if n.name}
    produced_by = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    extra: list[str] = []
    for name in list(keep):
        node = by_name.get(name)
        if node is None:
            continue
        for i in node.input:
            src = produced_by.get(i)
            if src is not None and src.name:
                extra.append(src.name)
        for o in node.output:
            users = consumers.get(o, [])
            if len(users) == 1 and users[0].op_type in ("Relu", "Clip") and users[0].name:
                extra.append(users[0].name)
    for name in extra:
        if name not in chosen:
            keep.append(name)
            chosen.add(name)
    return keep
