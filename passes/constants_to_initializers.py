"""constants-to-initializers: ``Constant`` nodes of the main graph  ⇒  initializers of the same name.

Exporters write shape arithmetic's operands (and sometimes weights) as
``Constant`` nodes; onnxsim and onnxslim turn them into initializers, which
engines load the same way, and which leave the graph with only the nodes that
compute. Doing the same makes node counts comparable and lets the later passes
(``dedup-initializers``, ``cse``) see one kind of constant.

Uses onnx-ir's constant-to-tensor conversion, limited to the main graph: a
``Constant`` inside an ``If``/``Loop`` body stays (some engines refuse
subgraph initializers), and so does one that is a graph output (its name is
the interface) or that has a sparse value. A model of IR version < 4 (initializers had
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
    """Constant nodes of the main graph  ⇒  initializers with the same names."""

    name = "constants-to-initializers"
    summary = "Turn the main graph's Constant nodes into initializers (as onnxsim/onnxslim do); no value changes."

    def call(self, model: ir.Model) -> PassResult:
        notes: list[str] = []
        old_ir = model.ir_version is not None and model.ir_version < 4
        if old_ir and not self.options.get("upgrade_ir", True):
            return result(model, [], notes=["IR version < 4: initializers must also be graph inputs; kept"])
        graph = model.graph
        lifted: list[str] = []
        for node in list(graph):
            if node.op_type != "Constant" or node.domain not in ("", "ai.onnx") or len(node.outputs) != 1:
                continue
            out = node.outputs[0]
            if out.is_graph_output() or not out.name or out.name in graph.initializers:
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
            value = ir.Value(name=out.name, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype),
                             const_value=tensor, metadata_props=out.metadata_props.copy())
            label = node_label(node)
            out.name = None                      # free the name for the initializer
            graph.register_initializer(value)
            out.replace_all_uses_with(value)
            graph.remove(node, safe=True)
            lifted.append(label)
        changes = [Change("replaced", tuple(lifted), "Constant node -> initializer")] if lifted else []
        if lifted and old_ir:
            notes.append(f"IR version {model.ir_version} raised to 4 (initializers need not be graph inputs)")
            model.ir_version = 4
        return result(model, changes, notes=notes, constants_lifted=len(lifted))
