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

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from studio.core.bounds import OutOfRange
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.inspect.memory_plan import MemoryPlan

ORT_MEASURE_WHAT = ("ORT's memory-pattern block (all planned intermediates), CPU arena off, graph optimizations "
                    "off (nodes computed from weights alone run too), second run")
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
    predicted_bytes: int
    measured_bytes: int | None = None
    error: str | None = None          # why there is no measurement (no compiler, the engine failed)

    @property
    def relative_error(self) -> float | None:
        if not self.measured_bytes:
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
                **({"tensors": [t.to_dict() for t in p.tensors]} if include_tensors else {})}


def plan_feeds(handle: ModelHandle, dims: Mapping[str, int] | None = None
               ) -> tuple[dict[str, np.ndarray], dict[str, int], str | None]:
    """Seeded feeds at ``dims`` (unset dims as every run of the studio sets them; a decoder with past
    inputs: its decode step, one new token after the past length given, the cache contract kept), every
    free input dim at the value those feeds have (named dims by name, unnamed ones as INPUT[AXIS]), and
    which decoder step it is."""
    from studio.core.feeds import choose_dims, input_specs, random_feeds, unnamed_dim_key
    from studio.inspect.decoder import recognize
    from studio.inspect.decoder_feeds import decoder_steps

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
    from studio.inspect.decoder import recognize

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
                  pool_key: str = "default", timeout_s: float = 300) -> MemoryReport:
    """The plan at ``dims`` (the same shape resolution as ``inspect``), with ORT's and OpenVINO's measured
    activation memory when ``measure`` (a child process each, on the same seeded feeds; a failure is that
    engine's one-line error) and the KV cache's bytes for a decoder."""
    from studio.core.protowalk import node_id
    from studio.inspect.summary import summarize

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
    measured: tuple[MeasuredMemory, ...] = ()
    if measure:
        measured = (measure_ort(handle, feeds, _unoptimized(handle, summary, plan), timeout_s=timeout_s),
                    measure_openvino(handle, feeds, plan, timeout_s=timeout_s))
    seen: set[str] = set()
    ids = [node_id("", n.name, n.op_type, i, seen) for i, n in enumerate(handle.proto.graph.node)]
    return MemoryReport(handle.name, tuple(sorted(chosen.items())), plan, summary.memory.unknown_tensors,
                        measured, kv, tuple(notes), tuple(ids[i] for i in plan.steps))


def _unoptimized(handle: ModelHandle, summary, plan: MemoryPlan) -> MemoryPlan:
    """The plan of the run the measurement makes (ORT's optimizations off): nodes computed from weights
    alone (a ConstantOfShape of a weight's shape, a Transpose of one) then run each time and their outputs
    are activations; ``plan`` itself when the model has none."""
    from studio.core.protowalk import subgraphs_of
    from studio.core.types import value_info
    from studio.inspect.memory_plan import graph_plan

    graph = handle.proto.graph
    consts = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    if not any(n.op_type != "Constant" and all(not x or x in consts for x in n.input)
               and not any(True for _ in subgraphs_of(n)) for n in graph.node):
        return plan
    table = {t.name: t for t in summary.edges}

    def shape(name: str):
        t = table.get(name)
        return t.shape if t is not None and t.shape is not None and all(isinstance(d, int) for d in t.shape) \
            else None

    static = table
    if any(isinstance(d, str) or d is None for vi in graph.input for d in (value_info(vi).shape or ())):
        from studio.inspect.shapes import sandboxed_shapes      # ORT's load-time shapes keep the symbols

        static = sandboxed_shapes(handle.path, handle.proto, None)[0].values
    p, _ = graph_plan(graph, shape, lambda n: table[n].elem_type if n in table else None, plan.weights_bytes,
                      fold_weights=False, static_shape=lambda n: static[n].shape if n in static else None,
                      opset=next((o.version for o in handle.proto.opset_import if o.domain in ("", "ai.onnx")), None))
    return p


def measure_ort(handle: ModelHandle, feeds: Mapping[str, np.ndarray], plan: MemoryPlan, *,
                timeout_s: float = 300) -> MeasuredMemory:
    """ORT's pattern block on ``feeds`` against the best-fit arena of ``plan`` (the same quantity)."""
    from studio.inspect.memory_measure import measure_ort_activations

    def run() -> tuple[int, str]:
        m = measure_ort_activations(handle.path, feeds=feeds, timeout_s=timeout_s)
        return m.pattern_bytes, ORT_MEASURE_WHAT

    return _measured("onnxruntime", ORT_MEASURE_WHAT, plan.arena_bytes, run, handle)


def measure_openvino(handle: ModelHandle, feeds: Mapping[str, np.ndarray], plan: MemoryPlan, *,
                     timeout_s: float = 300) -> MeasuredMemory:
    """OpenVINO CPU's intermediate workspace at the shapes of ``feeds`` against the plan's best-fit arena
    (OpenVINO folds the nodes computed from weights alone, as the plan does; it fuses and computes in
    place where ORT does not, which the error shows)."""
    from studio.inspect.memory_measure import measure_openvino_activations

    def run() -> tuple[int, str]:
        m = measure_openvino_activations(handle.path, feeds=feeds, timeout_s=timeout_s)
        return m.workspace_bytes, OV_MEASURE_WHAT if m.static_shapes else OV_DYNAMIC_WHAT

    return _measured("openvino", OV_MEASURE_WHAT, plan.arena_bytes, run, handle)


def _measured(engine: str, what: str, predicted: int, run: Callable[[], tuple[int, str]],
              handle: ModelHandle) -> MeasuredMemory:
    """One engine's measurement, or its one-line error (never an exception: the report still shows)."""
    from studio.inspect.memory_measure import MeasureUnavailable

    try:
        measured, what = run()
    except (MeasureUnavailable, RuntimeError, OSError) as exc:
        return MeasuredMemory(engine, what, predicted, None, _line(exc, handle))
    except Exception as exc:  # noqa: BLE001 - a timeout or a broken child is this measurement's error
        return MeasuredMemory(engine, what, predicted, None, f"{type(exc).__name__}: {_line(exc, handle)}")
    return MeasuredMemory(engine, what, predicted, measured)


def _line(exc: BaseException, handle: ModelHandle) -> str:
    """One line without the model's absolute path (its file name instead)."""
    text = " ".join(str(exc).split()).replace(str(handle.path.resolve()), handle.path.name)
    return text.replace(str(handle.path), handle.path.name)[:300]
