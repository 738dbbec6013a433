"""Custom ops: every node outside the standard ONNX domains (or unknown to ONNX),
with what the studio knows about common ones.

``detect_custom_ops(model) -> list[CustomOpInfo]`` is the stable entry point
(the plugin-authoring feature builds on it). Model-local functions are not
custom ops: engines expand them, and their body nodes are checked instead.

The knowledge base (:data:`KNOWN_CUSTOM_OPS`) is data, one entry per op: which
engines accept it and how ("kernel" built in, "plugin" shipped with the engine,
"library" needs a custom-op library, "no"), and the standard-op equivalent or
fix when one exists.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import onnx
from onnx import ModelProto

from studio.core.protowalk import iter_graphs
from studio.core.protowalk import node_id as _node_id

__all__ = [
    "KNOWN_CUSTOM_OPS",
    "STANDARD_DOMAINS",
    "TENSORRT_PLUGINS",
    "CustomOpInfo",
    "KnownCustomOp",
    "detect_custom_ops",
    "is_standard_op",
    "lookup",
    "node_id",
]

STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.training", "ai.onnx.preview.training"})


@dataclass(frozen=True)
class KnownCustomOp:
    domain: str                      # "*" matches any domain (TensorRT plugins are found by name)
    op_type: str
    origin: str                      # who emits it
    engines: dict[str, str]          # engine -> "kernel" | "plugin" | "library" | "no"
    note: str = ""
    standard_equivalent: str | None = None   # "GridSample (ai.onnx >= 16, 4-D)"
    fix_pass: str | None = None
    tensorrt_plugin: str | None = None       # plugin name in TensorRT's registry


def _k(domain: str, op: str, origin: str, ort: str, ov: str, trt: str, note: str = "",
       equivalent: str | None = None, fix: str | None = None, plugin: str | None = None) -> KnownCustomOp:
    return KnownCustomOp(domain, op, origin, {"onnxruntime": ort, "openvino": ov, "tensorrt": trt}, note,
                         equivalent, fix, plugin)


_MMDEPLOY_ORT = "libmmdeploy_onnxruntime_ops.so (mmdeploy's ORT custom-op library)"
_MMDEPLOY_TRT = "libmmdeploy_tensorrt_ops.so (mmdeploy's TensorRT plugins)"

# TensorRT's bundled plugins that ONNX exporters emit as nodes named after the plugin
# (the parser falls back to the plugin registry for ops it does not know).
TENSORRT_PLUGINS: dict[str, str] = {
    "EfficientNMS_TRT": "efficientNMSPlugin", "EfficientNMS_ONNX_TRT": "efficientNMSPlugin",
    "BatchedNMS_TRT": "batchedNMSPlugin", "BatchedNMSDynamic_TRT": "batchedNMSPlugin",
    "MultilevelCropAndResize_TRT": "multilevelCropAndResizePlugin",
    "MultilevelProposeROI_TRT": "multilevelProposeROI", "PyramidROIAlign_TRT": "pyramidROIAlignPlugin",
    "ROIAlign_TRT": "roiAlignPlugin", "ResizeNearest_TRT": "resizeNearestPlugin",
    "DisentangledAttention_TRT": "disentangledAttentionPlugin", "ScatterElements": "scatterElementsPlugin",
    "InstanceNormalization_TRT": "instanceNormalizationPlugin", "GroupNormalizationPlugin": "groupNormalizationPlugin",
    "CustomEmbLayerNormPluginDynamic": "embLayerNormPlugin", "CustomSkipLayerNormPluginDynamic": "skipLayerNormPlugin",
    "CustomQKVToContextPluginDynamic": "bertQKVToContextPlugin", "CustomFCPluginDynamic": "fcPlugin",
    "CustomGeluPluginDynamic": "geluPlugin (removed in TensorRT 11)", "ModulatedDeformConv2d": "modulatedDeformConvPlugin",
    "TRT_Attention": "built-in (TensorRT 11 parser)", "TRT_MoE": "built-in (TensorRT 11 parser)",
    "TRT_KVCacheUpdate": "built-in (TensorRT 11 parser)",
}
_TRT11_ONLY = {"TRT_Attention", "TRT_MoE", "TRT_KVCacheUpdate"}
_TRT11_REMOVED = {"CustomGeluPluginDynamic"}

KNOWN_CUSTOM_OPS: tuple[KnownCustomOp, ...] = (
    _k("mmdeploy", "grid_sampler", "mmdeploy / mmcv export of torch grid_sample", "library", "no", "plugin",
       f"ONNX Runtime needs {_MMDEPLOY_ORT}; TensorRT needs {_MMDEPLOY_TRT}; OpenVINO has no conversion rule",
       "GridSample (ai.onnx opset >= 16; 4-D on TensorRT and OpenVINO)", "legalize-grid-sampler", "grid_sampler"),
    _k("mmcv", "grid_sampler", "mmcv ONNX export of torch grid_sample", "library", "no", "plugin",
       "mmcv's custom-op library is needed on every engine", "GridSample (ai.onnx opset >= 16)",
       "legalize-grid-sampler", "grid_sampler"),
    _k("mmdeploy", "MMCVModulatedDeformConv2d", "mmdeploy (DCNv2)", "library", "no", "plugin",
       f"ONNX Runtime needs {_MMDEPLOY_ORT}; TensorRT needs {_MMDEPLOY_TRT}",
       "DeformConv (ai.onnx opset >= 19, with the mask input)", None, "MMCVModulatedDeformConv2d"),
    _k("mmcv", "MMCVModulatedDeformConv2d", "mmcv (DCNv2)", "library", "no", "plugin",
       "mmcv's custom-op library is needed", "DeformConv (ai.onnx opset >= 19, with the mask input)", None,
       "MMCVModulatedDeformConv2d"),
    _k("mmcv", "MMCVDeformConv2d", "mmcv (DCNv1)", "library", "no", "plugin", "mmcv's custom-op library is needed",
       "DeformConv (ai.onnx opset >= 19)", None, "MMCVDeformConv2d"),
    _k("mmdeploy", "NMSRotated", "mmdeploy rotated-box NMS", "library", "no", "plugin",
       f"ONNX Runtime needs {_MMDEPLOY_ORT}; no standard op does rotated NMS", None, None, "TRTBatchedRotatedNMS"),
    _k("mmcv", "NMSRotated", "mmcv rotated-box NMS", "library", "no", "plugin",
       "mmcv's custom-op library is needed; no standard op does rotated NMS"),
    _k("mmdeploy", "TRTBatchedNMS", "mmdeploy batched NMS (TensorRT)", "no", "no", "plugin",
       f"TensorRT only, with {_MMDEPLOY_TRT}", "NonMaxSuppression (ai.onnx) + gather post-processing"),
    _k("mmdeploy", "MMCVMultiLevelRoiAlign", "mmdeploy multi-level RoIAlign", "library", "no", "plugin",
       f"ONNX Runtime needs {_MMDEPLOY_ORT}", "RoiAlign (ai.onnx) per level + concat"),
    _k("mmcv", "MMCVRoiAlign", "mmcv RoIAlign", "library", "no", "plugin", "mmcv's custom-op library is needed",
       "RoiAlign (ai.onnx opset >= 16 for coordinate_transformation_mode)"),
    _k("com.microsoft", "GridSample", "ONNX Runtime contrib op (PyTorch < 1.12 exports, ORT tools)", "kernel",
       "no", "no", "ONNX Runtime only; OpenVINO's ONNX frontend and TensorRT's parser do not accept it",
       "GridSample (ai.onnx opset >= 16)", "gridsample-to-standard"),
    _k("org.pytorch.aten", "ATen", "torch.onnx.export fallback (OperatorExportTypes.ONNX_ATEN_FALLBACK)", "no", "no",
       "no", "an ATen fallback node runs only in PyTorch-backed runtimes; re-export with a higher opset or "
       "without ATen fallback so the op becomes standard ONNX"),
    _k("ai.onnx.contrib", "*", "onnxruntime-extensions", "library", "no", "no",
       "needs onnxruntime-extensions' custom-op library registered in the session"),
    _k("com.microsoft", "*", "ONNX Runtime contrib ops", "kernel", "partial", "no",
       "ONNX Runtime has kernels; OpenVINO's ONNX frontend converts some com.microsoft ops; TensorRT none"),
    _k("com.microsoft.nchwc", "*", "ONNX Runtime layout-optimized model", "kernel", "no", "no",
       "hardware-specific ONNX Runtime optimization output; export the model before ORT's layout optimizations"),
    _k("trt.plugins", "*", "TensorRT plugin nodes", "no", "no", "plugin",
       "runs only in TensorRT, with the plugin registered"),
)

_EXACT = {(k.domain, k.op_type): k for k in KNOWN_CUSTOM_OPS if k.op_type != "*"}
_DOMAIN_WIDE = {k.domain: k for k in KNOWN_CUSTOM_OPS if k.op_type == "*"}


def lookup(domain: str, op_type: str) -> KnownCustomOp | None:
    """Knowledge-base entry for an op (exact, then TensorRT plugin by name, then domain-wide)."""
    domain = "" if domain == "ai.onnx" else (domain or "")
    hit = _EXACT.get((domain, op_type))
    if hit is not None:
        return hit
    if op_type in TENSORRT_PLUGINS:
        return KnownCustomOp(domain, op_type, "TensorRT plugin", {"onnxruntime": "no", "openvino": "no",
                                                                  "tensorrt": "plugin"},
                             f"TensorRT plugin {TENSORRT_PLUGINS[op_type]}; ONNX Runtime and OpenVINO cannot run it",
                             tensorrt_plugin=op_type)
    return _DOMAIN_WIDE.get(domain)


def trt_plugin_available(op_type: str, trt_major: int) -> bool:
    if op_type not in TENSORRT_PLUGINS:
        return False
    if trt_major >= 11 and op_type in _TRT11_REMOVED:
        return False
    return not (trt_major < 11 and op_type in _TRT11_ONLY)


@dataclass(frozen=True)
class CustomOpInfo:
    domain: str
    op_type: str
    count: int
    nodes: tuple[str, ...]
    reason: str                     # "custom domain" | "unknown op in a standard domain" | "op not in this opset"
    known: KnownCustomOp | None = None
    opset: int | None = None

    @property
    def qualified(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def to_dict(self) -> dict:
        return {"domain": self.domain, "op_type": self.op_type, "count": self.count, "nodes": list(self.nodes[:50]),
                "reason": self.reason, "opset": self.opset,
                "known": None if self.known is None else {
                    "origin": self.known.origin, "engines": dict(self.known.engines), "note": self.known.note,
                    "standard_equivalent": self.known.standard_equivalent, "fix_pass": self.known.fix_pass,
                    "tensorrt_plugin": self.known.tensorrt_plugin}}


def node_id(scope: str, node: onnx.NodeProto, index: int, seen: set[str] | None = None) -> str:
    """The studio-wide node id (``studio.core.protowalk.node_id``) of a NodeProto."""
    return _node_id(scope, node.name, node.op_type, index, seen)


def is_standard_op(domain: str, op_type: str, version: int) -> bool:
    try:
        return onnx.defs.has(op_type, version, domain) if version > 0 else onnx.defs.has(op_type, domain)
    except TypeError:  # older onnx
        return onnx.defs.has(op_type, domain)


def detect_custom_ops(model: ModelProto) -> list[CustomOpInfo]:
    """Every op type outside the standard domains, or unknown to ONNX at the model's opset.

    Nodes calling a model-local function are skipped (the function body is checked).
    """
    opset = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    local = {(f.domain, f.name) for f in model.functions}
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    reasons: dict[tuple[str, str], str] = {}
    seen: set[str] = set()
    for ref in iter_graphs(model):
        for i, n in enumerate(ref.graph.node):
            nid = node_id(ref.scope, n, i, seen)
            dom = "" if n.domain == "ai.onnx" else n.domain
            if (n.domain, n.op_type) in local or (dom, n.op_type) in local:
                continue
            if dom not in STANDARD_DOMAINS:
                reason = "custom domain"
            elif not is_standard_op(dom, n.op_type, opset.get(dom, 0)):
                reason = ("op not in this opset" if is_standard_op(dom, n.op_type, 0)
                          else "unknown op in a standard domain")
            else:
                continue
            found[(dom, n.op_type)].append(nid)
            reasons[(dom, n.op_type)] = reason
    return [CustomOpInfo(dom, op, len(nodes), tuple(nodes), reasons[(dom, op)], lookup(dom, op), opset.get(dom))
            for (dom, op), nodes in sorted(found.items())]


