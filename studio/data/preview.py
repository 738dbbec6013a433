"""A few samples as the model gets them: a thumbnail and the value range of each channel.

A recipe that is wrong by a factor of 58 (ImageNet normalization for a Caffe model)
looks fine as a picture; its numbers do not. So the preview shows, for each sample,
the tensor's shape and dtype and the min/max/mean of every channel, named in the
order the model gets them (B, G, R after a BGR swap), beside a thumbnail of the same
tensor (min-max scaled, shown in true colours).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
from onnx import ModelProto

from studio.core.feeds import input_specs
from studio.core.preprocess import Recipe, channel_layout
from studio.data.datasets import Dataset, dataset_feeds


@dataclass(frozen=True)
class ChannelRange:
    """Value range of one channel of one sample's tensor."""

    channel: str                     # "B", "G", "R", "L", or "all" for a non-image input
    min: float
    max: float
    mean: float

    def to_dict(self) -> dict:
        return {"channel": self.channel, "min": self.min, "max": self.max, "mean": self.mean}


@dataclass(frozen=True, eq=False)
class PreviewSample:
    """One sample after preprocessing: the input it feeds, its ranges, a thumbnail for images."""

    index: int
    file: str
    label: str | None
    input: str
    shape: tuple[int, ...]
    dtype: str
    layout: str                       # NCHW / NHWC for image tensors, "" otherwise
    channels: tuple[ChannelRange, ...]
    picture: np.ndarray | None = None  # uint8 HxW or HxWx3, true colours

    def ranges_text(self) -> str:
        """'B -103.9..151.1 (mean 9.8), G ...' for captions and the CLI."""
        return ", ".join(f"{c.channel} {c.min:.4g}..{c.max:.4g} (mean {c.mean:.3g})" for c in self.channels)

    def to_dict(self) -> dict:
        return {"sample": self.index, "file": self.file, "label": self.label, "input": self.input,
                "shape": list(self.shape), "dtype": self.dtype, "layout": self.layout,
                "channels": [c.to_dict() for c in self.channels]}


def _channel_names(recipe: Recipe, count: int) -> list[str]:
    if count == 1:
        return ["L"]
    if count == 3:
        return list("BGR") if recipe.color == "BGR" else list("RGB")
    return [f"c{i}" for i in range(count)]


def _range(name: str, a: np.ndarray) -> ChannelRange:
    a = np.asarray(a, np.float64)
    return ChannelRange(name, float(a.min()), float(a.max()), float(a.mean()))


def _picture(hwc: np.ndarray, bgr: bool) -> np.ndarray | None:
    a = np.asarray(hwc, np.float64)
    if a.ndim != 3 or a.shape[-1] not in (1, 3) or a.size == 0 or not np.isfinite(a).all():
        return None
    lo, hi = float(a.min()), float(a.max())
    a = (a - lo) / (hi - lo) if hi > lo else np.zeros_like(a)
    if bgr and a.shape[-1] == 3:
        a = a[..., ::-1]
    out = np.round(a * 255).astype(np.uint8)
    return out[..., 0] if out.shape[-1] == 1 else np.ascontiguousarray(out)


def preview_samples(ds: Dataset, model: ModelProto, *, count: int = 4, part: str = "all",
                    dims: Mapping[str, int] | None = None) -> tuple[PreviewSample, ...]:
    """The first ``count`` samples of ``part`` preprocessed for ``model``, with their ranges."""
    feeds = dataset_feeds(ds, model, part=part, limit=count, dims=dims)
    refs = ds.part(part)[:count]
    specs = {s.name: s for s in input_specs(model)}
    recipe = ds.recipe or Recipe()
    out = []
    for ref, feed in zip(refs, feeds):
        name = next(iter(feed)) if ds.kind != "image" else next(
            (k for k, v in feed.items() if np.ndim(v) == 4 and specs.get(k) is not None), next(iter(feed)))
        arr = np.asarray(feed[name])
        layout, picture = "", None
        if ds.kind == "image" and arr.ndim == 4:
            layout = channel_layout(tuple(specs[name].shape or arr.shape), recipe.layout)
            hwc = arr[0] if layout == "NHWC" else arr[0].transpose(1, 2, 0)
            names = _channel_names(recipe, hwc.shape[-1])
            channels = tuple(_range(n, hwc[..., i]) for i, n in enumerate(names))
            picture = _picture(hwc, recipe.color == "BGR")
        else:
            channels = (_range("all", arr),) if arr.size and arr.dtype.kind in "biuf" else ()
        out.append(PreviewSample(ref.index, PurePosixPath(ref.file).name, ref.label, name, tuple(arr.shape),
                                 str(arr.dtype), layout, channels, picture))
    return tuple(out)
