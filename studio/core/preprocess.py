"""Preprocessing as data: how a picture becomes the tensor a model takes.

A recipe is plain, serializable data (resize mode and size, scale, mean/std,
colour order, layout, dtype), never code, so it can be stored in a project,
shown, diffed and reused by calibration, verification and profiling alike.
Presets cover the common families: ImageNet classifiers (resize 256, centre crop,
ImageNet mean/std), YOLO detectors (letterbox, 0..1, grey padding 114), CLIP,
text-line recognizers (grey strip, keep aspect, pad right, -1..1) and raw pixels.
``suggest_recipe`` picks one from what the model says (metadata such as
``imgsz``/``task``, its input's size, channels and dtype), with the reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
from onnx import ModelProto

from studio.core.errors import StudioError

RESIZE_MODES = ("stretch", "letterbox", "center-crop", "keep-height", "none")
LAYOUTS = ("auto", "NCHW", "NHWC")
COLORS = ("RGB", "BGR", "L")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".webp")
MAX_IMAGE_BYTES = 64 * 2**20


@dataclass(frozen=True)
class Recipe:
    """Image preprocessing; ``size`` (height, width) None means: the model's input size."""

    resize: str = "stretch"
    size: tuple[int, int] | None = None
    scale: float = 1 / 255.0
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    color: str = "RGB"
    layout: str = "auto"
    pad_value: float = 114.0          # letterbox / keep-height padding, in pixel units (0..255)
    crop_ratio: float = 0.875         # center-crop: resize the short side to size / crop_ratio first
    preset: str = "custom"

    def __post_init__(self) -> None:
        if self.resize not in RESIZE_MODES:
            raise StudioError(f"resize must be one of {', '.join(RESIZE_MODES)}, got {str(self.resize)[:20]!r}",
                              code="BAD-OPTION")
        if self.layout not in LAYOUTS:
            raise StudioError(f"layout must be one of {', '.join(LAYOUTS)}", code="BAD-OPTION")
        if self.color not in COLORS:
            raise StudioError(f"colour order must be one of {', '.join(COLORS)}", code="BAD-OPTION")
        if self.size is not None and not (len(self.size) == 2 and all(isinstance(v, int) and 1 <= v <= 16384
                                                                      for v in self.size)):
            raise StudioError("image size must be HEIGHTxWIDTH, each 1..16384", code="BAD-OPTION")
        if not self.std or any(s == 0 for s in self.std):
            raise StudioError("std values must be non-zero", code="BAD-OPTION")
        if not 0 < self.crop_ratio <= 1:
            raise StudioError("crop ratio must be in (0, 1]", code="BAD-OPTION")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["size"] = list(self.size) if self.size else None
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Recipe:
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if known.get("size") is not None:
            known["size"] = tuple(int(v) for v in known["size"])
        for k in ("mean", "std"):
            if k in known:
                known[k] = tuple(float(v) for v in known[k])
        for k in ("scale", "pad_value", "crop_ratio"):
            if k in known:
                known[k] = float(known[k])
        return cls(**known)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PRESETS: dict[str, Recipe] = {
    "imagenet": Recipe("center-crop", mean=IMAGENET_MEAN, std=IMAGENET_STD, preset="imagenet"),
    "yolo": Recipe("letterbox", scale=1 / 255.0, pad_value=114.0, preset="yolo"),
    "clip": Recipe("center-crop", mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711),
                   crop_ratio=1.0, preset="clip"),
    "text-strip": Recipe("keep-height", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), pad_value=0.0, preset="text-strip"),
    "grayscale": Recipe("stretch", color="L", mean=(0.0,), std=(1.0,), preset="grayscale"),
    "raw": Recipe("stretch", scale=1.0, preset="raw"),
}


def preset(name: str, **overrides) -> Recipe:
    if name not in PRESETS:
        raise StudioError(f"unknown preprocessing preset {name[:40]!r}; known: {', '.join(PRESETS)}",
                          code="BAD-OPTION")
    return replace(PRESETS[name], **overrides) if overrides else PRESETS[name]


# ---------------------------------------------------------------------------- the model's image input

def channel_layout(shape: tuple, layout: str = "auto") -> str:
    if layout in ("NCHW", "NHWC"):
        return layout
    if len(shape) == 4 and shape[1] in (1, 3, 4):
        return "NCHW"
    if len(shape) == 4 and shape[3] in (1, 3, 4):
        return "NHWC"
    raise StudioError(f"cannot tell the channel axis of image input shape {list(shape)}; give the layout "
                      "(NCHW or NHWC)")


def image_size_of(shape: tuple, layout: str, recipe: Recipe, hint: tuple[int, int] | None = None) -> tuple[int, int]:
    """(height, width) the recipe produces: its own size, the model's static size, or the model's hint."""
    if recipe.size is not None:
        return recipe.size
    hw = shape[2:4] if layout == "NCHW" else shape[1:3]
    h = hw[0] if isinstance(hw[0], int) and hw[0] > 0 else (hint[0] if hint else None)
    w = hw[1] if isinstance(hw[1], int) and hw[1] > 0 else (hint[1] if hint else None)
    if recipe.resize == "keep-height" and h is not None and w is None:
        w = -1           # width follows the picture's aspect
    if h is None or w is None:
        raise StudioError("the model's image size is dynamic and it does not say which; give the size "
                          "(HEIGHTxWIDTH) in the preprocessing")
    return int(h), int(w)


def suggest_recipe(model: ModelProto) -> tuple[Recipe, str]:
    """A preset for the model's image input and why (metadata, input size, dtype)."""
    from studio.core.dim_hints import metadata_image_size
    from studio.core.types import value_info

    meta = {p.key.strip().lower(): p.value[:200] for p in model.metadata_props}
    init = {t.name for t in model.graph.initializer}
    inputs = [value_info(v) for v in model.graph.input if v.name not in init]
    image = next((t for t in inputs if t.shape is not None and len(t.shape) == 4), None)
    if image is None:
        return PRESETS["raw"], "the model has no 4-D image input"
    if image.dtype == "uint8":
        return PRESETS["raw"], f"input '{image.name[:40]}' takes uint8 pixels"
    task = meta.get("task", "").lower()
    if task in ("detect", "segment", "pose", "obb") or metadata_image_size(model) is not None and "stride" in meta:
        return PRESETS["yolo"], f"metadata says task={task or 'detect'} (Ultralytics-style): letterbox, 0..1"
    try:
        layout = channel_layout(image.shape)
    except StudioError:
        return PRESETS["raw"], "the image input's channel axis is unclear"
    channels = image.shape[1] if layout == "NCHW" else image.shape[3]
    h = image.shape[2] if layout == "NCHW" else image.shape[1]
    w = image.shape[3] if layout == "NCHW" else image.shape[2]
    if isinstance(h, int) and h <= 64 and not isinstance(w, int):
        return PRESETS["text-strip"], f"input height {h} with a free width: a text-line recognizer"
    if channels == 1:
        return PRESETS["grayscale"], "the image input has one channel"
    if "pixel_values" in image.name and "clip" in (model.producer_name + model.doc_string).lower():
        return PRESETS["clip"], "a CLIP-style pixel_values input"
    return PRESETS["imagenet"], "a 3-channel image input (the ImageNet convention; change it if your model differs)"


# ---------------------------------------------------------------------------- applying a recipe

def load_image(path, color: str):
    """A Pillow image in ``color`` mode; a one-line error for anything unreadable."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as im:
            im.load()
            return im.convert(color)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError, SyntaxError):
        raise StudioError("cannot be read as an image") from None


def apply_recipe(image, recipe: Recipe, size: tuple[int, int], layout: str, dtype: str,
                 channels: int | None = None) -> np.ndarray:
    """The batch-of-one tensor for ``image`` (a Pillow image) under ``recipe``."""
    from PIL import Image

    color = recipe.color if channels != 1 else "L"
    im = image.convert("RGB" if color == "BGR" else color)
    h, w = size
    if recipe.resize == "letterbox":
        r = min(h / im.height, w / im.width)
        nh, nw = max(1, round(im.height * r)), max(1, round(im.width * r))
        resized = im.resize((nw, nh), Image.BILINEAR)
        fill = int(recipe.pad_value) if im.mode == "L" else (int(recipe.pad_value),) * 3
        canvas = Image.new(im.mode, (w, h), fill)
        canvas.paste(resized, ((w - nw) // 2, (h - nh) // 2))
        im = canvas
    elif recipe.resize == "center-crop":
        short = min(h, w) / recipe.crop_ratio
        r = short / min(im.height, im.width)
        nh, nw = max(h, round(im.height * r)), max(w, round(im.width * r))
        im = im.resize((nw, nh), Image.BILINEAR)
        top, left = (nh - h) // 2, (nw - w) // 2
        im = im.crop((left, top, left + w, top + h))
    elif recipe.resize == "keep-height":
        nw = max(1, round(im.width * h / im.height)) if w == -1 else min(w, max(1, round(im.width * h / im.height)))
        resized = im.resize((nw, h), Image.BILINEAR)
        if w != -1 and nw < w:
            fill = int(recipe.pad_value) if im.mode == "L" else (int(recipe.pad_value),) * 3
            canvas = Image.new(im.mode, (w, h), fill)
            canvas.paste(resized, (0, 0))
            resized = canvas
        im = resized
    elif recipe.resize == "stretch" or (im.height, im.width) != (h, w):
        im = im.resize((w, h), Image.BILINEAR)
    arr = np.asarray(im, dtype=np.float32)
    if arr.ndim == 2:
        arr = arr[..., None]
    if color == "BGR":
        arr = arr[..., ::-1]
    c = arr.shape[-1]
    if np.dtype(dtype).kind == "f":
        mean = np.resize(np.asarray(recipe.mean, np.float32), c)
        std = np.resize(np.asarray(recipe.std, np.float32), c)
        arr = (arr * np.float32(recipe.scale) - mean) / std
    if layout == "NCHW":
        arr = arr.transpose(2, 0, 1)
    return np.ascontiguousarray(arr[None]).astype(np.dtype(dtype))
