"""gridsample-to-standard: ``com.microsoft::GridSample``  ⇒  ai.onnx ``GridSample`` (opset >= 16)."""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.gridsample_rewrite import default_opset, graphs_with_nodes, mode_name, swap_node
from passes.registry import register


def _attr(node: ir.Node, name: str, default):
    a = node.attributes.get(name)
    return default if a is None else a.value


@register
class GridSampleToStandard(StudioPass):
    """com.microsoft::GridSample  ⇒  GridSample (ai.onnx), so OpenVINO and TensorRT accept it."""

    name = "gridsample-to-standard"
    summary = "Replace ONNX Runtime's contrib GridSample by the standard ai.onnx GridSample (opset >= 16)."
    needs_weights = False

    def call(self, model: ir.Model) -> PassResult:
        targets = [(g, n) for g, n in graphs_with_nodes(model)
                   if n.op_type == "GridSample" and n.domain == "com.microsoft"]
        if not targets:
            return result(model, [])
        changes: list[Change] = []
        opset = default_opset(model)
        if opset < 16:
            from onnxscript.version_converter import convert_version

            convert_version(model, 16, fallback=True)
            changes.append(Change("changed", (), f"ai.onnx opset {opset} -> 16 (GridSample needs 16)"))
            opset = 16
        for owner, node in targets:
            attrs = {"mode": mode_name(str(_attr(node, "mode", "bilinear")), opset),
                     "padding_mode": str(_attr(node, "padding_mode", "zeros")),
                     "align_corners": int(_attr(node, "align_corners", 0))}
            label = node_label(node)
            swap_node(owner, node, "GridSample", "", attrs)
            changes.append(Change("replaced", (label,), f"com.microsoft::GridSample -> GridSample (mode={attrs['mode']})"))
        if "com.microsoft" in model.opset_imports and not any(n.domain == "com.microsoft"
                                                              for _, n in graphs_with_nodes(model)):
            del model.opset_imports["com.microsoft"]
        return result(model, changes, nodes_replaced=len(targets))
