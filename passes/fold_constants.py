"""fold-constants: subgraphs whose inputs are all constant (including shape
arithmetic once dims are static)  ⇒  precomputed initializers.

Wraps onnxscript's constant folder (which evaluates ops with ONNX's reference
implementation, propagates shapes node by node and folds ``Shape`` of
statically known tensors) and adds what onnxsim and onnxslim lack:

* a **size gate**: a folded tensor may not be larger than what it frees (the
  constant inputs only it used) times ``max_growth`` (default 1.0), except for
  results up to ``min_bytes``, which all together may add no more than
  ``max_file_growth - 1`` (default 0.1) of the model's initializer bytes plus
  ``min_bytes``. So ``ConstantOfShape``/``Expand``/``Tile``
  weights and int8-weight dequantization (``DequantizeLinear`` or
  ``Cast(int8)``) stay as they are unless the options ask otherwise —
  onnxsim turns a 9 KB model into 513 MB that way;
* generator ops (``Expand``, ``Tile``, ``Range``, ``ConstantOfShape``) are
  sized *before* evaluation, so a 4 TiB ``Expand`` is never allocated;
* shape vectors with dynamic dims that a Reshape or Expand reads become constants
  (``0`` copies the input's dim, ``1`` keeps it; ``passes.shape_values``), so the
  tracer's ``Shape→Gather→Unsqueeze→Concat`` chains go even with a dynamic batch;
* control flow is never evaluated (a constant-foldable ``Loop`` with trip
  count 2^62 is left alone; an ``If`` with a constant condition is inlined),
  and the whole pass runs in a sandbox worker with a timeout and a memory
  limit (``calls_engines``): an op evaluation that explodes or hangs ends as a
  clear error for this pass, never as a dead studio;
* random ops (``passes.nondeterministic``: Bernoulli, Random*, Multinomial,
  training Dropout, custom-domain ops) are never evaluated;
* annotations are left as they were: inferred shapes are used while folding,
  not written into the file.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from passes.base import Change, ChangeTracker, PassResult, StudioPass, result
from passes.ir_helpers import const_array, const_tensor, dtype_of, graphs_of, is_onnx_op, static_shape
from passes.nondeterministic import PURE_DOMAINS, nondeterministic_reason
from passes.base import register
from studio.core.sandbox import Limits
from passes.base import all_nodes
from passes.ir_helpers import all_values, inferred_shapes
from studio.core.sandbox import default_limits
from passes.shape_values import resolve_shape_vectors

log = logging.getLogger(__name__)

# Ops whose output can be far larger than their inputs: sized before evaluation.
GENERATORS = frozenset({"ConstantOfShape", "Expand", "Tile", "Range"})
# Kept by default (onnxscript's list): quantization parameters carry meaning.
QUANT_OPS = frozenset({"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear"})
SEQUENCE_OPS = frozenset({"SplitToSequence", "ConcatFromSequence", "SequenceAt", "SequenceConstruct"})
_FOLDED_FROM = "pkg.onnxscript.optimizer.folded_from"


class SizePolicy:
    """Decides whether a folded tensor of ``nbytes`` may replace ``node``.

    A fold that frees at least ``nbytes / max_growth`` of constants only it used always
    may. A smaller fold (up to ``min_bytes``: shape tensors, small tables) draws on one
    budget for the whole model, ``budget_bytes``, charged with what each such fold adds
    net: many small folds never add up to more than the budget (a model of shape
    arithmetic once grew 1.42x from folds each under ``min_bytes``).
    """

    def __init__(self, max_growth: float, min_bytes: int, budget_bytes: float = math.inf) -> None:
        self.max_growth = max_growth
        self.min_bytes = min_bytes
        self.budget_bytes = budget_bytes
        self.spent_bytes = 0
        self.refused: list[str] = []
        # Nodes of a constant region that frees at least what it adds as a whole
        # (``approve_regions``): each may fold though alone it would add bytes.
        self.approved: set[int] = set()

    @staticmethod
    def freed_bytes(node: ir.Node) -> int:
        """Bytes of constant inputs that only this node uses (they disappear with it)."""
        total, seen = 0, set()
        for v in node.inputs:
            if v is None or id(v) in seen:
                continue
            seen.add(id(v))
            t = const_tensor(v)
            if t is not None and set(v.consumers()) == {node} and not v.is_graph_output():
                total += t.nbytes
        return total

    def allows(self, node: ir.Node, nbytes: int, *, charge: bool = True) -> bool:
        if id(node) in self.approved:
            return True
        freed = self.freed_bytes(node)
        net = nbytes - freed
        if nbytes <= self.max_growth * freed:
            ok = True
        elif nbytes <= self.min_bytes:
            ok = self.spent_bytes + net <= self.budget_bytes
            if not ok:
                self.refused.append(f"{node.op_type} '{node.name or '?'}' kept: the model's folding budget "
                                    f"({self.budget_bytes / 1024:.1f} KiB) is spent")
                return False
        else:
            self.refused.append(f"{node.op_type} '{node.name or '?'}' kept: folding would add "
                                f"{nbytes / 2**20:.2f} MiB of constants")
            return False
        if ok and charge:
            self.spent_bytes += net
        return ok


def _region_candidate(node: ir.Node) -> bool:
    """An op a constant region may hold: pure, no subgraph, not a generator or quantization op."""
    return (is_onnx_op(node) and node.op_type not in GENERATORS | QUANT_OPS | SEQUENCE_OPS
            and node.op_type not in ("Constant", "If", "Loop", "Scan", "Dropout")
            and nondeterministic_reason(node, None) is None
            and not any(a.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for a in node.attributes.values()))


def _value_bytes(value: ir.Value) -> int | None:
    shape, dtype = static_shape(value), dtype_of(value)
    if shape is None or dtype is None:
        return None
    try:
        return math.prod(shape) * dtype.itemsize
    except Exception:
        return None


def _region_result_bytes(members: list[ir.Node], results: list[ir.Value],
                         opsets: dict[str, int]) -> list[int | None]:
    """Sizes of a constant region's results by ONNX shape inference on the region alone,
    its small constants given by value (starts, axes, shapes), the others by shape."""
    import onnx
    from onnx import helper

    inits, inputs, seen = [], [], set()
    for n in members:
        for v in n.inputs:
            t = const_tensor(v) if v is not None else None
            if t is None or id(v) in seen or not v.name:
                continue
            seen.add(id(v))
            if t.size <= 64:
                proto = ir.serde.serialize_tensor(t)
                proto.name = v.name
                inits.append(proto)
            else:
                inputs.append(helper.make_tensor_value_info(v.name, int(t.dtype), list(t.shape)))
    try:
        graph = helper.make_graph([ir.serde.serialize_node(n) for n in members], "region", inputs,
                                  [helper.make_empty_tensor_value_info(v.name) for v in results], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, int(o)) for d, o in opsets.items()])
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:
        return [None] * len(results)
    types = {vi.name: vi.type.tensor_type for vi in [*inferred.output, *inferred.value_info]}
    sizes: list[int | None] = []
    for v in results:
        tt = types.get(v.name)
        if tt is None or not tt.HasField("shape") or not tt.elem_type or any(
                not d.HasField("dim_value") for d in tt.shape.dim):
            sizes.append(None)
            continue
        itemsize = ir.DataType(tt.elem_type).itemsize
        sizes.append(math.prod(d.dim_value for d in tt.shape.dim) * itemsize)
    return sizes


def _result_key(value: ir.Value, memo: dict[int, object]) -> object:
    """A structural key of a constant computation: two results with one key hold the same
    bytes (dedup-initializers merges them after folding)."""
    if id(value) in memo:
        return memo[id(value)]
    node = value.producer()
    t = const_tensor(value)
    if t is not None and t.size <= 64:
        arr = const_array(value)
        key: object = ("const", id(value)) if arr is None else ("small", str(arr.dtype), arr.shape, arr.tobytes())
    elif t is not None or node is None:
        key = ("const", id(value))
    else:
        attrs = tuple(sorted((k, repr(a.value)) for k, a in node.attributes.items()))
        key = (node.domain, node.op_type, attrs, list(node.outputs).index(value),
               tuple(None if v is None else _result_key(v, memo) for v in node.inputs))
    memo[id(value)] = key
    return key


def approve_regions(model: ir.Model, policy: SizePolicy, max_elements: int) -> int:
    """Approve, as a whole, the connected regions of constant computation that together take
    no more than ``max_growth`` times the constants only they read: an LSTM's gate reorder
    ``Slice(W)x3 -> Concat -> Unsqueeze`` replaces W by a tensor of W's size, while each
    Slice alone, sharing W, would only add bytes. Regions that share a large constant are
    judged together (the two branches of an If reordering the same W), their results
    counted once per distinct computation (identical results are deduplicated after
    folding). Results are sized by shape inference. Returns the nodes approved."""
    regions: list[list[ir.Node]] = []
    for graph in graphs_of(model):
        parent: dict[int, int] = {}
        nodes: dict[int, ir.Node] = {}

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for node in graph:
            if not _region_candidate(node) or not node.inputs:
                continue
            roots, ok = [], True
            for v in node.inputs:
                if v is None or const_tensor(v) is not None:
                    continue
                prod = v.producer()
                if prod is None or id(prod) not in parent:
                    ok = False
                    break
                roots.append(find(id(prod)))
            if not ok:
                continue
            nodes[id(node)] = node
            parent[id(node)] = id(node)
            for r in roots:
                parent[find(r)] = id(node)
        grouped: dict[int, list[ir.Node]] = {}
        for i, node in nodes.items():
            grouped.setdefault(find(i), []).append(node)
        regions += [m for m in grouped.values() if len(m) >= 2]
    # Regions sharing a constant larger than min_bytes are judged together.
    owner: dict[int, int] = {}
    group = list(range(len(regions)))

    def top(i: int) -> int:
        while group[i] != i:
            group[i] = group[group[i]]
            i = group[i]
        return i

    for r, members in enumerate(regions):
        for n in members:
            for v in n.inputs:
                t = const_tensor(v) if v is not None else None
                if t is not None and t.nbytes > policy.min_bytes:
                    if id(v) in owner:
                        group[top(r)] = top(owner[id(v)])
                    else:
                        owner[id(v)] = r
    together: dict[int, list[int]] = {}
    for r in range(len(regions)):
        together.setdefault(top(r), []).append(r)
    approved = 0
    memo: dict[int, object] = {}
    for rs in together.values():
        members = [n for r in rs for n in regions[r]]
        inside = {id(n) for n in members}
        out: dict[object, int] = {}
        freed, fits = 0, True
        for r in rs:
            ms = regions[r]
            mine = {id(n) for n in ms}
            results = [v for n in ms for v in n.outputs
                       if v.is_graph_output() or any(id(c) not in mine for c in v.consumers())]
            sizes = [_value_bytes(v) for v in results]
            if None in sizes:            # in a subgraph ONNX inference sees no outer constant's value
                sizes = _region_result_bytes(ms, results, dict(model.opset_imports))
            for v, nb in zip(results, sizes):
                if nb is None or nb > max_elements * 8:
                    fits = False
                else:
                    out[_result_key(v, memo)] = int(nb)
        seen: set[int] = set()
        for n in members:
            for v in n.inputs:
                t = const_tensor(v) if v is not None else None
                if t is None or id(v) in seen:
                    continue
                seen.add(id(v))
                if t.size > max_elements:
                    fits = False
                if not v.is_graph_output() and all(id(c) in inside for c in v.consumers()):
                    freed += t.nbytes
        out_bytes = sum(out.values())
        if fits and out_bytes > policy.min_bytes and out_bytes <= policy.max_growth * freed:
            policy.approved.update(inside)
            approved += len(members)
    return approved


def lift_subgraph_initializers(model: ir.Model, before: set[int]) -> int:
    """Move the initializers folding put inside If/Loop bodies to the main graph, read from
    the outer scope (some engines refuse subgraph initializers), and keep one of the new
    ones that are byte-identical (sibling branches' same fold). Returns how many moved."""
    main = model.graph
    taken = {v.name for g in model.graphs()
             for v in [*g.inputs, *g.initializers.values(), *(o for n in g for o in n.outputs)] if v.name}
    moved = 0
    for graph in list(model.graphs()):
        if graph is main:
            continue
        for name, value in list(graph.initializers.items()):
            if id(value) in before or value.is_graph_output() or value.is_graph_input():
                continue
            del graph.initializers[name]
            new, i = name, 0
            while new in main.initializers or (new != name and new in taken):
                i += 1
                new = f"{name}_{i}"
            value.name = new
            taken.add(new)
            main.register_initializer(value)
            moved += 1
    # What folding computed twice (two branches' same reorder of one weight) is kept once.
    kept: dict[tuple, ir.Value] = {}
    for name, value in list(main.initializers.items()):
        if id(value) in before or value.is_graph_output() or value.const_value is None:
            continue
        try:
            arr = value.const_value.numpy()
        except Exception:
            continue
        key = (str(arr.dtype), arr.shape, arr.tobytes())
        if key not in kept:
            kept[key] = value
            continue
        value.replace_all_uses_with(kept[key])
        del main.initializers[name]
    return moved


def constant_bytes(model: ir.Model) -> int:
    """Bytes of every initializer and Constant-node tensor, subgraphs included: what the file mostly is."""
    total = sum(v.const_value.nbytes for g in model.graphs() for v in g.initializers.values()
                if v.const_value is not None)
    for node in all_nodes(model):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.TENSOR:
                    total += attr.value.nbytes
    return total


def _expected_bytes(node: ir.Node) -> int | None:
    """Output size of a generator op computed from its constant inputs, before evaluating it."""
    out = node.outputs[0]
    itemsize = 8
    if out.type is not None:
        try:
            itemsize = max(1, out.type.dtype.itemsize)
        except Exception:
            pass
    op = node.op_type
    try:
        if op == "ConstantOfShape":
            shape = const_array(node.inputs[0], 64)
            return None if shape is None else int(np.prod(shape.astype(np.float64))) * itemsize
        if op == "Expand":
            x, shape = const_tensor(node.inputs[0]), const_array(node.inputs[1], 64)
            if x is None or shape is None:
                return None
            dims = np.broadcast_shapes(tuple(int(d) for d in x.shape), tuple(int(s) for s in shape))
            return math.prod(dims) * x.dtype.itemsize
        if op == "Tile":
            x, reps = const_tensor(node.inputs[0]), const_array(node.inputs[1], 64)
            if x is None or reps is None:
                return None
            return int(x.size * np.prod(reps.astype(np.float64))) * x.dtype.itemsize
        if op == "Range":
            start, limit, delta = (const_array(v, 1) for v in node.inputs[:3])
            if start is None or limit is None or delta is None or float(delta) == 0:
                return None
            n = max(0.0, math.ceil((float(limit) - float(start)) / float(delta)))
            return int(n) * np.asarray(start).dtype.itemsize
    except (ValueError, OverflowError, TypeError):
        return None
    return None


def _make_folder(policy: SizePolicy, *, input_size_limit: int, fold_dequantize: bool, fold_generators: bool):
    from onnxscript.optimizer._constant_folding import FoldConstantsPass

    class SizeGatedFolder(FoldConstantsPass):
        """onnxscript's folder with the size gate applied to every folded tensor."""

        def process_node(self, node, is_function):
            # Random ops (Bernoulli is missing from onnxscript's list), training Dropout and
            # custom-domain ops are never evaluated: a folded draw is one frozen sample.
            reason = nondeterministic_reason(node, self._opset_imports.get("", None))
            if reason is not None:
                if self.shape_inference and node.domain in PURE_DOMAINS:
                    try:
                        self._do_inference(node)      # shapes still flow (Shape of a draw folds)
                    except Exception:
                        pass
                if node.domain in PURE_DOMAINS and all(v is None or const_tensor(v) is not None
                                                       for v in node.inputs):
                    policy.refused.append(f"{node.op_type} '{node.name or '?'}' kept: {reason}")
                return None
            # onnxscript's sequence rewrites emit Split with a 'split' input, which only
            # exists from opset 13: before that, leave sequence ops alone.
            if node.op_type in SEQUENCE_OPS and self._opset_imports.get("", 0) < 13:
                return None
            return super().process_node(node, is_function)

        def _prepare_folded_tensor(self, node, output_name, output_array):
            if isinstance(output_array, np.ndarray) and not policy.allows(node, output_array.nbytes):
                return None
            return super()._prepare_folded_tensor(node, output_name, output_array)

    def should_fold(node: ir.Node) -> bool | None:
        if not is_onnx_op(node):
            return None
        if node.op_type in QUANT_OPS:
            return True if fold_dequantize and node.op_type == "DequantizeLinear" else None
        if node.op_type in GENERATORS:
            expected = _expected_bytes(node)
            if node.op_type == "ConstantOfShape" and not fold_generators and (
                    expected is None or expected > policy.min_bytes):
                return False          # a fill stays a fill; a small one (a pads vector) folds on the budget
            if expected is None or not policy.allows(node, expected, charge=False):
                return False
            return True if node.op_type == "ConstantOfShape" else None
        return None

    return SizeGatedFolder(shape_inference=True, input_size_limit=input_size_limit,
                           output_size_limit=2**40, should_fold=should_fold)


def _ort_evaluate(domain: str, op: str, version: int, args: tuple, attrs: dict):
    """Evaluate one node on ONNX Runtime (CPU, optimizations off): the fallback for ops
    ONNX's reference implementation has no version of (e.g. DequantizeLinear-17)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    names = [f"i{i}" if a is not None else "" for i, a in enumerate(args)]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(names, args) if a is not None]
    node = helper.make_node(op, names, ["out"], domain=domain, **attrs)
    graph = helper.make_graph([node], "fold", inputs, [onnx.ValueInfoProto(name="out")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(domain, version)], ir_version=8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(names, args) if a is not None})[0]


class _Evaluator:
    """ONNX's reference implementation first, ONNX Runtime when it has no kernel version."""

    def __init__(self, reference) -> None:
        self.reference = reference

    def get_evaluator(self, domain, op, version):
        return self.reference.get_evaluator(domain, op, version)

    def evaluate(self, domain: str, op: str, version: int, *args, **kwargs):
        if self.reference.get_evaluator(domain, op, version) is not None:
            return self.reference.evaluate(domain, op, version, *args, **kwargs)
        if domain not in ("", "ai.onnx") or any(a is not None and not isinstance(a, np.ndarray) for a in args):
            return None
        try:
            return _ort_evaluate(domain, op, version, args, kwargs)
        except Exception as exc:
            log.info("cannot evaluate %s-%d for folding: %s", op, version, str(exc).splitlines()[0][:200])
            return None


class _patched_evaluator:
    """Route onnxscript's folder to ``_Evaluator`` for the duration of one pass (the
    pass runs in a sandbox worker, one job at a time)."""

    def __enter__(self):
        from onnxscript.optimizer import _constant_folding as cf

        self._cf, self._orig = cf, cf._reference_evaluator
        cf._reference_evaluator = _Evaluator(self._orig)
        return self

    def __exit__(self, *exc):
        self._cf._reference_evaluator = self._orig
        return False


def _snapshot_annotations(model: ir.Model) -> dict[ir.Value, tuple]:
    return {v: (v.type, v.shape) for v in all_values(model)}


@register
class FoldConstants(StudioPass):
    """Subgraphs of constants, and shape arithmetic on static dims  ⇒  precomputed initializers (size-capped)."""

    name = "fold-constants"
    summary = ("Precompute constant subgraphs and shape arithmetic; never grows the file "
               "(ConstantOfShape/Expand weights and int8 dequantization are kept).")
    calls_engines = True     # evaluates ops: runs in a sandbox worker with a timeout and memory limit

    def worker_limits(self, limits: Limits | None) -> Limits | None:
        timeout = self.options.get("timeout_s")
        if timeout is None:
            return limits
        from dataclasses import replace

        return replace(limits or default_limits(), timeout_s=float(timeout))

    def call(self, model: ir.Model) -> PassResult:
        min_bytes = int(self.options.get("min_bytes", 1024))
        file_growth = float(self.options.get("max_file_growth", 1.1))
        budget = max(0.0, file_growth - 1.0) * constant_bytes(model) + min_bytes
        policy = SizePolicy(float(self.options.get("max_growth", 1.0)), min_bytes, budget)
        folder = _make_folder(policy, input_size_limit=int(self.options.get("input_size_limit", 2**22)),
                              fold_dequantize=bool(self.options.get("fold_dequantize", False)),
                              fold_generators=bool(self.options.get("fold_generators", False)))
        tracker = ChangeTracker(model)
        inits_before = {id(v) for g in model.graphs() for v in g.initializers.values()}
        annotations = _snapshot_annotations(model)
        outputs_before = [id(v) for v in model.graph.outputs]

        with inferred_shapes(model):     # value-info-driven: dims ONNX inference knows count as static
            resolved = resolve_shape_vectors(model, lambda node, nbytes: policy.allows(node, nbytes))
            approve_regions(model, policy, int(self.options.get("input_size_limit", 2**22)))
        with _patched_evaluator():
            fold = folder(model)
        lift_subgraph_initializers(model, inits_before)
        RemoveUnusedNodesPass()(model)
        for v, (type_, shape) in annotations.items():   # inferred shapes were for folding only
            if v.is_graph_output() and id(v) not in outputs_before:
                continue
            v.type, v.shape = type_, shape
        for g in model.graphs():
            for node in g:
                for v in node.outputs:
                    v.metadata_props.pop(_FOLDED_FROM, None)
            for v in g.initializers.values():
                v.metadata_props.pop(_FOLDED_FROM, None)
        changes = list(tracker.changes(removed_kind="removed", detail="folded into constants"))
        inits_after = [v for g in model.graphs() for v in g.initializers.values()]
        new_inits = [v for v in inits_after if id(v) not in inits_before]
        if (fold.modified or resolved) and not changes:
            changes.append(Change("changed", (), "inputs re-pointed to equivalent values"))
        return result(model, changes, notes=policy.refused,
                      nodes_folded=sum(len(c.nodes) for c in changes if c.kind == "removed"),
                      shape_vectors_resolved=len(resolved),
                      initializers_added=len(new_inits),
                      initializers_removed=len(inits_before) - (len(inits_after) - len(new_inits)))
