"""NumPy reference implementations of ops that some engine cannot run, keyed by
``(domain, op_type)``, usable by ``onnx.reference.ReferenceEvaluator``.

Why: a fix that replaces a custom op (``mmdeploy::grid_sampler``) by a standard
one cannot be verified against the original on ONNX Runtime (it has no kernel
for the custom op), so the original is evaluated with these references instead.
The plugin-scaffolding feature reuses them as the numeric oracle of a plugin.

GridSample is written here (vectorised, any rank) rather than taken from
``onnx.reference``: that one accepts only the opset-20 mode names
(linear/cubic, not bilinear/bicubic) and loops over output pixels in Python.
Semantics follow PyTorch's ``grid_sample`` (which the ONNX spec follows):
unnormalisation by ``align_corners``, padding applied to the source coordinate
for linear/nearest and to each tap for cubic, nearest rounding half to even.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from onnx.reference.op_run import OpRun

__all__ = [
    "MMDEPLOY_INTERPOLATION",
    "MMDEPLOY_PADDING",
    "REFERENCE_OPS",
    "grid_sample",
    "reference_evaluator",
    "reference_op_classes",
]

_MODE_ALIASES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic",
                 "nearest": "nearest"}
_PADDINGS = ("zeros", "border", "reflection")
# mmcv/mmdeploy grid_sampler integer attributes (torch.nn.functional.grid_sample enums).
MMDEPLOY_INTERPOLATION = {0: "bilinear", 1: "nearest", 2: "bicubic"}
MMDEPLOY_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


def _unnormalize(coord: np.ndarray, size: int, align_corners: bool) -> np.ndarray:
    if align_corners:
        return (coord + 1.0) / 2.0 * (size - 1)
    return ((coord + 1.0) * size - 1.0) / 2.0


def _reflect(coord: np.ndarray, twice_low: float, twice_high: float) -> np.ndarray:
    if twice_low == twice_high:
        return np.zeros_like(coord)
    low = twice_low / 2.0
    span = (twice_high - twice_low) / 2.0
    c = np.abs(coord - low)
    extra = np.fmod(c, span)
    flips = np.floor(c / span)
    return np.where(np.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coord(coord: np.ndarray, size: int, padding: str, align_corners: bool) -> np.ndarray:
    """PyTorch's compute_coordinates: border clips, reflection reflects then clips."""
    if padding == "border":
        return np.clip(coord, 0, size - 1)
    if padding == "reflection":
        if align_corners:
            coord = _reflect(coord, 0.0, 2.0 * (size - 1))
        else:
            coord = _reflect(coord, -1.0, 2.0 * size - 1.0)
        return np.clip(coord, 0, size - 1)
    return coord


def _fetch(x: np.ndarray, idx: list[np.ndarray]) -> np.ndarray:
    """Values of ``x`` (N, C, *spatial) at integer indices (each (N, *out)); zero outside."""
    spatial = x.shape[2:]
    n = x.shape[0]
    valid = np.ones(idx[0].shape, dtype=bool)
    clipped = []
    for i, size in zip(idx, spatial):
        valid &= (i >= 0) & (i < size)
        clipped.append(np.clip(i, 0, size - 1))
    batch = np.arange(n).reshape((n,) + (1,) * (idx[0].ndim - 1))
    picked = _gather(x, batch, clipped)
    return np.where(valid[:, None], picked, 0)


def _gather(x: np.ndarray, batch: np.ndarray, idx: list[np.ndarray]) -> np.ndarray:
    # x[b, :, i0, i1, ...] with broadcasting index arrays -> (N, *out, C); move C to axis 1.
    moved = np.moveaxis(x, 1, -1)                      # (N, *spatial, C)
    vals = moved[(batch, *idx)]                        # (N, *out, C)
    return np.moveaxis(vals, -1, 1)                    # (N, C, *out)


def _cubic_weights(t: np.ndarray) -> list[np.ndarray]:
    a = -0.75
    def near(s):  # |s| <= 1
        return ((a + 2) * s - (a + 3)) * s * s + 1
    def far(s):   # 1 < |s| < 2
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


def grid_sample(x: np.ndarray, grid: np.ndarray, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool | int = False) -> np.ndarray:
    """ONNX GridSample (opset 16 and 20 names) for any spatial rank; cubic for 4-D and up."""
    mode = _MODE_ALIASES.get(str(mode))
    if mode is None:
        raise ValueError("GridSample mode must be bilinear/linear, nearest or bicubic/cubic")
    if padding_mode not in _PADDINGS:
        raise ValueError(f"GridSample padding_mode must be one of {_PADDINGS}")
    x = np.asarray(x)
    grid = np.asarray(grid)
    nd = x.ndim - 2
    if nd < 1 or grid.ndim != x.ndim or grid.shape[-1] != nd or grid.shape[0] != x.shape[0]:
        raise ValueError(f"GridSample: input {x.shape} and grid {grid.shape} do not match "
                         "(grid must be (N, *out, rank-2))")
    align = bool(align_corners)
    spatial = x.shape[2:]
    g = grid.astype(np.float64)
    # grid's last axis is (x, y, z...) = innermost spatial dim first.
    coords = [_unnormalize(g[..., nd - 1 - d], spatial[d], align) for d in range(nd)]
    xf = x.astype(np.float64) if x.dtype.kind == "f" else x
    if mode == "cubic":
        base = [np.floor(c) for c in coords]
        weights = [_cubic_weights(c - b) for c, b in zip(coords, base)]
        out = np.zeros((x.shape[0], x.shape[1], *grid.shape[1:-1]), dtype=np.float64)
        for taps in itertools.product(range(4), repeat=nd):
            idx, w = [], 1.0
            for d, t in enumerate(taps):
                pos = _pad_coord(base[d] - 1 + t, spatial[d], padding_mode, align)
                idx.append(pos.astype(np.int64))
                w = w * weights[d][t]
            out += _fetch(xf, idx) * w[:, None]
        return out.astype(x.dtype)
    coords = [_pad_coord(c, spatial[d], padding_mode, align) for d, c in enumerate(coords)]
    if mode == "nearest":
        return _fetch(xf, [np.rint(c).astype(np.int64) for c in coords]).astype(x.dtype)
    low = [np.floor(c) for c in coords]
    frac = [c - lo for c, lo in zip(coords, low)]
    out = np.zeros((x.shape[0], x.shape[1], *grid.shape[1:-1]), dtype=np.float64)
    for corner in itertools.product((0, 1), repeat=nd):
        idx, w = [], 1.0
        for d, bit in enumerate(corner):
            idx.append((low[d] + bit).astype(np.int64))
            w = w * (frac[d] if bit else 1.0 - frac[d])
        out += _fetch(xf, idx) * w[:, None]
    return out.astype(x.dtype)


# ---------------------------------------------------------------------------- onnx.reference ops
# ReferenceEvaluator looks ops up by (op_domain, class name), so class names are op types.

def grid_sample_source() -> str:
    """This module's GridSample code (any rank) as Python source: the plugin scaffold writes it into a
    standalone Python op, so the op computes what this reference computes."""
    import inspect

    parts = [f"_MODE_ALIASES = {_MODE_ALIASES!r}\n_PADDINGS = {_PADDINGS!r}"]
    parts += [inspect.getsource(fn).rstrip() for fn in (_unnormalize, _reflect, _pad_coord, _fetch, _gather,
                                                        _cubic_weights, grid_sample)]
    return "\n\n\n".join(parts)


class grid_sampler(OpRun):  # noqa: N801 - the op type is lower case
    """mmdeploy::grid_sampler (also exported by mmcv): int enums for mode and padding."""

    op_domain = "mmdeploy"

    def _run(self, x, grid, interpolation_mode=0, padding_mode=0, align_corners=0):  # noqa: D401
        mode = MMDEPLOY_INTERPOLATION.get(int(interpolation_mode if interpolation_mode is not None else 0))
        pad = MMDEPLOY_PADDING.get(int(padding_mode if padding_mode is not None else 0))
        if mode is None or pad is None:
            raise ValueError("grid_sampler: interpolation_mode must be 0-2 and padding_mode 0-2")
        return (grid_sample(x, grid, mode, pad, bool(align_corners)),)


class _MmcvGridSampler(grid_sampler):
    op_domain = "mmcv"


class GridSample(OpRun):
    """com.microsoft::GridSample (ONNX Runtime contrib op, opset-16 mode names, 4-D)."""

    op_domain = "com.microsoft"

    def _run(self, x, grid, mode="bilinear", padding_mode="zeros", align_corners=0):
        return (grid_sample(x, grid, mode or "bilinear", padding_mode or "zeros", bool(align_corners)),)


class _StandardGridSample(OpRun):
    """ai.onnx GridSample with both opset-16 and opset-20 mode names."""

    op_domain = ""

    def _run(self, x, grid, mode="linear", padding_mode="zeros", align_corners=0):
        return (grid_sample(x, grid, mode or "linear", padding_mode or "zeros", bool(align_corners)),)


def _named(cls: type, name: str) -> type:
    return type(name, (cls,), {"op_domain": cls.op_domain, "__module__": __name__})


# (domain, op_type) -> OpRun class; "" is ai.onnx.
REFERENCE_OPS: dict[tuple[str, str], type[OpRun]] = {
    ("mmdeploy", "grid_sampler"): grid_sampler,
    ("mmcv", "grid_sampler"): _named(_MmcvGridSampler, "grid_sampler"),
    ("com.microsoft", "GridSample"): GridSample,
    ("", "GridSample"): _named(_StandardGridSample, "GridSample"),
}


def reference_op_classes() -> list[type[OpRun]]:
    return list(REFERENCE_OPS.values())


def has_reference(domain: str, op_type: str) -> bool:
    return ((domain or "") if domain != "ai.onnx" else "", op_type) in REFERENCE_OPS


def reference_evaluator(model, **kwargs) -> Callable:
    """``onnx.reference.ReferenceEvaluator`` with the studio's reference ops registered."""
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model, new_ops=reference_op_classes(), **kwargs)
