"""Which preprocessing a model wants, from its own evidence, and why.

A wrong recipe silently feeds a model -2.1..2.6 where it expects -123..151, so the
suggestion reads what the model says before it guesses, and its reason names the
evidence: the image input (layout from dim denotations, a Transpose after it or its
shape; dtype), the normalization the graph does itself (leading Sub/Add/Mul/Div by
1- or 3-value constants: a mean in pixel units means 0..255 input, the order of an
ImageNet mean tells RGB from BGR), and the metadata (a ``preprocessing`` recipe,
``mean_values``/``scale_values``/``color_order``/``reverse_input_channels`` as
OpenVINO's Open Model Zoo writes them, ONNX's ``Image.BitmapPixelFormat`` and
``Image.NominalPixelRange``, Ultralytics' ``task``/``stride``). Only when none of it
is there does it fall back on conventions, and then it says that it is a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

import numpy as np
from onnx import ModelProto, TensorProto, numpy_helper

from studio.core.errors import StudioError
from studio.core.preprocess import IMAGENET_MEAN, PRESETS, Recipe, channel_layout, recipe_from_json
from studio.core.dim_hints import metadata_image_size
from studio.core.types import shape_text, value_info

_MAX_CONST = 64                      # constants read for evidence: per-channel vectors, never weights
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_MEAN_KEYS = ("mean_values", "mean_value", "mean", "means", "norm_mean", "pixel_mean", "image_mean")
_STD_KEYS = ("scale_values", "std_values", "std", "norm_std", "pixel_std", "image_std")
_COLOR_KEYS = ("color_order", "colour_order", "channel_order", "color_format", "pixel_format",
               "image.bitmappixelformat")
_RANGE_KEY = "image.nominalpixelrange"
_PASS_THROUGH = ("Identity", "Cast")


@dataclass(frozen=True)
class Suggestion:
    """A recipe, the evidence it rests on, and whether it is a guess."""

    recipe: Recipe
    reason: str                       # "input 'x' is NHWC float32 [...]; <evidence> → <conclusion>"
    evidence: tuple[str, ...]
    guess: bool

    def to_dict(self) -> dict:
        return {"recipe": self.recipe.to_dict(), "reason": self.reason, "evidence": list(self.evidence),
                "guess": self.guess}


def _fmt(values) -> str:
    return ", ".join(f"{float(v):.4g}" for v in values)


def _result(recipe: Recipe, evidence: list[str], conclusion: str, guess: bool = False) -> Suggestion:
    reason = "; ".join(evidence) + f" → {conclusion}" if evidence else conclusion
    return Suggestion(recipe, reason[:400], tuple(evidence), guess)


# ---------------------------------------------------------------------------- graph evidence

def _constants(model: ModelProto) -> dict[str, np.ndarray]:
    """Small constants (initializers and Constant nodes) by name; weights and external data are skipped."""
    out: dict[str, np.ndarray] = {}
    for t in model.graph.initializer:
        if t.data_location == TensorProto.EXTERNAL or int(np.prod(t.dims or [1])) > _MAX_CONST:
            continue
        try:
            out[t.name] = numpy_helper.to_array(t).astype(np.float64)
        except (ValueError, TypeError):
            continue
    for node in model.graph.node:
        if node.op_type != "Constant" or not node.output:
            continue
        for a in node.attribute:
            try:
                if a.name == "value" and int(np.prod(a.t.dims or [1])) <= _MAX_CONST:
                    out[node.output[0]] = numpy_helper.to_array(a.t).astype(np.float64)
                elif a.name == "value_float":
                    out[node.output[0]] = np.asarray([a.f])
                elif a.name == "value_floats" and len(a.floats) <= _MAX_CONST:
                    out[node.output[0]] = np.asarray(list(a.floats))
            except (ValueError, TypeError):
                continue
    return out


def _per_channel(c: np.ndarray, channels: int) -> np.ndarray | None:
    """A broadcastable constant as ``channels`` values (a scalar repeats), else None."""
    flat = np.asarray(c, np.float64).reshape(-1)
    if flat.size == 1:
        return np.repeat(flat, channels)
    if flat.size == channels and sum(d > 1 for d in np.shape(c)) == 1:
        return flat
    return None


@dataclass(frozen=True)
class _GraphNorm:
    first_op: str                     # Sub, Add, Mul or Div: the first affine op on the input
    first_const: tuple[float, ...]
    scale: np.ndarray                 # y = scale * x + shift, per channel, after all leading affine ops
    shift: np.ndarray
    ops: tuple[str, ...]
    transposed_to_nchw: bool


def _leading(model: ModelProto, name: str, channels: int) -> tuple[_GraphNorm | None, bool]:
    """The affine normalization the graph applies to input ``name`` before anything else,
    and whether a Transpose to NCHW follows the input."""
    consts = _constants(model)
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    a, b = np.ones(channels), np.zeros(channels)
    ops: list[str] = []
    first: tuple[str, tuple[float, ...]] | None = None
    transposed = False
    cur = name
    for _ in range(8):
        users = [n for n in consumers.get(cur, []) if n.op_type not in ("Shape", "Size")]
        if len(users) != 1 or not users[0].output:
            break
        node = users[0]
        if node.op_type in _PASS_THROUGH:
            cur = node.output[0]
            continue
        if node.op_type == "Transpose":
            perm = next((list(x.ints) for x in node.attribute if x.name == "perm"), [])
            transposed = transposed or perm == [0, 3, 1, 2]
            cur = node.output[0]
            continue
        if node.op_type not in ("Sub", "Add", "Mul", "Div") or len(node.input) != 2:
            break
        x_first = node.input[0] == cur
        other = node.input[1] if x_first else node.input[0]
        if other not in consts:
            break
        c = _per_channel(consts[other], channels)
        if c is None or (node.op_type == "Div" and (not x_first or np.any(c == 0))):
            break
        if node.op_type == "Sub":
            a, b = (a, b - c) if x_first else (-a, c - b)
        elif node.op_type == "Add":
            b = b + c
        elif node.op_type == "Mul":
            a, b = a * c, b * c
        else:
            a, b = a / c, b / c
        if first is None:
            first = (node.op_type, tuple(float(v) for v in np.asarray(consts[other]).reshape(-1)))
        ops.append(node.op_type)
        cur = node.output[0]
    if first is None:
        return None, transposed
    return _GraphNorm(first[0], first[1], a, b, tuple(ops), transposed), transposed


def _pixel_range(norm: _GraphNorm) -> str:
    """"0..255" or "0..1": the input range the graph's first normalization op implies."""
    c = np.abs(np.asarray(norm.first_const))
    if norm.first_op in ("Sub", "Add"):
        return "0..255" if c.max() > 1.5 else "0..1"
    if norm.first_op == "Mul":
        return "0..255" if c.max() <= 0.05 else "0..1"
    return "0..255" if c.min() >= 20 else "0..1"


def _order_of(mean01: np.ndarray) -> str | None:
    """RGB or BGR when a 3-value mean (in 0..1 units) is the ImageNet mean in one order."""
    if mean01.size != 3 or len({round(float(v), 3) for v in mean01}) < 3:
        return None
    ref = np.asarray(IMAGENET_MEAN)
    if np.abs(mean01 - ref).max() < 0.03:
        return "RGB"
    if np.abs(mean01 - ref[::-1]).max() < 0.03:
        return "BGR"
    return None


def _describe_ops(norm: _GraphNorm) -> str:
    verbs = {"Sub": "subtracts", "Add": "adds", "Mul": "multiplies by", "Div": "divides by"}
    c = norm.first_const
    value = f"a {len(c)}-value constant ({_fmt(c)})"
    rest = f", then {'/'.join(norm.ops[1:])}" if len(norm.ops) > 1 else ""
    return f"the graph first {verbs[norm.first_op]} {value}{rest}"


def _from_graph(norm: _GraphNorm, layout: str, channels: int) -> tuple[Recipe, str, str]:
    rng = _pixel_range(norm)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_x = np.where(norm.scale != 0, -norm.shift / norm.scale, 0.0)
    order = _order_of(mean_x / (255.0 if rng == "0..255" else 1.0)) if channels == 3 else None
    color = order or ("L" if channels == 1 else "RGB")
    base = PRESETS["imagenet"] if channels == 3 else PRESETS["grayscale"]
    recipe = replace(base, scale=1.0 if rng == "0..255" else 1 / 255.0, mean=(0.0,) * len(base.mean),
                     std=(1.0,) * len(base.std), color=color, layout=layout, preset="custom")
    evidence = _describe_ops(norm) + (f" (in {rng} units)" if norm.first_op in ("Sub", "Add") else "")
    if order == "BGR":
        evidence += ", in B,G,R order (the Caffe ImageNet mean)"
    elif order == "RGB":
        evidence += ", in R,G,B order (the ImageNet mean)"
    what = f"{color} pixels {'0–255' if rng == '0..255' else 'scaled to 0–1'}"
    conclusion = f"feed {what}, no mean or std here: the graph normalizes them itself"
    if channels == 3 and order is None:
        conclusion += " (colour order not recognised from the constants: RGB assumed)"
    return recipe, evidence, conclusion


# ---------------------------------------------------------------------------- metadata evidence

def _numbers(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in _NUM.findall(text)[:4])


def _from_metadata(meta: dict[str, str], layout: str, channels: int,
                   names: dict[str, str]) -> tuple[Recipe, str, str] | None:
    """A recipe from preprocessing entries in the metadata (``names``: the keys as written)."""
    found: list[str] = []
    mean = std = scale = color = None
    for k in _MEAN_KEYS:
        if k in meta and len(_numbers(meta[k])) in (1, 3):
            mean = _numbers(meta[k])
            found.append(f"{names[k][:40]}={meta[k][:40]}")
            break
    for k in _STD_KEYS:
        if k in meta and len(_numbers(meta[k])) in (1, 3) and all(v != 0 for v in _numbers(meta[k])):
            std = _numbers(meta[k])
            found.append(f"{names[k][:40]}={meta[k][:40]}")
            break
    for k in _COLOR_KEYS:
        v = meta.get(k, "").lower()
        if v:
            color = "BGR" if "bgr" in v else "RGB" if "rgb" in v else "L" if "gray" in v or "grey" in v else None
            if color:
                found.append(f"{names[k][:40]}={meta[k][:20]}")
                break
    if color is None and meta.get("reverse_input_channels", "").strip().lower() in ("true", "1", "yes"):
        color = "BGR"
        found.append("reverse_input_channels=true")
    rng = meta.get(_RANGE_KEY, "").lower()
    if rng:
        found.append(f"{names[_RANGE_KEY][:40]}={meta[_RANGE_KEY][:24]}")
        if "1_1" in rng:
            scale, mean, std = 1 / 127.5, mean or (1.0,), std or (1.0,)
        elif "0_1" in rng:
            scale = 1 / 255.0
        elif "255" in rng or "235" in rng:
            scale = 1.0
    if not found:
        return None
    if scale is None:
        scale = 1.0 if mean is not None and max(abs(v) for v in mean) > 1.5 else 1 / 255.0
    color = color or ("L" if channels == 1 else "RGB")
    n = 1 if color == "L" else 3
    mean = tuple(mean) if mean is not None else (0.0,) * n
    std = tuple(std) if std is not None else (1.0,) * n
    base = PRESETS["imagenet"] if channels != 1 else PRESETS["grayscale"]
    try:
        recipe = replace(base, scale=scale, mean=mean, std=std, color=color, layout=layout, preset="custom")
    except StudioError:
        return None
    if color == "BGR" and scale == 1.0 and any(mean) and max(mean) > 1.5:
        conclusion = "Caffe-style: BGR pixels 0–255 minus that mean, no scaling"
    else:
        units = "0–255" if scale == 1.0 else "0–1" if abs(scale - 1 / 255) < 1e-9 else f"x{scale:.4g}"
        conclusion = (f"{color} pixels {units}" + (f" minus {_fmt(mean)}" if any(mean) else "")
                      + (f" over {_fmt(std)}" if any(s != 1 for s in std) else ""))
    return recipe, "metadata says " + ", ".join(found), conclusion


# ---------------------------------------------------------------------------- the image input

def _dim_denotation_layout(vi) -> str | None:
    dims = [d.denotation for d in vi.type.tensor_type.shape.dim]
    if len(dims) == 4 and "DATA_CHANNEL" in dims:
        return "NCHW" if dims.index("DATA_CHANNEL") == 1 else "NHWC" if dims.index("DATA_CHANNEL") == 3 else None
    return None


def suggest(model: ModelProto) -> Suggestion:
    """The recipe for the model's image input, from its evidence; a guess only when there is none."""
    meta = {p.key.strip().lower(): p.value[:200] for p in model.metadata_props}
    names = {p.key.strip().lower(): p.key.strip() for p in model.metadata_props}
    init = {t.name for t in model.graph.initializer}
    vis = [v for v in model.graph.input if v.name not in init]
    image_vi = next((v for v in vis if (value_info(v).shape is not None and len(value_info(v).shape) == 4)), None)
    if image_vi is None:
        return _result(PRESETS["raw"], [], "the model has no 4-D image input: raw values")
    image = value_info(image_vi)
    name = image.name[:40]
    if image.dtype == "uint8":
        return _result(PRESETS["raw"], [f"input '{name}' takes uint8 {shape_text(image.shape)}"],
                       "pixels fed as they are (0–255 integers)")
    layout = _dim_denotation_layout(image_vi)
    how = "by its dim denotations" if layout else ""
    if layout is None:
        try:
            layout = channel_layout(image.shape)
        except StudioError:
            layout = None
    channels_guess = 3
    if layout is not None:
        c = image.shape[1] if layout == "NCHW" else image.shape[3]
        channels_guess = c if isinstance(c, int) else 3
    norm, transposed = _leading(model, image_vi.name, channels_guess)
    if layout is None and transposed:
        layout, how = "NHWC", "a Transpose to NCHW follows it"
    elif layout == "NHWC" and transposed and not how:
        how = "a Transpose to NCHW follows it"
    if layout is None:
        return _result(PRESETS["raw"], [f"input '{name}' is {image.dtype} {shape_text(image.shape)}"],
                       "the channel axis is unclear: raw values (give the layout)", guess=True)
    channels = channels_guess
    head = f"input '{name}' is {layout} {image.dtype} {shape_text(image.shape)}" + (f" ({how})" if how else "")
    evidence = [head]
    explicit = meta.get("preprocessing")
    if explicit:
        try:
            recipe = recipe_from_json(explicit, "metadata preprocessing")
            return _result(recipe, [*evidence, "metadata gives a preprocessing recipe"], recipe.describe())
        except StudioError as exc:
            evidence.append(f"the metadata preprocessing entry is unusable ({str(exc)[:80]})")
    if norm is not None:
        recipe, ev, conclusion = _from_graph(norm, layout, channels)
        return _result(recipe, [*evidence, ev], conclusion)
    evidence.append("no normalization in the graph")
    from_meta = _from_metadata(meta, layout, channels, names)
    if from_meta is not None:
        recipe, ev, conclusion = from_meta
        return _result(recipe, [*evidence, ev], conclusion)
    task = meta.get("task", "").lower()
    if task in ("detect", "segment", "pose", "obb") or metadata_image_size(model) is not None and "stride" in meta:
        return _result(PRESETS["yolo"], [*evidence, f"metadata says task={task or 'detect'} (Ultralytics-style)"],
                       "letterbox, RGB 0..1, grey padding 114")
    h = image.shape[2] if layout == "NCHW" else image.shape[1]
    w = image.shape[3] if layout == "NCHW" else image.shape[2]
    if isinstance(h, int) and h <= 64 and not isinstance(w, int):
        return _result(PRESETS["text-strip"], [*evidence, f"height {h} with a free width"],
                       "a text-line recognizer: grey strip, keep aspect, -1..1", guess=True)
    if channels == 1:
        return _result(PRESETS["grayscale"], [*evidence, "one channel"], "grey pixels 0..1", guess=True)
    if "pixel_values" in image.name and "clip" in (model.producer_name + model.doc_string).lower():
        return _result(PRESETS["clip"], [*evidence, "a CLIP-style pixel_values input"], "CLIP mean/std",
                       guess=True)
    recipe = replace(PRESETS["imagenet"], layout=layout) if how else PRESETS["imagenet"]
    tail = ("; NHWC exports (TensorFlow, Keras, Caffe converters) also often take Caffe-style BGR 0–255 minus "
            "mean, or -1..1" if layout == "NHWC" else "")
    return _result(recipe, [*evidence, "no preprocessing metadata"],
                   f"ImageNet mean/std on RGB 0–1 (a guess: change it if your model differs{tail})", guess=True)


def suggest_recipe(model: ModelProto) -> tuple[Recipe, str]:
    """A recipe for the model's image input and why, from its evidence (graph, metadata, input)."""
    s = suggest(model)
    return s.recipe, s.reason
