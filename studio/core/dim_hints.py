"""What a model says about the size of its dynamic dims.

A detector exported for 320x320 says so in its metadata (Ultralytics writes
``imgsz: [320, 320]``), a graph that resizes (or reshapes) its input to a constant size says
that size, and a dim named ``height_320`` (or ``640``, ``h=640``) carries its value. Seeding, shape
fixes, export verification and TensorRT profiles should start from those values,
not from a silent 224 (or 16 tokens): every value here carries its reason and where it came from
(``origin``: metadata, graph, name rule).

Never made up (issue 32 item 5): exporters name the dims they know nothing about (tf2onnx ``unk__214``,
paddle2onnx ``p2o.DynamicDimension.0``, torch dynamo ``s0``, ``Addoutput_dim_0``): the number in such a
name is a counter, not a size (magika's ``unk__214`` was proposed as 214). A float 4-D tensor is an image
only when its free axes are not named for a sequence and the tensor is no cache: a GPT-2 decoder's
``past_key_values [batch, 4, past_sequence_length, 8]`` has 4 heads, not 4 channels, and its head size 8
is no "static width" of the past length. Nor is an image's static side a size for its free side: a text-line
recogniser fixes its height (PP-OCR 48, ddddocr 64) and leaves its width free because lines differ in length.
A dim written as a formula of other input dims
(``past_sequence_length + sequence_length``) is derived: computed from its parts, never set on its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from onnx import ModelProto

from studio.core.errors import StudioError
from studio.core.dimexpr import evaluate
from studio.core.dimexpr import free_names
from studio.core.error_codes import ErrorCode

_SIZE_KEYS = ("imgsz", "img_size", "image_size", "input_size", "input_shape", "imgsize", "image_shape",
              "resolution")
_MAX_VALUE_CHARS = 200
_NUM = re.compile(r"\d{1,6}")
_NAME_NUMBER = re.compile(r"(?:^|[_\-])(\d{2,5})$")
_NAME_DEFAULT = re.compile(r"^(?:[A-Za-z_]\w{0,40}\s*[=:]\s*)?(\d{1,5})$")    # "640", "height=640", "h: 640"
_PASS_THROUGH = frozenset({"Cast", "Identity", "Sub", "Div", "Mul", "Add", "Clip", "Relu", "Neg", "Sqrt",
                           "BatchNormalization", "InstanceNormalization", "DequantizeLinear", "QuantizeLinear"})
_MAX_WALK = 64
_MIN_SIDE, _MAX_SIDE = 8, 16384

# Names exporters give dims they know nothing about: a counter, never a size.
_AUTO_NAME = re.compile(
    r"^(?:unk__\d+"                              # tf2onnx, ONNX/ORT symbolic shape inference
    r"|p2o\.DynamicDimension\.\d+"               # paddle2onnx
    r"|DynamicDimension\.\d+"
    r"|[su]\d+"                                  # torch dynamo symbols (s0, s77; u0 unbacked)
    r"|\w*_dim_\d+"                              # torch.onnx's TorchScript path (Addoutput_dim_0)
    r"|\?|-1|None|N/A|dynamic|unk|unknown)$", re.I)
# A free axis named like this is a sequence (tokens, time, cache), never an image's height or width.
_SEQ_AXIS = re.compile(r"seq|len|token|time|step|frame|word|past|total|cache|context|position", re.I)
# A tensor named like this carries a decoder's or an RNN's state, never an image.
_STATE_INPUT = re.compile(r"past|present|cache|key|value|state|hidden|\bh0\b|\bc0\b|kv", re.I)
ORIGINS = ("metadata", "graph", "name rule")


@dataclass(frozen=True)
class DimHint:
    """A suggested value for one dynamic dim of one input axis, and why."""

    input: str
    axis: int
    key: str            # the dim's name, or INPUT[AXIS] for an unnamed dim
    value: int
    source: str         # "metadata imgsz=[320, 320]", "Resize to [1, 3, 224, 224] (resize)", "dim name"
    origin: str = "name rule"   # one of ORIGINS: where the value came from

    def to_dict(self) -> dict:
        return {"input": self.input, "axis": self.axis, "dim": self.key, "value": self.value, "source": self.source,
                "origin": self.origin}


def is_auto_name(dim: object) -> bool:
    """True for a dim name an exporter made up (``unk__214``, ``p2o.DynamicDimension.0``, ``s0``,
    ``Addoutput_dim_0``, ``?``): it says nothing about the size, and its number is a counter."""
    return isinstance(dim, str) and bool(_AUTO_NAME.match(dim.strip()))


def metadata_image_size(model: ModelProto) -> tuple[tuple[int, int], str] | None:
    """(height, width) from the metadata when the exporter wrote one, with the entry's text."""
    for prop in model.metadata_props:
        key = prop.key.strip().lower()
        if key not in _SIZE_KEYS:
            continue
        text = prop.value[:_MAX_VALUE_CHARS]
        nums = [int(n) for n in _NUM.findall(text) if 8 <= int(n) <= 16384]
        if not nums:
            continue
        if key in ("input_shape", "image_shape") and len(nums) >= 2:
            nums = nums[-2:]          # NCHW / [h, w]: the spatial pair is last
        h, w = (nums[0], nums[0]) if len(nums) == 1 else (nums[0], nums[1])
        return (h, w), f"metadata {prop.key[:40]}={text[:40]}"
    return None


def _constant_ints(model: ModelProto) -> dict[str, list[int]]:
    """Small integer constants (initializers and Constant nodes) by value name."""
    from onnx import TensorProto, helper, numpy_helper

    out: dict[str, list[int]] = {}
    ints = {TensorProto.INT64, TensorProto.INT32}
    tensors = [(t.name, t) for t in model.graph.initializer
               if t.data_type in ints and t.data_location != TensorProto.EXTERNAL]
    tensors += [(n.output[0], helper.get_attribute_value(a)) for n in model.graph.node
                if n.op_type == "Constant" and n.output for a in n.attribute if a.name == "value"
                and a.t.data_type in ints]
    for name, t in tensors:
        if len(t.dims) == 1 and 0 < t.dims[0] <= 8:
            try:
                out[name] = [int(v) for v in numpy_helper.to_array(t).ravel()]
            except (ValueError, TypeError):
                continue
    return out


def graph_image_size(model: ModelProto, name: str, spatial: tuple[int, int]) -> tuple[tuple[int, int], str] | None:
    """(height, width) the graph itself fixes for image input ``name``: a Resize to constant ``sizes``
    or a Reshape to a constant 4-D shape, reached through elementwise steps (normalization)."""
    consts = _constant_ints(model)
    consumers: dict[str, list] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    frontier, seen = [name], set()
    while frontier and len(seen) < _MAX_WALK:
        value = frontier.pop(0)
        if value in seen:
            continue
        seen.add(value)
        for n in consumers.get(value, ()):
            if n.domain not in ("", "ai.onnx") or not n.input or n.input[0] != value:
                continue
            target = None
            if n.op_type == "Resize" and len(n.input) > 3:
                target, what = consts.get(n.input[3]), "Resize to"
            elif n.op_type == "Reshape" and len(n.input) > 1:
                target, what = consts.get(n.input[1]), "Reshape to"
            if target is not None and len(target) == 4:
                h, w = target[spatial[0]], target[spatial[1]]
                if _MIN_SIDE <= h <= _MAX_SIDE and _MIN_SIDE <= w <= _MAX_SIDE:
                    return (h, w), f"{what} {target} ({(n.name or n.op_type)[:40]})"
            if n.op_type in _PASS_THROUGH:
                frontier.extend(o for o in n.output if o)
    return None


def image_axes(name: str, shape: Sequence, is_float: bool) -> tuple[int, int] | None:
    """The (height, width) axes of a float NCHW/NHWC image input (1, 3 or 4 channels), else None.

    Not an image: a tensor named as a cache or state (``past_key_values.0.key [batch, 4, past, 8]``:
    4 heads, not 4 channels), or one whose free axes are named for a sequence (``past_sequence_length``)."""
    if len(shape) != 4 or not is_float or _STATE_INPUT.search(name or ""):
        return None
    axes = (2, 3) if shape[1] in (1, 3, 4) else (1, 2) if shape[3] in (1, 3, 4) else None
    if axes is None or any(isinstance(shape[a], str) and _SEQ_AXIS.search(shape[a]) for a in axes):
        return None
    return axes


def dim_hints(model: ModelProto) -> tuple[DimHint, ...]:
    """Suggested values for the dynamic dims of the model's inputs (only where the model says)."""
    from onnx import TensorProto

    init = {t.name for t in model.graph.initializer}
    meta = metadata_image_size(model)
    float_types = {TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16}
    hints: list[DimHint] = []
    seen: set[str] = set()
    for vi in model.graph.input:
        if vi.name in init or vi.type.WhichOneof("value") != "tensor_type":
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        dims = list(tt.shape.dim)
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (d.dim_param or None)
                 for d in dims]
        spatial = image_axes(vi.name, shape, tt.elem_type in float_types)
        size = meta
        if size is None and spatial is not None and any(not isinstance(shape[a], int) for a in spatial):
            size = graph_image_size(model, vi.name, spatial)
        for axis, d in enumerate(shape):
            if isinstance(d, int):
                continue
            key = d if isinstance(d, str) else f"{vi.name}[{axis}]"
            if key in seen:
                continue
            hint = _hint_for(vi.name, axis, key, shape, spatial, size)
            if hint is not None:
                seen.add(key)
                hints.append(hint)
    return tuple(hints)


def _hint_for(name: str, axis: int, key: str, shape: list, spatial: tuple[int, int] | None,
              meta: tuple[tuple[int, int], str] | None) -> DimHint | None:
    if spatial is not None and axis in spatial:
        side = spatial.index(axis)
        if meta is not None:
            origin = "graph" if meta[1].startswith(("Resize", "Reshape")) else "metadata"
            return DimHint(name, axis, key, meta[0][side], meta[1], origin)
    if "[" in key or is_auto_name(key):
        return None                      # an exporter's counter (unk__214) is no size
    m = _NAME_NUMBER.search(key)
    if m is not None and int(m.group(1)) > 1:
        return DimHint(name, axis, key, int(m.group(1)), "dim name", "name rule")
    m = _NAME_DEFAULT.match(key.strip())
    if m is not None and int(m.group(1)) > 1:
        return DimHint(name, axis, key, int(m.group(1)), "the dim's default in its name", "name rule")
    return None


# ---------------------------------------------------------------------------- derived dims

_PLAIN_DIM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class DerivedDim:
    """An input dim written as a formula of other input dims (``past_sequence_length + sequence_length``
    on an optimum decoder's attention mask, ``2*s0``): its value follows from ``parts``."""

    key: str
    parts: tuple[str, ...]

    def value(self, dims: Mapping[str, int]) -> int | None:
        return evaluate(self.key, dims)

    def to_dict(self) -> dict:
        return {"dim": self.key, "parts": list(self.parts)}


def derived_dims(names: Sequence[object]) -> tuple[DerivedDim, ...]:
    """The derived dims among the input dim names ``names``: formulas whose every name is a plain dim
    of the inputs (a label such as ``batch-size`` or a formula over unknown names is a name of its own)."""
    plain = {d for d in names if isinstance(d, str) and _PLAIN_DIM.match(d)}
    out: dict[str, DerivedDim] = {}
    for d in names:
        if not isinstance(d, str) or d in plain or d in out:
            continue
        parts = free_names(d)
        if parts and parts <= plain:
            out[d] = DerivedDim(d, tuple(sorted(parts)))
    return tuple(out.values())


def model_derived_dims(model: ModelProto) -> tuple[DerivedDim, ...]:
    """:func:`derived_dims` over the dims of ``model``'s inputs."""
    init = {t.name for t in model.graph.initializer}
    names = [d.dim_param for vi in model.graph.input if vi.name not in init
             and vi.type.WhichOneof("value") == "tensor_type" for d in vi.type.tensor_type.shape.dim
             if d.dim_param]
    return derived_dims(names)


def resolve_derived(derived: Sequence[DerivedDim], given: Mapping[str, int], in_use: Mapping[str, int]
                    ) -> dict[str, int]:
    """Values of the derived dims from their parts' values ``in_use`` (the user's and the defaults), and a
    one-line error when the user ``given`` a derived dim a value its parts contradict (ONNX Runtime
    would stop at the first Add with a truncated message)."""
    out: dict[str, int] = {}
    for d in derived:
        value = d.value(in_use)
        if d.key in given and value is not None and int(given[d.key]) != value:
            parts = ", ".join(f"{p}={in_use[p]}" for p in d.parts if p in in_use)
            unset = [p for p in d.parts if p not in given]
            how = (f"set {' and '.join(unset)} instead" if unset else f"set it to {value} or leave it out")
            raise StudioError(f"dim '{d.key[:80]}' is derived from {', '.join(d.parts)}: it is {value} at {parts}, "
                              f"not {int(given[d.key])}; {how}", code=ErrorCode.BAD_DIM)
        if value is not None and value > 0:
            out[d.key] = value
    return out
