"""Interface and weight operations: add or remove graph outputs, change an input's shape, dims or
dtype (inference re-run), replace an initializer from .npy, add an opset import."""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from studio.edit import graph as g
from studio.edit.script import EditError, EditOp
from studio.edit.state import KEEPS, PINNED, STRUCTURE, VALUES, EditState
from studio.core.npy_header import NpyError, load_npy
from studio.core.paths import check_regular_file


def add_output(state: EditState, op: EditOp) -> None:
    """Make any tensor of the main graph a graph output, typed by shape inference."""
    graph = state.model.graph
    t = g.value(graph, op.args["tensor"], op)
    if t.is_graph_output():
        raise EditError(f"{op.where()}: '{t.name[:80]}' is already a graph output")
    g.infer_types(state.model)
    if t.dtype is None:
        raise EditError(f"{op.where()}: the type of tensor '{t.name[:80]}' cannot be inferred, so it cannot be a "
                        "typed output")
    graph.outputs.append(t)
    state.did(STRUCTURE, f"added output '{t.name}' ({g.type_text(t)})")


def remove_outputs(state: EditState, op: EditOp) -> None:
    """Remove graph outputs; the nodes only they needed go too."""
    graph = state.model.graph
    current = {o.name: o for o in graph.outputs}
    for name in op.args["outputs"]:
        if name not in current:
            raise EditError(f"{op.where()}: '{name[:80]}' is not a graph output{g.edit_hint(name, list(current))}")
    if set(op.args["outputs"]) >= set(current):
        raise EditError(f"{op.where()}: a model needs at least one output; keep one")
    before = graph.num_nodes()
    graph.outputs[:] = [o for o in graph.outputs if o.name not in set(op.args["outputs"])]
    g.remove_dead(graph)
    state.did(STRUCTURE, f"removed outputs {', '.join(op.args['outputs'])} and {before - graph.num_nodes()} nodes")


def _dtype(text: str, op: EditOp) -> ir.DataType:
    try:
        return ir.DataType.from_numpy(np.dtype(text))
    except TypeError:
        pass
    try:
        return ir.DataType[text.upper()]
    except KeyError:
        raise EditError(f"{op.where()}: '{text[:30]}' is not a dtype (float32, float16, int64, uint8...)") from None


def _dim(d, op: EditOp):
    if d is None or isinstance(d, str) or (isinstance(d, int) and not isinstance(d, bool) and d >= 0):
        return d
    raise EditError(f"{op.where()}: a dim is a size >= 0, a name or null, not {str(d)[:30]}")


def _names(shape: ir.Shape | None) -> set[str]:
    return {d.value for d in shape or () if isinstance(d, ir.SymbolicDim) and d.value}


def _only_pins(before: ir.Shape | None, after: ir.Shape | None) -> bool:
    """Whether ``after`` only gives sizes to free dims of ``before`` (no value of the model changes)."""
    if before is None or after is None or len(before) != len(after):
        return False
    return all(a == b or (isinstance(b, ir.SymbolicDim) and isinstance(a, int)) for b, a in zip(before, after))


def _keep_output_dims(graph: ir.Graph, old_outputs: dict, dropped: set[str], pinned_only: bool) -> None:
    """Where inference, run again, names an output dim anew (``unk__47``) or not at all, the output keeps
    the name it had (``batch``): a consumer binding dims by name still finds them. Not a name the edit
    took off the input (pinned to a size or renamed): inference says what that became. After a pin of
    free dims alone (no value changes) a static size the output had is kept too."""
    for o in graph.outputs:
        old = old_outputs.get(o)
        if old is None or o.shape is None or len(o.shape) != len(old):
            continue
        dims = [d.value if isinstance(d, ir.SymbolicDim) else d for d in o.shape]
        for i, (new, was) in enumerate(zip(dims, old)):
            if not (new is None or (isinstance(new, str) and new.startswith("unk__"))):
                continue
            if isinstance(was, ir.SymbolicDim) and was.value and was.value not in dropped:
                dims[i] = was.value
            elif isinstance(was, int) and pinned_only:
                dims[i] = was
        o.shape = ir.Shape(dims)


def set_input(state: EditState, op: EditOp) -> None:
    """Change a graph input's shape (whole), some dims (by name or axis) and/or dtype; every
    inferred shape downstream is dropped and inferred again."""
    graph = state.model.graph
    name = op.args["input"]
    found = [v for v in graph.inputs if v.name == name and not v.is_initializer()]
    if not found:
        raise EditError(f"{op.where()}: '{name[:80]}' is not a graph input"
                        f"{g.edit_hint(name, [v.name for v in graph.inputs])}")
    v = found[0]
    before = g.type_text(v)
    before_shape = v.shape
    if "shape" in op.args:
        v.shape = ir.Shape([_dim(d, op) for d in op.args["shape"]])
    if "dims" in op.args:
        if v.shape is None:
            raise EditError(f"{op.where()}: input '{name[:80]}' has no shape; give the whole shape instead")
        dims = list(v.shape)
        for key, size in op.args["dims"].items():
            axes = ([int(key)] if str(key).lstrip("-").isdigit()
                    else [i for i, d in enumerate(dims) if isinstance(d, ir.SymbolicDim) and d.value == key])
            if not axes or not all(-len(dims) <= a < len(dims) for a in axes):
                raise EditError(f"{op.where()}: input '{name[:80]}' has no dim '{str(key)[:40]}' (its shape is "
                                f"{before})")
            for a in axes:
                dims[a] = _dim(size, op)
        v.shape = ir.Shape([d.value if isinstance(d, ir.SymbolicDim) else d for d in dims])
    shared = _pin_shared_dims(graph, v, before_shape)
    dtype_changed = "dtype" in op.args and _dtype(op.args["dtype"], op) != v.dtype
    if dtype_changed:
        v.type = ir.TensorType(_dtype(op.args["dtype"], op))
    inputs = set(graph.inputs)
    old_outputs = {o: o.shape for o in graph.outputs}
    for other in g.main_values(graph).values():      # re-infer everything downstream
        if other in inputs or other.is_initializer():
            continue
        other.shape = None
        if dtype_changed and not other.is_graph_output():
            other.type = None
    g.infer_types(state.model)
    # Ops ONNX inference does not know (com.microsoft's) leave outputs unshaped, which the checker refuses:
    # their rank is kept, fixed sizes left open (they may have changed), named dims kept.
    stale = [o for o in graph.outputs if o.shape is None and old_outputs.get(o) is not None]
    for o in stale:
        o.shape = ir.Shape([d.value if isinstance(d, ir.SymbolicDim) else None for d in old_outputs[o]])
    _keep_output_dims(graph, old_outputs, dropped=_names(before_shape) - _names(v.shape),
                      pinned_only=not dtype_changed and _only_pins(before_shape, v.shape))
    # Pinning free dims changes no value: verified at the pinned sizes (verify._pinned_dims); a dtype is a value
    state.did(VALUES if dtype_changed else PINNED, f"input '{name}' {before} -> {g.type_text(v)}" + "".join(
        f"; the same dim pinned in input '{other[:60]}' too: {was} -> {now}" for other, was, now in shared) + (
        f"; {len(stale)} outputs not re-inferred (ops outside ONNX inference), their fixed sizes left open"
        if stale else ""))


def _pin_shared_dims(graph: ir.Graph, v: ir.Value, before: ir.Shape | None) -> list[tuple[str, str, str]]:
    """A named dim of ``v`` pinned to a size is one size wherever the model names it: the other graph inputs
    that name it are pinned to it too (else the model would declare ``mask[batch,src_len]`` beside
    ``ids[batch,16]`` and refuse every other length at run time: corpus romanizer_ar_encoder's src and
    src_mask). (input, type before, type after) of each input changed."""
    if before is None or v.shape is None or len(before) != len(v.shape):
        return []
    pins = {b.value: a for b, a in zip(before, v.shape)
            if isinstance(b, ir.SymbolicDim) and b.value and isinstance(a, int)}
    changed = []
    for other in graph.inputs:
        if other is v or other.is_initializer() or other.shape is None:
            continue
        dims = [pins.get(d.value, d.value) if isinstance(d, ir.SymbolicDim) else d for d in other.shape]
        if dims != [d.value if isinstance(d, ir.SymbolicDim) else d for d in other.shape]:
            was = g.type_text(other)
            other.shape = ir.Shape(dims)
            changed.append((other.name, was, g.type_text(other)))
    return changed


def replace_initializer(state: EditState, op: EditOp) -> None:
    """Replace an initializer's values from a .npy file of the same dtype and shape."""
    graph = state.model.graph
    name = op.args["name"]
    v = graph.initializers.get(name)
    if v is None:
        raise EditError(f"{op.where()}: '{name[:80]}' is not an initializer"
                        f"{g.edit_hint(name, list(graph.initializers))}")
    path = state.script.path(op.args["npy"])
    old = v.const_value
    want_dtype = old.dtype if old is not None else v.dtype
    want_shape = list(old.shape) if old is not None else list(v.shape or [])
    if want_dtype is None or any(not isinstance(d, int) for d in want_shape):
        raise EditError(f"{op.where()}: initializer '{name[:80]}' has no fixed dtype and shape to check a .npy "
                        "against")
    limit = math.ceil(math.prod(want_shape) * want_dtype.itemsize)     # the file holds exactly the initializer
    label = (f"{op.where()}: '{path.name[:80]}' (for initializer '{name[:60]}', "
             f"{want_dtype.name.lower()}{want_shape})")
    try:
        check_regular_file(path, max_bytes=None, label=".npy file")
        array = load_npy(path, label, max_bytes=limit)
    except OSError as exc:
        raise EditError(f"{op.where()}: cannot read '{path.name[:80]}' as .npy ({str(exc).splitlines()[0][:120]})") \
            from None
    except NpyError as exc:
        raise EditError(f"{exc}; give a .npy of the initializer's dtype and shape") from None
    if ir.DataType.from_numpy(array.dtype) != want_dtype or list(array.shape) != want_shape:
        raise EditError(f"{op.where()}: '{path.name[:80]}' is {array.dtype}{list(array.shape)} but initializer "
                        f"'{name[:80]}' is {want_dtype.name.lower()}{want_shape}; give the same dtype and shape")
    v.const_value = ir.tensor(np.ascontiguousarray(array), name=name)
    state.did(VALUES, f"replaced initializer '{name}' from {path.name}")


def add_opset(state: EditState, op: EditOp) -> None:
    """Import an opset domain (a custom domain, or ai.onnx.ml) at a version."""
    domain = "" if op.args["domain"] in ("", "ai.onnx") else op.args["domain"]
    version = op.args["version"]
    have = state.model.opset_imports.get(domain)
    if have is not None and have != version:
        raise EditError(f"{op.where()}: the model already imports {domain or 'ai.onnx'} at version {have}; "
                        "converting opsets is the convert-opset pass (optimize --passes convert-opset)")
    if version < 1:
        raise EditError(f"{op.where()}: an opset version is >= 1")
    state.model.opset_imports[domain] = version
    state.model.graph.opset_imports[domain] = version
    state.did(KEEPS, f"imports {domain or 'ai.onnx'} version {version}")
