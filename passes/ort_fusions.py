"""ONNX Runtime's own fusions on a model, as ORT runs it by default (ORT_ENABLE_ALL).

A rewrite with fewer ONNX nodes is no optimization when ORT then fuses less: a folded
Attention or LayerNorm pattern that ORT's matcher no longer recognizes runs as a dozen
kernels instead of one. So a candidate's fused-op counts are read from the graph ORT
itself saves (``SessionOptions.optimized_model_filepath``) and compared with its input's
(``OrtFusions.costs``): a key fusion (attention, normalization, GELU) whose count drops refuses
the candidate, and so does any other fused op whose count drops while ORT's graph does not get
smaller. Runs in a sandbox worker.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.engines import sessions

# ORT's fused kernels (contrib ops and the LayerNormalization its fusions produce), by op type.
FUSED_OPS = frozenset({
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention", "QAttention",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
    "LayerNormalization", "SimplifiedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "QuickGelu",
    "GemmFastGelu", "BiasSoftmax", "BiasDropout", "BiasAdd", "BiasSplitGelu", "FusedConv", "FusedGemm",
    "FusedMatMul", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "MatMulNBits", "RotaryEmbedding",
    "NhwcConv", "QGemm", "QLinearConv",
})

# The fusions a rewrite must never cost ORT: attention, normalization and GELU kernels replace a dozen
# nodes each. The others (FusedConv, FusedMatMul...) fold an activation or a transpose into a neighbour;
# one may disappear because the rewrite removed what it fused (a Transpose folded into the weights).
KEY_FUSIONS = frozenset({
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention", "QAttention",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
    "LayerNormalization", "SimplifiedLayerNormalization", "BiasGelu", "FastGelu", "Gelu", "QuickGelu",
    "GemmFastGelu", "BiasSoftmax", "BiasSplitGelu", "RotaryEmbedding", "MatMulNBits",
})

_SAVED = "ort_optimized.onnx"


@dataclass(frozen=True)
class OrtFusions:
    """Fused-op counts and total nodes of the graph ORT runs (all graphs, subgraphs included)."""

    fused: Mapping[str, int]
    nodes: int

    def lost_to(self, other: OrtFusions) -> dict[str, tuple[int, int]]:
        """Fused op types with fewer nodes in ``other`` than here: (here, there)."""
        return {op: (n, other.fused.get(op, 0)) for op, n in sorted(self.fused.items())
                if other.fused.get(op, 0) < n}

    def costs(self, other: OrtFusions) -> dict[str, tuple[int, int]]:
        """What going from this graph to ``other`` costs ORT: every key fusion (attention, normalization,
        GELU) with fewer nodes, and any other fused op with fewer nodes unless ORT's graph got smaller."""
        lost = self.lost_to(other)
        if other.nodes < self.nodes:
            return {op: v for op, v in lost.items() if op in KEY_FUSIONS}
        return lost


def fused_counts(proto) -> tuple[Counter, int]:
    """(fused op counts, all nodes) of an ``onnx.ModelProto``, subgraphs included."""
    counts: Counter = Counter()
    total = 0

    def walk(graph) -> None:
        nonlocal total
        for node in graph.node:
            total += 1
            if node.op_type in FUSED_OPS:
                counts[node.op_type] += 1
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g)
                for g in attr.graphs:
                    walk(g)

    walk(proto.graph)
    return counts, total


@job("passes.ort_fusions")
def ort_fusions_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Open the model in ORT at ORT_ENABLE_ALL, saving the optimized graph; count its fused ops."""
    import onnx

    runner = sessions.open_runner("onnxruntime", args["model_path"], {
        "graph_optimization_level": "all", "log_severity_level": 3, "save_optimized_model": _SAVED,
        "external_data_dir": args.get("data_dir") or None}, ctx)
    runner.close()
    counts, total = fused_counts(onnx.load_model(str(ctx.out_dir / _SAVED), load_external_data=False))
    return JobOutput(data={"fused": dict(counts), "nodes": total})


def ort_fusions(model_path: Path, out_dir: Path, *, data_dir: Path | None = None, limits: Limits | None = None,
                pool_key: str = "default") -> OrtFusions:
    """``model_path`` as ORT runs it by default: its fused ops. ``data_dir``: where a checkpoint's
    unchanged external weights live. Raises ``WorkerError`` when ORT cannot open it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    res = run_job("passes.ort_fusions", {"model_path": str(model_path), "data_dir": str(data_dir or "")},
                  stage="ONNX Runtime's fusions (ORT_ENABLE_ALL)", limits=limits, out_dir=out_dir,
                  pool_key=pool_key)
    return OrtFusions({str(k): int(v) for k, v in res.data["fused"].items()}, int(res.data["nodes"]))
