"""Input options shared by commands that run models (compare, precision, profile):
``--inputs X.npz``, ``--images DIR`` with its preprocessing, ``--count``, ``--dim``."""

from __future__ import annotations

import argparse

from studio import api
from studio.core.errors import StudioError


def add_input_arguments(p: argparse.ArgumentParser, *, images: bool = True) -> None:
    g = p.add_argument_group("inputs (the same feeds drive calibration, verification and profiling)")
    g.add_argument("--inputs", metavar="X.npz", help="input values: keys are input names, or NAME/0, NAME/1... "
                                                     "for several samples (never unpickled)")
    if images:
        g.add_argument("--images", metavar="DIR", help="a folder of images for the model's image input")
    g.add_argument("--count", type=int, default=2, metavar="N", help="seeded random input sets when no file is "
                                                                     "given (default 2)")
    g.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value of a symbolic input dim, or INPUT[AXIS]=VALUE for an unnamed one (repeatable)")
    add_preprocess_arguments(g)


def add_preprocess_arguments(g) -> None:
    """How images from ``--images`` (or an image calibration folder) become the model's input."""
    g.add_argument("--image-size", metavar="HxW", help="resize images to HxW (default: the model's input size)")
    g.add_argument("--layout", choices=("auto", "NCHW", "NHWC"), default="auto", help="image layout (default auto)")
    g.add_argument("--mean", metavar="R,G,B", help="per-channel mean after scaling to [0, 1] (ImageNet default)")
    g.add_argument("--std", metavar="R,G,B", help="per-channel std (ImageNet default)")
    g.add_argument("--bgr", action="store_true", help="feed channels in BGR order")


def _floats(text: str | None, label: str) -> tuple[float, ...] | None:
    if not text:
        return None
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError:
        raise StudioError(f"{label} expects comma-separated numbers, got '{text[:40]}'") from None
    if len(values) not in (1, 3):
        raise StudioError(f"{label} expects 1 or 3 numbers")
    return values


def preprocess_from(args: argparse.Namespace) -> api.ImagePreprocess:
    size = None
    if getattr(args, "image_size", None):
        try:
            h, w = (int(x) for x in args.image_size.lower().split("x"))
        except ValueError:
            raise StudioError(f"--image-size expects HxW (e.g. 224x224), got '{args.image_size[:20]}'") from None
        if h <= 0 or w <= 0 or h * w > 8192 * 8192:
            raise StudioError("--image-size must be positive and at most 8192x8192")
        size = (h, w)
    kwargs = {"size": size, "layout": getattr(args, "layout", "auto"), "bgr": bool(getattr(args, "bgr", False))}
    mean, std = _floats(getattr(args, "mean", None), "--mean"), _floats(getattr(args, "std", None), "--std")
    if mean:
        kwargs["mean"] = mean
    if std:
        if any(s == 0 for s in std):
            raise StudioError("--std values must not be 0")
        kwargs["std"] = std
    return api.ImagePreprocess(**kwargs)
