"""Saving models between passes without rewriting weights that did not change.

A pipeline saves a checkpoint after every modifying pass (verification runs
ORT on a file) and hands models to worker passes through files. Rewriting a
1.3 GB external-data file each time would cost more than the passes, so a
*checkpoint* is only the graph: every external tensor the passes did not
touch keeps its location, offset and length **relative to the original
model's folder** (``data_dir``), and new or changed tensors are stored
inline. Readers resolve external data against ``data_dir``: onnx-ir through
its base dir, ONNX Runtime through
``session.model_external_initializers_file_folder_path`` (the model is then
loaded from bytes). Nothing is copied or linked, and the user's files are
only read.

Only when the new tensors would not fit in one protobuf (> 1.5 GB) does a
checkpoint become self-contained instead: data files hard-linked from one
private copy in the work folder (``Linker``), new tensors in its own file.

The *final* result is written self-contained (``save_result``): one data file
of its own when the weights are large, never links to the user's files.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from pathlib import Path

import onnx
import onnx_ir as ir
from onnx_ir import external_data as ir_external

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import atomic_write_bytes
from studio.core.protowalk import iter_graphs
from studio.core.save import save_model

log = logging.getLogger(__name__)

# Above this many bytes of weights, results keep weights in an external file.
EXTERNAL_THRESHOLD = 64 * 2**20
# In self-contained checkpoints, in-memory tensors above this size go to the checkpoint's data file.
_CHECKPOINT_TENSOR_BYTES = 1024
# Checkpoints keep new tensors inline up to this many bytes (a protobuf holds 2 GiB).
INLINE_LIMIT = 1536 * 2**20


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A saved model and the folder its external-data locations are relative to."""

    path: Path
    data_dir: Path

    @property
    def relocated(self) -> bool:
        """True when external data lives elsewhere than next to the file."""
        return self.data_dir.resolve() != self.path.parent.resolve()

    def to_args(self) -> dict:
        return {"model_path": str(self.path), "data_dir": str(self.data_dir)}

    @classmethod
    def from_args(cls, args: dict) -> Checkpoint:
        return cls(Path(args["model_path"]), Path(args.get("data_dir") or Path(args["model_path"]).parent))


def _initializer_values(model: ir.Model) -> list[ir.Value]:
    return [v for g in model.graphs() for v in g.initializers.values()]


def weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in _initializer_values(model) if v.const_value is not None)


class Linker:
    """Makes external data files reachable from new folders without rewriting them.

    ``link(source, folder)`` returns a file name inside ``folder`` whose content is
    ``source``: a hard link to a private copy in the work folder. A file outside
    the work folder (the user's own weights) is copied there once and never
    linked itself: a user's file must keep its single link (loaders reject
    multi-linked data files as a hard-link attack) and its metadata.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = Path(workdir).resolve()
        self._copies: dict[str, Path] = {}
        self._n = 0

    def _private(self, source: Path) -> Path:
        source = source.resolve()
        if self.workdir in source.parents:
            return source
        copy = self._copies.get(str(source))
        if copy is None:
            cache = self.workdir / "copies"
            cache.mkdir(parents=True, exist_ok=True)
            copy = cache / f"copy{len(self._copies) + 1}.data"
            shutil.copyfile(source, copy)  # scratch: the workdir's private copy
            self._copies[str(source)] = copy
            log.info("external data copied once into the work folder (%d MB)", copy.stat().st_size // 2**20)
        return copy

    def link(self, source: Path, folder: Path) -> str:
        self._n += 1
        name = f"linked{self._n}.data"
        target = folder / name
        private = self._private(Path(source))
        try:
            os.link(private, target)  # scratch: a checkpoint folder in the workdir
        except OSError:           # no hard links on this filesystem
            shutil.copyfile(private, target)  # scratch: a checkpoint folder in the workdir
        return name


def _under(path: Path, folder: Path) -> bool:
    return folder == path or folder in path.parents


def save_checkpoint(model: ir.Model, path: Path, *, data_dir: Path, linker: Linker,
                    self_contained: bool = False) -> Checkpoint:
    """Save ``model`` as a checkpoint (see the module doc); the in-memory model is left unchanged.
    ``self_contained``: its data files next to it even where they could stay in ``data_dir`` (for an engine
    that reads external data only beside the file and takes no data folder: OpenVINO)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data_dir = Path(data_dir).resolve()
    values = _initializer_values(model)
    tensors = [v.const_value for v in values]
    external = [t for t in tensors if isinstance(t, ir.ExternalTensor)]
    inline = sum(t.nbytes for t in tensors if t is not None and not isinstance(t, ir.ExternalTensor))
    if self_contained or inline > INLINE_LIMIT or not all(_under(Path(t.path).resolve(), data_dir) for t in external):
        return _save_self_contained(model, path, linker)
    try:
        for v, t in zip(values, tensors):
            if isinstance(t, ir.ExternalTensor):
                location = os.path.relpath(Path(t.path).resolve(), data_dir)
                v.const_value = ir.ExternalTensor(location, t.offset, t.length, t.dtype, shape=t.shape,
                                                  name=t.name or v.name or "", base_dir=str(data_dir))
        onnx.save_model(_serialize(model), str(path))  # scratch: a checkpoint in the pipeline's workdir
    finally:
        for v, t in zip(values, tensors):
            v.const_value = t
    return Checkpoint(path, data_dir)


def _save_self_contained(model: ir.Model, path: Path, linker: Linker) -> Checkpoint:
    """A checkpoint whose data files sit next to it: unchanged external data hard-linked
    from one private copy, new tensors in ``<name>.data``."""
    folder = path.parent
    values = _initializer_values(model)
    originals = [v.const_value for v in values]
    linked: dict[str, str] = {}
    fresh: list[tuple[ir.Value, ir.TensorProtocol]] = []
    try:
        for v, tensor in zip(values, originals):
            if tensor is None:
                continue
            if isinstance(tensor, ir.ExternalTensor):
                source = str(Path(tensor.path).resolve())
                if source not in linked:
                    linked[source] = linker.link(Path(source), folder)
                v.const_value = ir.ExternalTensor(linked[source], tensor.offset, tensor.length, tensor.dtype,
                                                  shape=tensor.shape, name=tensor.name or v.name or "",
                                                  base_dir=str(folder))
            elif tensor.nbytes > _CHECKPOINT_TENSOR_BYTES:
                fresh.append((v, tensor))
        if fresh:
            externals = ir_external.convert_tensors_to_external([t for _, t in fresh], str(folder),
                                                                f"{path.name}.data")
            for (v, _), ext in zip(fresh, externals):
                v.const_value = ext
        onnx.save_model(_serialize(model), str(path))  # scratch: a checkpoint in the pipeline's workdir
    finally:
        for v, tensor in zip(values, originals):
            v.const_value = tensor
    return Checkpoint(path, path.parent)


def _has_map(tp: onnx.TypeProto) -> bool:
    """Whether a type is, or holds, a map (``seq(map(int64, float))`` from ZipMap)."""
    which = tp.WhichOneof("value")
    if which == "map_type":
        return True
    if which == "sequence_type":
        return _has_map(tp.sequence_type.elem_type)
    if which == "optional_type":
        return _has_map(tp.optional_type.elem_type)
    return False


# metadata_props key under which hidden map types travel with the model (checkpoints, worker passes).
HIDDEN_TYPES_KEY = "onnx_studio.hidden_map_types"


def hide_map_types(proto: onnx.ModelProto) -> dict[str, bytes]:
    """Erase, in place, the declared types that hold a map, so onnx-ir can read the model.

    Graph inputs/outputs keep their names with an unknown type; value_info hints
    with such types are dropped. The erased types (name -> serialized TypeProto,
    merged with any recorded earlier) are recorded in the model's metadata under
    :data:`HIDDEN_TYPES_KEY`, so every save can put them back (:func:`restore_map_types`).
    The nodes that make or read these values (ZipMap...) stay as they are: no pass
    rewrites ops it does not know, and verification runs the real model."""

    hidden = _recorded(proto)
    for ref in iter_graphs(proto):
        if ref.function is not None:
            continue
        for vi in (*ref.graph.input, *ref.graph.output):
            if _has_map(vi.type):
                hidden[vi.name] = vi.type.SerializeToString()
                vi.ClearField("type")
        keep = [vi for vi in ref.graph.value_info if not _has_map(vi.type)]
        if len(keep) != len(ref.graph.value_info):
            del ref.graph.value_info[:]
            ref.graph.value_info.extend(keep)
    _set_record(proto, hidden)
    return hidden


def restore_map_types(proto: onnx.ModelProto, *, keep_record: bool) -> onnx.ModelProto:
    """Put back the types :func:`hide_map_types` erased, on every graph input/output that
    still has that name and no type; ``keep_record`` False drops the metadata entry (results)."""

    hidden = _recorded(proto)
    if not hidden:
        return proto
    for ref in iter_graphs(proto):
        if ref.function is not None:
            continue
        for vi in (*ref.graph.input, *ref.graph.output):
            if vi.name in hidden and not vi.HasField("type"):
                vi.type.ParseFromString(hidden[vi.name])
    if not keep_record:
        _set_record(proto, {})
    return proto


def _recorded(proto: onnx.ModelProto) -> dict[str, bytes]:
    import base64
    import json

    for prop in proto.metadata_props:
        if prop.key == HIDDEN_TYPES_KEY:
            try:
                return {str(k): base64.b64decode(v) for k, v in json.loads(prop.value).items()}
            except (ValueError, TypeError, AttributeError):
                return {}
    return {}


def _set_record(proto: onnx.ModelProto, hidden: dict[str, bytes]) -> None:
    import base64
    import json

    props = [p for p in proto.metadata_props if p.key != HIDDEN_TYPES_KEY]
    del proto.metadata_props[:]
    proto.metadata_props.extend(props)
    if hidden:
        value = json.dumps({k: base64.b64encode(v).decode("ascii") for k, v in hidden.items()})
        proto.metadata_props.add(key=HIDDEN_TYPES_KEY, value=value)


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """The model as a proto with hidden map types back in place: what a tool that reads
    protos (ORT, onnxsim, ONNX type inference) must see."""
    return restore_map_types(ir.serde.serialize_model(model), keep_record=True)


def from_proto(proto: onnx.ModelProto) -> ir.Model:
    """``ir.serde.deserialize_model`` for any proto, map types hidden first (changes ``proto``)."""
    hide_map_types(proto)
    return ir.serde.deserialize_model(proto)


_serialize, _deserialize = to_proto, from_proto


def load_ir(path: Path) -> ir.Model:
    """``ir.load`` for any model the passes see: map types hidden (:func:`hide_map_types`)."""
    proto = onnx.load_model(str(path), load_external_data=False)
    model = _deserialize(proto)
    ir_external.set_base_dir(model.graph, os.path.dirname(str(path)))
    return model


def load_for_passes(path: Path) -> ir.Model:
    """The source model as onnx-ir, or a one-line StudioError saying why it cannot be.

    onnx-ir raises a chain of ``SerdeError``s (a traceback for the user) on types it
    cannot represent; map types are hidden from it first (:func:`hide_map_types`),
    anything else it still cannot read is named with onnx-ir's own reason."""
    try:
        return load_ir(path)
    except ir.serde.SerdeError as exc:
        root: BaseException = exc
        while root.__cause__ is not None:
            root = root.__cause__
        reason = (str(root).splitlines() or [type(root).__name__])[0][:200]
        raise StudioError(f"cannot optimize: onnx-ir cannot read the model ({reason})",
                          code=ErrorCode.UNSUPPORTED_MODEL) from exc


def load_checkpoint(ckpt: Checkpoint) -> ir.Model:
    """Load a checkpoint this pipeline wrote, resolving external data against its ``data_dir``.

    Self-contained checkpoints hard-link their data files on purpose, which
    onnx-ir's loader refuses as a possible attack; those files were created
    here (from data the studio's loader validated), so their tensors are
    re-pointed by absolute path, without the containment check."""
    proto = onnx.load_model(str(ckpt.path), load_external_data=False)
    model = _deserialize(proto)
    if ckpt.relocated:
        ir_external.set_base_dir(model.graph, str(ckpt.data_dir))
        return model
    for v in _initializer_values(model):
        t = v.const_value
        if isinstance(t, ir.ExternalTensor):
            v.const_value = ir.ExternalTensor(str((ckpt.path.parent / t.location).resolve()), t.offset, t.length,
                                              t.dtype, shape=t.shape, name=t.name or v.name or "", base_dir="")
    return model


def save_result(model: ir.Model, path: Path, *, shown: str | None = None) -> Path:
    """Save a self-contained result: weights inline, or in ``<name>.data`` when large.

    Inline saving would keep an external tensor's old location (onnx-ir saves
    external tensors as they are), so small external weights are read in first."""

    external = weight_bytes(model) > EXTERNAL_THRESHOLD
    if not external:
        for v in _initializer_values(model):
            if isinstance(v.const_value, ir.ExternalTensor):
                v.const_value = ir.tensor(v.const_value.numpy(), name=v.const_value.name or v.name)
    return save_declared(model, Path(path), external_data=external, shown=shown)


def save_declared(model: ir.Model, path: Path, *, external_data: bool | None, shown: str | None = None) -> Path:
    """``studio.core.save.save_model`` for a model read by :func:`load_ir`: the file declares
    the map types hidden from onnx-ir again, and carries no trace of the hiding."""

    record = model.metadata_props.pop(HIDDEN_TYPES_KEY, None)
    try:
        written = save_model(model, Path(path), external_data=external_data, shown=shown)
    finally:
        if record is not None:
            model.metadata_props[HIDDEN_TYPES_KEY] = record
    if record is not None:      # the result declares the user's map types again

        proto = onnx.load_model(str(written), load_external_data=False)
        proto.metadata_props.add(key=HIDDEN_TYPES_KEY, value=record)
        atomic_write_bytes(written, restore_map_types(proto, keep_record=False).SerializeToString())
    return written
