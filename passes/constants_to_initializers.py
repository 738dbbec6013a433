"""constants-to-initializers: ``Constant`` nodes of the main graph  ⇒  initializers of the same name.

Exporters write shape arithmetic's operands (and sometimes weights) as
``Constant`` nodes; onnxsim and onnxslim turn them into initializers, which
engines load the same way, and which leave the graph with only the nodes that
compute. Doing the same makes node counts comparable and lets the later passes
(``dedup-initializers``, ``cse``) see one kind of constant.

Uses onnx-ir's constant-to-tensor conversion. A ``Constant`` inside an
``If``/``Loop``/``Scan`` body becomes an initializer of the *main* graph, which
the body reads from its outer scope (ONNX Runtime and OpenVINO read both; some
engines refuse initializers inside a subgraph, so none is put there): spox and
the TorchScript exporter write every shape operand of a branch as a Constant
(silero VAD v5: 66 of its 234 nodes). A lifted name that another scope also
uses gets a fresh one. ``subgraphs=False`` keeps the bodies' Constants. One
that is a graph output (its name is the interface; a branch output too) or
that has a sparse value stays, and so does one inside a model-local function
(a function body has no outer scope). A model of IR version < 4 (initializers had
to be graph inputs then: the opset-9 backend models) is raised to IR version 4 first,
which changes nothing else (IR 4 reads every IR 3 file the same way); with
``upgrade_ir=False`` it keeps its Constant nodes.
"""

from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import LiftConstantsToInitializersPass

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.base import register

_LIFT = LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)


@register
class ConstantsToInitializers(StudioPass):
    """Constant nodes of the main graph and its subgraphs  ⇒  main-graph initializers (same names where free)."""

    name = "constants-to-initializers"
    summary = ("Turn Constant nodes into main-graph initializers (as onnxsim/onnxslim do), If/Loop bodies' too "
               "(read from the outer scope); no value changes.")

    def call(self, model: ir.Model) -> PassResult:
        notes: list[str] = []
        old_ir = model.ir_version is not None and model.ir_version < 4
        if old_ir and not self.options.get("upgrade_ir", True):
            return result(model, [], notes=["IR version < 4: initializers must also be graph inputs; kept"])
        main = model.graph
        lifted: list[str] = []
        lifted_from_bodies: list[str] = []
        graphs = list(model.graphs()) if self.options.get("subgraphs", True) else [main]
        names = _scope_names(model) if len(graphs) > 1 else {}
        for graph in graphs:
            for node in list(graph):
                if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
                    continue
                out = node.outputs[0]
                if out.is_graph_output() or not out.name or (graph is main and out.name in main.initializers):
                    notes.append(f"{node_label(node)} kept: its output is a graph output or has no free name")
                    continue
                if len(node.attributes) != 1 or next(iter(node.attributes)) == "sparse_value":
                    continue
                attr_name, attr = next(iter(node.attributes.items()))
                try:
                    tensor = _LIFT._constant_node_attribute_to_tensor(node, attr_name, attr, out.name)
                except ValueError:
                    continue
                if tensor is None:
                    continue
                name = out.name
                if graph is not main and (names.get(name, 0) > 1 or name in main.initializers):
                    name = _fresh(name, names, main)     # another scope uses it: no shadowing
                value = ir.Value(name=name, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype),
                                 const_value=tensor, metadata_props=out.metadata_props.copy())
                label = node_label(node)
                out.name = None                      # free the name for the initializer
                main.register_initializer(value)
                out.replace_all_uses_with(value)
                graph.remove(node, safe=True)
                (lifted if graph is main else lifted_from_bodies).append(label)
        changes = [Change("replaced", tuple(lifted), "Constant node -> initializer")] if lifted else []
        if lifted_from_bodies:
            changes.append(Change("replaced", tuple(lifted_from_bodies),
                                  "Constant node in a subgraph -> main-graph initializer read from the outer scope"))
        lifted += lifted_from_bodies
        if lifted and old_ir:
            notes.append(f"IR version {model.ir_version} raised to 4 (initializers need not be graph inputs)")
            model.ir_version = 4
        return result(model, changes, notes=notes, constants_lifted=len(lifted))


def _scope_names(model: ir.Model) -> dict[str, int]:
    """How many times each value name is defined across the main graph and its subgraphs."""
    counts: dict[str, int] = {}
    for graph in model.graphs():
        defined = [*graph.inputs, *graph.initializers.values(), *(v for n in graph for v in n.outputs)]
        for v in defined:
            if v.name:
                counts[v.name] = counts.get(v.name, 0) + 1
    return counts


def _fresh(base: str, names: dict[str, int], main: ir.Graph) -> str:
    name, i = base, 0
    while names.get(name, 0) > 0 or name in main.initializers:
        i += 1
        name = f"{base}_{i}"
    names[name] = 1
    return name
