"""Model inputs: seeded random feeds that respect each input's dtype, rank and a
sensible value range, user .npz files, and image folders with preprocessing.
The same feeds drive calibration, verification and profiling.

Value ranges come from the graph where possible: an integer input used as
Gather indices gets ids below the gathered table's size (token ids within the
vocabulary), one used as OneHot indices ids below its depth, and a float input
the graph casts to such indices whole numbers in that range; names decide the rest (masks are ones, token-type ids zeros,
position ids a range).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import GraphProto, ModelProto, NodeProto, TensorProto, load_model

from studio.core.dim_hints import dim_hints
from studio.core.errors import StudioError
from studio.core.paths import check_regular_file, user_data_path
from studio.core.types import Dim, TensorInfo, np_dtype, value_info
from studio.core.protowalk import iter_graphs, iter_nodes
from studio.core.dim_hints import image_axes as _axes
from studio.core.dim_hints import derived_dims, resolve_derived
from studio.core.error_codes import ErrorCode
from studio.core.outputs import register_input
from studio.core.tensor_safety import MAX_ARRAY_BYTES
from studio.core.tensor_safety import load_npz as read_arrays
from studio.core.outputs import open_output

Feeds = dict[str, object]       # name -> np.ndarray, or list[np.ndarray] for sequence inputs

SEQ_NAMES = re.compile(r"seq|len|token|time|step|frame|word|src|tgt|past|total", re.I)
_PASS_THROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose"}
# Ops whose data input's elements come out unchanged, some of them (torch's dynamo exporter writes
# ``sr == 16000`` on a scalar as Reshape([-1]) -> Gather(0) -> Equal).
_PICKS = {"Slice", "Gather", "Split"}
_INT_TYPES = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
              TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}


@dataclass(frozen=True)
class InputSpec:
    """What an input needs: dtype, shape (symbolic dims kept) and a value range."""

    name: str
    dtype: str                       # numpy dtype name ('float32', 'int64', 'bool', ...)
    shape: tuple[Dim, ...] | None
    kind: str = "tensor"             # tensor | sequence | optional | map
    low: float | None = None         # values drawn in [low, high) for integer inputs
    high: float | None = None
    role: str = "generic"            # generic | token_ids | indices | mask | token_type | positions | scalar | compared
                                     # | recurrent_state
    hinted: tuple[tuple[int, int], ...] = ()   # (axis, value) the model itself suggests (studio.core.dim_hints)

    def hint(self, axis: int) -> int | None:
        return next((v for a, v in self.hinted if a == axis), None)

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "kind": self.kind, "role": self.role,
                "shape": None if self.shape is None else list(self.shape), "low": self.low, "high": self.high}


MAX_RANK = 64        # NumPy arrays (and so every feed) have at most 64 dimensions (R38)


def _consumers(graph: GraphProto) -> dict[str, list[tuple[NodeProto, int]]]:
    """Value name -> every (node, input position) of ``graph`` that reads it."""
    consumers: dict[str, list[tuple[NodeProto, int]]] = {}
    for n in graph.node:
        for i, name in enumerate(n.input):
            consumers.setdefault(name, []).append((n, i))
    return consumers


def _gather_bounds(model: ModelProto) -> dict[str, int]:
    """For values used (possibly through Cast/Reshape...) as Gather indices: the table size."""
    g = model.graph
    init_dims = {t.name: list(t.dims) for t in g.initializer}
    consumers = _consumers(g)
    bounds: dict[str, int] = {}
    for vi in g.input:
        for n, i in value_uses(vi.name, consumers):
            if n.op_type == "Gather" and i == 1 and n.input[0] in init_dims:
                axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
                table = init_dims[n.input[0]]
                if table and -len(table) <= axis < len(table):
                    size = int(table[axis])
                    bounds[vi.name] = min(bounds.get(vi.name, size), size)
    return bounds


def _one_hot_bounds(model: ModelProto) -> dict[str, int]:
    """For inputs used (possibly through Cast/Reshape...) as OneHot indices: the depth, when it is a constant
    (magika's float "bytes" input, cast to int for a OneHot of depth 257: N(0, 1) floats would cover ~5 of
    its values)."""
    g = model.graph
    depths = scalar_int_constants(model)
    consumers = _consumers(g)
    bounds: dict[str, int] = {}
    for vi in g.input:
        for n, i in value_uses(vi.name, consumers):
            if n.op_type == "OneHot" and i == 0 and len(n.input) > 1 and depths.get(n.input[1], 0) > 0:
                bounds[vi.name] = min(bounds.get(vi.name, depths[n.input[1]]), depths[n.input[1]])
    return bounds


def _class_set_bounds(model: ModelProto) -> dict[str, tuple[int, int]]:
    """For integer inputs compared with Equal against a constant vector of classes (jax's one_hot writes
    ``Equal(ids, iota[0..depth))``: corpus magika_standard_v3_3's ``bytes`` against 0..256): the classes'
    range [min, max + 1). Seeded 0..9, such an input would reach 10 of its 257 rows."""
    from onnx import numpy_helper

    g = model.graph
    vectors: dict[str, tuple[int, int]] = {}
    for t in g.initializer:
        if t.data_location == 1 or t.data_type not in _INT_TYPES:
            continue
        try:
            arr = numpy_helper.to_array(t).reshape(-1)
        except Exception:  # noqa: BLE001 - a malformed constant is simply not used
            continue
        if 1 < arr.size <= 1 << 20 and np.unique(arr).size == arr.size:
            vectors[t.name] = (int(arr.min()), int(arr.max()) + 1)
    consumers = _consumers(g)
    found: dict[str, tuple[int, int]] = {}
    for vi in g.input:
        for n, i in value_uses(vi.name, consumers):
            if n.op_type in _COMPARE_OPS and len(n.input) == 2 and i in (0, 1) and n.input[1 - i] in vectors:
                found[vi.name] = vectors[n.input[1 - i]]
                break
    return found


def value_uses(name: str, consumers: Mapping[str, Sequence[tuple[NodeProto, int]]]
               ) -> Iterator[tuple[NodeProto, int]]:
    """Every (node, input position) that reads ``name`` or a value carried on from it unchanged in meaning
    (the first input of a Cast, Reshape, Unsqueeze..., or of a Gather/Slice/Split that picks some of its
    elements), each value followed once; ``consumers``: value name -> its (node, position) uses."""
    frontier, seen = [name], set()
    while frontier:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for n, i in consumers.get(value, []):
            yield n, i
            if (n.op_type in _PASS_THROUGH or n.op_type in _PICKS) and i == 0:
                frontier.extend(n.output)


_COMPARE_OPS = {"Equal"}


def scalar_int_constants(model: ModelProto) -> dict[str, int]:
    """Integer one-element constants (initializers and Constant nodes) of every graph, by value name."""
    from onnx import numpy_helper

    out: dict[str, int] = {}
    for ref in iter_graphs(model):
        tensors = [(t.name, t) for t in ref.graph.initializer]
        tensors += [(n.output[0], a.t) for n in ref.graph.node if n.op_type == "Constant" and n.output
                    for a in n.attribute if a.name == "value" and a.HasField("t")]
        for name, t in tensors:
            if len(t.dims) > 1 or (t.dims and t.dims[0] != 1) or t.data_location == 1:
                continue
            try:
                arr = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - a malformed constant is simply not used
                continue
            if arr.size == 1 and arr.dtype.kind in "iu":
                out[name] = int(arr.reshape(-1)[0])
    return out


def _compared_values(model: ModelProto) -> dict[str, int]:
    """For integer inputs tested with Equal against a constant (Silero VAD's ``sr == 16000``
    choosing an If branch): that constant. A random value would take a branch the model
    never takes in use, and often fails there."""
    consts = scalar_int_constants(model)
    consumers = _consumers(model.graph)
    found: dict[str, int] = {}
    for vi in model.graph.input:
        for n, i in value_uses(vi.name, consumers):
            if n.op_type in _COMPARE_OPS and len(n.input) == 2 and i in (0, 1) and n.input[1 - i] in consts:
                found[vi.name] = consts[n.input[1 - i]]
                break
    return found


# Ops that hand a recurrent state on to the op that reads it (a slice of the stacked h/c, a reshape...).
_STATE_CARRY = _PASS_THROUGH | _PICKS
_STATE_SLOTS = {"LSTM": (5, 6), "GRU": (5,), "RNN": (5,)}      # initial_h (and LSTM's initial_c)


def recurrent_state_inputs(model: ModelProto) -> frozenset[str]:
    """Inputs that reach an LSTM/GRU/RNN's initial state through slicing and reshaping alone, in any graph
    (an If's branch output carries on as the If's output): a streaming model's state ``[layers, batch,
    hidden]``. Its free dims are the batch, which must match the batch of the other inputs (Silero VAD's
    ``state [2, ?, 128]``: at 16, or at the audio's length, the LSTM refuses every run)."""
    consumers: dict[str, list[tuple[NodeProto, int]]] = {}
    carried: dict[str, list[str]] = {}           # a branch output -> the If output it becomes
    for ref in iter_nodes(model):
        for i, name in enumerate(ref.node.input):
            consumers.setdefault(name, []).append((ref.node, i))
        if ref.node.op_type == "If":
            for attr in ref.node.attribute:
                if attr.HasField("g"):
                    for k, o in enumerate(attr.g.output[:len(ref.node.output)]):
                        carried.setdefault(o.name, []).append(ref.node.output[k])
    init = {t.name for t in model.graph.initializer}
    found: set[str] = set()
    for vi in model.graph.input:
        if vi.name in init:
            continue
        frontier, seen = [vi.name], set()
        while frontier and vi.name not in found:
            name = frontier.pop()
            if name in seen:
                continue
            seen.add(name)
            frontier.extend(carried.get(name, ()))
            for n, i in consumers.get(name, []):
                if i in _STATE_SLOTS.get(n.op_type, ()):
                    found.add(vi.name)
                    break
                if n.op_type in _STATE_CARRY and i == 0:
                    frontier.extend(n.output)
    return frozenset(found)


def input_specs(model: ModelProto) -> tuple[InputSpec, ...]:
    """Specs for the model's real inputs (initializers listed as inputs are skipped)."""
    init = {t.name for t in model.graph.initializer}
    bounds = _gather_bounds(model)
    one_hot = _one_hot_bounds(model)
    compared = _compared_values(model)
    classes = _class_set_bounds(model)
    hinted: dict[str, list[tuple[int, int]]] = {}
    for h in dim_hints(model):
        hinted.setdefault(h.input, []).append((h.axis, h.value))
    states = recurrent_state_inputs(model)
    specs = []
    for vi in model.graph.input:
        if vi.name in init:
            continue
        info: TensorInfo = value_info(vi)
        try:
            dtype = np_dtype(info.elem_type).name if info.elem_type else "float32"
        except (KeyError, TypeError, ValueError):
            dtype = "float32"
        low = high = None
        role = "generic"
        lname = vi.name.lower()
        if dtype.startswith(("int", "uint")):
            if vi.name in bounds:
                low, high, role = 0, bounds[vi.name], "token_ids"
            elif vi.name in one_hot:
                low, high, role = 0, one_hot[vi.name], "indices"
            elif vi.name in compared:
                low, high, role = compared[vi.name], compared[vi.name] + 1, "compared"
            elif vi.name in classes:
                (low, high), role = classes[vi.name], "indices"
            elif "mask" in lname:
                low, high, role = 1, 2, "mask"
            elif "type" in lname or "segment" in lname:
                low, high, role = 0, 1, "token_type"
            elif "position" in lname or lname.endswith("pos_ids"):
                role = "positions"
            elif info.shape == ():
                low, high, role = 1, 4, "scalar"
            else:
                low, high = 0, 10
        elif dtype == "bool" and "mask" in lname:
            role = "mask"
        elif dtype.startswith(("float", "bfloat")) and (vi.name in bounds or vi.name in one_hot):
            # a float input the graph casts to integer indices (Gather, OneHot): whole numbers in the valid range
            low, high, role = 0, min(bounds.get(vi.name, 2**62), one_hot.get(vi.name, 2**62)), "indices"
        elif vi.name in states and info.shape is not None:
            # its free dims are the batch: 1, as the other inputs' leading dim, not a sequence length
            role = "recurrent_state"
            given = {a for a, _ in hinted.get(vi.name, ())}
            hinted.setdefault(vi.name, []).extend(
                (a, 1) for a, d in enumerate(info.shape) if not isinstance(d, int) and a not in given)
        specs.append(InputSpec(vi.name, dtype, info.shape, info.kind, low, high, role,
                               tuple(hinted.get(vi.name, ()))))
    return tuple(specs)


# Height and width of an image input whose size is dynamic: 224 is the size most CNNs are trained at, and a
# multiple of 32, so detectors, OCR and classifiers that downsample 5 times still have pixels left (at 32x32
# a MaxPool or an FPN's Resize/Concat fails where the model never fails in use).
IMAGE_SIDE = 224


def image_axes(spec: InputSpec) -> tuple[int, ...]:
    """The spatial axes of a float NCHW/NHWC image input (1, 3 or 4 channels), else () (one rule:
    ``studio.core.dim_hints.image_axes``; a KV cache or a sequence-named axis is no image)."""
    return _axes(spec.name, tuple(spec.shape or ()), spec.dtype.startswith(("float", "bfloat"))) or ()


def _default_dim(spec: InputSpec, axis: int, name: str, spatial: set[int] | frozenset[int]) -> int:
    hinted = spec.hint(axis)
    return (hinted if hinted is not None
            else 1 if axis == 0 and not SEQ_NAMES.search(name) else IMAGE_SIDE if axis in spatial
            else 16 if SEQ_NAMES.search(name) or axis == 1 else 32)


def choose_dims(specs: tuple[InputSpec, ...], dims: Mapping[str, int] | None = None) -> dict[str, int]:
    """Concrete values for every symbolic dim: the user's, else what the model says
    (metadata ``imgsz``, the static other side, the dim's name: ``dim_hints``), else 1
    for a leading (batch) dim, 224 for an image's height and width, 16 for
    sequence-like names and 32 for anything else. A dim written as a formula of other dims
    (``past_sequence_length + sequence_length``) is evaluated from their values."""
    given = dict(dims or {})
    chosen = dict(given)
    derived = {d.key: d for d in derived_dims([x for s in specs for x in (s.shape or ())])}
    where: dict[str, tuple[InputSpec, int]] = {}
    for s in specs:
        spatial = image_axes(s)
        for i, d in enumerate(s.shape or ()):
            if isinstance(d, str) and d in derived:
                where.setdefault(d, (s, i))
            elif isinstance(d, str) and d not in chosen:
                chosen[d] = _default_dim(s, i, d, spatial)
    values = resolve_derived(tuple(derived.values()), given, chosen)     # a contradiction: one line
    for d, (s, i) in where.items():
        if d not in chosen:
            chosen[d] = values.get(d) or _default_dim(s, i, d, image_axes(s))
    return chosen


def unnamed_dim_key(input_name: str, axis: int) -> str:
    """The ``--dim`` key of an unnamed dim: ``input[1]`` (Silero VAD's ``input [?, ?]``
    and PP-OCR's ``x [?, 3, ?, W]`` have dims no NAME=VALUE can reach)."""
    return f"{input_name}[{axis}]"


def concrete_shape(spec: InputSpec, dims: Mapping[str, int]) -> tuple[int, ...]:
    """Concrete dims: known ones, symbolic ones from ``dims`` by name, unnamed ones from
    ``dims`` by ``INPUT[AXIS]`` key, else 1 (leading), 224 (an image's height/width) or 16."""
    if spec.shape is None:
        raise StudioError(f"input '{spec.name[:60]}' has an unknown rank; give its values in an .npz file")
    out = []
    for i, d in enumerate(spec.shape):
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str):
            out.append(int(dims[d]))
        else:  # unnamed unknown dim
            hinted = spec.hint(i)
            default = hinted if hinted is not None else 1 if i == 0 else IMAGE_SIDE if i in image_axes(spec) else 16
            out.append(int(dims.get(unnamed_dim_key(spec.name, i), default)))
    return tuple(out)


MAX_FEED_BYTES = 2**30     # refuse to generate more than 1 GiB of inputs (declared-size bombs)


def random_feeds(specs: tuple[InputSpec, ...], dims: Mapping[str, int] | None = None, seed: int = 0,
                 max_bytes: int = MAX_FEED_BYTES) -> Feeds:
    """One seeded feed dict. Floats ~ N(0, 1); integers within each spec's range."""
    rng = np.random.default_rng(seed)
    chosen = choose_dims(specs, dims)
    feeds: Feeds = {}
    total = 0
    for s in specs:
        if s.kind not in ("tensor", "optional", "sequence"):
            raise StudioError(f"input '{s.name[:60]}' is a {s.kind}; give its values in an .npz file")
        shape = concrete_shape(s, chosen)
        if len(shape) > MAX_RANK:
            raise StudioError(f"input '{s.name[:60]}' has rank {len(shape)}; NumPy and the engines support at "
                              f"most {MAX_RANK} dimensions, so the studio cannot make or run inputs for it")
        if any(d < 0 for d in shape):
            raise StudioError(f"input '{s.name[:60]}' declares a negative dim {list(shape)}")
        itemsize = 8 if s.dtype in ("bfloat16", "string") else np.dtype(s.dtype).itemsize
        total += int(np.prod(shape, dtype=object)) * itemsize
        if total > max_bytes:
            raise StudioError(f"inputs would need {total / 2**30:.1f} GiB (input '{s.name[:60]}' has shape "
                              f"{list(shape)}); set smaller values for its dims or give an .npz file")
        value = np.asarray(_random_array(s, shape, rng))    # 0-d results come back as numpy scalars
        feeds[s.name] = [value] if s.kind == "sequence" else value
    return feeds


def flipped_flags(feeds: Feeds) -> Feeds | None:
    """``feeds`` with every one-element bool input negated, or None when there is none.

    Such inputs are usually If conditions: one seeded set takes one branch only,
    so a check that must cover both branches adds this set."""
    flags = [k for k, v in feeds.items() if isinstance(v, np.ndarray) and v.dtype == np.bool_ and v.size == 1]
    if not flags:
        return None
    return {k: (np.logical_not(v) if k in flags else v) for k, v in feeds.items()}


def _random_array(s: InputSpec, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(s.dtype) if s.dtype != "bfloat16" else np.dtype("float32")
    if s.role == "positions":
        return np.broadcast_to(np.arange(shape[-1] if shape else 1, dtype=dtype), shape).copy()
    if dtype.kind in "iu":
        low = 0 if s.low is None else int(s.low)
        high = 10 if s.high is None else int(s.high)
        return rng.integers(low, max(high, low + 1), size=shape, dtype=dtype)
    if dtype.kind == "b":
        return np.ones(shape, bool) if s.role == "mask" else rng.random(shape) < 0.5
    if dtype.kind == "f":
        if s.role == "indices" and s.high is not None:
            return rng.integers(int(s.low or 0), max(int(s.high), 1), size=shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "OUS":
        return np.array(["x"] * int(np.prod(shape)), dtype=object).reshape(shape)
    raise StudioError(f"input '{s.name[:60]}' has dtype {s.dtype}, which random feeds do not support; "
                      "give its values in an .npz file")


def feeds_text(feeds: Feeds, max_inputs: int = 6) -> str:
    """'input float32[1, 16], state float32[2, 1, 128], sr int64=16000': what a run was fed,
    for messages that must say a failure may come from the inputs, not the engine."""
    parts = []
    for name, value in list(feeds.items())[:max_inputs]:
        v = value[0] if isinstance(value, list) and value else value
        if isinstance(v, np.ndarray):
            dtype = "string" if v.dtype.kind in "OUS" else str(v.dtype)
            if v.size == 1 and v.ndim <= 1 and dtype != "string":
                parts.append(f"{name[:40]} {dtype}={v.reshape(-1)[0].item()}")
            else:
                parts.append(f"{name[:40]} {dtype}{list(v.shape)}")
        else:
            parts.append(f"{name[:40]} {type(value).__name__}")
    if len(feeds) > max_inputs:
        parts.append(f"{len(feeds) - max_inputs} more")
    return ", ".join(parts)


def seeded_inputs_note(feeds: Feeds) -> str:
    """The hint for a run that failed on seeded inputs: real models often need a real size
    (a 512-sample audio window) or value (a sample rate) that no random feed can know."""
    return (f"run on seeded inputs ({feeds_text(feeds)}); for other sizes set --dim NAME=VALUE "
            "(INPUT[AXIS]=VALUE for an unnamed dim)")


# The second image size a compatibility run tries when the first fails: text recognizers are trained at
# 32-48 pixels high and fail at 224, where classifiers and detectors that downsample 5 times fail at 32.
SMALL_IMAGE_SIDE = 48


def check_feeds(model: ModelProto, dims: Mapping[str, int] | None = None,
                inputs: str | Path | None = None) -> list[tuple[Feeds, str]]:
    """The feed sets a compatibility run tries in order, each with the note shown when the
    run fails: the user's first .npz sample when given; else seeded inputs, and when an
    image's height or width is free, the same at a small size (a model is judged by
    whether it runs at a size it is made for, not at one guess)."""
    specs = input_specs(model)
    if inputs:
        return [(load_npz(Path(inputs), specs)[0], f"run on the inputs from {Path(inputs).name}")]
    user = dict(dims or {})
    tail = ", or give real inputs with --inputs X.npz"
    feeds = random_feeds(specs, user, seed=0)
    out = [(feeds, seeded_inputs_note(feeds) + tail)]
    small = small_image_dims(specs, user)
    if small:
        other = random_feeds(specs, {**user, **small}, seed=0)
        out.append((other, seeded_inputs_note(other) + tail))
    return out


def small_image_dims(specs: tuple[InputSpec, ...], user: Mapping[str, int]) -> dict[str, int]:
    """Dim values putting every free image height/width at SMALL_IMAGE_SIDE ({} when none is free)."""
    out: dict[str, int] = {}
    for s in specs:
        for i in image_axes(s):
            d = (s.shape or ())[i]
            key = d if isinstance(d, str) else unnamed_dim_key(s.name, i) if d is None else None
            if key is not None and key not in user:
                out[key] = SMALL_IMAGE_SIDE
    return out


def feed_sets(specs: tuple[InputSpec, ...], count: int, dims: Mapping[str, int] | None = None,
              seed: int = 0) -> list[Feeds]:
    """``count`` independent seeded feeds (calibration, repeated verification)."""
    return [random_feeds(specs, dims, seed + i) for i in range(count)]


def load_npz(path: Path, specs: tuple[InputSpec, ...], *, max_bytes: int | None = None) -> list[Feeds]:
    """Feeds from a user .npz: keys are input names (one sample), or 'name/0', 'name/1'...
    for several samples. Never unpickles; every array's header is checked against its input (rank,
    static dims, numeric dtype) and a memory limit before anything is allocated
    (:func:`studio.core.tensor_safety.load_npz`); object, string, complex-for-real and truncated
    arrays and a corrupt archive are one line."""
    check_regular_file(Path(path), max_bytes=8 * 2**30, label="inputs file")
    register_input(path)                # a file this run reads: never an output
    by_name = {s.name: s for s in specs}

    def split(key: str) -> tuple[str, str]:
        name, _, idx = key.rpartition("/") if "/" in key and key.rpartition("/")[2].isdigit() else (key, "", "0")
        return name, idx

    def check(key: str, header) -> None:  # noqa: ANN001 - tensor_safety.ArrayHeader
        name, _ = split(key)
        if name not in by_name:
            raise StudioError(f"inputs file has '{key[:60]}', which is not an input of the model "
                              f"(inputs: {', '.join(sorted(by_name))[:200]})")
        check_array_header(by_name[name], header.shape, header.dtype, "the file gives")

    arrays = read_arrays(Path(path), label="inputs file", max_bytes=max_bytes or 2 * MAX_ARRAY_BYTES, check=check)
    samples: dict[int, Feeds] = {}
    for key, arr in arrays.items():
        name, idx = split(key)
        spec = by_name[name]
        if arr.dtype.name != spec.dtype and spec.dtype != "bfloat16":
            arr = _cast_checked(arr, spec)
        samples.setdefault(int(idx), {})[name] = arr
    missing = [s.name for s in specs if any(s.name not in f for f in samples.values())]
    if not samples or missing:
        raise StudioError(f"inputs file lacks {', '.join(missing)[:200] or 'every input'}")
    return [samples[i] for i in sorted(samples)]


def npz_feeds(inputs: str | Path, model: ModelProto | str | Path) -> list[Feeds]:
    """The feed sets of a user's .npz for ``model`` (a proto, or a file read without its weights): the one
    npz-to-feeds step of a verifying pipeline (optimize, a fix). ``inputs`` is a path as the user gave it,
    made absolute here (workers run in their own folder); a missing file is one line naming it."""
    if not isinstance(model, ModelProto):
        model = load_model(str(model), load_external_data=False)
    return load_npz(user_data_path(inputs, label="inputs file"), input_specs(model))


def check_array_header(spec: InputSpec, shape: tuple[int, ...], dtype: np.dtype, gives: str,
                       batch_axis_optional: bool = False) -> None:
    """Refuse, before any allocation, an array of ``shape``/``dtype`` that ``spec``'s input cannot
    take: another rank, another static dim, a complex value for a real input, a float for an integer
    one. ``batch_axis_optional``: a sample may lack the leading batch axis (it is added)."""
    name = spec.name[:60]
    if spec.shape is not None:
        want = list(spec.shape)
        got = list(shape)
        if batch_axis_optional and len(got) == len(want) - 1:
            got = [1, *got]
        if len(got) != len(want):
            raise StudioError(f"input '{name}' needs rank {len(want)} {want}, {gives} shape {list(shape)}",
                              code=ErrorCode.BAD_INPUT)
        for d, n in zip(want, got):
            if isinstance(d, int) and d >= 0 and d != n:
                raise StudioError(f"input '{name}' needs shape {want}, {gives} {list(shape)}", code=ErrorCode.BAD_INPUT)
    _check_cast(spec, np.dtype(dtype), gives)


def _check_cast(spec: InputSpec, have: np.dtype, gives: str) -> None:
    if spec.dtype == "bfloat16":
        return
    target = np.dtype(spec.dtype)
    if have.kind == "c" and target.kind != "c":
        raise StudioError(f"input '{spec.name[:60]}' needs {spec.dtype}, {gives} complex {have.name}; refusing "
                          "rather than dropping the imaginary part", code=ErrorCode.BAD_INPUT)
    if have.kind == "f" and target.kind in "iub":
        raise StudioError(f"input '{spec.name[:60]}' needs {spec.dtype}, {gives} {have.name}", code=ErrorCode.BAD_INPUT)


def _cast_checked(arr: np.ndarray, spec: InputSpec) -> np.ndarray:
    _check_cast(spec, arr.dtype, "the file gives")
    return arr.astype(np.dtype(spec.dtype))


@dataclass(frozen=True)
class ImagePreprocess:
    """Resize, layout and normalization for image folders (ImageNet defaults).

    ``layout="auto"`` reads it from the input shape (channels of 1 or 3 at axis 1
    means NCHW, at the last axis NHWC). Integer inputs (uint8 images) get the
    resized pixels as they are, without scale/mean/std."""

    size: tuple[int, int] | None = None          # (height, width); None: from the model input
    layout: str = "auto"                         # "auto", "NCHW" or "NHWC"
    mean: tuple[float, ...] = (0.485, 0.456, 0.406)
    std: tuple[float, ...] = (0.229, 0.224, 0.225)
    scale: float = 1 / 255.0
    bgr: bool = False

    def to_dict(self) -> dict:
        return {"size": list(self.size) if self.size else None, "layout": self.layout, "mean": list(self.mean),
                "std": list(self.std), "scale": self.scale, "bgr": self.bgr}


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".ppm")


def _image_layout(shape: tuple, layout: str) -> str:
    if layout in ("NCHW", "NHWC"):
        return layout
    if layout != "auto":
        raise StudioError(f"image layout must be auto, NCHW or NHWC, got {str(layout)[:20]!r}")
    if shape[1] in (1, 3):
        return "NCHW"
    if shape[3] in (1, 3):
        return "NHWC"
    raise StudioError(f"cannot tell the channel axis of image input shape {list(shape)}; give the layout "
                      "(NCHW or NHWC)")


def image_input(specs: tuple[InputSpec, ...]) -> InputSpec:
    """The model's image input: the first 4-D float or uint8 tensor input."""
    for s in specs:
        if s.kind == "tensor" and s.shape is not None and len(s.shape) == 4 and s.dtype in (
                "float32", "float16", "float64", "uint8"):
            return s
    raise StudioError("the model has no 4-D image input (float or uint8); give inputs as an .npz file instead")


def image_feeds(folder: Path, spec: InputSpec, pre: ImagePreprocess = ImagePreprocess(),
                limit: int = 64) -> list[Feeds]:
    """One feed per image file in ``folder`` (png/jpg/bmp/ppm), preprocessed for ``spec``."""
    try:
        from PIL import Image, UnidentifiedImageError
    except ImportError:
        raise StudioError("image folders need Pillow (pip install pillow)") from None
    shape = spec.shape or ()
    if len(shape) != 4:
        raise StudioError(f"input '{spec.name[:60]}' is not a 4-D image input (shape {list(shape)})")
    layout = _image_layout(shape, pre.layout)
    channels = shape[1] if layout == "NCHW" else shape[3]
    channels = channels if isinstance(channels, int) else 3
    if channels not in (1, 3):
        raise StudioError(f"input '{spec.name[:60]}' has {channels} channels; image folders give 1 or 3")
    if pre.size is not None:
        h, w = pre.size
    else:
        hw = shape[2:4] if layout == "NCHW" else shape[1:3]
        if not all(isinstance(d, int) and d > 0 for d in hw):
            raise StudioError("the model's image size is dynamic; give the image size (--image-size HxW)")
        h, w = hw
    folder = Path(folder)
    if not folder.is_dir():
        raise StudioError("the calibration/image path is not a folder of images")
    files = sorted(p for p in folder.iterdir()
                   if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file() and not p.is_symlink())[:limit]
    if not files:
        raise StudioError("no images (.png/.jpg/.bmp/.ppm) in the image folder")
    mean = np.array(pre.mean[:channels] if len(pre.mean) >= channels else pre.mean[:1] * channels, np.float32)
    std = np.array(pre.std[:channels] if len(pre.std) >= channels else pre.std[:1] * channels, np.float32)
    feeds = []
    for f in files:
        check_regular_file(f, max_bytes=64 * 2**20, label="image")
        try:
            with Image.open(f) as im:
                im.draft(None, (w * 2, h * 2))          # decode large JPEGs at a reduced size
                rgb = im.convert("RGB" if channels == 3 else "L").resize((w, h), Image.BILINEAR)
                arr = np.asarray(rgb, dtype=np.float32)
        except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
            raise StudioError(f"image '{f.name[:60]}' cannot be read as an image") from None
        if arr.ndim == 2:
            arr = arr[..., None]
        if pre.bgr and channels == 3:
            arr = arr[..., ::-1]
        if spec.dtype != "uint8":
            arr = (arr * pre.scale - mean) / std
        if layout == "NCHW":
            arr = arr.transpose(2, 0, 1)
        dtype = np.dtype(spec.dtype)
        feeds.append({spec.name: np.ascontiguousarray(arr[None]).astype(dtype)})
    return feeds


@dataclass(frozen=True, eq=False)
class FeedSet:
    """Input sets and where they came from (said in every result that used them)."""

    sets: tuple[Feeds, ...]
    source: str                      # one line: "random, seed 0, 4 sets" / "inputs.npz, 3 samples"...
    dims: Mapping[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.sets)

    def to_dict(self) -> dict:
        return {"source": self.source, "count": len(self.sets), "dims": dict(self.dims)}


def make_feeds(model: ModelProto, *, inputs: Path | None = None, images: Path | None = None, count: int = 1,
               dims: Mapping[str, int] | None = None, seed: int = 0,
               preprocess: ImagePreprocess | None = None) -> FeedSet:
    """The feeds a command runs on: a user .npz (``inputs``), an image folder
    (``images``: the image input gets the pictures, other inputs seeded values),
    or ``count`` seeded random sets. Calibration, verification and profiling all
    take their inputs from here."""
    specs = input_specs(model)
    if count < 1:
        raise StudioError("the number of input sets must be at least 1")
    if inputs is not None and images is not None:
        raise StudioError("give either an .npz inputs file or an image folder, not both")
    if inputs is not None:
        sets = load_npz(Path(inputs), specs)
        return FeedSet(tuple(sets), f"{Path(inputs).name[:60]}, {len(sets)} sample(s)", dims_of_sets(specs, sets))
    chosen = choose_dims(specs, dims)
    if images is not None:
        spec = image_input(specs)
        pre = preprocess or ImagePreprocess()
        pictures = image_feeds(Path(images), spec, pre, limit=max(count, 1) if count > 1 else 64)
        others = tuple(s for s in specs if s.name != spec.name)
        sets = []
        for i, picture in enumerate(pictures):
            extra = random_feeds(others, chosen, seed + i) if others else {}
            sets.append({**extra, **picture})
        return FeedSet(tuple(sets), f"{len(sets)} image(s) from {Path(images).name[:60]}/",
                       {**chosen, **dims_of_sets(specs, sets)})
    sets = feed_sets(specs, count, chosen, seed)
    dims_text = ", ".join(f"{k}={v}" for k, v in chosen.items())
    return FeedSet(tuple(sets), f"random, seed {seed}, {count} set(s)" + (f", {dims_text}" if dims_text else ""),
                   chosen)


def dims_of_sets(specs: tuple[InputSpec, ...], sets: Sequence[Feeds]) -> dict[str, int]:
    """The symbolic dims' values in the first set's arrays: what work built on these feeds (a pass's own random
    sets, its latency runs) must use. Without them a pass fell back to default sizes the model may not take
    (oww_melspectrogram's STFT Conv: 'samples' at 16 under a kernel of 512)."""
    found: dict[str, int] = {}
    first = sets[0] if sets else {}
    for spec in specs:
        value = first.get(spec.name)
        if not isinstance(value, np.ndarray) or spec.shape is None or value.ndim != len(spec.shape):
            continue
        for dim, size in zip(spec.shape, value.shape):
            if isinstance(dim, str) and dim:
                found.setdefault(dim, int(size))
    return found


def cast_to_inputs(feeds: Feeds, model: ModelProto) -> Feeds:
    """``feeds`` with float arrays cast to ``model``'s declared float input dtypes: the same
    values for a model whose inputs changed float precision on purpose (float32 -> float16)."""
    out = dict(feeds)
    for spec in input_specs(model):
        value = feeds.get(spec.name)
        if not isinstance(value, np.ndarray) or spec.kind != "tensor":
            continue
        try:
            target = np.dtype(spec.dtype)
        except TypeError:
            continue
        if value.dtype.kind == "f" and target.kind == "f" and value.dtype != target:
            out[spec.name] = value.astype(target)
    return out


def save_npz(sets: list[Feeds] | tuple[Feeds, ...], path: Path) -> Path:
    """Write feed sets as 'name/i' keys (what :func:`load_npz` reads back)."""
    arrays: dict[str, np.ndarray] = {}
    for i, feeds in enumerate(sets):
        for name, value in feeds.items():
            if isinstance(value, list):
                raise StudioError(f"input '{name[:60]}' is a sequence; it cannot be saved as an .npz")
            arrays[f"{name}/{i}"] = np.asarray(value)

    path = Path(path)
    with open_output(path, "wb") as fh:
        np.savez(fh, **arrays)  # scratch: into open_output's temp file
    return path
