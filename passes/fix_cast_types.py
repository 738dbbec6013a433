"""fix-cast-types: a Cast whose ``to`` contradicts its consumers or its declared output type  ⇒  retargeted.

The known failure of float16 converters (onnxconverter-common's
``convert_float_to_float16`` among them): a ``Cast(to=FLOAT)`` already in the
model is flipped to FLOAT16 while its declared output type, or the op that
reads it (a node left in float32 by the block list), still says float32; or it
is left at FLOAT while every consumer now computes in float16. ONNX Runtime
then refuses the model ("Type (tensor(float16)) of output arg (f) of node ...
does not match expected type (tensor(float))").

No library repairs such a model, so this is written by hand: for each Cast to
a float type, the types its consumers need are read from the op schemas (the
other inputs bound to the same type constraint: ``Add(T, T)``, ``Where(B, T, T)``),
the Cast is retargeted to the type they agree on (else to its declared type),
and the stale declaration is updated. Repeated until nothing changes, so chains
of Casts settle. Graph outputs keep their declared type (the interface).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import onnx
import onnx_ir as ir
from onnx import TensorProto

from passes.base import Change, PassResult, StudioPass
from passes.base import register
from passes.normalize import sort_graph
from studio.core.model_io import from_proto, to_proto

log = logging.getLogger(__name__)

FLOATS = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)
_NAMES = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16",
          TensorProto.DOUBLE: "float64"}


@dataclass(frozen=True)
class CastFix:
    node: str
    before: int
    after: int
    reason: str

    def describe(self) -> str:
        return f"{self.node}: to {_NAMES.get(self.before, self.before)} -> {_NAMES.get(self.after, self.after)} ({self.reason})"


def _opset(model: onnx.ModelProto, domain: str) -> int:
    for o in model.opset_import:
        if (o.domain or "") == (domain or ""):
            return o.version
    return onnx.defs.onnx_opset_version()


def _schema(node: onnx.NodeProto, model: onnx.ModelProto):
    try:
        return onnx.defs.get_schema(node.op_type, _opset(model, node.domain), node.domain or "")
    except Exception:  # noqa: BLE001 - custom or unknown op: no information
        return None


def _formal(params, index: int) -> str | None:
    if not params:
        return None
    if index < len(params):
        return params[index].type_str
    last = params[-1]
    return last.type_str if last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic else None


def _types(graph: onnx.GraphProto, model: onnx.ModelProto, outer: dict[str, int]) -> dict[str, int]:
    """Elem types known for values: outer scope, declarations, initializers, Cast outputs,
    and (main graph) ONNX type inference."""
    types: dict[str, int] = dict(outer)
    values: list = []
    if graph is model.graph:
        try:
            values = list(onnx.shape_inference.infer_shapes(model, strict_mode=False).graph.value_info)
        except Exception:  # noqa: BLE001 - a mistyped model may defeat inference; use what is declared
            values = []
    for vi in values + list(graph.value_info) + list(graph.input) + list(graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in graph.initializer:
        types[t.name] = t.data_type
    for n in graph.node:
        if n.op_type == "Cast" and n.output:
            to = next((a.i for a in n.attribute if a.name == "to"), None)
            if to is not None:
                types[n.output[0]] = to
    return types


def _consumer_votes(model: onnx.ModelProto, graph: onnx.GraphProto, tensor: str, types: dict[str, int],
                    consumers) -> set[int]:
    """Float types the consumers of ``tensor`` require, read from their schemas' type constraints."""
    votes: set[int] = set()
    outputs = {o.name for o in graph.output}
    for node, index in consumers.get(tensor, []):
        schema = _schema(node, model)
        if schema is None:
            continue
        constraint = _formal(schema.inputs, index)
        if constraint is None or constraint not in {tc.type_param_str for tc in schema.type_constraints}:
            continue
        peers = [name for j, name in enumerate(node.input) if j != index and name
                 and _formal(schema.inputs, j) == constraint]
        peers += [name for k, name in enumerate(node.output) if name and _formal(schema.outputs, k) == constraint
                  and name not in outputs]
        known = {types[p] for p in peers if types.get(p) in FLOATS}
        if len(known) == 1:
            votes |= known
    return votes


def _repair_graph(graph: onnx.GraphProto, model: onnx.ModelProto, outer: dict[str, int], fixes: list[CastFix],
                  max_rounds: int) -> None:
    graph_outputs = {o.name: o.type.tensor_type.elem_type for o in graph.output if o.type.HasField("tensor_type")}
    for _ in range(max_rounds):
        types = _types(graph, model, outer)
        declared = {vi.name: vi for vi in graph.value_info}
        consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for n in graph.node:
            for i, name in enumerate(n.input):
                if name:
                    consumers.setdefault(name, []).append((n, i))
        changed = False
        for node in list(graph.node):
            if node.op_type != "Cast" or not node.output:
                continue
            attr = next((a for a in node.attribute if a.name == "to"), None)
            if attr is None or attr.i not in FLOATS:
                continue
            out = node.output[0]
            votes = _consumer_votes(model, graph, out, types, consumers)
            want, reason = None, ""
            if out in graph_outputs and graph_outputs[out] in FLOATS:
                want, reason = graph_outputs[out], "declared graph output type"
                if len(votes) == 1 and next(iter(votes)) != want:
                    _split_output(graph, node, out, next(iter(votes)), consumers, fixes)
                    changed = True
            elif len(votes) == 1:
                want, reason = next(iter(votes)), "type its consumers compute in"
            elif not votes and out in declared and declared[out].type.tensor_type.elem_type in FLOATS:
                want, reason = declared[out].type.tensor_type.elem_type, "declared output type"
            if want is not None and want != attr.i:
                fixes.append(CastFix(node.name or f"Cast({out})", attr.i, want, reason))
                attr.i = want
                changed = True
            vi = declared.get(out)
            if vi is not None and vi.type.tensor_type.elem_type in FLOATS and vi.type.tensor_type.elem_type != attr.i:
                vi.type.tensor_type.elem_type = attr.i     # stale declaration
                changed = True
        if not changed:
            break
    types = _types(graph, model, outer)
    for node in graph.node:
        for a in node.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            for sub in subs:
                _repair_graph(sub, model, types, fixes, max_rounds)


def _split_output(graph: onnx.GraphProto, cast: onnx.NodeProto, out: str, want: int, consumers, fixes) -> None:
    """A Cast feeding both a graph output (its declared type) and consumers that need another
    type: the consumers read a second Cast."""
    new = f"{out}__as_{_NAMES.get(want, want)}"
    graph.node.append(onnx.helper.make_node("Cast", [out], [new], to=want, name=f"{cast.name or 'Cast'}__for_consumers"))
    for node, index in consumers.get(out, []):
        node.input[index] = new
    fixes.append(CastFix(cast.name or f"Cast({out})", want, want,
                         "added a Cast for its consumers; the graph output keeps its declared type"))
    sort_graph(graph)


def repair_cast_types(model: onnx.ModelProto, max_rounds: int = 10) -> list[CastFix]:
    """Retarget mistyped Casts in place (main graph and If/Loop/Scan bodies); returns what changed."""
    fixes: list[CastFix] = []
    _repair_graph(model.graph, model, {}, fixes, max_rounds)
    return fixes


@register
class FixCastTypes(StudioPass):
    """Cast with a ``to`` its consumers or declaration contradict  ⇒  retargeted to the type they need."""

    name = "fix-cast-types"
    summary = "Repair Casts left mistyped by float16 converters (the model fails to load with a Type Error)."
    calls_engines = True        # ONNX type inference is native code: a hostile model must not crash the studio
    accepts_invalid = True      # a mistyped Cast is exactly what the full check refuses

    def call(self, model: ir.Model) -> PassResult:
        proto = to_proto(model)                  # map types (ZipMap) visible to type inference
        fixes = repair_cast_types(proto)
        if not fixes:
            return PassResult(model, False)
        fixed = from_proto(proto)
        changes = tuple(Change("changed", (f.node,), f.describe()) for f in fixes)
        return PassResult(fixed, True, changes, {"casts_retargeted": len(fixes)})
