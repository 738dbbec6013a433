"""``summarize(handle) -> ModelSummary``: everything the Overview and Nodes pages
and ``onnx-studio inspect --json`` show. The JSON layout is documented in
docs/inspect-json.md and versioned by ``SCHEMA_VERSION``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace

from onnx import defs

from studio.core.model import ModelHandle
from studio.core.protowalk import cycle_nodes, cycle_text, iter_graphs, node_id, subgraphs_of
from studio.core.types import TensorInfo, value_info
from studio.inspect.flops import Cost, node_cost, shape_lookup
from studio.inspect.memory_plan import MemoryEstimate, MemoryPlan, as_ort_loads, file_symbols, graph_plan
from studio.inspect.params import ParamStats, count_params
from studio.core.dim_hints import DimHint, dim_hints, model_derived_dims, resolve_derived
from studio.inspect.edge_shapes import EdgeShapes, FormulaMismatch, pinned_inputs, resolve_edges
from studio.inspect.shapes import sandboxed_shapes

SCHEMA_VERSION = 1
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"})
MAX_TEXT = 500


@dataclass(frozen=True)
class OpsetInfo:
    domain: str
    version: int
    used: bool


@dataclass(frozen=True)
class OpCount:
    domain: str
    op_type: str
    count: int


@dataclass(frozen=True)
class NodeCounts:
    main: int
    subgraph_nodes: int
    function_nodes: int
    subgraphs: int
    functions: int

    @property
    def total(self) -> int:
        return self.main + self.subgraph_nodes + self.function_nodes


@dataclass(frozen=True)
class NodeInfo:
    id: str                   # unique: scope + name (or op_index when unnamed)
    name: str
    op_type: str
    domain: str
    scope: str                # "" for the main graph
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    flops: int | None
    macs: int | None


@dataclass(frozen=True)
class BranchFlops:
    """An If's two branches: only one runs, so the total counts the larger (``counted``)."""

    node: str                 # the If node's id
    then_flops: int
    else_flops: int
    counted: str              # "then_branch" | "else_branch"


@dataclass(frozen=True)
class FlopStats:
    flops: int
    macs: int
    by_op: tuple[tuple[str, int], ...]      # (op_type, flops), descending
    unknown_nodes: int                     # nodes whose cost needs shapes we lack
    dims: Mapping[str, int]                # user-set values used
    assumed_dims: tuple[str, ...]          # input dims with no value given (taken as 1)
    unresolved_dims: tuple[str, ...]       # dims inference could not compute (taken as 1)
    branches: tuple[BranchFlops, ...] = ()  # per If: then / else FLOPs; the total has the larger one
    unknown_dims: tuple[str, ...] = ()     # --dim names that are no dim of this model (ignored)

    @property
    def lower_bound(self) -> bool:
        """The figure counts some dims as 1 or leaves nodes out: the real count is at least this."""
        return bool(self.assumed_dims or self.unresolved_dims or self.unknown_nodes)

    def open_text(self) -> str:
        """Why the figure is a lower bound ("height and width unresolved, counted as 1"), or ''."""
        parts = []
        # With input dims unset, the dims derived from them are no news: the input dims are named.
        dims = list(self.assumed_dims or self.unresolved_dims)
        if dims:
            shown = dims[:6]
            names = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
            more = f" (+{len(dims) - 6} more)" if len(dims) > 6 else ""
            parts.append(f"{names}{more} unresolved, counted as 1")
        if self.unknown_nodes:
            parts.append(f"{self.unknown_nodes} node(s) not counted (shapes unknown)")
        return "; ".join(parts)


@dataclass(frozen=True)
class ModelSummary:
    schema_version: int
    name: str
    sha256: str
    file_bytes: int
    total_bytes: int
    producer: str
    producer_version: str
    ir_version: int
    model_version: int
    domain: str
    doc_string: str
    metadata: tuple[tuple[str, str], ...]
    opsets: tuple[OpsetInfo, ...]
    node_counts: NodeCounts
    op_histogram: tuple[OpCount, ...]
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    initializers_as_inputs: int
    params: ParamStats
    flops: FlopStats
    memory: MemoryEstimate | None          # None: not planned (``summarize(memory=False)``, the graph viewer's)
    custom_ops: tuple[OpCount, ...]
    local_functions: tuple[str, ...]
    check_ok: bool
    check_message: str | None
    shape_inference_error: str | None
    nodes: tuple[NodeInfo, ...] = field(repr=False)
    edges: tuple[TensorInfo, ...] = field(repr=False)
    dim_hints: tuple[DimHint, ...] = ()      # what the model says its dynamic dims should be, with the source
    shape_note: str | None = None            # how open shapes were filled (a real run), or why not
    formula_mismatches: tuple[FormulaMismatch, ...] = ()   # exporter dim formulas the model contradicts
    formula_mismatch_count: int = 0
    # Lifetimes, live bytes per step and the arena behind ``memory`` (api.memory_plan; not in to_dict)
    memory_plan: MemoryPlan | None = field(default=None, repr=False, compare=False)

    @property
    def custom_domains(self) -> tuple[str, ...]:
        return tuple(sorted({c.domain for c in self.custom_ops}))

    def node(self, node_id: str) -> NodeInfo | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def to_dict(self, *, include_nodes: bool = True) -> dict:
        d = asdict(replace(self, memory_plan=None))
        d.pop("memory_plan")
        d["node_counts"]["total"] = self.node_counts.total
        d["custom_domains"] = list(self.custom_domains)
        d["inputs"] = [t.to_dict() for t in self.inputs]
        d["outputs"] = [t.to_dict() for t in self.outputs]
        d["edges"] = [t.to_dict() for t in self.edges] if include_nodes else []
        d["params"] = self.params.to_dict()
        d["flops"]["by_op"] = [{"op_type": op, "flops": f} for op, f in self.flops.by_op]
        d["flops"]["dims"] = dict(self.flops.dims)
        d["flops"]["lower_bound"] = self.flops.lower_bound
        d["flops"]["open"] = self.flops.open_text()
        if d["memory"] is not None:
            d["memory"]["lower_bound"] = bool(self.flops.assumed_dims or self.flops.unresolved_dims
                                              or self.memory.unknown_tensors)
        d["dim_hints"] = [h.to_dict() for h in self.dim_hints]
        d["metadata"] = [{"key": k, "value": v} for k, v in self.metadata]
        if not include_nodes:
            d["nodes"] = []
        return d


def _clip(text: str, n: int = MAX_TEXT) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _named_dims(table: Mapping[str, TensorInfo]) -> set[str]:
    """The dim names in ``table``'s shapes."""
    return {d for t in table.values() for d in (t.shape or ()) if isinstance(d, str)}


def _within(scope: str, roots: set[str]) -> bool:
    return any(scope == r or scope.startswith(r + "/") for r in roots)


def _if_branches(refs, costs: list[tuple[str, str, Cost]], if_ids: dict[tuple[str, int], str]
                 ) -> tuple[set[str], tuple[BranchFlops, ...]]:
    """Only one branch of an If runs: per If (nested ones first), the FLOPs of each branch (its own
    nodes plus its bodies, the larger branch of inner Ifs), and the scopes of the smaller branches,
    which the total leaves out."""
    if not if_ids:          # no If anywhere: nothing to choose (the walk below visits every node of every graph)
        return set(), ()
    direct: Counter[str] = Counter()
    for scope, _, cost in costs:
        direct[scope] += cost.flops
    by_scope = {ref.scope: ref for ref in refs}
    memo: dict[str, int] = {}
    skipped: set[str] = set()
    out: list[BranchFlops] = []

    def effective(scope: str) -> int:
        if scope in memo:
            return memo[scope]
        memo[scope] = 0                          # a scope repeated by duplicate node names: no cycle
        ref = by_scope.get(scope)
        total = direct[scope]
        if ref is not None:
            for i, node in enumerate(ref.graph.node):
                subs = [(attr, f"{scope}/{node.name or f'{node.op_type}_{i}'}/{attr}")
                        for attr, _ in subgraphs_of(node)]
                subs = [(a, s) for a, s in subs if s in by_scope]
                if not subs:
                    continue
                figures = {a: effective(s) for a, s in subs}
                nid = if_ids.get((scope, i))
                if nid is not None and {"then_branch", "else_branch"} <= set(figures):
                    counted = "then_branch" if figures["then_branch"] >= figures["else_branch"] else "else_branch"
                    other = "else_branch" if counted == "then_branch" else "then_branch"
                    skipped.add(dict(subs)[other])
                    out.append(BranchFlops(nid, figures["then_branch"], figures["else_branch"], counted))
                    total += figures[counted]
                else:
                    total += sum(figures.values())
        memo[scope] = total
        return total

    for ref in refs:                              # memoised: each If is decided once, by its own graph
        effective(ref.scope)
    return skipped, tuple(out)


def _is_known_op(domain: str, op_type: str, version: int) -> bool:
    try:
        return defs.has(op_type, domain) if version <= 0 else defs.has(op_type, version, domain)
    except TypeError:  # older onnx signature
        return defs.has(op_type, domain)


def summarize(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
              pool_key: str = "default", memory: bool = True) -> ModelSummary:
    """Summary of a loaded model. ``dims`` gives values for symbolic dims (FLOPs, memory).
    ``memory=False`` skips the memory plan (``memory`` and ``memory_plan`` None): the graph viewer draws
    only edge shapes and FLOPs, and the plan is ~45% of a 10k-node model's summary."""
    model = handle.proto
    dims = dict(dims or {})
    init_names = {t.name for t in model.graph.initializer}
    pinned = pinned_inputs(model, dims)
    # a derived dim (past + sequence) is its parts' value, never one to set: not listed as unset
    derived = model_derived_dims(model)
    dims = {**resolve_derived(derived, dims, dims), **dims}
    input_symbols = set(pinned.keys) - {d.key for d in derived}   # named dims, and INPUT[AXIS] for unnamed ones
    static = not pinned.keys and not pinned.unknown_rank
    # Shapes on the model as written (the interface keeps its symbols), and with the
    # inputs pinned at the dims (unset ones at 1: FLOPs and memory are then a lower bound,
    # said so): one worker job.
    symbolic_table, concrete_table = sandboxed_shapes(handle.path, model, pinned.shapes, static=static,
                                                      pool_key=pool_key)
    # onnx.checker's default (not full) check passes a graph whose nodes wait on their own outputs. Sorted
    # after the worker's job, not before: the graph viewer builds its hierarchy while that job runs.
    cyclic = cycle_nodes(model.graph)
    shape_error = symbolic_table.error
    table = symbolic_table.values
    concrete = concrete_table.values if concrete_table is not None else table
    edges = EdgeShapes(symbolic_table)
    edge_table = table                    # the interface (inputs/outputs) keeps its symbolic dims
    if dims or static:
        # Dims that flow: inference at the pinned inputs, the exporter's formulas as a hint,
        # one real run to measure what is left and to check every formula it filled.
        edges = resolve_edges(handle.path, model, symbolic_table, concrete_table, pinned, dims,
                              total_bytes=handle.total_bytes, pool_key=pool_key)
        concrete = edge_table = edges.table.values
        if static:
            table = edge_table

    assumed: set[str] = set()     # every symbolic dim a FLOPs/memory figure had to take as 1
    shape_of = shape_lookup(concrete, dims, assumed)

    local_fns = {(f.domain, f.name) for f in model.functions}
    opset_of = {o.domain or "": o.version for o in model.opset_import}
    hist: Counter[tuple[str, str]] = Counter()
    used_domains: set[str] = set()
    nodes: list[NodeInfo] = []
    seen: set[str] = set()
    main = sub = fn_nodes = subgraphs = 0
    by_op: Counter[str] = Counter()
    unknown_cost = 0
    refs = list(iter_graphs(model))
    costs: list[tuple[str, str, Cost]] = []        # (scope, op_type, cost) of every costed node
    if_ids: dict[tuple[str, int], str] = {}          # (scope, index) -> id of an If node
    for ref in refs:
        if ref.function:
            fn_nodes += len(ref.graph.node)
        elif ref.depth == 0:
            main += len(ref.graph.node)
        else:
            subgraphs += 1
            sub += len(ref.graph.node)
        for i, n in enumerate(ref.graph.node):
            dom = "" if n.domain == "ai.onnx" else n.domain
            hist[(dom, n.op_type)] += 1
            used_domains.add(dom)
            cost = None if (dom, n.op_type) in local_fns else node_cost(n, shape_of)
            if cost is None:
                unknown_cost += int((dom, n.op_type) not in local_fns)
            else:
                costs.append((ref.scope, n.op_type, cost))
            nid = node_id(ref.scope, n.name, n.op_type, i, seen)
            if n.op_type == "If" and dom == "":
                if_ids[(ref.scope, i)] = nid
            nodes.append(NodeInfo(nid, n.name, n.op_type, dom,
                                  ref.scope, tuple(n.input), tuple(n.output),
                                  None if cost is None else cost.flops, None if cost is None else cost.macs))
    skipped, branches = _if_branches(refs, costs, if_ids)
    total = Cost(0, 0)
    for scope, op_type, cost in costs:
        if not _within(scope, skipped):
            total = Cost(total.flops + cost.flops, total.macs + cost.macs)
            by_op[op_type] += cost.flops

    custom = []
    for (dom, op), c in sorted(hist.items()):
        if (dom, op) in local_fns:
            continue
        if dom not in STANDARD_DOMAINS or not _is_known_op(dom, op, opset_of.get(dom, 0)):
            custom.append(OpCount(dom, op, c))

    params = count_params(model)
    # ORT decides its buffer reuse on the shapes it infers at load time (the file's symbols kept, a name the
    # inference made up unnamed): the table as written
    plan: MemoryPlan | None = None
    estimate: MemoryEstimate | None = None
    if memory:
        symbols = file_symbols(model)
        plan, unknown_sizes = graph_plan(model.graph, shape_of,
                                         lambda n: concrete[n].elem_type if n in concrete else None, params.bytes,
                                         static_shape=lambda n: as_ort_loads(table[n].shape, symbols) if n in table
                                         else None,
                                         opset=opset_of.get("", opset_of.get("ai.onnx")))
        estimate = MemoryEstimate.of(plan, unknown_sizes)
    known_dims = input_symbols | _named_dims(concrete) | (_named_dims(table) if table is not concrete else set())
    inputs = tuple(table.get(vi.name) or value_info(vi) for vi in model.graph.input if vi.name not in init_names)
    outputs = tuple(table.get(vi.name) or value_info(vi) for vi in model.graph.output)
    p = model
    return ModelSummary(
        schema_version=SCHEMA_VERSION, name=handle.name, sha256=handle.sha256, file_bytes=handle.file_bytes,
        total_bytes=handle.total_bytes, producer=_clip(p.producer_name, 200),
        producer_version=_clip(p.producer_version, 100), ir_version=p.ir_version,
        model_version=p.model_version, domain=_clip(p.domain, 200), doc_string=_clip(p.doc_string),
        metadata=tuple((_clip(m.key, 200), _clip(m.value)) for m in p.metadata_props[:100]),
        opsets=tuple(OpsetInfo(o.domain or "", o.version, (o.domain or "") in used_domains
                               or (o.domain == "ai.onnx" and "" in used_domains)) for o in p.opset_import),
        node_counts=NodeCounts(main, sub, fn_nodes, subgraphs, len(model.functions)),
        op_histogram=tuple(OpCount(d, o, c) for (d, o), c in hist.most_common()),
        inputs=inputs, outputs=outputs,
        initializers_as_inputs=sum(vi.name in init_names for vi in model.graph.input),
        params=params,
        flops=FlopStats(total.flops, total.macs, tuple(by_op.most_common()), unknown_cost,
                        dims, tuple(sorted(input_symbols - set(dims))),
                        tuple(sorted(assumed - input_symbols))[:20], branches,
                        tuple(sorted(k for k in dims if k not in known_dims))),
        memory=estimate, memory_plan=plan, custom_ops=tuple(custom),
        local_functions=tuple(f"{d}::{n}" for d, n in sorted(local_fns)),
        check_ok=handle.check.ok and not cyclic, shape_inference_error=shape_error,
        check_message=f"{cycle_text(cyclic)}; no engine can run it: re-export the model" if cyclic
        else handle.check.message,
        nodes=tuple(nodes), edges=tuple(edge_table[k] for k in sorted(edge_table)),
        dim_hints=dim_hints(model), shape_note=edges.note,
        formula_mismatches=edges.mismatches, formula_mismatch_count=edges.mismatch_count,
    )
