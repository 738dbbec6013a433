"""Saving models between passes without rewriting weights that did not change.

A pipeline saves a checkpoint after every modifying pass (verification runs
ORT on a file) and hands models to worker passes through files. Rewriting a
1.3 GB external-data file each time would cost more than the passes. So a
*checkpoint* keeps every external tensor the passes did not touch where it
is: its data file is hard-linked into the checkpoint folder (copied once
into the private work folder when it lives on another filesystem) and the
tensor keeps its offset and length; only new or changed tensors are written,
to ``<name>.data``. Checkpoints are private and deleted with the pipeline's
work folder; nothing ever writes into a linked file.

The *final* result is written self-contained (``save_result``): one data file
of its own when the weights are large, never links to the user's files.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import onnx
import onnx_ir as ir
from onnx_ir import external_data as ir_external

log = logging.getLogger(__name__)

# Above this many bytes of weights, results keep weights in an external file.
EXTERNAL_THRESHOLD = 64 * 2**20
# In checkpoints, in-memory tensors above this size go to the checkpoint's data file.
_CHECKPOINT_TENSOR_BYTES = 1024


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
            shutil.copyfile(source, copy)
            self._copies[str(source)] = copy
            log.info("external data copied once into the work folder (%d MB)", copy.stat().st_size // 2**20)
        return copy

    def link(self, source: Path, folder: Path) -> str:
        self._n += 1
        name = f"linked{self._n}.data"
        target = folder / name
        private = self._private(Path(source))
        try:
            os.link(private, target)
        except OSError:           # no hard links on this filesystem
            shutil.copyfile(private, target)
        return name


def load_trusted(path: Path) -> ir.Model:
    """Load a checkpoint this process wrote. Its data files are hard links on
    purpose, which onnx-ir's loader refuses as a possible attack; these files were
    created here (from data validated by the studio's loader), so their tensors
    are re-pointed by absolute path, without the containment check."""
    model = ir.load(path)
    for v in _initializer_values(model):
        t = v.const_value
        if isinstance(t, ir.ExternalTensor):
            v.const_value = ir.ExternalTensor(str(Path(t.path).resolve()), t.offset, t.length, t.dtype,
                                              shape=t.shape, name=t.name or v.name or "", base_dir="")
    return model


def save_checkpoint(model: ir.Model, path: Path, linker: Linker) -> Path:
    """Save ``model`` to ``path`` keeping unchanged external tensors in place (see module doc).

    The in-memory model is left unchanged.
    """
    path = Path(path)
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
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
        onnx.save_model(ir.serde.serialize_model(model), str(path))
    finally:
        for v, tensor in zip(values, originals):
            v.const_value = tensor
    return path


def save_result(model: ir.Model, path: Path) -> Path:
    """Save a self-contained result: weights inline, or in ``<name>.data`` when large.

    Inline saving would keep an external tensor's old location (onnx-ir saves
    external tensors as they are), so small external weights are read in first."""
    from studio.core.save import save_model

    external = weight_bytes(model) > EXTERNAL_THRESHOLD
    if not external:
        for v in _initializer_values(model):
            if isinstance(v.const_value, ir.ExternalTensor):
                v.const_value = ir.tensor(v.const_value.numpy(), name=v.const_value.name or v.name)
    return save_model(model, Path(path), external_data=external)
