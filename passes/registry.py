"""Passes by name, and presets as explicit ordered lists of names.

A pass module registers its class with ``passes.base.register`` (it never imports this module);
``PASS_MODULES`` lists the modules so every pass is known without importing it up front.
"""

from __future__ import annotations

import importlib

from passes.base import PASSES, StudioPass, register_in
from passes.presets import BUILTIN, Preset
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

# One module per pass (name -> module). Imported on first lookup.
PASS_MODULES: dict[str, str] = {
    "eliminate-dead-code": "passes.eliminate_dead_code",
    "legalize-grid-sampler": "passes.legalize_grid_sampler",
    "gridsample-to-standard": "passes.gridsample_to_standard",
    "gridsample-to-contrib": "passes.gridsample_to_contrib",
    "remove-initializers-from-inputs": "passes.remove_initializers_from_inputs",
    "eliminate-identity": "passes.eliminate_identity",
    "fold-constants": "passes.fold_constants",
    "dedup-initializers": "passes.dedup_initializers",
    "cse": "passes.cse",
    "fuse-conv-bn": "passes.fuse_conv_bn",
    "fuse-conv-scale": "passes.fuse_conv_scale",
    "fuse-hardswish": "passes.fuse_hardswish",
    "fuse-conv-affine": "passes.fuse_conv_affine",
    "fuse-matmul-add": "passes.fuse_matmul_add",
    "cancel-transposes": "passes.cancel_transposes",
    "cancel-round-trips": "passes.cancel_round_trips",
    "merge-reshapes": "passes.merge_reshapes",
    "fuse-layernorm": "passes.fuse_layernorm",
    "fuse-gelu": "passes.fuse_gelu",
    "fuse-transformers": "passes.fuse_transformers",
    "fix-input-shapes": "passes.fix_input_shapes",
    "convert-opset": "passes.convert_opset",
    "onnxsim": "passes.onnxsim_pass",
    "onnxslim": "passes.onnxsim_pass",
    "best-of-peers": "passes.onnxsim_pass",
    "quantize-int8-static": "passes.quantize_int8_static",
    "quantize-int8-dynamic": "passes.quantize_int8_dynamic",
    "quantize-weight-only": "passes.quantize_weight_only",
    "convert-fp16": "passes.convert_fp16",
    "fix-cast-types": "passes.fix_cast_types",
    "rename-duplicate-nodes": "passes.rename_duplicate_nodes",
    "remove-unused-opsets": "passes.remove_unused_opsets",
    "constants-to-initializers": "passes.constants_to_initializers",
    "reorder-for-memory": "passes.reorder_for_memory",
    "remove-dead-guards": "passes.remove_dead_guards",
}

_REGISTRY: dict[str, type[StudioPass]] = PASSES     # the pass modules' ``@register`` (passes.base) fills it


def register(cls: type[StudioPass]) -> type[StudioPass]:
    """Class decorator for a pass defined outside ``PASS_MODULES`` (a test's): into this registry."""
    return register_in(_REGISTRY, cls)


def _load_all() -> None:
    for module in PASS_MODULES.values():
        importlib.import_module(module)


def pass_class(name: str) -> type[StudioPass]:
    if name not in _REGISTRY and name in PASS_MODULES:
        importlib.import_module(PASS_MODULES[name])
    if name not in _REGISTRY:
        _load_all()
    cls = _REGISTRY.get(name)
    if cls is None:
        raise StudioError(f"unknown pass '{name[:60]}'; known passes: {', '.join(sorted(known_passes()))}",
                          code=ErrorCode.UNKNOWN_PASS)
    return cls


def make_pass(name: str, **options) -> StudioPass:
    return pass_class(name)(**options)


def known_passes() -> dict[str, type[StudioPass]]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


PRESETS: dict[str, Preset] = dict(BUILTIN)


def known_presets() -> dict[str, Preset]:
    return dict(PRESETS)


def preset(name: str) -> Preset:
    p = PRESETS.get(name)
    if p is None:
        raise StudioError(f"unknown preset '{name[:40]}'; presets: {', '.join(PRESETS) or 'none yet'}",
                          code=ErrorCode.UNKNOWN_PRESET)
    return p
