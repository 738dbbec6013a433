"""gridsample-to-standard: ``com.microsoft::GridSample``  ⇒  ai.onnx ``GridSample`` (opset >= 16)."""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.gridsample_rewrite import (
    drop_unused_domains,
    graphs_with_nodes,
    mode_name,
    raise_to_gridsample_opset,
    swap_node,
)
from passes.base import register


def _attr(node: ir.Node, name: str, default):
    a = node.attributes.get(name)
    return default if a is None else a.value


@register
class GridSampleToStandard(StudioPass):
    """com.microsoft::GridSample  ⇒  GridSample (ai.onnx), so OpenVINO and TensorRT accept it."""

    name = "gridsample-to-standard"
    summary = "Replace ONNX Runtime's contrib GridSample by the standard ai.onnx GridSample (opset >= 16)."

    def call(self, model: ir.Model) -> PassResult:
        targets = [(g, n) for g, n in graphs_with_nodes(model)
                   if n.op_type == "GridSample" and n.domain == "com.microsoft"]
        if not targets:
            return result(model, [])
        opset, changes = raise_to_gridsample_opset(model)
        for owner, node in targets:
            attrs = {"mode": mode_name(str(_attr(node, "mode", "bilinear")), opset),
                     "padding_mode": str(_attr(node, "padding_mode", "zeros")),
                     "align_corners": int(_attr(node, "align_corners", 0))}
            label = node_label(node)
            swap_node(owner, node, "GridSample", "", attrs)
            changes.append(Change("replaced", (label,), f"com.microsoft::GridSample -> GridSample (mode={attrs['mode']})"))
        drop_unused_domains(model, ("com.microsoft",))
        return result(model, changes, nodes_replaced=len(targets))
