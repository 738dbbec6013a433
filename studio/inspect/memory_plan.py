"""The memory plan: tensor lifetimes in ORT's execution order, an arena with reuse, and what-if orders.

Why: one peak number does not say which tensors hold the peak or whether
another order would lower it. This module is the studio's one memory model:
the summary's peak (:class:`MemoryEstimate`, :func:`estimate`) is this plan's
peak. It

* reproduces onnxruntime's DEFAULT execution order: ``GraphViewer`` runs
  ``Graph::ReverseDFSFrom`` from the leaf nodes (nodes no other node consumes)
  with ``NodeCompare`` (node index), emitting a node when it is left, so the
  highest-index leaf's cone runs first and, within a node, its highest-index
  producer's cone first. ORT turns ``Constant`` nodes into initializers on load,
  so they are not scheduled; a node it has no CPU kernel for (HardSwish...) runs
  as its function body, appended after the graph's nodes
  (:mod:`studio.inspect.ort_functions`);
* gives every tensor a lifetime (produced at step i, freed after its last
  consumer; graph inputs live from the start, graph outputs to the end;
  initializers, and nodes computed from weights alone, are weights, counted
  apart);
* while an If/Loop/Scan node runs, the peak of its largest body (planned the
  same way, recursively; one iteration) sits on top of the outer tensors, which
  the bodies' reads of outer values keep alive (a body has its own session
  state and pattern in ORT: not in the main graph's arena);
* groups tensors into the buffers ORT's allocation planner decides
  (:func:`ort_buffers`): an alias output (Reshape...) shares its input's buffer,
  an in-place one (Relu...) when that buffer has no other reader left, any other
  output takes the most recently freed buffer of the same *static* shape (the
  shapes ORT infers when it loads the file, symbols kept: the caller passes
  them), and a buffer nobody reads is held to the end of the run;
* simulates ORT's ``MemPatternPlanner`` over those buffers (:func:`best_fit`:
  the gap that wastes least, the free tail included, else the end; every size
  padded to 256 bytes): the arena's size is the plan's figure, the one ORT's
  pattern allocates; "max live bytes" is its lower bound. Measured within 10 % of ORT's
  block on the samples and the ONNX backend's light CNNs (resnet50, densenet121,
  inception...), whose chains of same-shape reuses made a plain best fit 30-40 %
  low;
* finds a memory-aware order (exact search over the graph's downsets for small
  graphs, greedy otherwise) and a node order for the file that makes ORT's
  reverse DFS run it (:func:`file_order_for`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from onnx import GraphProto, NodeProto

from studio.core.protowalk import MAX_DEPTH, iter_graphs, node_reads, subgraphs_of
from studio.core.tensor_safety import itemsize_of, packed_nbytes
from studio.core.types import value_info
from studio.inspect.flops import numel
from studio.inspect.ort_functions import expansions

ALIGNMENT = 256         # ORT sizes every planned tensor with kAllocAlignment (256 bytes) in its pattern
EXACT_MAX_NODES = 18    # exact order search up to this many nodes
_EXACT_MAX_STATES = 200_000
# ORT CPU kernels whose output 0 shares input 0's buffer (KernelDefBuilder().Alias(0, 0)) ...
ALIAS_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
# ... and those that may write into input 0's buffer when it is that buffer's last use and both have the
# same static shape (MayInplace(0, 0)); measured on onnxruntime 1.32's CPU kernels, one op at a time
# (Neg, Exp, Add, Mul, Dropout, Gelu... are not in place).
INPLACE_OPS = frozenset({"Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "Tanh", "Softplus",
                         "Softsign", "ThresholdedRelu", "Shrink", "Clip", "Cast", "Softmax", "LogSoftmax"})
# Kernels of other domains that may write output 0 into input k (MayInplace(k, 0)): the fused Conv's "Sum"
# input (Conv + Add fused by ORT's optimizer, plain and NCHWc).
INPLACE_INPUT = {("com.microsoft", "FusedConv"): 3, ("com.microsoft.nchwc", "Conv"): 3}
# A load-time type as ORT's planner sees it: the dims (int, a symbol, None unknown) and bytes per element.
StaticType = tuple[tuple[int | str | None, ...] | None, int | None]


@dataclass(frozen=True)
class OpNode:
    """One scheduled node: its index in the file, label and value names."""

    index: int
    label: str
    op_type: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    body_bytes: int = 0              # peak of its largest body (If/Loop/Scan), live while it runs
    body_node: str | None = None     # the node at that body's peak ("/if/then_branch/r1")
    args: tuple[str, ...] = ()       # the explicit inputs as written ("" for a missing one); () = ``inputs``
    domain: str = ""


@dataclass(frozen=True)
class Schedule:
    """A graph reduced to what memory planning needs (names, sizes, interface)."""

    nodes: tuple[OpNode, ...]                 # in file order
    sizes: Mapping[str, int]                  # bytes per value (unknown ones are absent)
    graph_inputs: tuple[str, ...]
    graph_outputs: tuple[str, ...]
    weights_bytes: int = 0
    # ORT's load-time type per value (the file's value_info and inference, symbols kept): its planner
    # reuses a buffer only between values of the same static shape; absent = unknown = no reuse.
    static: Mapping[str, StaticType] = field(default_factory=dict)

    @property
    def unknown(self) -> tuple[str, ...]:
        names = [o for n in self.nodes for o in n.outputs if o and o not in self.sizes]
        return tuple(names + [i for i in self.graph_inputs if i not in self.sizes])


@dataclass(frozen=True)
class TensorLife:
    name: str
    bytes: int
    start: int          # step that produces it (-1: a graph input)
    end: int            # last step that reads it (len(order): a graph output)
    kind: str           # input | activation | output
    offset: int = -1    # placement in the arena (activations only)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class MemoryPlan:
    """Where memory goes at each step of one execution order."""

    order: tuple[str, ...]                    # node labels in execution order
    live_bytes: tuple[int, ...]               # bytes live while each step runs (inputs + outputs of the step)
    peak_bytes: int                           # max live bytes (all tensors: inputs, activations, outputs)
    peak_step: int
    peak_node: str | None
    peak_tensors: tuple[tuple[str, int], ...] # live at the peak, largest first
    activation_peak_bytes: int                # max live bytes of intermediate tensors only (lower bound)
    arena_bytes: int                          # best-fit arena for intermediates (what ORT's pattern allocates)
    weights_bytes: int
    tensors: tuple[TensorLife, ...]
    unknown_tensors: tuple[str, ...]          # sizes unknown: counted as 0
    steps: tuple[int, ...] = ()               # each step's node: its index in the graph's node list

    def to_dict(self, *, include_tensors: bool = True) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "tensors"}
        d["order"] = list(self.order)
        d["live_bytes"] = list(self.live_bytes)
        d["peak_tensors"] = [[n, b] for n, b in self.peak_tensors]
        d["unknown_tensors"] = list(self.unknown_tensors)
        d["steps"] = list(self.steps)
        if include_tensors:
            d["tensors"] = [t.to_dict() for t in self.tensors]
        return d


@dataclass(frozen=True)
class MemoryEstimate:
    """The summary's memory figures: the plan's peak (what ``inspect`` and the Overview show)."""

    weights_bytes: int
    peak_activation_bytes: int
    peak_after_node: str | None
    unknown_tensors: int       # activations whose size is unknown (not counted)

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def of(cls, p: MemoryPlan, unknown_tensors: int | None = None) -> MemoryEstimate:
        return cls(p.weights_bytes, p.peak_bytes, p.peak_node,
                   len(p.unknown_tensors) if unknown_tensors is None else unknown_tensors)


# ============================================================================ building a schedule

def _weight_only(graph: GraphProto, constants: set[str]) -> set[str]:
    """Outputs of nodes computed from weights alone (ConstantOfShape of a constant shape, a Transpose of
    a weight...): ORT folds them into initializers at its default level, so they are weights too."""
    graph_inputs = {vi.name for vi in graph.input} - constants
    out = set(constants)
    for n in graph.node:
        if all(not x or x in out for x in n.input) and not set(n.input) & graph_inputs \
                and n.op_type not in ("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                      "Multinomial") and not any(True for _ in subgraphs_of(n)):
            out.update(n.output)
    return out


def declared_types(graph: GraphProto) -> dict[str, StaticType]:
    """The static types a graph declares (inputs, outputs, value_info): what ORT's planner compares
    when the file has been through shape inference."""
    out: dict[str, StaticType] = {}
    for vi in [*graph.input, *graph.output, *graph.value_info]:
        if vi.type.WhichOneof("value") == "tensor_type":
            info = value_info(vi)
            out[vi.name] = (info.shape, itemsize_of(vi.type.tensor_type.elem_type))
    return out


def file_symbols(model) -> frozenset[str]:  # noqa: ANN001 - onnx.ModelProto
    """The dim names the file itself declares (inputs, outputs and value_info of every graph).

    Why: ORT's load-time inference carries these names from op to op, but where ONNX's own inference
    makes a fresh name for a dim it cannot compute (``unk__6`` for a Conv's output width on a
    symbolic input) ORT leaves the dim unnamed, and an unnamed dim is never "the same size": ORT's
    planner does not reuse between such tensors. A plan that kept the made-up names shared buffers ORT
    keeps apart (paddle2onnx's OCR recognisers: +16.7 % over ORT's block)."""
    out: set[str] = set()
    for ref in iter_graphs(model):
        g = ref.graph
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.WhichOneof("value") == "tensor_type" and vi.type.tensor_type.HasField("shape"):
                out.update(d.dim_param for d in vi.type.tensor_type.shape.dim if d.dim_param)
    return frozenset(out)


def as_ort_loads(shape: tuple[int | str | None, ...] | None, symbols: frozenset[str]
                 ) -> tuple[int | str | None, ...] | None:
    """A load-time shape as ORT holds it: a dim name the file does not declare is an unnamed dim."""
    if shape is None:
        return None
    return tuple(None if isinstance(d, str) and d not in symbols else d for d in shape)


def schedule_from_graph(graph: GraphProto, size_of: Callable[[str], int | None], weights_bytes: int = 0, *,
                        fold_weights: bool = True, scope: str = "", depth: int = 0,
                        unknown: list[str] | None = None,
                        static_of: Callable[[str], StaticType | None] | None = None,
                        expanded: Mapping[int, Sequence[NodeProto]] | None = None) -> Schedule:
    """The graph's non-Constant nodes with sizes from ``size_of`` (None: unknown). ``fold_weights``:
    nodes computed from weights alone are weights, not scheduled (ORT's constant folding). Each node
    with bodies carries its largest body's peak; names inside bodies are labelled ``scope/node``.
    ``unknown`` collects the names without a size, bodies' included. ``static_of``: ORT's load-time
    type of a value (default: what the graph declares, :func:`declared_types`). ``expanded``: nodes ORT
    runs as their function body (:mod:`studio.inspect.ort_functions`), by index: the body's nodes are
    scheduled after the graph's, as ORT appends them, each keeping its node's index."""
    if static_of is None:
        static_of = declared_types(graph).get
    constants = {t.name for t in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            constants.update(n.output)
    if fold_weights:
        constants = _weight_only(graph, constants)
    nodes = []
    expanded = expanded or {}
    inlined = [(i, j, b) for i in sorted(expanded) for j, b in enumerate(expanded[i])]
    items = [(i, n, None) for i, n in enumerate(graph.node)] + [(i, b, j) for i, j, b in inlined]
    for i, n, j in items:
        if (j is None and i in expanded) or set(n.output) <= constants:
            continue
        label = n.name or f"{n.op_type}_{i}"
        if j is not None:
            label = f"{graph.node[i].name or f'{graph.node[i].op_type}_{i}'}/{n.op_type}_{j}"
        body_bytes, body_node = 0, None
        if depth < MAX_DEPTH:
            for attr, body in subgraphs_of(n):
                where = f"{scope}/{label}/{attr}"
                bp = plan(schedule_from_graph(body, size_of, fold_weights=fold_weights, scope=where,
                                              depth=depth + 1, unknown=unknown, static_of=static_of), alignment=1)
                if bp.peak_bytes > body_bytes:
                    body_bytes, body_node = bp.peak_bytes, bp.peak_node or where
        reads = tuple(x for x in node_reads(n) if x not in constants)   # bodies' reads: live until n has run
        nodes.append(OpNode(i, f"{scope}/{label}" if scope else label, n.op_type, reads, tuple(n.output),
                            body_bytes, body_node, tuple(n.input), "" if n.domain == "ai.onnx" else n.domain))
    inputs = tuple(vi.name for vi in graph.input if vi.name not in constants)
    outputs = tuple(vo.name for vo in graph.output if vo.name not in constants)
    sizes: dict[str, int] = {}
    for name in list(inputs) + [o for n in nodes for o in n.outputs if o]:
        b = size_of(name)
        if b is not None:
            sizes[name] = int(b)
        elif unknown is not None:
            unknown.append(name)
    static = {}
    for name in list(inputs) + [o for n in nodes for o in n.outputs if o]:
        st = static_of(name)
        if st is not None:
            static[name] = st
    return Schedule(tuple(nodes), sizes, inputs, outputs, weights_bytes, static)


def graph_plan(graph: GraphProto, resolved_shape: Callable[[str], tuple[int, ...] | None],
               elem_type: Callable[[str], int | None], weights_bytes: int = 0, *,
               fold_weights: bool = True,
               static_shape: Callable[[str], tuple[int | str | None, ...] | None] | None = None,
               opset: int | None = None, file_order: bool = False,
               run_order: Sequence[str] = ()) -> tuple[MemoryPlan, int]:
    """The plan of a model's main graph from resolved shapes and element types, and how many tensors
    (bodies' included) have no known size (counted as 0). ``fold_weights=False``: nodes computed from
    weights alone run as ORT runs them with its optimizations off. ``static_shape``: the shape ORT
    sees when it loads the file (symbols kept), which decides its buffer reuse; default: the graph's
    declared value_info. ``opset``: the model's default-domain opset, to expand the nodes ORT runs as
    their function body (HardSwish...); None: nodes as written. ``file_order``: run the nodes in the
    file's order (a graph ORT wrote, :mod:`studio.inspect.ort_optimized`); ``run_order``: node names in
    the order ORT's profile saw them run, which wins where it names every scheduled node."""
    declared = declared_types(graph)
    exp = expansions(graph.node, opset, resolved_shape,
                     static_shape or (lambda n: declared.get(n, (None, None))[0]), elem_type)
    if exp:
        shapes = {k: v for e in exp.values() for k, v in e.shapes.items()}
        statics = {k: v for e in exp.values() for k, v in e.static.items()}
        elems = {k: v for e in exp.values() for k, v in e.elem_types.items()}
        outer_shape, outer_elem, outer_static = resolved_shape, elem_type, static_shape

        def resolved_shape(name: str):  # noqa: F811 - the body's intermediates first
            if name in shapes:
                got = shapes[name]
                return got if got is not None and all(isinstance(d, int) for d in got) else None
            return outer_shape(name)

        def elem_type(name: str):  # noqa: F811
            return elems[name] if name in elems else outer_elem(name)

        def static_shape(name: str):  # noqa: F811
            if name in statics:
                return statics[name]
            return outer_static(name) if outer_static is not None else declared.get(name, (None, None))[0]

    static_of = None
    if static_shape is not None:
        def static_of(name: str) -> StaticType | None:
            et = elem_type(name)
            return (static_shape(name), itemsize_of(et) if et is not None else None)

    def size_of(name: str) -> int | None:
        shape, et = resolved_shape(name), elem_type(name)
        if shape is None or et is None:
            return None
        return packed_nbytes(et, numel(shape))

    unknown: list[str] = []
    sched = schedule_from_graph(graph, size_of, weights_bytes, unknown=unknown, fold_weights=fold_weights,
                                static_of=static_of, expanded={i: e.nodes for i, e in exp.items()})
    order = tuple(range(len(sched.nodes))) if file_order else None
    rank = {name: i for i, name in enumerate(run_order)}
    if rank and all(n.label in rank for n in sched.nodes):
        order = tuple(sorted(range(len(sched.nodes)), key=lambda k: rank[sched.nodes[k].label]))
    p = plan(sched, order, alignment=ALIGNMENT)
    return p, len(unknown)


# ============================================================================ ORT's order

def _producers(s: Schedule) -> dict[str, int]:
    return {o: k for k, n in enumerate(s.nodes) for o in n.outputs if o}


def _preds(s: Schedule) -> list[list[int]]:
    prod = _producers(s)
    return [sorted({prod[x] for x in n.inputs if x in prod}) for n in s.nodes]


def ort_order(s: Schedule) -> tuple[int, ...]:
    """Positions into ``s.nodes`` in onnxruntime's DEFAULT order (ReverseDFSFrom the leaves)."""
    preds = _preds(s)
    has_consumer = {p for ps in preds for p in ps}
    leaves = [k for k in range(len(s.nodes)) if k not in has_consumer]
    # the last leaf is popped first; ascending preds: the highest index is popped first
    return _post_order(reversed(leaves), preds.__getitem__, len(s.nodes))


def _post_order(roots: Iterable[int], pushed: Callable[[int], Iterable[int]], n: int) -> tuple[int, ...]:
    """Iterative post-order DFS over producers from each root in turn, each node emitted once; ``pushed(k)``:
    k's producers in push order (the last pushed is visited first)."""
    visited = [False] * n
    out: list[int] = []
    for root in roots:
        stack: list[tuple[int, bool]] = [(root, False)]
        while stack:
            k, leave = stack.pop()
            if leave:
                out.append(k)
                continue
            if visited[k]:
                continue
            visited[k] = True
            stack.append((k, True))
            stack.extend((p, False) for p in pushed(k))
    return tuple(out)


# ============================================================================ lifetimes and the arena

def _aligned(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment if alignment > 1 else n


def best_fit(lives: Sequence[TensorLife], alignment: int = ALIGNMENT,
             work: list[int] | None = None) -> tuple[int, dict[str, int]]:
    """ORT's ``MemPatternPlanner::TraceAllocation``: each tensor (in order of ``start``) goes to the gap
    that wastes least -- between live blocks (the lowest such gap on a tie), or the free tail below the
    arena's size so far when it wastes strictly less -- else right after the last live block (growing
    the arena). A block is free after the step of its last reader; an empty tensor takes no block.
    Returns (arena bytes, offsets).

    Near-linear (issue 31 item 8): the gaps are kept sorted by (size, offset) and the live blocks by
    offset and by end, so a placement or a release costs O(log n) searches instead of a scan of every
    live block (a 20,000-input fan-in was quadratic). ``work``: a one-item counter the searches add to."""
    offsets: dict[str, int] = {}
    arena = 0
    starts: list[int] = []                  # live blocks' offsets, sorted
    size_at: dict[int, int] = {}            # live block offset -> size
    ending: list[tuple[int, int]] = []      # heap of (end step, offset)
    gaps: list[tuple[int, int]] = []        # free gaps between live blocks: (size, offset), sorted
    gap_at: dict[int, int] = {}             # gap offset -> size
    ops = 0

    def add_gap(off: int, size: int) -> None:
        if size > 0:
            bisect.insort(gaps, (size, off))
            gap_at[off] = size

    def drop_gap(off: int) -> int:
        size = gap_at.pop(off, 0)
        if size:
            del gaps[bisect.bisect_left(gaps, (size, off))]
        return size

    def last_end() -> int:
        return starts[-1] + size_at[starts[-1]] if starts else 0

    for t in sorted(lives, key=lambda x: x.start):      # stable: production order within a step
        size = _aligned(t.bytes, alignment)
        while ending and ending[0][0] < t.start:        # freed before this step: its space joins its gaps
            _, off = heapq.heappop(ending)
            i = bisect.bisect_left(starts, off)
            sz = size_at.pop(off)
            del starts[i]
            ops += 1
            lo = starts[i - 1] + size_at[starts[i - 1]] if i > 0 else 0
            drop_gap(lo)
            drop_gap(off + sz)
            if i < len(starts):                         # a block above: one gap from lo to it
                add_gap(lo, starts[i] - lo)
            # else: the removed block was the last one; the space above lo is the tail
        if size <= 0:
            offsets[t.name] = 0
            continue
        ops += 1
        j = bisect.bisect_left(gaps, (size, -1))
        current = last_end()
        best = None
        if j < len(gaps):
            gsize, goff = gaps[j]
            best, waste = goff, gsize - size
            tail = arena - current
            if tail >= size and tail - size < waste:
                best = None
        if best is None:
            best = current                               # the tail, or the end (growing the arena)
        else:
            gsize = drop_gap(best)
            add_gap(best + size, gsize - size)
        bisect.insort(starts, best)
        size_at[best] = size
        heapq.heappush(ending, (t.end, best))
        offsets[t.name] = best
        arena = max(arena, best + size)
    if work is not None:
        work[0] += ops
    return arena, offsets


def plan(s: Schedule, order: Sequence[int] | None = None, alignment: int = ALIGNMENT) -> MemoryPlan:
    """Lifetimes, live bytes per step, the peak and the best-fit arena for one order."""
    order = tuple(ort_order(s) if order is None else order)
    step_of = {k: i for i, k in enumerate(order)}
    end = len(order)
    outputs = set(s.graph_outputs)
    last: dict[str, int] = {}
    for k in order:
        for x in s.nodes[k].inputs:
            last[x] = step_of[k]
    lives: list[TensorLife] = []
    for name in s.graph_inputs:
        lives.append(TensorLife(name, s.sizes.get(name, 0), -1, end if name in outputs else last.get(name, -1),
                                "input"))
    for k in order:
        for o in s.nodes[k].outputs:
            if not o:
                continue
            kind = "output" if o in outputs else "activation"
            lives.append(TensorLife(o, s.sizes.get(o, 0), step_of[k],
                                    end if o in outputs else last.get(o, step_of[k]), kind))
    blocks, owner = ort_buffers(s, order, lives)
    arena, offsets = best_fit(list(blocks.values()), alignment)
    lives = [TensorLife(t.name, t.bytes, t.start, t.end, t.kind, offsets.get(owner.get(t.name, ""), -1))
             for t in lives]
    # Live bytes per step count a shared buffer once, while one of its tensors is live (an alias or an
    # in-place output shares its input's buffer; a reused buffer idles between its tensors).
    shared = _pieces(lives, blocks, owner)
    phys = shared + [t for t in lives if t.kind != "activation"]
    live = _per_step(phys, end)
    act = _per_step(shared, end)
    born = [0] * end                             # bytes of the buffers a step creates
    for b in phys:
        if 0 <= b.start < end:
            born[b.start] += b.bytes
    in_body: dict[int, str | None] = {}       # steps whose peak is inside a body
    for i in range(end):
        node = s.nodes[order[i]]
        if node.body_bytes:
            # a body runs before its node's outputs exist: what is live then, plus the body's peak
            before = live[i] - born[i]
            if before + node.body_bytes > live[i]:
                live[i], in_body[i] = before + node.body_bytes, node.body_node
    if not live:
        live = [sum(t.bytes for t in lives)]
        act = [0]
    peak_step = max(range(len(live)), key=lambda i: (live[i], -i))
    at_peak = sorted(((t.name, t.bytes) for t in lives if t.start <= peak_step <= t.end
                      and not (peak_step in in_body and t.start == peak_step)), key=lambda x: (-x[1], x[0]))
    labels = tuple(s.nodes[k].label for k in order)
    peak_node = in_body[peak_step] if peak_step in in_body else labels[peak_step] if labels else None
    return MemoryPlan(labels, tuple(live), live[peak_step], peak_step, peak_node,
                      tuple(at_peak), max(act), arena, s.weights_bytes, tuple(lives), s.unknown,
                      tuple(s.nodes[k].index for k in order))


def _pieces(lives: Sequence[TensorLife], blocks: Mapping[str, TensorLife],
            owner: Mapping[str, str]) -> list[TensorLife]:
    """Each buffer's stretches of use: the union of its tensors' lifetimes, at the buffer's size."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for t in lives:
        if t.kind == "activation" and t.name in owner:
            spans.setdefault(owner[t.name], []).append((t.start, t.end))
    out: list[TensorLife] = []
    for label, ss in spans.items():
        ss.sort()
        lo, hi = ss[0]
        for a, b in ss[1:] + [(1 << 62, 1 << 62)]:
            if a > hi + 1:
                out.append(TensorLife(label, blocks[label].bytes, lo, hi, "activation"))
                lo, hi = a, b
            else:
                hi = max(hi, b)
    return out


def _per_step(items: Sequence[TensorLife], steps: int) -> list[int]:
    """Bytes live at each step (an item is live from its start to its end step, both included)."""
    delta = [0] * (steps + 1)
    for t in items:
        lo, hi = max(t.start, 0), min(t.end, steps - 1)
        if lo <= hi:
            delta[lo] += t.bytes
            delta[hi + 1] -= t.bytes
    out, run = [], 0
    for i in range(steps):
        run += delta[i]
        out.append(run)
    return out


def same_static_size(a: StaticType | None, b: StaticType | None) -> bool:
    """ORT's ``SameSize``: same bytes per element and the same static shape, dim by dim (equal numbers,
    or the same non-empty symbol); anything unknown is not the same."""
    if a is None or b is None or a[0] is None or b[0] is None or a[1] is None or a[1] != b[1]:
        return False
    if len(a[0]) != len(b[0]):
        return False
    return all(x is not None and x == y and x != "" for x, y in zip(a[0], b[0]))


def _inplace_input(n: OpNode, explicit: Sequence[str]) -> str:
    """The input node ``n`` may compute its output 0 into ("" when none)."""
    if n.domain == "":
        return explicit[0] if explicit and n.op_type in INPLACE_OPS else ""
    k = INPLACE_INPUT.get((n.domain, n.op_type))
    return explicit[k] if k is not None and len(explicit) > k else ""


def _static_key(st: StaticType | None) -> tuple | None:
    """A hashable key equal for two types exactly when :func:`same_static_size` holds; None: never reused."""
    if st is None or st[0] is None or not st[0] or st[1] is None:
        return None
    if any(d is None or d == "" for d in st[0]):
        return None
    return (st[1], tuple(st[0]))


def ort_buffers(s: Schedule, order: Sequence[int], lives: Sequence[TensorLife]
                ) -> tuple[dict[str, TensorLife], dict[str, str]]:
    """The buffers ORT's pattern holds, as its allocation planner decides them for this order
    (``PlannerImpl::ComputeSingleStreamReusePlan``, then ``GenerateDeallocationPlan``):

    * a graph output gets its own allocation, outside the pattern;
    * an alias output (Reshape...) takes its input's buffer, whatever that is (a graph input or a
      weight: then nothing is planned); an in-place output (Relu...) its input's when that buffer has
      no other use left and both have the same static shape;
    * otherwise the most recently freed buffer of the same static shape (same element size, rank and
      dims: the shapes ORT inferred when it loaded the file, symbols kept), else a new buffer;
    * a buffer is freed after the last node that reads any of its tensors; one nobody reads is held
      to the end of the run.

    Returns the planned buffers (name "a|b", held from the first tensor's step to that release, size
    the largest) and each planned tensor's buffer."""
    by_name = {t.name: t for t in lives}
    produced = {o for k in order for o in s.nodes[k].outputs if o}
    outputs = set(s.graph_outputs)
    end = len(order)

    def reads(n: OpNode) -> list[str]:
        explicit = [x for x in (n.args or n.inputs) if x]
        seen = set(explicit)
        return explicit + [x for x in n.inputs if x not in seen]

    use: dict[str, int] = {}
    for k in order:
        n = s.nodes[k]
        for x in reads(n) + [o for o in n.outputs if o]:
            use[x] = use.get(x, 0) + 1
    for o in outputs:
        use[o] = use.get(o, 0) + 1
    root: dict[str, str] = {}
    # freed buffers by static type (ORT's SameSize compares exactly these), most recently freed last: a
    # lookup is one dict access, not a scan of every freed buffer (near-linear, issue 31 item 8)
    freed: dict[tuple, list[str]] = {}
    for i, k in enumerate(order):
        n = s.nodes[k]
        explicit = n.args or n.inputs
        src = explicit[0] if explicit else ""
        for j, o in enumerate(n.outputs):
            if not o:
                continue
            reuse = None
            if o in outputs:
                pass
            elif n.domain == "" and j == 0 and src and n.op_type in ALIAS_OPS:
                reuse = root.get(src, src)
            elif j == 0 and (into := _inplace_input(n, explicit)) in root and use.get(root[into]) == 1 \
                    and same_static_size(s.static.get(into), s.static.get(o)):
                reuse = root[into]
            else:
                key = _static_key(s.static.get(o))
                if key is not None and freed.get(key):
                    reuse = freed[key].pop()
            root[o] = o if reuse is None else reuse
            if reuse is not None and reuse in use:
                use[reuse] += use.get(o, 0)
        for x in reads(n) + [o for o in n.outputs if o]:
            r = root.get(x)
            if r is not None and r in produced and r not in outputs:
                use[r] -= 1
                if use[r] == 0 and (key := _static_key(s.static.get(r))) is not None:
                    freed.setdefault(key, []).append(r)
    step_of = {o: i for i, k in enumerate(order) for o in s.nodes[k].outputs if o}
    release: dict[str, int] = {}
    for i, k in enumerate(order):
        for x in reads(s.nodes[k]):
            r = root.get(x)
            if r is not None:
                release[r] = i
    members: dict[str, list[str]] = {}
    for o, r in root.items():
        if r in produced and r not in outputs and o not in outputs and by_name.get(o) is not None:
            members.setdefault(r, []).append(o)
    blocks: dict[str, TensorLife] = {}
    owner: dict[str, str] = {}
    for r, names in members.items():
        names.sort(key=lambda m: step_of[m])
        label = "|".join(names)
        blocks[label] = TensorLife(label, max(by_name[m].bytes for m in names), step_of[r],
                                   release.get(r, end), "activation")
        owner.update((m, label) for m in names)
    return blocks, owner


# ============================================================================ what-if: a memory-aware order

def _step_costs(s: Schedule):
    """Per node: bytes it allocates, and for each input the consumer count (to know when it frees)."""
    prod = _producers(s)
    consumers: dict[str, set[int]] = {}
    for k, n in enumerate(s.nodes):
        for x in n.inputs:
            consumers.setdefault(x, set()).add(k)
    keep = set(s.graph_outputs)
    return prod, consumers, keep


def _alloc(s: Schedule, k: int) -> int:
    return sum(s.sizes.get(o, 0) for o in s.nodes[k].outputs if o)


def memory_order(s: Schedule) -> tuple[int, ...]:
    """A topological order with a low peak of live bytes: exact for small graphs, greedy otherwise."""
    if len(s.nodes) <= EXACT_MAX_NODES:
        exact = _exact_order(s)
        if exact is not None:
            return exact
    return greedy_order(s)


def greedy_order(s: Schedule, work: list[int] | None = None) -> tuple[int, ...]:
    """Among ready nodes, run the one whose net growth (allocates minus frees) is lowest; ties: file order.

    Near-linear (issue 31 item 8): a ready node's frees only grow as other nodes run (an input is freed by
    its last remaining reader), so the ready nodes sit in a heap and a node is pushed again only when one
    of its inputs comes down to it as the last reader; a 20,000-input fan-in was quadratic (every step
    re-costed every ready node against the set of nodes done). ``work``: a one-item counter of heap pushes."""
    preds = _preds(s)
    _, consumers, keep = _step_costs(s)
    n = len(s.nodes)
    remaining = {x: len(c) for x, c in consumers.items()}       # readers of x not yet run
    done = [False] * n
    alloc = [_alloc(s, k) for k in range(n)]
    dead = [sum(s.sizes.get(o, 0) for o in s.nodes[k].outputs if o and o not in keep and not consumers.get(o))
            for k in range(n)]
    frees_now = [dead[k] + sum(s.sizes.get(x, 0) for x in set(s.nodes[k].inputs)
                               if x not in keep and remaining.get(x) == 1) for k in range(n)]
    waiting = [len(p) for p in preds]
    succ: list[list[int]] = [[] for _ in s.nodes]
    for k, ps in enumerate(preds):
        for p in ps:
            succ[p].append(k)
    heap: list[tuple[int, int, int]] = []
    pushes = 0

    def push(k: int) -> None:
        nonlocal pushes
        pushes += 1
        heapq.heappush(heap, (alloc[k] - frees_now[k], alloc[k], k))

    for k in range(n):
        if waiting[k] == 0:
            push(k)
    out: list[int] = []
    while heap:
        net, _, k = heapq.heappop(heap)
        if done[k] or net != alloc[k] - frees_now[k]:
            continue                                   # run already, or re-pushed at a lower cost
        out.append(k)
        done[k] = True
        for x in set(s.nodes[k].inputs):
            remaining[x] -= 1
            if remaining[x] == 1 and x not in keep:    # its one reader left now frees it
                last = next(c for c in consumers[x] if not done[c])
                frees_now[last] += s.sizes.get(x, 0)
                if waiting[last] == 0:
                    push(last)
        for c in succ[k]:
            waiting[c] -= 1
            if waiting[c] == 0:
                push(c)
    if work is not None:
        work[0] += pushes
    return tuple(out)


def _exact_order(s: Schedule) -> tuple[int, ...] | None:
    """Minimum peak over all topological orders: Dijkstra-like search over downsets (max, not sum)."""
    preds = _preds(s)
    _, consumers, keep = _step_costs(s)
    n = len(s.nodes)
    pmask = [sum(1 << p for p in ps) for ps in preds]
    base = sum(s.sizes.get(i, 0) for i in s.graph_inputs)

    def live_after(mask: int) -> int:
        done = {k for k in range(n) if mask >> k & 1}
        total = 0
        for name in s.graph_inputs:
            if name in keep or consumers.get(name, set()) - done:
                total += s.sizes.get(name, 0)
        for k in done:
            for o in s.nodes[k].outputs:
                if o and (o in keep or consumers.get(o, set()) - done):
                    total += s.sizes.get(o, 0)
        return total

    full = (1 << n) - 1
    best: dict[int, int] = {0: base}
    parent: dict[int, tuple[int, int]] = {}
    heap = [(base, 0)]
    live_cache: dict[int, int] = {0: base}
    while heap:
        peak, mask = heapq.heappop(heap)
        if mask == full:
            out = []
            while mask:
                prev, k = parent[mask]
                out.append(k)
                mask = prev
            return tuple(reversed(out))
        if peak > best.get(mask, peak):
            continue
        for k in range(n):
            if mask >> k & 1 or pmask[k] & ~mask:
                continue
            nxt = mask | 1 << k
            during = live_cache[mask] + _alloc(s, k)
            cand = max(peak, during)
            if cand < best.get(nxt, 1 << 62):
                if nxt not in live_cache:
                    if len(live_cache) > _EXACT_MAX_STATES:
                        return None
                    live_cache[nxt] = live_after(nxt)
                best[nxt] = cand
                parent[nxt] = (mask, k)
                heapq.heappush(heap, (cand, nxt))
    return None


def file_order_for(s: Schedule, target: Sequence[int]) -> tuple[int, ...]:
    """A topological node order for the file such that ORT's reverse DFS runs close to ``target``.

    ORT pops a node's highest-index producer first, so the producer that should run first must be
    written last: a post-order DFS from the leaves that visits producers latest-in-target first."""
    pos = {k: i for i, k in enumerate(target)}
    preds = _preds(s)
    has_consumer = {p for ps in preds for p in ps}
    leaves = sorted((k for k in range(len(s.nodes)) if k not in has_consumer), key=lambda k: -pos[k])
    # visited first = the producer latest in target: push it last
    return _post_order(leaves, lambda k: sorted(preds[k], key=lambda p: pos[p]), len(s.nodes))


@dataclass(frozen=True)
class Reordering:
    """The what-if: ORT's order as written, and the best file order found for memory."""

    before: MemoryPlan
    after: MemoryPlan
    file_order: tuple[int, ...]     # positions into the schedule's nodes, to write in this order
    target_peak_bytes: int          # peak of the memory-aware order itself (the best a scheduler could do)

    @property
    def improves(self) -> bool:
        return (self.after.peak_bytes, self.after.arena_bytes) < (self.before.peak_bytes, self.before.arena_bytes)

    def to_dict(self) -> dict:
        return {"before": self.before.to_dict(include_tensors=False),
                "after": self.after.to_dict(include_tensors=False), "improves": self.improves,
                "target_peak_bytes": self.target_peak_bytes}


def reorder_for_memory(s: Schedule) -> Reordering:
    """Candidates (the memory-aware order written as is, and as ORT's DFS needs it): the one whose
    ORT order has the lowest (peak, arena) wins; the file order as written when none is lower."""
    before = plan(s)
    target = memory_order(s)
    target_plan = plan(s, target)
    best_order, best_plan = tuple(range(len(s.nodes))), before
    for cand in (file_order_for(s, target), target):
        rs = _reindexed(s, cand)
        p = plan(rs)
        if (p.peak_bytes, p.arena_bytes) < (best_plan.peak_bytes, best_plan.arena_bytes):
            best_order, best_plan = tuple(cand), p
    return Reordering(before, best_plan, best_order, target_plan.peak_bytes)


def _reindexed(s: Schedule, file_order: Sequence[int]) -> Schedule:
    nodes = tuple(replace(s.nodes[k], index=i) for i, k in enumerate(file_order))
    return Schedule(nodes, s.sizes, s.graph_inputs, s.graph_outputs, s.weights_bytes, s.static)
