"""Save a model (ModelProto or onnx_ir Model) into an output folder, atomically,
with external data when it would not fit in one protobuf (> 2 GiB).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
from onnx import ModelProto

from studio.core.paths import atomic_write_bytes

# Above this total tensor size, weights go to an external data file.
EXTERNAL_DATA_THRESHOLD = 1_800 * 2**20


def _proto_of(model) -> ModelProto:
    if isinstance(model, ModelProto):
        return model
    import onnx_ir as ir

    if isinstance(model, ir.Model):
        return ir.serde.serialize_model(model)
    raise TypeError(f"cannot save a {type(model).__name__}")


def save_model(model, target: Path, *, external_data: bool | None = None) -> Path:
    """Write ``model`` to ``target`` (inside an output folder the caller chose).

    ``external_data`` None means: only when the model would exceed the protobuf
    limit. External data goes to ``<target name>.data`` beside it.
    Returns the path of the .onnx written.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if external_data is None and not _is_ir(model):
        proto = _proto_of(model)
        external_data = proto.ByteSize() > EXTERNAL_DATA_THRESHOLD
    if _is_ir(model):
        return _save_ir(model, target, external_data)
    proto = _proto_of(model)
    if not external_data:
        atomic_write_bytes(target, proto.SerializeToString())
        return target
    data_name = f"{target.name}.data"
    # onnx.save_model appends to an existing data file: write into a temp dir, then move.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".save-") as tmp:
        tmp_model = Path(tmp) / target.name
        copy = ModelProto()
        copy.CopyFrom(proto)
        onnx.save_model(copy, str(tmp_model), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data_name, size_threshold=1024)
        for name in (data_name, target.name):
            src = Path(tmp) / name
            if src.exists():
                os.replace(src, target.parent / name)
    return target


def _is_ir(model) -> bool:
    try:
        import onnx_ir as ir
    except ImportError:  # pragma: no cover
        return False
    return isinstance(model, ir.Model)


def _save_ir(model, target: Path, external_data: bool | None) -> Path:
    import onnx_ir as ir

    total = sum(v.const_value.nbytes for v in model.graph.initializers.values()
                if v.const_value is not None)
    if external_data is None:
        external_data = total > EXTERNAL_DATA_THRESHOLD
    if not external_data:
        # Saving inline must not keep references to the source's external files.
        ir.external_data.load_to_model(model)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".save-") as tmp:
        tmp_model = Path(tmp) / target.name
        data_name = f"{target.name}.data"
        ir.save(model, tmp_model, external_data=data_name if external_data else None)
        for name in (data_name, target.name):
            src = Path(tmp) / name
            if src.exists():
                os.replace(src, target.parent / name)
    return target
