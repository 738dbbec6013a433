"""Content-addressed files of a project: each model under ``models/<sha256>/``
(the model file under its first name, ``<name>.onnx``, so commands
shown for it read naturally, plus its external-data files), written once into a
temporary folder and moved into place with one atomic rename, so a reader (or a
catalog row) never sees half a model. Identical content is stored once."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle, load
from studio.core.paths import safe_child, safe_name

MODEL_FILE = "model.onnx"       # when the model has no usable name


def _stored_file(folder: Path) -> Path | None:
    found = sorted(folder.glob("*.onnx")) if folder.is_dir() else []
    return found[0] if len(found) == 1 else None


def _fsync_tree(folder: Path) -> None:
    for p in folder.rglob("*"):
        if p.is_file():
            with open(p, "rb") as fh:
                os.fsync(fh.fileno())
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def scratch_dir(root: Path, prefix: str) -> Path:
    """A fresh folder under ``<project>/tmp`` (swept when the project opens)."""
    d = root / "tmp" / f"{prefix}-{secrets.token_hex(6)}"
    d.mkdir(parents=True)
    return d


def put_model(root: Path, source: ModelHandle) -> tuple[str, str]:
    """Store a loaded model's files; returns (sha256, path relative to the project root).

    The source files are only read. The stored copy is re-loaded and must hash the same."""
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    final = models / source.sha256
    existing = _stored_file(final)
    if existing is not None:
        return source.sha256, existing.relative_to(root).as_posix()
    name = f"{safe_name(source.name, default='model')}.onnx"
    tmp = scratch_dir(root, "model")
    try:
        shutil.copyfile(source.path, tmp / name)  # scratch: inside the projects root, the studio's own store
        for f in source.external_files:
            dst = safe_child(tmp, f.relative_to(source.folder.resolve()))
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dst)  # scratch: inside the projects root, the studio's own store
        stored = load(tmp / name, check=False)
        if stored.sha256 != source.sha256:
            raise StudioError("the stored copy of the model differs from its source (changed while copying?)",
                              code=ErrorCode.STORE_MISMATCH)
        _fsync_tree(tmp)
        try:
            os.rename(tmp, final)  # scratch: inside the projects root, the studio's own store
        except OSError:
            if _stored_file(final) is None:    # lost a race with an identical writer: fine
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store
    return source.sha256, _stored_file(final).relative_to(root).as_posix()


def artifact_dir(root: Path, job_id: str) -> Path:
    d = root / "artifacts" / job_id
    d.mkdir(parents=True, exist_ok=True)
    return d
