"""Names for ONNX types and shapes, shared by every layer (inspect, feeds, export)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto, TensorProto, TypeProto, ValueInfoProto, helper

Dim = int | str | None          # int: known, str: symbolic name, None: unknown


@functools.lru_cache(maxsize=256)
def dtype_name(elem_type: int) -> str:
    """'float32', 'int64', 'bfloat16', 'float8_e4m3fn', 'string'... for an ONNX elem_type (once per type: numpy's
    dtype naming was a third of the shape worker's table on a 10k-node model)."""
    if elem_type == TensorProto.STRING:
        return "string"
    if elem_type == TensorProto.UNDEFINED:
        return "undefined"
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, ValueError, TypeError):
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else ""
        return name.lower() or f"dtype{elem_type}"


def np_dtype(elem_type: int) -> np.dtype:
    """numpy dtype of an ONNX elem_type (ml_dtypes types for bfloat16/float8)."""
    if elem_type == TensorProto.STRING:
        return np.dtype(object)
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


@dataclass(frozen=True)
class TensorInfo:
    """Type and shape of one value. ``shape`` None means the rank is unknown."""

    name: str
    dtype: str
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"     # tensor | sequence | map | optional | sparse_tensor | unknown
    elem_type: int = 0

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    def shape_text(self, max_dim_chars: int = 24) -> str:
        return shape_text(self.shape, max_dim_chars)

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "kind": self.kind,
                "shape": None if self.shape is None else list(self.shape)}


def shape_text(shape: tuple[Dim, ...] | None, max_dim_chars: int = 24) -> str:
    """'[batch, 3, 224, 224]' with absurdly long symbolic names shortened."""
    if shape is None:
        return "?"
    parts = []
    for d in shape:
        if d is None:
            parts.append("?")
        elif isinstance(d, str):
            parts.append(d if len(d) <= max_dim_chars else d[: max_dim_chars - 1] + "…")
        else:
            parts.append(str(d))
    return "[" + ", ".join(parts) + "]"


# Dim "names" that are placeholders for "unknown", not symbols: paddle2onnx writes ``?`` on every free axis of
# an OCR input ([-1, 3, '?', '?']: height and width differ), so reading them as one shared symbol would pin
# both axes to one size. ONNX Runtime and OpenVINO do not tie such axes either.
_PLACEHOLDER_DIMS = frozenset({"", "?", "-1", "none", "n/a", "unk", "unknown", "dynamic"})


def is_placeholder_dim(name: str) -> bool:
    """True for a dim_param that means "any size" (``?``, ``-1``, ``unknown``…): each axis is its own dim."""
    return name.strip().lower() in _PLACEHOLDER_DIMS


def _dims(tensor_type) -> tuple[Dim, ...] | None:
    """Dims of a tensor type. A negative ``dim_value`` (paddle2onnx and old exporters write
    -1 for "any size") is read as an unknown dim, as ONNX Runtime and OpenVINO read it; so is a
    placeholder name (:func:`is_placeholder_dim`)."""
    if not tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for d in tensor_type.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value) if d.dim_value >= 0 else None)
        elif d.HasField("dim_param") and d.dim_param and not is_placeholder_dim(d.dim_param):
            dims.append(d.dim_param[:1024])
        else:
            dims.append(None)
    return tuple(dims)


def type_info(name: str, tp: TypeProto) -> TensorInfo:
    """TensorInfo of any TypeProto (tensors, sequences, maps, optionals)."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        t = tp.tensor_type
        return TensorInfo(name, dtype_name(t.elem_type), _dims(t), "tensor", t.elem_type)
    if which == "sparse_tensor_type":
        t = tp.sparse_tensor_type
        return TensorInfo(name, dtype_name(t.elem_type), _dims(t), "sparse_tensor", t.elem_type)
    if which == "sequence_type":
        inner = type_info(name, tp.sequence_type.elem_type)
        return TensorInfo(name, f"seq({inner.dtype})", inner.shape, "sequence", inner.elem_type)
    if which == "map_type":
        val = type_info(name, tp.map_type.value_type)
        return TensorInfo(name, f"map({dtype_name(tp.map_type.key_type)},{val.dtype})", None, "map")
    if which == "optional_type":
        inner = type_info(name, tp.optional_type.elem_type)
        return TensorInfo(name, f"optional({inner.dtype})", inner.shape, "optional", inner.elem_type)
    return TensorInfo(name, "undefined", None, "unknown")


def value_info(vi: ValueInfoProto) -> TensorInfo:
    return type_info(vi.name, vi.type)


def clear_unknown_dims(model) -> list[str]:
    """Make every non-positive ``dim_value`` of a model's graph inputs, outputs and value_info an unnamed dim,
    in place; returns the graph inputs' ones as ``name[axis]=value``. paddle2onnx and older exporters write
    ``-1`` (some ``0``) for "any size"; ONNX Runtime and OpenVINO read a negative one as unknown, as
    :func:`type_info` does, but a converter may take any int for a static size (onnx2tf made a Keras input of
    size -1, which TensorFlow refuses). An unnamed dim is what every converter reads as dynamic."""
    out = []
    inits = {t.name for t in model.graph.initializer}
    for group, named in ((model.graph.input, True), (model.graph.output, False), (model.graph.value_info, False)):
        for vi in group:
            if vi.name in inits or not vi.type.HasField("tensor_type") or \
                    not vi.type.tensor_type.HasField("shape"):
                continue
            for axis, d in enumerate(vi.type.tensor_type.shape.dim):
                if d.HasField("dim_value") and d.dim_value <= 0:
                    if named:
                        out.append(f"{vi.name}[{axis}]={d.dim_value}")
                    d.ClearField("dim_value")
    return out


def pin_inputs(view: ModelProto, shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """Set the graph inputs of ``view`` (a copy) to ``shapes`` in place, and drop every
    intermediate and output shape the file declares: the exporter's value_info (its dim
    formulas, stale numbers) would otherwise be merged into what inference (or a converter reading
    the copy: OpenVINO at the run's input shapes) computes. Returns the inputs whose declared shape
    changed (a dynamic or different dim made the given size)."""
    changed = []
    for vi in view.graph.input:
        shape = shapes.get(vi.name)
        if shape is None or vi.type.WhichOneof("value") != "tensor_type" or not vi.type.tensor_type.HasField("shape"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) != len(shape):
            continue
        if any(not d.HasField("dim_value") or d.dim_value != int(v) for d, v in zip(dims, shape)):
            changed.append(vi.name)
        for d, value in zip(dims, shape):
            d.dim_value = int(value)          # clears dim_param (a oneof)
    del view.graph.value_info[:]
    for vi in view.graph.output:
        if vi.type.WhichOneof("value") == "tensor_type":
            vi.type.tensor_type.ClearField("shape")
    return changed
