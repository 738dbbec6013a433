"""gridsample-to-contrib: 4-D ai.onnx ``GridSample``  ⇒  ``com.microsoft::GridSample``.

For ONNX Runtime's CUDA EP before 1.18, which had a CUDA kernel only for the
contrib op and ran the standard one on the CPU. Only nodes with a known 4-D input
are rewritten (the contrib kernel's limit); others are left alone.
"""

from __future__ import annotations

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, node_label, result
from passes.gridsample_rewrite import graphs_with_nodes, mode_name, swap_node
from passes.base import register


def _attr(node: ir.Node, name: str, default):
    a = node.attributes.get(name)
    return default if a is None else a.value


def _rank(value: ir.Value | None) -> int | None:
    return None if value is None or value.shape is None else len(value.shape)


@register
class GridSampleToContrib(StudioPass):
    """GridSample (ai.onnx, 4-D)  ⇒  com.microsoft::GridSample (CUDA kernel on ONNX Runtime < 1.18)."""

    name = "gridsample-to-contrib"
    summary = ("Replace 4-D standard GridSample by ONNX Runtime's contrib GridSample, which older ORT CUDA "
               "builds run on the GPU (ORT-only: OpenVINO and TensorRT do not accept the contrib op).")

    def call(self, model: ir.Model) -> PassResult:
        changes: list[Change] = []
        skipped = 0
        for owner, node in list(graphs_with_nodes(model)):
            if node.op_type != "GridSample" or node.domain not in ("", "ai.onnx"):
                continue
            # X and grid have the same rank; either may carry the shape.
            ranks = {r for r in (_rank(node.inputs[0]), _rank(node.inputs[1] if len(node.inputs) > 1 else None))
                     if r is not None}
            if ranks != {4}:
                skipped += 1
                continue
            mode = mode_name(str(_attr(node, "mode", "linear")), 16)   # contrib uses the opset-16 names
            attrs = {"mode": mode, "padding_mode": str(_attr(node, "padding_mode", "zeros")),
                     "align_corners": int(_attr(node, "align_corners", 0))}
            label = node_label(node)
            swap_node(owner, node, "GridSample", "com.microsoft", attrs)
            changes.append(Change("replaced", (label,), f"GridSample -> com.microsoft::GridSample (mode={mode})"))
        if changes and "com.microsoft" not in model.opset_imports:
            model.opset_imports["com.microsoft"] = 1
        return result(model, changes, nodes_replaced=len(changes), nodes_skipped_not_4d=skipped)
