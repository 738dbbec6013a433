"""Passes by name, and presets as explicit ordered lists of names.

A pass module registers its class with ``@register``; ``PASS_MODULES`` lists
the modules so every pass is known without importing it up front.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from passes.base import StudioPass
from studio.core.errors import StudioError

# One module per pass (name -> module). Imported on first lookup.
PASS_MODULES: dict[str, str] = {
    "eliminate-dead-code": "passes.eliminate_dead_code",
    "quantize-int8-static": "passes.quantize_int8_static",
    "quantize-int8-dynamic": "passes.quantize_int8_dynamic",
    "convert-fp16": "passes.convert_fp16",
    "fix-cast-types": "passes.fix_cast_types",
}

_REGISTRY: dict[str, type[StudioPass]] = {}


def register(cls: type[StudioPass]) -> type[StudioPass]:
    """Class decorator: make a pass available under ``cls.name``."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise TypeError(f"pass name {cls.name!r} registered twice ({existing.__qualname__}, {cls.__qualname__})")
    _REGISTRY[cls.name] = cls
    return cls


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
                          code="UNKNOWN-PASS")
    return cls


def make_pass(name: str, **options) -> StudioPass:
    return pass_class(name)(**options)


def known_passes() -> dict[str, type[StudioPass]]:
    _load_all()
    return dict(sorted(_REGISTRY.items()))


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    passes: tuple[str, ...]


PRESETS: dict[str, Preset] = {}


def add_preset(preset: Preset) -> None:
    PRESETS[preset.name] = preset


def preset(name: str) -> Preset:
    p = PRESETS.get(name)
    if p is None:
        raise StudioError(f"unknown preset '{name[:40]}'; presets: {', '.join(PRESETS) or 'none yet'}",
                          code="UNKNOWN-PRESET")
    return p


# Reduced-precision presets (issue #7); each pass measures its own choices on this machine.
add_preset(Preset("int8", "Static INT8, calibrated; configuration chosen by measured latency and accuracy",
                  ("quantize-int8-static",)))
add_preset(Preset("int8-dynamic", "Dynamic INT8 for transformers (weights int8, activations at run time)",
                  ("quantize-int8-dynamic",)))
add_preset(Preset("fp16", "float16 weights and compute, float32 inputs/outputs, mistyped Casts repaired",
                  ("convert-fp16",)))
