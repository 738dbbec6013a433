"""Writing files into a bundle without ever writing outside it (RELIABILITY R25).

* Every file name is the studio's own (``model.onnx``, ``model.onnx.data``,
  ``model.xml``...); names from users or models never become file names.
* ONNX copies are re-serialized, never written with ``onnx.save_model``: onnx's
  saver writes a tensor's raw bytes to the tensor's own ``location`` (the
  CVE-2025-51480 shape, ``location="../victim"``) and names per-tensor files
  after tensor names. Here weights go through onnx-ir into one data file whose
  name we choose (hand-written because no saver offers "ignore the model's
  locations"), and stray external-data fields on inline tensors are dropped.
* Writes go through ``studio.core.outputs`` (temp file beside the destination,
  renamed into place; a link, FIFO or folder at the destination is refused).
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
from onnx import ModelProto, TensorProto

from studio.core import outputs
from studio.core.model import model_weight_bytes
from studio.core.protowalk import iter_tensors
from studio.core.save import EXTERNAL_DATA_THRESHOLD



def data_name(model_file: Path) -> str:
    """The one external-data file of a model the studio writes: ``<model file name>.data``."""
    return f"{model_file.name}.data"


def copy_file(src: Path, dst: Path) -> Path:
    """Copy bytes to ``dst`` atomically (``studio.core.outputs``: a link at ``dst`` is refused)."""
    outputs.copy_file(src, dst)
    return dst


def link_or_copy(src: Path, dst: Path) -> Path:
    """Hard-link a file the studio wrote itself into another place of the same bundle (a Triton
    model repository reuses the OpenVINO IR: no second gigabyte on disk), else copy it. The
    link is made under a temporary name and renamed over ``dst`` (``studio.core.outputs.link_file``)."""
    if not outputs.link_file(src, dst):
        return copy_file(src, dst)
    return dst


def scrub_inline_external_fields(model: ModelProto) -> int:
    """Drop external-data entries from tensors whose bytes are inline; returns how many.

    An inline tensor carrying ``location`` entries is how onnx's saver is tricked
    into writing outside the output folder; the entries mean nothing to an engine."""
    scrubbed = 0
    for t, _ in iter_tensors(model):
        if t.data_location != TensorProto.EXTERNAL and len(t.external_data):
            del t.external_data[:]
            scrubbed += 1
    return scrubbed


def has_external_tensors(model: ModelProto) -> bool:
    return any(t.data_location == TensorProto.EXTERNAL for t, _ in iter_tensors(model))


def write_model_copy(src: Path, dst: Path, *, external: bool | None = None) -> tuple[Path, ...]:
    """A self-contained copy of a validated model at ``dst``: weights inline, or in
    ``<dst name>.data`` when ``external`` (None: only when too big for one protobuf).

    Returns the files written (model first). ``src`` is only read."""
    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    proto = onnx.load_model(str(src), load_external_data=False)
    if external is None:
        external = model_weight_bytes(src) > EXTERNAL_DATA_THRESHOLD
    stale = dst.parent / data_name(dst)
    if not external and not has_external_tensors(proto):
        scrub_inline_external_fields(proto)
        outputs.write_bytes(dst, proto.SerializeToString())
        _remove(stale)
        return (dst,)
    from studio.core.model_io import load_ir, save_declared  # heavy: passes import onnx_ir (~0.3 s)

    model = load_ir(src)           # external tensors read lazily, from the validated locations; map types kept
    save_declared(model, dst, external_data=external)
    if not external:
        _remove(stale)
    return (dst, stale) if external and stale.exists() else (dst,)


def _remove(path: Path) -> None:
    try:
        if path.is_symlink() or path.is_file():
            os.unlink(path)      # scratch: a stale data file in the bundle's own staging folder
    except FileNotFoundError:
        pass


