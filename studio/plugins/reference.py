"""NumPy reference implementations of custom ops, registered by ``(domain, op_type)``.

They are the numeric oracle of the plugin feature: a user's Python op, an
OpenVINO conversion extension and a compiled C++ plugin are all compared with
the reference on the same inputs. The maths lives in
:mod:`diagnostics.reference_ops` (vectorised GridSample for any rank, mode,
padding and ``align_corners``); this module only adapts it to one calling
convention -- ``impl(inputs, attrs) -> tuple of outputs`` -- and keeps the
registry that other ops can join with :func:`register_reference`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from diagnostics.reference_ops import MMDEPLOY_INTERPOLATION, MMDEPLOY_PADDING, grid_sample

__all__ = ["ReferenceImpl", "get_reference", "references", "register_reference"]

RefFn = Callable[[Sequence[np.ndarray], Mapping[str, Any]], tuple[np.ndarray, ...]]


@dataclass(frozen=True)
class ReferenceImpl:
    """One op's reference: what it computes, its port names and attribute defaults."""

    domain: str
    op_type: str
    summary: str
    fn: RefFn = field(repr=False, compare=False)
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    attr_defaults: Mapping[str, Any] = field(default_factory=dict)

    @property
    def qualified(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    def __call__(self, inputs: Sequence[np.ndarray], attrs: Mapping[str, Any] | None = None) -> tuple[np.ndarray, ...]:
        merged = {**self.attr_defaults, **(attrs or {})}
        out = self.fn(list(inputs), merged)
        return tuple(np.asarray(o) for o in out)


_REGISTRY: dict[tuple[str, str], ReferenceImpl] = {}


def _key(domain: str, op_type: str) -> tuple[str, str]:
    return ("" if domain in ("", "ai.onnx") else domain, op_type)


def register_reference(impl: ReferenceImpl) -> ReferenceImpl:
    """Add (or replace) the reference of ``impl.domain::impl.op_type``."""
    _REGISTRY[_key(impl.domain, impl.op_type)] = impl
    return impl


def get_reference(domain: str, op_type: str) -> ReferenceImpl | None:
    return _REGISTRY.get(_key(domain, op_type))


def references() -> list[ReferenceImpl]:
    return sorted(_REGISTRY.values(), key=lambda r: (r.domain, r.op_type))


# ---------------------------------------------------------------------------- GridSample family

def _text(value: Any, default: str) -> str:
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def _mmdeploy_grid_sampler(inputs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    mode = MMDEPLOY_INTERPOLATION.get(int(attrs.get("interpolation_mode", 0)))
    pad = MMDEPLOY_PADDING.get(int(attrs.get("padding_mode", 0)))
    if mode is None or pad is None:
        raise ValueError("grid_sampler: interpolation_mode and padding_mode must be 0, 1 or 2")
    return (grid_sample(inputs[0], inputs[1], mode, pad, bool(int(attrs.get("align_corners", 0)))),)


def _named_grid_sample(default_mode: str) -> RefFn:
    def run(inputs: Sequence[np.ndarray], attrs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
        return (grid_sample(inputs[0], inputs[1], _text(attrs.get("mode"), default_mode),
                            _text(attrs.get("padding_mode"), "zeros"), bool(int(attrs.get("align_corners", 0)))),)
    return run


for _domain in ("mmdeploy", "mmcv"):
    register_reference(ReferenceImpl(
        _domain, "grid_sampler",
        "torch.nn.functional.grid_sample as exported by mmcv/mmdeploy (int enums: interpolation_mode "
        "0 bilinear / 1 nearest / 2 bicubic, padding_mode 0 zeros / 1 border / 2 reflection), 4-D and 5-D",
        _mmdeploy_grid_sampler, ("input", "grid"), ("output",),
        {"interpolation_mode": 0, "padding_mode": 0, "align_corners": 0}))
register_reference(ReferenceImpl(
    "com.microsoft", "GridSample", "ONNX Runtime contrib GridSample (mode bilinear/nearest/bicubic), 4-D",
    _named_grid_sample("bilinear"), ("X", "Grid"), ("Y",),
    {"mode": "bilinear", "padding_mode": "zeros", "align_corners": 0}))
register_reference(ReferenceImpl(
    "", "GridSample", "ONNX GridSample, opset 16 and 20 mode names, any spatial rank",
    _named_grid_sample("linear"), ("X", "grid"), ("Y",),
    {"mode": "linear", "padding_mode": "zeros", "align_corners": 0}))
