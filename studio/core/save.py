"""Save a model (ModelProto or onnx_ir Model) to a file the user chose, atomically,
with external data when it would not fit in one protobuf (> 2 GiB).

The model and its ``.data`` are written by onnx/onnx_ir into a staging folder that
``studio.core.outputs.staged_files`` hands out beside the destination, then committed
together (one lock, two renames): the destination rules of ``studio.core.outputs`` apply
to both files, and a concurrent writer never leaves one writer's model with the other's data.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnx import ModelProto

from studio.core.outputs import check_destination, shown_path, staged_files, write_bytes

# Above this total tensor size, weights go to an external data file.
EXTERNAL_DATA_THRESHOLD = 1_800 * 2**20


def _proto_of(model) -> ModelProto:
    if isinstance(model, ModelProto):
        return model
    import onnx_ir as ir

    if isinstance(model, ir.Model):
        return ir.serde.serialize_model(model)
    raise TypeError(f"cannot save a {type(model).__name__}")


def save_model(model, target: Path, *, external_data: bool | None = None, shown: str | None = None) -> Path:
    """Write ``model`` to ``target`` (inside an output folder the caller chose).

    ``external_data`` None means: only when the model would exceed the protobuf
    limit. External data goes to ``<target name>.data`` beside it.
    Returns the path of the .onnx written (parent resolved, the name as given).
    """
    label = shown or shown_path(target)
    target = check_destination(target, shown=label)
    check_destination(target.with_name(f"{target.name}.data"), shown=f"{label}.data")
    if _is_ir(model):
        return _save_ir(model, target, external_data, label)
    proto = _proto_of(model)
    if external_data is None:
        external_data = proto.ByteSize() > EXTERNAL_DATA_THRESHOLD
    if not external_data:
        write_bytes(target, proto.SerializeToString(), shown=label)
        return target
    data_name = f"{target.name}.data"
    # onnx.save_model appends to an existing data file: a fresh staging folder has none.
    with staged_files(target.parent, shown=str(Path(label).parent), what=label) as stage:
        copy = ModelProto()
        copy.CopyFrom(proto)
        # scratch: into staged_files' private folder
        onnx.save_model(copy, str(stage / target.name), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=1024)
    return target


SCRATCH_EXTERNAL_BYTES = 1_800_000_000      # under protobuf's 2 GiB, with room for the graph


def save_scratch(model: ModelProto, path: Path, *, external: bool | None = None) -> Path:
    """Write ``model`` to ``path`` in a folder the run made for itself; ``external`` None: its tensors go to
    ``<name>.data`` beside it only over :data:`SCRATCH_EXTERNAL_BYTES`, True: always (tensors over 1 KB).

    Not :func:`save_model`: that one copies the proto before moving tensors out (the caller's model stays whole)
    and stages the files for a user's folder; scratch writers drop the model right after, and a copy of a model
    this size is the memory the large-model stages cannot spare. The external write empties ``model``'s tensors
    in place. A ``.data`` left by an earlier write of the same name is removed first: onnx.save_model appends to
    it (the file doubled, its offsets past the stale copy)."""
    if external is None:
        external = model.ByteSize() > SCRATCH_EXTERNAL_BYTES
    if not external:
        onnx.save_model(model, str(path))  # scratch: the caller's own folder
        return path
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)  # scratch: the caller's own folder
    # scratch: the caller's own folder
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    return path


def _is_ir(model) -> bool:
    try:
        import onnx_ir as ir
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, ir.Model)


@contextmanager
def _initializer_value_info_left_out(model) -> Iterator[None]:
    """onnx-ir writes a value_info for every initializer, a copy of the dtype and dims its TensorProto already
    holds (60-100 bytes each): a file read and written unchanged grew (corpus brainmaze_spindle_eeg, 124
    initializers: +8 KB, so optimize grew it 0.2 %). Their type and shape are cleared for the write and put
    back after; one with metadata or a doc string, or that is a graph input too, keeps its entry."""
    cleared = []
    for graph in model.graphs():
        inputs = {id(v) for v in graph.inputs}
        for v in graph.initializers.values():
            if id(v) in inputs or v.metadata_props or v.doc_string or v.const_value is None:
                continue
            cleared.append((v, v.type, v.shape))
            v.type, v.shape = None, None
    try:
        yield
    finally:
        for v, type_, shape in cleared:
            v.type, v.shape = type_, shape


def _save_ir(model, target: Path, external_data: bool | None, label: str) -> Path:
    import onnx_ir as ir

    total = sum(v.const_value.nbytes for v in model.graph.initializers.values()
                if v.const_value is not None)
    if external_data is None:
        external_data = total > EXTERNAL_DATA_THRESHOLD
    if not external_data:
        # Saving inline must not keep references to the source's external files.
        ir.external_data.load_to_model(model)
    with staged_files(target.parent, shown=str(Path(label).parent), what=label) as stage, \
            _initializer_value_info_left_out(model):
        # scratch: into staged_files' private folder
        ir.save(model, stage / target.name, external_data=f"{target.name}.data" if external_data else None)
    return target
