"""Preprocessing as data: how a picture becomes the tensor a model takes.

A recipe is plain, serializable data (resize mode and size, interpolation, scale,
mean/std, colour order, layout, dtype, padding, crop ratio), never code, so it can
be stored in a project, shown, diffed, written to a recipe file and reused by
calibration, verification and profiling alike. The tensor is
``(pixel * scale - mean) / std`` per channel, with mean and std in the order the
model gets the channels (after an RGB -> BGR swap). Presets cover the common
families: ImageNet classifiers (resize 256, centre crop, ImageNet mean/std), Caffe
classifiers (BGR pixels 0..255 minus the BGR mean), YOLO detectors (letterbox, 0..1,
grey padding 114), CLIP, text-line recognizers and raw pixels. Every field can be
set by name from a string (the CLI, the page) or from JSON (a recipe file), with
one-line errors naming the field and its allowed values. ``studio.core.preprocess_suggest``
picks one from the model's evidence (``suggest_recipe``).
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import check_regular_file, safe_name

RESIZE_MODES = ("stretch", "letterbox", "center-crop", "keep-height", "none")
LAYOUTS = ("auto", "NCHW", "NHWC")
COLORS = ("RGB", "BGR", "L")
DTYPES = ("auto", "float32", "float16", "float64", "uint8")
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm", ".webp")
MAX_IMAGE_BYTES = 64 * 2**20
MAX_RECIPE_FILE_BYTES = 1 * 2**20

#: What each field takes, as said in every error about it.
ALLOWED: dict[str, str] = {
    "resize": "one of " + ", ".join(RESIZE_MODES),
    "size": "HEIGHTxWIDTH such as 224x224 (each 1..16384), or empty for the model's own size",
    "scale": "a positive number such as 1, 0.0039215686 or 1/255",
    "mean": "1 or 3 numbers (comma-separated), in the order the model gets the channels",
    "std": "1 or 3 non-zero numbers (comma-separated), in the order the model gets the channels",
    "color": "one of RGB, BGR, L (grey)",
    "layout": "one of auto, NCHW, NHWC",
    "dtype": "one of " + ", ".join(DTYPES) + " (auto: the model input's type)",
    "interpolation": "one of " + ", ".join(INTERPOLATIONS),
    "pad_value": "a number 0..255 (letterbox / keep-height padding, in pixel units)",
    "crop_ratio": "a number in (0, 1] (center-crop: the short side is resized to size / crop_ratio first)",
    "preset": "a preset name or custom",
}


def _bad(name: str, value: object) -> StudioError:
    shown = repr(value)[:40] if not isinstance(value, str) else repr(value[:40])
    return StudioError(f"{name} must be {ALLOWED[name]}; got {shown}", code=ErrorCode.BAD_OPTION)


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
    dtype: str = "auto"               # the tensor's element type; auto: the model input's
    interpolation: str = "bilinear"
    pad_value: float = 114.0          # letterbox / keep-height padding, in pixel units (0..255)
    crop_ratio: float = 0.875         # center-crop: resize the short side to size / crop_ratio first
    preset: str = "custom"

    def __post_init__(self) -> None:
        for name, allowed in (("resize", RESIZE_MODES), ("layout", LAYOUTS), ("color", COLORS), ("dtype", DTYPES),
                              ("interpolation", INTERPOLATIONS)):
            if getattr(self, name) not in allowed:
                raise _bad(name, getattr(self, name))
        if self.size is not None and not (isinstance(self.size, tuple) and len(self.size) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 16384 for v in self.size)):
            raise _bad("size", self.size)
        if not _finite(self.scale) or self.scale <= 0:
            raise _bad("scale", self.scale)
        for name in ("mean", "std"):
            v = getattr(self, name)
            if not isinstance(v, tuple) or len(v) not in (1, 3) or not all(_finite(x) for x in v):
                raise _bad(name, v)
        if any(s == 0 for s in self.std):
            raise StudioError("std values must be non-zero", code=ErrorCode.BAD_OPTION)
        if not _finite(self.pad_value) or not 0 <= self.pad_value <= 255:
            raise _bad("pad_value", self.pad_value)
        if not _finite(self.crop_ratio) or not 0 < self.crop_ratio <= 1:
            raise StudioError("crop ratio must be in (0, 1]", code=ErrorCode.BAD_OPTION)
        if not isinstance(self.preset, str) or not self.preset or len(self.preset) > 40:
            raise _bad("preset", self.preset)
        if self.dtype == "uint8" and (self.scale != 1 or any(self.mean) or any(s != 1 for s in self.std)):
            raise StudioError("dtype uint8 carries the pixels as they are: set scale 1, mean 0 and std 1 "
                              "(or a float dtype)", code=ErrorCode.BAD_OPTION)
        check_recipe_range(self, "float32" if self.dtype == "auto" else self.dtype)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["size"] = list(self.size) if self.size else None
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d

    @classmethod
    def from_dict(cls, data: Mapping) -> Recipe:
        """A stored recipe (a dataset manifest): known fields parsed and validated, others ignored."""
        known = {f.name: parse_field(f.name, data[f.name]) for f in fields(cls) if f.name in data}
        return cls(**known)

    def describe(self) -> str:
        """One line: what the recipe does to a picture."""
        size = "the model's size" if self.size is None else f"{self.size[0]}x{self.size[1]}"
        scale = "1" if self.scale == 1 else "1/255" if math.isclose(self.scale, 1 / 255) else f"{self.scale:.6g}"
        parts = [f"{self.resize} to {size}", self.color, f"x{scale}"]
        if any(self.mean):
            parts.append("minus " + ",".join(f"{m:.4g}" for m in self.mean))
        if any(s != 1 for s in self.std):
            parts.append("over " + ",".join(f"{s:.4g}" for s in self.std))
        parts += [f"layout {self.layout}", f"dtype {self.dtype}"]
        return f"{self.preset}: " + ", ".join(parts)


def check_recipe_range(recipe: Recipe, dtype: str) -> None:
    """Refuse a recipe whose numbers cannot be carried in ``dtype`` (the tensor's element type):
    a std that is 0 there (1e-320 in float32), a scale that underflows to 0, or a pixel 0..255 whose
    ``(pixel * scale - mean) / std`` (or a step of it) overflows to inf. Checked when a recipe is
    made or saved (float32 unless it names its dtype) and again against the model input's own type."""
    if recipe.dtype != "auto":
        dtype = recipe.dtype
    dt = np.dtype(dtype)
    if dt.kind != "f":
        return
    fmax = float(np.finfo(dt).max)
    if float(dt.type(recipe.scale)) == 0:
        raise StudioError(f"scale {recipe.scale:.3g} is 0 in {dt.name}: every pixel would become 0; give a scale "
                          f"of at least {float(np.finfo(dt).smallest_subnormal):.3g}", code=ErrorCode.BAD_OPTION)
    channels = max(len(recipe.mean), len(recipe.std))
    for c in range(channels):
        mean, std = recipe.mean[c % len(recipe.mean)], recipe.std[c % len(recipe.std)]
        with np.errstate(over="ignore"):
            std_there = float(dt.type(std))
        if not math.isfinite(std_there):
            # the division by an inf std makes every pixel 0 while the check on Python floats passes
            raise StudioError(f"std {std:.3g} is beyond {dt.name}'s range ({fmax:.3g}): every pixel would become 0; "
                              "give a std the tensor's type can hold", code=ErrorCode.BAD_OPTION)
        if std_there == 0:
            raise StudioError(f"std {std:.3g} is 0 in {dt.name}: the tensor would be "
                              "inf; give a std a pixel can be divided by", code=ErrorCode.BAD_OPTION)
        for pixel in (0.0, 255.0, float(recipe.pad_value)):
            steps = (pixel * recipe.scale, pixel * recipe.scale - mean, (pixel * recipe.scale - mean) / std)
            if not all(math.isfinite(v) and abs(v) <= fmax for v in steps):
                raise StudioError(f"the recipe overflows {dt.name}: pixel {pixel:g} x "
                                  f"scale {recipe.scale:.3g} - mean {mean:.3g} / std {std:.3g} is beyond "
                                  f"{fmax:.3g}; give numbers that keep the tensor finite", code=ErrorCode.BAD_OPTION)


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------- fields by name

def _number(name: str, value: object) -> float:
    if isinstance(value, bool):
        raise _bad(name, value)
    if isinstance(value, (int, float)):
        out = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            if "/" in text:                         # 1/255
                num, _, den = text.partition("/")
                out = float(num) / float(den)
            else:
                out = float(text)
        except (ValueError, ZeroDivisionError):
            raise _bad(name, value) from None
    else:
        raise _bad(name, value)
    if not math.isfinite(out):
        raise _bad(name, value)
    return out


def _numbers(name: str, value: object) -> tuple[float, ...]:
    if isinstance(value, str):
        items: list = [v for v in value.replace(";", ",").split(",") if v.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [value]
    else:
        raise _bad(name, value)
    if len(items) not in (1, 3):
        raise _bad(name, value)
    return tuple(_number(name, v) for v in items)


def _size(value: object) -> tuple[int, int] | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "model", "auto", "none")):
        return None
    if isinstance(value, str):
        parts = value.lower().replace(" ", "").replace(",", "x").split("x")
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        parts = [value, value]
    else:
        raise _bad("size", value)
    if len(parts) == 1:
        parts = parts * 2
    try:
        if len(parts) != 2 or any(isinstance(p, (bool, float)) for p in parts):
            raise ValueError
        h, w = (int(p) for p in parts)
    except (TypeError, ValueError):
        raise _bad("size", value) from None
    if not (1 <= h <= 16384 and 1 <= w <= 16384):
        raise _bad("size", value)
    return h, w


def _choice(name: str, value: object, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise _bad(name, value)
    by_fold = {a.lower(): a for a in allowed}
    text = value.strip().lower()
    if name == "color" and text in ("gray", "grey", "grayscale", "greyscale"):
        text = "l"
    if text not in by_fold:
        raise _bad(name, value)
    return by_fold[text]


def parse_field(name: str, value: object):
    """``value`` (a string from the CLI or the page, or JSON from a file) as recipe field ``name``."""
    if name == "resize":
        return _choice(name, value, RESIZE_MODES)
    if name == "size":
        return _size(value)
    if name in ("scale", "pad_value", "crop_ratio"):
        return _number(name, value)
    if name in ("mean", "std"):
        return _numbers(name, value)
    if name == "color":
        return _choice(name, value, COLORS)
    if name == "layout":
        return _choice(name, value, LAYOUTS)
    if name == "dtype":
        return _choice(name, value, DTYPES)
    if name == "interpolation":
        return _choice(name, value, INTERPOLATIONS)
    if name == "preset":
        if not isinstance(value, str) or not value.strip():
            raise _bad(name, value)
        return value.strip()[:40]
    raise unknown_field(name)


def unknown_field(name: object) -> StudioError:
    text = str(name)[:40]
    close = difflib.get_close_matches(text.lower().replace("-", "_"), list(ALLOWED), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return StudioError(f"unknown recipe field {text!r}{hint}; fields: {', '.join(ALLOWED)}", code=ErrorCode.BAD_OPTION)


def recipe_with(base: Recipe, changes: Mapping[str, object]) -> Recipe:
    """``base`` with the named fields changed (values as strings or JSON). A ``preset`` entry
    starts from that preset instead. The result is labelled ``custom`` unless it is a preset."""
    changes = {str(k).replace("-", "_"): v for k, v in changes.items()}
    for k in changes:
        if k not in ALLOWED:
            raise unknown_field(k)
    if changes.get("preset") not in (None, "", "custom"):
        base = PRESETS[_choice("preset", changes["preset"], tuple(PRESETS))]
    parsed = {k: parse_field(k, v) for k, v in changes.items() if k != "preset"}
    out = replace(base, **parsed)
    return out if out == PRESETS.get(out.preset) else replace(out, preset="custom")


def recipe_from_json(text: str, label: str = "recipe file") -> Recipe:
    """A recipe from a JSON object of fields (``{"color": "BGR", "mean": [103.94, 116.78, 123.68], ...}``);
    a ``preset`` field starts from that preset. One-line errors name the bad field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StudioError(f"{label}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})",
                          code=ErrorCode.BAD_OPTION) from None
    except (RecursionError, ValueError):       # nested thousands deep; an integer of more than 4,300 digits
        raise StudioError(f"{label}: not a recipe (nested too deeply or a number too long to read)",
                          code=ErrorCode.BAD_OPTION) from None
    if isinstance(data, dict) and isinstance(data.get("recipe"), dict) and not set(data) & set(ALLOWED):
        data = data["recipe"]              # ``data show --json`` / a manifest: {"recipe": {...}, ...}
    if not isinstance(data, dict):
        raise StudioError(f"{label}: must be a JSON object of recipe fields ({', '.join(ALLOWED)})",
                          code=ErrorCode.BAD_OPTION)
    try:
        return recipe_with(Recipe(), data)
    except StudioError as exc:
        raise StudioError(f"{label}: {exc}", code=ErrorCode.BAD_OPTION) from None


def read_recipe_file(path: str | Path) -> Recipe:
    """The recipe in a JSON file (see :func:`recipe_from_json`)."""
    path = Path(path)
    check_regular_file(path, max_bytes=MAX_RECIPE_FILE_BYTES, label="recipe file")
    label = f"recipe file {safe_name(path.name)[:60]}"
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise StudioError(f"{label}: not UTF-8 text", code=ErrorCode.BAD_OPTION) from None
    return recipe_from_json(text, label)


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CAFFE_BGR_MEAN = (103.939, 116.779, 123.68)      # the ImageNet mean in pixel units, B, G, R
PRESETS: dict[str, Recipe] = {
    "imagenet": Recipe("center-crop", mean=IMAGENET_MEAN, std=IMAGENET_STD, preset="imagenet"),
    "caffe": Recipe("center-crop", scale=1.0, mean=CAFFE_BGR_MEAN, color="BGR", preset="caffe"),
    "yolo": Recipe("letterbox", scale=1 / 255.0, pad_value=114.0, preset="yolo"),
    "clip": Recipe("center-crop", mean=(0.48145466, 0.4578275, 0.40821073), std=(0.26862954, 0.26130258, 0.27577711),
                   crop_ratio=1.0, preset="clip"),
    "text-strip": Recipe("keep-height", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), pad_value=0.0, preset="text-strip"),
    "grayscale": Recipe("stretch", color="L", mean=(0.0,), std=(1.0,), preset="grayscale"),
    "raw": Recipe("stretch", scale=1.0, preset="raw"),
}


ALLOWED["preset"] = "one of " + ", ".join(PRESETS) + " or custom"


def preset(name: str, **overrides) -> Recipe:
    if name not in PRESETS:
        raise StudioError(f"unknown preprocessing preset {name[:40]!r}; known: {', '.join(PRESETS)}",
                          code=ErrorCode.BAD_OPTION)
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


def _resample(name: str):
    from PIL import Image

    return {"bilinear": Image.BILINEAR, "nearest": Image.NEAREST, "bicubic": Image.BICUBIC,
            "lanczos": Image.LANCZOS}[name]


def apply_recipe(image, recipe: Recipe, size: tuple[int, int], layout: str, dtype: str,
                 channels: int | None = None) -> np.ndarray:
    """The batch-of-one tensor for ``image`` (a Pillow image) under ``recipe``; ``dtype`` is the
    model input's (the recipe's own dtype, when set, wins)."""
    from PIL import Image

    if recipe.dtype != "auto":
        dtype = recipe.dtype
    resample = _resample(recipe.interpolation)
    color = recipe.color if channels != 1 else "L"
    im = image.convert("RGB" if color == "BGR" else color)
    h, w = size
    if recipe.resize == "letterbox":
        r = min(h / im.height, w / im.width)
        nh, nw = max(1, round(im.height * r)), max(1, round(im.width * r))
        resized = im.resize((nw, nh), resample)
        fill = int(recipe.pad_value) if im.mode == "L" else (int(recipe.pad_value),) * 3
        canvas = Image.new(im.mode, (w, h), fill)
        canvas.paste(resized, ((w - nw) // 2, (h - nh) // 2))
        im = canvas
    elif recipe.resize == "center-crop":
        short = min(h, w) / recipe.crop_ratio
        r = short / min(im.height, im.width)
        nh, nw = max(h, round(im.height * r)), max(w, round(im.width * r))
        im = im.resize((nw, nh), resample)
        top, left = (nh - h) // 2, (nw - w) // 2
        im = im.crop((left, top, left + w, top + h))
    elif recipe.resize == "keep-height":
        nw = max(1, round(im.width * h / im.height)) if w == -1 else min(w, max(1, round(im.width * h / im.height)))
        resized = im.resize((nw, h), resample)
        if w != -1 and nw < w:
            fill = int(recipe.pad_value) if im.mode == "L" else (int(recipe.pad_value),) * 3
            canvas = Image.new(im.mode, (w, h), fill)
            canvas.paste(resized, (0, 0))
            resized = canvas
        im = resized
    elif recipe.resize == "stretch" or (im.height, im.width) != (h, w):
        im = im.resize((w, h), resample)
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
