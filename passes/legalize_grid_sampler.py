"""legalize-grid-sampler: mmdeploy/mmcv ``grid_sampler``  ⇒  standard ``GridSample`` (ai.onnx >= 16)."""

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

# torch.nn.functional.grid_sample enums, as mmcv/mmdeploy export them.
_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
_PADDING = {0: "zeros", 1: "border", 2: "reflection"}
CUSTOM_DOMAINS = ("mmdeploy", "mmcv")


def _int_attr(node: ir.Node, name: str, default: int = 0) -> int:
    attr = node.attributes.get(name)
    return default if attr is None else int(attr.value)


@register
class LegalizeGridSampler(StudioPass):
    """mmdeploy::grid_sampler / mmcv::grid_sampler  ⇒  GridSample (int enums → mode/padding_mode strings)."""

    name = "legalize-grid-sampler"
    summary = ("Replace mmdeploy/mmcv grid_sampler by the standard GridSample (raising the ai.onnx opset to 16 "
               "when lower), so ONNX Runtime, OpenVINO and TensorRT run it without a custom-op library.")

    def call(self, model: ir.Model) -> PassResult:
        targets = [(g, n) for g, n in graphs_with_nodes(model)
                   if n.op_type == "grid_sampler" and n.domain in CUSTOM_DOMAINS]
        if not targets:
            return result(model, [])
        opset, changes = raise_to_gridsample_opset(model)     # GridSample exists from ai.onnx 16
        for owner, node in targets:
            mode_i, pad_i = _int_attr(node, "interpolation_mode"), _int_attr(node, "padding_mode")
            if mode_i not in _INTERPOLATION or pad_i not in _PADDING:
                raise ValueError(f"{node_label(node)}: interpolation_mode {mode_i} / padding_mode {pad_i} "
                                 "are outside the grid_sample enums (0-2)")
            attrs = {"mode": mode_name(_INTERPOLATION[mode_i], opset), "padding_mode": _PADDING[pad_i],
                     "align_corners": _int_attr(node, "align_corners")}
            label = node_label(node)
            swap_node(owner, node, "GridSample", "", attrs)
            changes.append(Change("replaced", (label,), f"{node.domain}::grid_sampler -> GridSample "
                                  f"(mode={attrs['mode']}, padding_mode={attrs['padding_mode']}, "
                                  f"align_corners={attrs['align_corners']})"))
        drop_unused_domains(model, CUSTOM_DOMAINS)
        return result(model, changes, nodes_replaced=len(targets))
