"""What a model says about the size of its dynamic dims.

A detector exported for 320x320 says so in its metadata (Ultralytics writes
``imgsz: [320, 320]``), an image input with one free side usually has a static
other side, a graph that resizes (or reshapes) its input to a constant size says
that size, and a dim named ``height_320`` (or ``640``, ``h=640``) carries its value. Seeding, shape
fixes, export verification and TensorRT profiles should start from those values,
not from a silent 224 (or 16 tokens): every value here carries its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from onnx import ModelProto

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


@dataclass(frozen=True)
class DimHint:
    """A suggested value for one dynamic dim of one input axis, and why."""

    input: str
    axis: int
    key: str            # the dim's name, or INPUT[AXIS] for an unnamed dim
    value: int
    source: str         # "metadata imgsz=[320, 320]", "static width 320", "dim name"

    def to_dict(self) -> dict:
        return {"input": self.input, "axis": self.axis, "dim": self.key, "value": self.value, "source": self.source}


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


def _image_axes(shape: list, elem_is_float: bool) -> tuple[int, int] | None:
    if len(shape) != 4 or not elem_is_float:
        return None
    if shape[1] in (1, 3, 4):
        return (2, 3)
    if shape[3] in (1, 3, 4):
        return (1, 2)
    return None


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
        spatial = _image_axes(shape, tt.elem_type in float_types)
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
            return DimHint(name, axis, key, meta[0][side], meta[1])
        other = shape[spatial[1 - side]]
        if isinstance(other, int) and other >= 8:
            return DimHint(name, axis, key, other, f"static {'width' if side == 0 else 'height'} {other}")
    m = _NAME_NUMBER.search(key) if isinstance(key, str) and "[" not in key else None
    if m is not None and int(m.group(1)) > 1:
        return DimHint(name, axis, key, int(m.group(1)), "dim name")
    m = _NAME_DEFAULT.match(key.strip()) if isinstance(key, str) and "[" not in key else None
    if m is not None and int(m.group(1)) > 1:
        return DimHint(name, axis, key, int(m.group(1)), "the dim's default in its name")
    return None


def hints_by_key(model: ModelProto) -> dict[str, DimHint]:
    return {h.key: h for h in dim_hints(model)}
