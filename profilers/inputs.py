"""Feeds for profiling: prepared once in the studio process from
:mod:`studio.core.feeds` (seeded, value ranges respected), a user ``.npz`` or an image folder,
then sent to the worker with the job; batch sweeps get the same feeds with
another leading dim."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import (ImagePreprocess, choose_dims, feeds_text, input_specs, load_npz, make_feeds,
                               random_feeds, unnamed_dim_key)
from studio.core.model import ModelHandle

__all__ = ["PreparedFeeds", "batched_feeds", "prepare_feeds"]


@dataclass(frozen=True)
class PreparedFeeds:
    feeds: Mapping[str, np.ndarray]
    dims: Mapping[str, int]          # values chosen for symbolic dims
    source: str                      # one line for the report: where the values come from, then what they are
    guessed: tuple[str, ...] = ()    # symbolic dims of seeded feeds sized by a default, not by the user

    def signature(self) -> tuple:
        return tuple((n, a.dtype.str, a.shape) for n, a in self.feeds.items())


def _tensor_feeds(feeds: Mapping[str, object]) -> dict[str, np.ndarray]:
    out = {}
    for name, value in feeds.items():
        if not isinstance(value, np.ndarray):
            raise StudioError(f"input '{name[:60]}' is a sequence or map; profiling supports tensor inputs only",
                              code=ErrorCode.BAD_FEEDS)
        if value.dtype.hasobject:
            value = value.astype(str)
        out[name] = value
    return out


def prepare_feeds(handle: ModelHandle, *, dims: Mapping[str, int] | None = None, seed: int = 0,
                  npz: Path | None = None, images: Path | None = None,
                  preprocess: ImagePreprocess | None = None) -> PreparedFeeds:
    """The model's feeds: the first sample of ``npz``, the first image of the folder ``images``
    (``studio.core.feeds``: resized and normalized by ``preprocess``; other inputs seeded), or
    seeded random values."""
    specs = input_specs(handle.proto)
    if images is not None:
        fs = make_feeds(handle.proto, images=Path(images), count=2, dims=dims, seed=seed, preprocess=preprocess)
        feeds = _tensor_feeds(fs.sets[0])
        return PreparedFeeds(feeds, dict(fs.dims), f"first of {fs.source} ({(preprocess or ImagePreprocess()).layout} "
                                                   f"layout): {feeds_text(feeds)}")
    if npz is not None:
        samples = load_npz(Path(npz), specs)
        feeds = _tensor_feeds(samples[0])
        return PreparedFeeds(feeds, {},
                             f"inputs from {Path(npz).name} (sample 1 of {len(samples)}): {feeds_text(feeds)}")
    chosen = choose_dims(specs, dims)
    feeds = _tensor_feeds(random_feeds(specs, chosen, seed=seed))
    dims_text = ", ".join(f"{k}={v}" for k, v in chosen.items())
    # Unnamed free dims (Silero's input [?, ?]) are sized by a default too: named by their INPUT[AXIS] key.
    unnamed = {unnamed_dim_key(s.name, i): int(feeds[s.name].shape[i]) for s in specs if s.name in feeds
               for i, d in enumerate(s.shape or ()) if d is None and unnamed_dim_key(s.name, i) not in (dims or {})}
    return PreparedFeeds(feeds, {**chosen, **unnamed},
                         f"seeded random inputs (seed {seed}): {feeds_text(feeds)}"
                         + (f" ({dims_text})" if dims_text else ""),
                         tuple(k for k in chosen if k not in (dims or {})) + tuple(unnamed))


def batched_feeds(handle: ModelHandle, prepared: PreparedFeeds, batch: int, *, seed: int = 0,
                  from_npz: bool = False) -> dict[str, np.ndarray]:
    """``prepared`` with leading dim ``batch``; the model's inputs must have a dynamic first dim."""
    if batch < 1:
        raise StudioError("batch sizes must be positive", code=ErrorCode.BAD_OPTION)
    specs = input_specs(handle.proto)
    dims = dict(prepared.dims)
    unnamed: set[str] = set()
    for spec in specs:
        shape = spec.shape or ()
        if not shape:
            raise StudioError(f"input '{spec.name[:60]}' has no batch dimension (rank 0 or unknown rank); "
                              "a batch sweep needs a dynamic first dim", code=ErrorCode.BAD_OPTION)
        first = shape[0]
        if isinstance(first, int):
            if first != batch:
                raise StudioError(f"input '{spec.name[:60]}' has a fixed first dim {first}; a batch sweep needs "
                                  "a dynamic batch dim (re-export with dynamic_axes)", code=ErrorCode.BAD_OPTION)
        elif isinstance(first, str):
            dims[first] = batch
        else:
            unnamed.add(spec.name)
    if from_npz:
        return {n: np.repeat(a[:1], batch, axis=0) if a.ndim else a for n, a in prepared.feeds.items()}
    feeds = _tensor_feeds(random_feeds(specs, dims, seed=seed))
    return {n: np.repeat(a[:1], batch, axis=0) if n in unnamed else a for n, a in feeds.items()}
