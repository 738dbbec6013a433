"""The memory plan a user sees (``api.memory_plan``): the plan at the dims an engine really runs,
what ORT and OpenVINO really allocate for activations beside the prediction, and the KV cache's
share for decoders.

Why here: the plan itself (:mod:`studio.inspect.memory_plan`) works on sizes; this module picks
the sizes. Unset dims take the values the studio's seeded feeds take (``choose_dims``: the model's
hints, 16 for sequence-like names, 224 for image sides...), so the plan, the summary's figure at
those dims and the measurement all describe the same run. A decoder's past inputs are graph
inputs like any other: their past length is a dim (``past_sequence_length``), set with ``dims``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.bounds import OutOfRange
from studio.core.errors import StudioError, WorkerError
from studio.core.model import ModelHandle, model_weight_bytes
from studio.core.sandbox import GiB, require_memory
from studio.inspect.memory_plan import MemoryPlan
from studio.core.feeds import choose_dims, input_specs, random_feeds, unnamed_dim_key
from studio.inspect.decoder import recognize
from studio.inspect.decoder_feeds import decoder_steps
from studio.core.error_codes import ErrorCode
from studio.core.protowalk import cycle_nodes, cycle_text, node_id
from studio.inspect.summary import summarize
from studio.inspect.ort_optimized import OPTIMIZED_WHAT, load_types, optimized_plan
from studio.inspect.ov_compiled import compiled_graph, compiled_plan
from studio.inspect.memory_plan import graph_plan
from studio.inspect.memory_measure import measure_ort_activations
from studio.inspect.memory_measure import measure_openvino_activations
from studio.inspect.memory_measure import MeasureUnavailable

ORT_MEASURE_WHAT = ("ORT's memory-pattern block (all planned intermediates), CPU arena off, graph optimizations "
                    "off (nodes computed from weights alone run too), second run")
ORT_DEFAULT_WHAT = ("ORT's memory-pattern block as users run it: default session options (graph optimizations "
                    "ORT_ENABLE_ALL, memory patterns on), second run; the CPU arena off so the block is seen exactly "
                    "(with it on, the arena holds the same block in a region rounded up)")
ORT_OFF_ENGINE = "onnxruntime (optimizations off)"
MISS_TOLERANCE = 0.15            # a plan further off an engine's measurement than this says why
_CHILD_COPIES = 1.3               # a measurement child's peak in weights (measured: ORT 1.01, OpenVINO 0.90)
MEASURE_TIMEOUT_S = 120.0        # per engine measurement (they run side by side): "too large to measure in N s"
OV_MEASURE_WHAT = ("OpenVINO CPU's intermediate-tensor workspace (MemorySolver over its fused graph; tensors "
                   "computed in place into an input or output and weights are apart), static shapes at the plan's "
                   "dims, 1 stream, f32, re-allocated after release_memory()")
OV_DYNAMIC_WHAT = ("OpenVINO CPU's peak aligned bytes of intermediates in one inference, the model compiled with its "
                   "dynamic shapes (it does not compile at the plan's dims), 1 stream, f32, after release_memory()")


@dataclass(frozen=True)
class MeasuredMemory:
    """What one engine allocated for activations, beside the plan's figure for the same thing."""

    engine: str
    what: str
    predicted_bytes: int | None             # None: no plan to compare with (ORT's optimized graph not planned)
    measured_bytes: int | None = None
    error: str | None = None          # why there is no measurement (no compiler, the engine failed)

    @property
    def relative_error(self) -> float | None:
        if not self.measured_bytes or self.predicted_bytes is None:
            return None
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes

    def to_dict(self) -> dict:
        return {**self.__dict__, "relative_error": self.relative_error}


@dataclass(frozen=True)
class KvCacheMemory:
    """The KV cache at the plan's dims: the past inputs the model reads, the present outputs it writes."""

    past_length_dim: str
    past_length: int | None
    past_bytes: int
    present_bytes: int
    past_inputs: tuple[str, ...]

    def to_dict(self) -> dict:
        return {**self.__dict__, "past_inputs": list(self.past_inputs)}


@dataclass(frozen=True)
class EngineGraphPlan:
    """The plan over the graph an engine really runs (ORT's optimized graph at its default level), and
    how that graph differs from the model as written: what makes the two plans differ."""

    engine: str
    what: str
    plan: MemoryPlan | None
    nodes: int = 0                             # nodes of the engine's graph (main graph)
    source_nodes: int = 0                      # nodes of the model as written
    op_changes: tuple[tuple[str, int, int], ...] = ()   # (op, as written, in the engine's graph) where they differ
    untyped: tuple[str, ...] = ()              # engine-graph values without a load-time shape: never reused
    error: str | None = None

    def to_dict(self) -> dict:
        p = self.plan
        return {"engine": self.engine, "what": self.what, "error": self.error, "nodes": self.nodes,
                "source_nodes": self.source_nodes,
                "op_changes": [{"op": op, "written": a, "engine": b} for op, a, b in self.op_changes],
                "untyped": len(self.untyped), "untyped_examples": list(self.untyped[:8]),
                **({"arena_bytes": p.arena_bytes, "peak_bytes": p.peak_bytes, "peak_node": p.peak_node,
                    "activation_peak_bytes": p.activation_peak_bytes,
                    "peak_tensors": [{"name": n, "bytes": b} for n, b in p.peak_tensors[:16]]} if p else {})}


@dataclass(frozen=True)
class MemoryReport:
    """The memory plan of one model at concrete dims."""

    model: str
    dims: tuple[tuple[str, int], ...]         # every free input dim, at the value the plan used
    plan: MemoryPlan
    unknown_tensors: int                      # tensors whose size is unknown (counted as 0: a lower bound)
    measured: tuple[MeasuredMemory, ...] = ()
    kv_cache: KvCacheMemory | None = None
    notes: tuple[str, ...] = ()
    step_nodes: tuple[str, ...] = ()          # node id (as the summary and the graph name it) of each step
    engine_plans: tuple[EngineGraphPlan, ...] = ()   # the plan over ORT's optimized graph (as users run it)

    @property
    def peak_bytes(self) -> int:
        return self.plan.peak_bytes

    def node_live_bytes(self) -> dict[str, int]:
        """Bytes live while each node runs, by node id: the Graph page's "live memory" overlay."""
        return dict(zip(self.step_nodes, self.plan.live_bytes))

    def to_dict(self, *, include_tensors: bool = False) -> dict:
        p = self.plan
        return {"model": self.model, "dims": dict(self.dims), "peak_bytes": p.peak_bytes,
                "peak_step": p.peak_step, "peak_node": p.peak_node,
                "peak_tensors": [{"name": n, "bytes": b} for n, b in p.peak_tensors],
                "activation_peak_bytes": p.activation_peak_bytes, "arena_bytes": p.arena_bytes,
                "weights_bytes": p.weights_bytes, "order": list(p.order), "live_bytes": list(p.live_bytes),
                "unknown_tensors": self.unknown_tensors, "lower_bound": bool(self.unknown_tensors),
                "measured": [m.to_dict() for m in self.measured],
                "kv_cache": self.kv_cache.to_dict() if self.kv_cache else None, "notes": list(self.notes),
                "node_live_bytes": self.node_live_bytes(),
                "engine_plans": [e.to_dict() for e in self.engine_plans],
                **({"tensors": [t.to_dict() for t in p.tensors]} if include_tensors else {})}


def plan_feeds(handle: ModelHandle, dims: Mapping[str, int] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, int], str | None]:
    """Seeded feeds at ``dims`` (unset dims as every run of the studio sets them; a decoder with past
    inputs: its decode step, one new token after the past length given, the cache contract kept), every
    free input dim at the value those feeds have (named dims by name, unnamed ones as INPUT[AXIS]), and
    which decoder step it is."""
    specs = input_specs(handle.proto)
    given = dict(dims or {})
    try:
        spec = recognize(handle.proto, folder=handle.path.parent, filename=handle.path.name)
    except OutOfRange:
        raise                         # a head dim of 0, a context of 10^400: one line before any work
    except StudioError:
        spec = None                   # a broken cache contract: plain seeded feeds (the report says why)
    step = None
    if spec is not None and spec.has_past:
        step = decoder_steps(handle.proto, spec, dims=given)[-1]
        feeds = dict(step.feeds)
    else:
        feeds = random_feeds(specs, choose_dims(specs, given))
    chosen: dict[str, int] = {}
    for s in specs:
        value = feeds.get(s.name)
        if s.shape is None or not isinstance(value, np.ndarray):
            continue
        for axis, d in enumerate(s.shape):
            if isinstance(d, int) or axis >= value.ndim:
                continue
            chosen[d if isinstance(d, str) else unnamed_dim_key(s.name, axis)] = int(value.shape[axis])
    return feeds, chosen, (f"the decoder's {step.label}" if step is not None else None)


def _formula_keys(dims: Mapping[str, int]) -> set[str]:
    """Dims written as formulas of others (``past_sequence_length + sequence_length``): not the user's to set."""
    return {k for k in dims if any(op in k for op in "+-*/ ")}


def _kv_cache(handle: ModelHandle, plan: MemoryPlan, dims: Mapping[str, int]
              ) -> tuple[KvCacheMemory | None, str | None]:
    try:
        spec = recognize(handle.proto, folder=handle.path.parent, filename=handle.path.name)
    except StudioError as exc:
        return None, f"KV cache not separated: {exc}"
    if spec is None or not spec.has_past:
        return None, None
    size = {t.name: t.bytes for t in plan.tensors}
    past = tuple(c.input for c in spec.cache if c.input)
    dim = spec.past_length_dim
    length = dims.get(dim) if isinstance(dim, str) else int(dim) if isinstance(dim, int) else None
    note = None
    if length is not None and spec.context and length >= spec.context:
        note = (f"the past length {length} leaves no room in the model's context of {spec.context} positions: "
                f"set {dim} below {spec.context}")
    return KvCacheMemory(str(dim), length, sum(size.get(n, 0) for n in past),
                         sum(size.get(c.output, 0) for c in spec.cache if c.output), past), note


def memory_report(handle: ModelHandle, dims: Mapping[str, int] | None = None, *, measure: bool = False,
                  pool_key: str = "default", timeout_s: float = MEASURE_TIMEOUT_S,
                  engine_graph: bool | None = None) -> MemoryReport:
    """The plan at ``dims`` (the same shape resolution as ``inspect``), with ORT's and OpenVINO's measured
    activation memory when ``measure`` (a child process each, side by side, on the same seeded feeds, each
    stopped after ``timeout_s``; a failure is that engine's one-line error) and the KV cache's bytes for a
    decoder. ``engine_graph`` (default: ``measure``): also plan ORT as users run it, over the graph ORT
    optimizes at its default level (:mod:`studio.inspect.ort_optimized`); then ``measured`` is ORT at its
    default options, OpenVINO, and ORT with its optimizations off (the plan of the graph as written)."""
    cyclic = cycle_nodes(handle.proto.graph)
    if cyclic:      # the plan would leave these nodes out and read as a model with (almost) no activations
        raise StudioError(f"{cycle_text(cyclic)}, so no engine can run it and there is no memory plan; fix the "
                          "model (re-export it)", code=ErrorCode.INVALID_MODEL)
    if measure:                         # each engine child (not a sandbox worker: no worker limit) holds the weights
        require_memory(handle.path, "memory --measure", copies=_CHILD_COPIES, in_worker=False)
    feeds, chosen, step = plan_feeds(handle, dims)
    summary = summarize(handle, chosen, pool_key=pool_key)
    plan = summary.memory_plan
    assert plan is not None               # summarize always plans
    notes: list[str] = [f"planned at {step}"] if step else []
    unset = sorted(k for k in set(chosen) - set(dims or {}) if not (step and k in _formula_keys(chosen)))
    if unset:
        notes.append("dims not given, taken as the studio's seeded inputs take them: "
                      + ", ".join(f"{k}={chosen[k]}" for k in unset[:12]) + (" ..." if len(unset) > 12 else ""))
    if summary.memory.unknown_tensors:
        notes.append(f"{summary.memory.unknown_tensors} tensor(s) have no known size and count as 0: "
                     "the peak is a lower bound")
    kv, kv_note = _kv_cache(handle, plan, chosen)
    if kv_note:
        notes.append(kv_note)
    engines: tuple[EngineGraphPlan, ...] = ()
    if measure if engine_graph is None else engine_graph:
        engines = (ort_engine_plan(handle, feeds, pool_key=pool_key, timeout_s=timeout_s),
                   ov_engine_plan(handle, feeds, pool_key=pool_key, timeout_s=timeout_s))
    measured: tuple[MeasuredMemory, ...] = ()
    if measure:
        ov = next((e for e in engines if e.engine == "openvino" and e.plan is not None), None)
        measured = _measure_all(handle, feeds, unoptimized_plan(handle, summary, plan), plan if ov is None else ov.plan,
                                engines[0] if engines else None, timeout_s)
        if ov is not None:
            from dataclasses import replace

            measured = tuple(replace(m, what=f"{m.what}; predicted {ov.what}") if m.engine == "openvino" else m
                             for m in measured)
        notes.extend(_miss_notes(measured, engines))
    seen: set[str] = set()
    ids = [node_id("", n.name, n.op_type, i, seen) for i, n in enumerate(handle.proto.graph.node)]
    return MemoryReport(handle.name, tuple(sorted(chosen.items())), plan, summary.memory.unknown_tensors,
                        measured, kv, tuple(notes), tuple(ids[i] for i in plan.steps), engines)


def children_at_once(model_path: Path, *, wanted: int = 3) -> int:
    """How many measurement children may hold the model side by side: each holds its weights about once
    (ORT's 6.42 GiB for the 6.36 GiB decoder of benchmarks/bench_large.py; OpenVINO's plugin its repacked
    constants, the mapped file's pages dropped as it reads them, :mod:`studio.core.mapped_pages`: 0.90x on
    a 1.48 GiB one, 1.82x without), counted at 1.3x, and together they must leave 4 GiB of the memory
    available now. All three for a small model; one at a time for that decoder on a 24 GiB machine."""
    each = _CHILD_COPIES * model_weight_bytes(model_path)
    if each < GiB / 2:
        return wanted
    try:
        import psutil

        available = psutil.virtual_memory().available
    except Exception:  # noqa: BLE001 - no psutil or no /proc: the safe choice
        return 1
    return max(1, min(wanted, int((available - 4 * GiB) // each)))


def _measure_all(handle: ModelHandle, feeds: Mapping[str, np.ndarray], unoptimized: MemoryPlan, plan: MemoryPlan,
                 engine: EngineGraphPlan | None, timeout_s: float) -> tuple[MeasuredMemory, ...]:
    """Every engine's measurement in its own child, side by side as far as memory allows
    (:func:`children_at_once`; each within ``timeout_s``): ORT as users run it (with an engine plan),
    OpenVINO, and ORT with its optimizations off (first without one)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=children_at_once(handle.path)) as pool:
        off = pool.submit(measure_ort, handle, feeds, unoptimized, timeout_s=timeout_s)
        ov = pool.submit(measure_openvino, handle, feeds, plan, timeout_s=timeout_s)
        if engine is None:
            return off.result(), ov.result()
        default = pool.submit(measure_ort, handle, feeds, engine.plan, timeout_s=timeout_s, optimized=True)
        off_m = off.result()
        return default.result(), ov.result(), MeasuredMemory(ORT_OFF_ENGINE, off_m.what, off_m.predicted_bytes,
                                                             off_m.measured_bytes, off_m.error)


def ort_engine_plan(handle: ModelHandle, feeds: Mapping[str, np.ndarray], *, pool_key: str = "default",
                    timeout_s: float = MEASURE_TIMEOUT_S) -> EngineGraphPlan:
    """The plan over ORT's optimized graph, with the op counts that changed and the values it leaves
    untyped; a failure (ORT refuses the model, the time limit) is the view's one-line error."""
    from collections import Counter


    engine = "onnxruntime"
    try:
        p, og, _ = optimized_plan(handle, feeds, pool_key=pool_key, timeout_s=timeout_s)
    except WorkerError as exc:
        why = f"too large to plan in {timeout_s:g} s" if exc.kind == "timeout" else _line(exc, handle)
        return EngineGraphPlan(engine, OPTIMIZED_WHAT, None, error=why)
    except (StudioError, OSError, RuntimeError, ValueError) as exc:
        return EngineGraphPlan(engine, OPTIMIZED_WHAT, None, error=_line(exc, handle))

    def ops(nodes) -> Counter:
        return Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in nodes)

    a, b = ops(handle.proto.graph.node), ops(og.model.graph.node)
    a.pop("Constant", None)
    b.pop("Constant", None)
    changes = tuple(sorted(((op, a[op], b[op]) for op in set(a) | set(b) if a[op] != b[op]),
                           key=lambda x: (-abs(x[2] - x[1]), x[0])))
    typed = {vi.name for vi in [*og.model.graph.value_info, *og.model.graph.input, *og.model.graph.output]}
    untyped = tuple(o for n in og.model.graph.node for o in n.output if o and o not in typed)
    return EngineGraphPlan(engine, OPTIMIZED_WHAT, p, og.nodes, og.source_nodes, changes, untyped)


def _miss_notes(measured: Sequence[MeasuredMemory], engines: Sequence[EngineGraphPlan]) -> list[str]:
    """Where the plan over an engine's graph misses that engine's measurement by more than 15 %: what
    differs and why, in words a user can act on."""
    out = []
    for e in engines:
        if e.error:
            out.append(f"ORT as users run it (ORT_ENABLE_ALL) not planned: {e.error}" if e.engine == "onnxruntime"
                       else f"OpenVINO's compiled graph not planned: {e.error}")
    ov_m = next((m for m in measured if m.engine == "openvino"), None)
    ov_e = next((e for e in engines if e.engine == "openvino" and e.plan is not None), None)
    if ov_m is not None and ov_e is not None:
        out.extend(_ov_miss_note(ov_m, ov_e))
    m = next((m for m in measured if m.engine == "onnxruntime"), None)
    e = next((e for e in engines if e.engine == "onnxruntime" and e.plan is not None), None)
    if m is None or e is None or m.relative_error is None or abs(m.relative_error) <= MISS_TOLERANCE:
        return out
    if m.measured_bytes and e.plan.activation_peak_bytes <= m.measured_bytes < e.plan.arena_bytes:
        out.append(f"the plan's max live bytes ({e.plan.activation_peak_bytes // 1024} KiB, the least any "
                   f"placement needs) is not above ORT's block ({m.measured_bytes // 1024} KiB): the plan's "
                   "best-fit simulation leaves gaps between the tensors that ORT's placement does not; expect "
                   "a block between the max live bytes and the plan's arena")
    fused = ", ".join(f"{op} {x}->{y}" for op, x, y in e.op_changes[:6])
    peak = ", ".join(f"{n} {b // 1024} KiB" for n, b in e.plan.peak_tensors[:4])
    why = (f"{len(e.untyped)} value(s) of ORT's graph have no load-time shape (made by its fusions, e.g. "
           f"{', '.join(e.untyped[:3])}): ORT may reuse buffers for them that the plan keeps apart, or the "
           "reverse" if e.untyped else "every value of ORT's graph has a load-time shape: ORT shares or computes "
           "in place some of the tensors at the peak where the plan's rules keep them apart (or the reverse)")
    out.append(f"the plan over ORT's optimized graph is {m.relative_error * 100:+.0f} % off ORT's block: ORT "
               f"changed the ops {fused or '(none: it runs the graph as written)'}; at the plan's peak "
               f"({e.plan.peak_node}): {peak}; {why}; plan with the measured block")
    return out


def ov_engine_plan(handle: ModelHandle, feeds: Mapping[str, np.ndarray], *, pool_key: str = "default",
                   timeout_s: float = MEASURE_TIMEOUT_S) -> EngineGraphPlan:
    """The plan over the graph OpenVINO compiled for CPU at the feeds' shapes (:mod:`studio.inspect.ov_compiled`);
    a failure (OpenVINO refuses the model, the time limit) is the view's one-line error."""
    engine = "openvino"
    what = "the plan over the graph OpenVINO compiled for CPU"
    try:
        g = compiled_graph(handle.path, feeds, pool_key=pool_key, timeout_s=timeout_s)
        p = compiled_plan(g.ops)
    except WorkerError as exc:
        why = f"too large to plan in {timeout_s:g} s" if exc.kind == "timeout" else _line(exc, handle)
        return EngineGraphPlan(engine, what, None, error=why)
    except (StudioError, OSError, RuntimeError, ValueError, KeyError) as exc:
        return EngineGraphPlan(engine, what, None, error=_line(exc, handle))
    kinds = {op.name: op.kind for op in g.ops}
    nodes = sum(kinds.get(n) not in ("Input", "Output") for n in p.order)
    what = (f"as compiled by OpenVINO {g.version}: the plan over its CPU runtime graph ({nodes} nodes after its "
            "fusions, its layouts and in-place ops; ov::MemorySolver over its edges), "
            + ("static shapes at the plan's dims" if g.static_shapes else
               "compiled with its dynamic shapes (it does not compile at the plan's dims)") + ", 1 stream, f32")
    untyped = tuple(dict.fromkeys(p.unknown_tensors))
    return EngineGraphPlan(engine, what, p, nodes, len(handle.proto.graph.node), (), untyped)


def _ov_miss_note(m: MeasuredMemory, e: EngineGraphPlan) -> list[str]:
    """Why the plan of OpenVINO's compiled graph misses its workspace by more than 15 %."""
    err = m.relative_error
    if err is None or abs(err) <= MISS_TOLERANCE or e.plan is None:
        return []
    peak = ", ".join(f"{n[:60]} {b // 1024} KiB" for n, b in e.plan.peak_tensors[:3])
    if e.untyped or m.what == OV_DYNAMIC_WHAT:
        why = ("OpenVINO compiled the model with dynamic shapes, so it allocates per inference and the plan's "
               "static workspace does not apply: give every dim (--dim) so it compiles at static shapes")
    elif err < 0:
        why = ("OpenVINO allocated more than its compiled graph's tensors need: scratch buffers of its kernels "
               "(oneDNN scratchpads, a Loop/If body's own memory) that the runtime graph does not show, or an "
               "in-place edge it resolved with a copy; expect the measured figure")
    else:
        why = ("OpenVINO computes in place some of the tensors the plan keeps apart (an Eltwise, Split or "
               "Concatenation it lays out as a view); expect the measured figure")
    return [f"the plan of OpenVINO's compiled graph is {err * 100:+.0f} % off its workspace; at the plan's peak "
            f"({e.plan.peak_node}): {peak or '-'}; {why}"]


def unoptimized_plan(handle: ModelHandle, summary, plan: MemoryPlan) -> MemoryPlan:
    """The plan of the run the measurement makes (ORT's optimizations off): nodes computed from weights
    alone (a ConstantOfShape of a weight's shape, a Transpose of one) then run each time and their outputs
    are activations. Buffer reuse follows ORT's load-time types (:func:`ort_optimized.load_types`: no shapes
    computed from values), which may differ from the summary's shapes: planned each time."""
    graph = handle.proto.graph
    table = {t.name: t for t in summary.edges}

    def shape(name: str):
        t = table.get(name)
        return t.shape if t is not None and t.shape is not None and all(isinstance(d, int) for d in t.shape) \
            else None

    static = load_types(handle)
    p, _ = graph_plan(graph, shape, lambda n: table[n].elem_type if n in table else None, plan.weights_bytes,
                      fold_weights=False, static_shape=lambda n: static[n][0] if n in static else None,
                      opset=next((o.version for o in handle.proto.opset_import if o.domain in ("", "ai.onnx")), None))
    return p


def measure_ort(handle: ModelHandle, feeds: Mapping[str, np.ndarray], plan: MemoryPlan | None, *,
                timeout_s: float = MEASURE_TIMEOUT_S, optimized: bool = False) -> MeasuredMemory:
    """ORT's pattern block on ``feeds`` against the best-fit arena of ``plan`` (the same quantity);
    ``optimized``: ORT at its default options (``plan`` is then the plan over its optimized graph)."""
    what = ORT_DEFAULT_WHAT if optimized else ORT_MEASURE_WHAT

    def run() -> tuple[int, str]:
        m = measure_ort_activations(handle.path, feeds=feeds, timeout_s=timeout_s, optimized=optimized)
        return m.pattern_bytes, what

    return _measured("onnxruntime", what, plan.arena_bytes if plan is not None else None, run, handle, timeout_s)


def measure_openvino(handle: ModelHandle, feeds: Mapping[str, np.ndarray], plan: MemoryPlan, *,
                     timeout_s: float = MEASURE_TIMEOUT_S) -> MeasuredMemory:
    """OpenVINO CPU's intermediate workspace at the shapes of ``feeds`` against the plan's best-fit arena
    (OpenVINO folds the nodes computed from weights alone, as the plan does; it fuses and computes in
    place where ORT does not, which the error shows)."""
    def run() -> tuple[int, str]:
        m = measure_openvino_activations(handle.path, feeds=feeds, timeout_s=timeout_s)
        return m.workspace_bytes, OV_MEASURE_WHAT if m.static_shapes else OV_DYNAMIC_WHAT

    return _measured("openvino", OV_MEASURE_WHAT, plan.arena_bytes, run, handle, timeout_s)


def _measured(engine: str, what: str, predicted: int | None, run: Callable[[], tuple[int, str]],
              handle: ModelHandle, timeout_s: float) -> MeasuredMemory:
    """One engine's measurement, or its one-line error (never an exception: the report still shows); a
    child past ``timeout_s`` is stopped: "too large to measure in N s"."""
    import subprocess


    try:
        measured, what = run()
    except subprocess.TimeoutExpired:
        return MeasuredMemory(engine, what, predicted, None,
                              f"too large to measure in {timeout_s:g} s (the engine's child was stopped; "
                              "allow longer with --measure-timeout)")
    except (MeasureUnavailable, RuntimeError, OSError) as exc:
        return MeasuredMemory(engine, what, predicted, None, _line(exc, handle))
    except Exception as exc:  # noqa: BLE001 - a timeout or a broken child is this measurement's error
        return MeasuredMemory(engine, what, predicted, None, f"{type(exc).__name__}: {_line(exc, handle)}")
    return MeasuredMemory(engine, what, predicted, measured)


def _line(exc: BaseException, handle: ModelHandle) -> str:
    """One line without the model's absolute path (its file name instead)."""
    text = " ".join(str(exc).split()).replace(str(handle.path.resolve()), handle.path.name)
    return text.replace(str(handle.path), handle.path.name)[:300]
