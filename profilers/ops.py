"""Per-op time: which kernels an engine ran, how long each took, and which
ONNX nodes they stand for.

Sources (both run in a worker, :func:`ops_job`):

* ONNX Runtime: its profiling JSON (chrome-trace format, written into the
  job's ``out_dir``, never the cwd). ``<node>_kernel_time`` events of the last
  ``runs`` ``model_run`` windows are summed per kernel (warm-up runs excluded).
* OpenVINO: per-layer counters (``PERF_COUNT``, ``get_profiling_info``) summed
  over the runs, and the runtime model's ``originalLayersNames`` (which model
  layers each executed node fuses). A chrome trace of the last run is
  synthesized from the counters (layers laid end to end) so both engines open
  in Perfetto / chrome://tracing.

Mapping kernels back to ONNX nodes (:func:`attribute`, engine-agnostic): a
kernel name (or each of OpenVINO's original names) is looked up as a node name,
then as a tensor name (OpenVINO names unnamed nodes after their output; ORT
names fused NCHWc kernels ``<output tensor>_nchwc``), then by its longest
``_``-separated prefix. ONNX nodes that no kernel names (a Conv whose BN got
folded in and whose kernel took a generated name) are *absorbed* into the
kernel that consumes their outputs, when exactly one does. A fused kernel's
time goes to its *anchor*: the first member, in graph order, whose op type
matches the kernel's (Conv for a Conv+BN+Relu kernel), else the first member.
``per_node_ms`` is keyed like the Nodes page (the node name, or
``<op_type>_<index>`` for an unnamed node; ``#2`` for a repeated name).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from onnx import ModelProto

from profilers.latency import timed_loop
from profilers.nvtx import ranges
from profilers.runners import open_runner
from studio.core import jsonsafe
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.paths import safe_name
from studio.core.protowalk import node_id
from studio.core.sandbox import Limits, run_job
from studio.core.engines.mnn import convert_to_mnn, mnn_op_times

__all__ = ["OpNodeIndex", "KernelTime", "OpProfile", "OpTypeTime", "RawKernel", "aggregate_ort_events",
           "attribute", "build_op_profile", "measure_ops"]

_NO_COST_OPS = {"Constant"}
# Ops engines fuse into the kernel of their producer (an epilogue).
_EPILOGUE_OPS = {"Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Clip", "Sigmoid", "HardSigmoid",
                 "HardSwish", "Tanh", "Erf", "Gelu", "Elu", "Selu", "Softplus", "Mish", "BatchNormalization",
                 "Identity", "Dropout", "Cast", "Sqrt", "Pow", "Exp", "Neg", "Abs", "Max", "Min"}
# OpenVINO layer types -> the ONNX op types they implement (for choosing a fused kernel's anchor).
_ENGINE_OP_ALIASES: dict[str, set[str]] = {
    "convolution": {"conv"}, "groupconvolution": {"conv"}, "convolutionbackpropdata": {"convtranspose"},
    "fullyconnected": {"gemm", "matmul"}, "matmul": {"matmul", "gemm"},
    "pooling": {"maxpool", "averagepool", "globalmaxpool", "globalaveragepool"},
    "reduce": {"reducemean", "reducesum", "reducemax", "reducemin", "reduceprod", "globalaveragepool",
               "globalmaxpool"},
    "mvn": {"meanvariancenormalization", "layernormalization"},
    "softmax": {"softmax"}, "gather": {"gather"}, "concatenation": {"concat"}, "reshape": {"reshape"},
    "transpose": {"transpose"}, "interpolate": {"resize", "upsample"},
}


# ============================================================================ graph index

@dataclass(frozen=True)
class OpNodeIndex:
    """The main graph's nodes, addressable by name, key and output tensor."""

    keys: tuple[str, ...]
    op_types: tuple[str, ...]
    by_name: Mapping[str, int]
    producer: Mapping[str, int]
    consumers: tuple[frozenset[int], ...]
    first_input_producer: tuple[int | None, ...]

    @classmethod
    def from_model(cls, model: ModelProto) -> OpNodeIndex:
        nodes = list(model.graph.node)
        keys: list[str] = []
        seen: set[str] = set()
        by_name: dict[str, int] = {}
        producer: dict[str, int] = {}
        for i, n in enumerate(nodes):
            key = node_id("", n.name, n.op_type, i, seen)   # the Nodes page's id for main-graph nodes
            keys.append(key)
            by_name.setdefault(key, i)
            by_name.setdefault(n.name or f"{n.op_type}_{i}", i)
            for out in n.output:
                if out:
                    producer.setdefault(out, i)
        consumers: list[set[int]] = [set() for _ in nodes]
        for i, n in enumerate(nodes):
            for name in n.input:
                p = producer.get(name)
                if p is not None:
                    consumers[p].add(i)
        first = tuple(producer.get(n.input[0]) if n.input else None for n in nodes)
        return cls(tuple(keys), tuple(n.op_type for n in nodes), by_name, producer,
                   tuple(frozenset(c) for c in consumers), first)

    def resolve(self, name: str) -> tuple[int, str] | None:
        """(node index, how) for an engine-side name, or None. Prefixes are cut at ``_``
        and ``/`` (ORT: ``<output>_nchwc``, ``<node>/LayerNormFusion/``)."""
        if name in self.by_name:
            return self.by_name[name], "exact"
        if name in self.producer:
            return self.producer[name], "tensor"
        for cut in sorted((i for i, ch in enumerate(name) if ch in "_/" and i > 0), reverse=True):
            prefix = name[:cut]
            if prefix in self.by_name:
                return self.by_name[prefix], "prefix"
            if prefix in self.producer:
                return self.producer[prefix], "prefix"
        return None


# ============================================================================ results

@dataclass(frozen=True)
class RawKernel:
    """One engine kernel as the job reports it: its time in each profiled run."""

    name: str
    op_type: str
    exec_type: str
    per_run_us: tuple[float, ...]                   # one entry per run (0 where it did not run)
    calls: int                                      # executions over all runs
    original_names: tuple[str, ...] | None = None   # OpenVINO: the layers it fuses

    @property
    def typical_us(self) -> float:
        """Median over runs: one slow run on a busy machine does not move it."""
        return float(np.median(self.per_run_us)) if self.per_run_us else 0.0


@dataclass(frozen=True)
class KernelTime:
    name: str                      # the engine's kernel / layer name
    op_type: str                   # the engine's op type (ORT op_name, OpenVINO layer type)
    exec_type: str                 # ORT execution provider / OpenVINO implementation
    ms: float                      # per inference
    calls: float                   # per inference
    share: float                   # of the per-op sum
    onnx_nodes: tuple[str, ...]    # ONNX node keys this kernel runs, in graph order
    anchor: str | None             # the node its time is attributed to
    mapping: str                   # exact | tensor | prefix | absorbed | unmapped

    def to_dict(self) -> dict:
        return {"name": self.name, "op_type": self.op_type, "exec_type": self.exec_type,
                "ms": round(self.ms, 6), "calls": round(self.calls, 3), "share": round(self.share, 5),
                "onnx_nodes": list(self.onnx_nodes), "anchor": self.anchor, "mapping": self.mapping}


@dataclass(frozen=True)
class OpTypeTime:
    op_type: str
    ms: float
    kernels: int
    share: float

    def to_dict(self) -> dict:
        return {"op_type": self.op_type, "ms": round(self.ms, 6), "kernels": self.kernels,
                "share": round(self.share, 5)}


@dataclass(frozen=True)
class OpProfile:
    """Per-op time of one variant, per inference: medians over ``runs`` runs (a spike in
    one run on a busy machine does not move them)."""

    variant_id: str
    engine: str
    runs: int
    kernels: tuple[KernelTime, ...]
    by_op_type: tuple[OpTypeTime, ...]
    per_node_ms: Mapping[str, float]
    per_op_sum_ms: float
    end_to_end_ms: float              # median of infer() in the same runs (perf_counter_ns)
    engine_run_ms: float | None       # ORT's own model_run duration (median)
    mapped_share: float               # share of per-op time attributed to ONNX nodes
    trace_file: str | None            # file name inside the job folder
    trace_note: str = ""
    notes: tuple[str, ...] = ()
    unassigned_nodes: tuple[str, ...] = field(default=(), repr=False)
    # Median over the runs of each run's time in kernels (None: not known). On a busy machine each run loses
    # time to preemption in different kernels, so the per-kernel medians add up to less than any run spends
    # in kernels; end-to-end is compared with this figure, which comes from the same runs.
    in_kernels_ms: float | None = None

    @property
    def _kernel_time_ms(self) -> float:
        return self.in_kernels_ms if self.in_kernels_ms is not None else self.per_op_sum_ms

    @property
    def overhead_ms(self) -> float:
        """End-to-end minus a run's time in kernels: framework, copies, scheduling (negative when the
        engine's counters add up to more than the wall time: see ``overhead_text``)."""
        return self.end_to_end_ms - self._kernel_time_ms

    @property
    def sum_exceeds_end_to_end(self) -> bool:
        return self._kernel_time_ms > self.end_to_end_ms

    def overhead_text(self) -> str:
        """"overhead X ms", or why there is none to show (never a negative overhead)."""
        runs_note = ""
        if self.in_kernels_ms is not None and self.in_kernels_ms > 1.25 * self.per_op_sum_ms + 1e-3:
            runs_note = (f"; a run spends {self.in_kernels_ms:.3f} ms in kernels (median over runs), more than the "
                         f"kernels' medians add up to ({self.per_op_sum_ms:.3f} ms): a busy machine slowed "
                         "different kernels in each run")
        if not self.sum_exceeds_end_to_end:
            return f"overhead {self.overhead_ms:.3f} ms{runs_note}"
        why = OVERLAP_WHY.get(self.engine, "kernels overlap (parallel execution) or the profiler adds time")
        return (f"{'time in kernels' if runs_note else 'per-op sum'} exceeds end-to-end by {-self.overhead_ms:.3f} "
                f"ms: {why}; no overhead figure{runs_note}")

    @property
    def coverage(self) -> float:
        """A run's time in kernels / end-to-end (1.0: every microsecond is in some kernel)."""
        return self._kernel_time_ms / self.end_to_end_ms if self.end_to_end_ms > 0 else 0.0

    def node_time_share(self) -> dict[str, float]:
        """Share of the per-op time per ONNX node key (0..1): the graph overlay's input."""
        total = sum(self.per_node_ms.values())
        return {k: v / total for k, v in self.per_node_ms.items()} if total > 0 else {}

    def node_times_s(self) -> dict[str, float]:
        """Seconds per inference per ONNX node: the graph view's ``data["node_times"]``."""
        return {k: v / 1000.0 for k, v in self.per_node_ms.items()}

    def top(self, n: int = 15) -> tuple[KernelTime, ...]:
        return self.kernels[:n]

    def to_dict(self) -> dict:
        return {"variant_id": self.variant_id, "engine": self.engine, "runs": self.runs,
                "per_op_sum_ms": round(self.per_op_sum_ms, 6), "end_to_end_ms": round(self.end_to_end_ms, 6),
                "in_kernels_ms": None if self.in_kernels_ms is None else round(self.in_kernels_ms, 6),
                "engine_run_ms": None if self.engine_run_ms is None else round(self.engine_run_ms, 6),
                "overhead_ms": round(self.overhead_ms, 6), "coverage": round(self.coverage, 4),
                "sum_exceeds_end_to_end": self.sum_exceeds_end_to_end,
                "mapped_share": round(self.mapped_share, 4), "trace_file": self.trace_file,
                "trace_note": self.trace_note, "notes": list(self.notes),
                "by_op_type": [o.to_dict() for o in self.by_op_type],
                "kernels": [k.to_dict() for k in self.kernels],
                "per_node_ms": {k: round(v, 6) for k, v in self.per_node_ms.items()},
                "unassigned_nodes": list(self.unassigned_nodes)}


# ============================================================================ attribution (pure)

def _op_matches(kernel_op: str, onnx_op: str) -> bool:
    k, o = kernel_op.lower(), onnx_op.lower()
    if k == o or (k.startswith("fused") and k[5:] == o):
        return True
    return o in _ENGINE_OP_ALIASES.get(k, set())


def attribute(kernels: Sequence[RawKernel], graph: OpNodeIndex, runs: int
              ) -> tuple[list[KernelTime], dict[str, float], tuple[str, ...]]:
    """Map kernels to ONNX nodes: (kernel times, per-node ms, nodes no kernel ran)."""
    runs = max(runs, 1)
    members: list[set[int]] = []
    direct: list[set[int]] = []
    how: list[str] = []
    owner: dict[int, int] = {}
    for ki, k in enumerate(kernels):
        names = k.original_names if k.original_names else (k.name,)
        found: set[int] = set()
        methods = []
        for name in names:
            hit = graph.resolve(name)
            if hit is not None:
                found.add(hit[0])
                methods.append(hit[1])
        members.append(set(found))
        direct.append(found)
        how.append("unmapped" if not methods else min(methods, key=["exact", "tensor", "prefix"].index))
        for idx in found:
            owner.setdefault(idx, ki)
    # Nodes no kernel names were fused into a neighbour. First (graph order) an epilogue op
    # (Add, Relu, BatchNormalization...) joins the kernel that produces its first input:
    # Conv+Add+Relu kernels are named after the Conv. Then (reverse order) any other node
    # joins the one kernel that consumes all its outputs: Conv+BN+Relu kernels are named
    # after the Relu's output. Nodes with no single owner stay unassigned.
    def claim(idx: int, ki: int) -> None:
        members[ki].add(idx)
        owner[idx] = ki
        if how[ki] == "unmapped":
            how[ki] = "absorbed"

    for idx in range(len(graph.keys)):
        if idx in owner or graph.op_types[idx] not in _EPILOGUE_OPS:
            continue
        first = graph.first_input_producer[idx]
        if first is not None and first in owner:
            claim(idx, owner[first])
    for idx in range(len(graph.keys) - 1, -1, -1):
        if idx in owner or graph.op_types[idx] in _NO_COST_OPS:
            continue
        owners = {owner.get(c) for c in graph.consumers[idx]}
        if len(owners) == 1 and None not in owners:
            claim(idx, owners.pop())
    per_op_us = sum(k.typical_us for k in kernels)
    out: list[KernelTime] = []
    per_node: dict[str, float] = {}
    for ki, k in enumerate(kernels):
        ordered = sorted(members[ki])
        anchor_idx = None
        if ordered:
            matching = [i for i in ordered if _op_matches(k.op_type, graph.op_types[i])]
            costly = [i for i in ordered if graph.op_types[i] not in _NO_COST_OPS]
            anchor_idx = (matching or costly or ordered)[0]
        ms = k.typical_us / 1000.0
        anchor = graph.keys[anchor_idx] if anchor_idx is not None else None
        if anchor is not None:
            per_node[anchor] = per_node.get(anchor, 0.0) + ms
        out.append(KernelTime(k.name, k.op_type, k.exec_type, ms, k.calls / runs,
                              k.typical_us / per_op_us if per_op_us > 0 else 0.0,
                              tuple(graph.keys[i] for i in ordered), anchor, how[ki]))
    out.sort(key=lambda kt: -kt.ms)
    unassigned = tuple(graph.keys[i] for i in range(len(graph.keys))
                       if i not in owner and graph.op_types[i] not in _NO_COST_OPS)
    return out, per_node, unassigned


def build_op_profile(variant_id: str, engine: str, raw: Sequence[RawKernel], graph: OpNodeIndex, runs: int,
                     end_to_end_ms: float, engine_run_ms: float | None, trace_file: str | None,
                     trace_note: str = "", notes: Sequence[str] = ()) -> OpProfile:
    kernels, per_node, unassigned = attribute(raw, graph, runs)
    total = sum(k.ms for k in kernels)
    by_type: dict[str, list[float]] = {}
    for k in kernels:
        entry = by_type.setdefault(k.op_type, [0.0, 0])
        entry[0] += k.ms
        entry[1] += 1
    op_types = tuple(sorted((OpTypeTime(t, ms, int(n), ms / total if total else 0.0)
                             for t, (ms, n) in by_type.items()), key=lambda o: -o.ms))
    mapped = sum(k.ms for k in kernels if k.anchor is not None)
    return OpProfile(variant_id, engine, runs, tuple(kernels), op_types, per_node, total, end_to_end_ms,
                     engine_run_ms, mapped / total if total else 0.0, trace_file, trace_note, tuple(notes),
                     unassigned, in_kernels_ms(raw))


def in_kernels_ms(raw: Sequence[RawKernel]) -> float | None:
    """Median over the runs of each run's summed kernel time (ms); None without per-run times."""
    width = max((len(k.per_run_us) for k in raw), default=0)
    if not width:
        return None
    per_run = np.zeros(width)
    for k in raw:
        per_run[:len(k.per_run_us)] += np.asarray(k.per_run_us, dtype=np.float64)
    return float(np.median(per_run)) / 1000.0


# ============================================================================ ORT trace (pure)

def aggregate_ort_events(events: Sequence[Mapping[str, Any]], runs: int
                         ) -> tuple[list[RawKernel], float | None, int]:
    """Kernel times per run over the last ``runs`` ``model_run`` windows of an ORT
    profile, the median ``model_run`` duration (ms) of those runs, and how many kernel
    events were nested inside another on the same thread (If/Loop/Scan bodies: their
    time is already in the control-flow node's, so they are not counted twice)."""
    model_runs = sorted((e for e in events if isinstance(e, Mapping) and e.get("cat") == "Session"
                         and e.get("name") == "model_run"), key=lambda e: float(e.get("ts", 0)))
    chosen = model_runs[-runs:] if runs > 0 else model_runs
    windows = [(float(e.get("ts", 0)), float(e.get("ts", 0)) + float(e.get("dur", 0))) for e in chosen]
    starts = np.array([w[0] for w in windows])
    ends = np.array([w[1] for w in windows])
    count = max(len(windows), 1)
    kernel_events = [e for e in events if isinstance(e, Mapping) and e.get("cat") == "Node"
                     and str(e.get("name", "")).endswith("_kernel_time")]
    # A body's first kernel can start in the same microsecond as its If/Loop (ORT writes the body's events
    # first): the longer event first, so the control-flow node is the one counted.
    kernel_events.sort(key=lambda e: (str(e.get("tid", "")), float(e.get("ts", 0)), -float(e.get("dur", 0))))
    totals: dict[str, list[Any]] = {}
    nested = 0
    open_until: dict[str, float] = {}
    for e in kernel_events:
        ts, dur, tid = float(e.get("ts", 0)), float(e.get("dur", 0)), str(e.get("tid", ""))
        run = 0
        if windows:
            run = int(np.searchsorted(starts, ts, side="right")) - 1
            if run < 0 or ts > ends[run]:
                continue      # a warm-up run, or outside every chosen run
        if ts < open_until.get(tid, -1.0):
            nested += 1       # inside a control-flow node's kernel on this thread
            continue
        open_until[tid] = ts + dur
        args = e.get("args") if isinstance(e.get("args"), Mapping) else {}
        node = str(e["name"])[: -len("_kernel_time")]
        entry = totals.setdefault(node, [str(args.get("op_name", "?")), str(args.get("provider", "")),
                                         [0.0] * count, 0])
        entry[2][run] += dur
        entry[3] += 1
    kernels = [RawKernel(name, op, provider, tuple(per_run), calls)
               for name, (op, provider, per_run, calls) in totals.items()]
    run_ms = float(np.median([e.get("dur", 0) for e in chosen])) / 1000.0 if chosen else None
    return kernels, run_ms, nested


def synthesize_trace(layers: Sequence[Mapping[str, Any]], originals: Mapping[str, Sequence[str]],
                     note: str) -> dict:
    """A chrome-trace object from one run's per-layer counters, layers laid end to end."""
    events = []
    ts = 0.0
    for layer in layers:
        if not layer.get("executed") or float(layer.get("us", 0)) <= 0:
            continue
        dur = float(layer["us"])
        events.append({"name": layer["name"], "cat": "Layer", "ph": "X", "ts": round(ts, 3), "dur": round(dur, 3),
                       "pid": 1, "tid": 1, "args": {"layer_type": layer["layer_type"],
                                                    "exec_type": layer["exec_type"],
                                                    "original_layers": list(originals.get(layer["name"], []))}})
        ts += dur
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": {"note": note}}


OV_TRACE_NOTE = ("synthesized from OpenVINO per-layer counters of the last run: executed layers laid end to "
                 "end (the real schedule may overlap them)")


# ============================================================================ job (worker side)

@job("profile.ops")
def ops_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Per-op counters of one variant over ``runs`` runs after ``warmup``, by the engine's row of
    :data:`PER_OP`; an engine without one is "not available" with its reason."""
    v = args["variant"]
    engine = v["engine"]["engine"]
    warmup, runs = int(args["warmup"]), max(1, int(args["runs"]))
    feeds = {name: arrays[key] for name, key in v["feeds"]}
    tag = safe_name(str(v["id"]), default="variant")
    ctx.set_stage(f"{v['label']}: per-op profiling")
    measure = PER_OP.get(engine)
    if measure is None:
        raise ValueError(NO_PER_OP.get(engine) or f"per-op profiling is not available for {engine} here: the studio "
                         "has no per-op profiler for it (profile end to end instead)")
    return measure(v, feeds, tag, warmup, runs, ctx, ranges())


def _ort_ops(v: dict, feeds: dict, tag: str, warmup: int, runs: int, ctx: JobContext, nv: Any) -> JobOutput:
    runner = open_runner(v["model_path"], v["engine"], feeds, out_dir=ctx.out_dir, profile_tag=tag)
    timed_loop(runner.infer, warmup)
    with nv.range(f"per-op {v['id']}"):
        e2e = timed_loop(runner.infer, runs)
    path = runner.end_profiling()  # type: ignore[attr-defined]
    if not path:
        raise RuntimeError("ONNX Runtime wrote no profile")
    events = _read_ort_profile(Path(path))
    raw, run_ms, nested = aggregate_ort_events(events if isinstance(events, list) else [], runs)
    return JobOutput(data={"kernels": [asdict(r) for r in raw], "runs": runs, "nested": nested,
                           "e2e_ns": e2e, "engine_run_ms": run_ms, "trace_file": Path(path).name,
                           "trace_note": "ONNX Runtime profile (chrome-trace format), warm-up runs included",
                           "details": runner.details})


def _ov_ops(v: dict, feeds: dict, tag: str, warmup: int, runs: int, ctx: JobContext, nv: Any) -> JobOutput:
    # OpenVINO's CPU counters are running *averages* over every inference since compile (warm-up
    # and the slow first runs included), not the last inference's times: summed as they were,
    # they exceeded end-to-end several times over. The mean over exactly the profiled runs is
    # (N * avg_N - W * avg_W) / runs, W inferences before them and N after; end-to-end is the
    # mean of the same runs.
    runner = open_runner(v["model_path"], v["engine"], feeds, out_dir=ctx.out_dir, perf_counters=True)
    timed_loop(runner.infer, warmup)
    before = {c["name"]: c["us"] for c in runner.layer_counters() if c["executed"]} if warmup else {}  # type: ignore[attr-defined]
    with nv.range(f"per-op {v['id']}"):
        e2e = timed_loop(runner.infer, runs)
    last = runner.layer_counters()  # type: ignore[attr-defined]
    total_runs = warmup + runs
    kernels = []
    originals = runner.original_names()  # type: ignore[attr-defined]
    for layer in last:
        if not layer["executed"]:
            continue
        mean_us = mean_over_profiled_runs(layer["us"], before.get(layer["name"], 0.0), warmup, runs)
        kernels.append({"name": layer["name"], "op_type": layer["layer_type"], "exec_type": layer["exec_type"],
                        "per_run_us": [mean_us] * runs, "calls": runs,
                        "original_names": originals.get(layer["name"])})
    trace_name = f"ov_layers_{tag}.json"
    means = {k["name"]: k["per_run_us"][0] for k in kernels}
    shown = [{**c, "us": means.get(c["name"], 0.0)} for c in last]
    (ctx.out_dir / trace_name).write_text(jsonsafe.dumps(synthesize_trace(shown, originals, OV_TRACE_NOTE)))  # scratch: worker: its job out folder
    return JobOutput(data={"kernels": kernels, "runs": runs, "e2e_ns": e2e, "e2e_stat": "mean",
                           "engine_run_ms": None, "trace_file": trace_name, "trace_note": OV_TRACE_NOTE,
                           "details": runner.details})


def _mnn_ops(v: dict, feeds: dict, tag: str, warmup: int, runs: int, ctx: JobContext, nv: Any) -> JobOutput:
    import re

    mnn_path = Path(ctx.scratch) / "model.mnn"
    convert_to_mnn(v["model_path"], mnn_path, str(v["engine"].get("precision") or "f32"))
    with nv.range(f"per-op {v['id']}"):
        records, e2e = mnn_op_times(mnn_path, feeds, threads=int(v["engine"].get("threads") or 4),
                                    warmup=warmup, runs=runs)
    kernels = [{"name": r["name"], "op_type": r["op_type"], "exec_type": "MNN CPU", "per_run_us": r["per_run_us"],
                "calls": runs, "original_names": [re.sub(r"_raster_\d+$", "", r["name"])]} for r in records]
    return JobOutput(data={"kernels": kernels, "runs": runs, "e2e_ns": e2e, "engine_run_ms": None,
                           "trace_file": None, "trace_note": "MNN session callbacks (runSessionWithCallBackInfo)",
                           "details": {"threads": int(v["engine"].get("threads") or 4)}})


# engine -> its per-op profiler (worker side); an engine of the table without a row here reads
# "not available" with the reason below (or a generic one)
PER_OP = {"onnxruntime": _ort_ops, "openvino": _ov_ops, "mnn": _mnn_ops}
# Why an engine's per-op sum can exceed the end-to-end time (others: the generic reason in overhead_text).
OVERLAP_WHY = {"openvino": "OpenVINO's per-layer counters overlap (work on parallel threads and async stages is "
                           "counted per layer)"}
NO_PER_OP = {
    "litert": "per-op profiling is not available for LiteRT here: the ai_edge_litert Python API has no op profiler "
              "(use the benchmark_model tool with --enable_op_profiling on the device)",
    "tensorrt": "per-op profiling is not available for tensorrt here; use trtexec --dumpProfile or nsys on a GPU "
                "machine",
}


def mean_over_profiled_runs(average_after_us: float, average_before_us: float, warmup: int, runs: int) -> float:
    """One layer's mean time over exactly the ``runs`` profiled inferences, from OpenVINO's
    running averages since compile: ``average_before_us`` after the ``warmup`` inferences,
    ``average_after_us`` after all ``warmup + runs`` of them."""
    total = (warmup + runs) * average_after_us - warmup * average_before_us
    return max(0.0, total / max(runs, 1))


# ============================================================================ parent side

def measure_ops(variant: dict[str, Any], arrays: Mapping[str, np.ndarray], model: ModelProto, *, warmup: int,
                runs: int, out_dir: Path, limits: Limits, pool_key: str,
                on_tick: Callable[[float], None] | None = None) -> OpProfile:
    """Run :func:`ops_job` for one variant and attribute its kernels to ``model``'s nodes."""
    result = run_job("profile.ops", {"variant": variant, "warmup": warmup, "runs": runs}, arrays,
                     stage=f"{variant['label']} (per-op)", limits=limits, out_dir=out_dir, pool_key=pool_key,
                     on_tick=on_tick)
    data = result.data
    raw = [RawKernel(str(k["name"]), str(k["op_type"]), str(k["exec_type"]),
                     tuple(float(x) for x in k["per_run_us"]), int(k["calls"]),
                     tuple(k["original_names"]) if k.get("original_names") else None) for k in data["kernels"]]
    e2e = np.asarray(data.get("e2e_ns") or [0], dtype=np.float64) / 1e6
    notes = []
    # The statistic of the per-op times (OpenVINO: means over the profiled runs), over the same runs.
    e2e_ms = float(np.mean(e2e)) if data.get("e2e_stat") == "mean" else float(np.median(e2e))
    if data.get("nested"):
        notes.append(f"{data['nested'] // max(int(data['runs']), 1)} kernel(s) per run ran inside If/Loop/Scan bodies; "
                     "their time is counted in the control-flow node")
    if data.get("engine_run_ms") is not None:
        notes.append("ONNX Runtime's own model_run time is shown beside the measured end-to-end time")
    return build_op_profile(variant["id"], variant["engine"]["engine"], raw, OpNodeIndex.from_model(model),
                            int(data["runs"]), e2e_ms, data.get("engine_run_ms"),
                            data.get("trace_file"), data.get("trace_note", ""), notes)


def _read_ort_profile(path: Path) -> object:
    """ONNX Runtime's profile JSON. ORT writes it without checking the write, so a file-size limit
    (``ulimit -f``) or a full disk leaves it cut short: said as such, not as a JSON syntax error."""
    import resource

    text = path.read_text()
    try:
        return json.loads(text)
    except ValueError:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        size = path.stat().st_size
        if limit != resource.RLIM_INFINITY and size >= limit:
            raise RuntimeError(f"ONNX Runtime's profile was cut at {size} bytes by the file-size limit (ulimit -f); "
                               "raise the limit to profile per op") from None
        raise RuntimeError(f"ONNX Runtime's profile is cut short or not JSON ({size} bytes): the disk may be "
                           "full") from None

