"""A workspace keeps every version of a model (the original, each optimized or
fixed version) with its provenance, so any two can be diffed, compared and
profiled side by side. One workspace per browser session or CLI run.

Layout::

    <root>/
      versions.json                 # lineage: id, label, parent, sha256, provenance
      v0-original/<name>.onnx (+ external data files)
      v1-safe/<name>.onnx
      jobs/<job>/                   # scratch and side files of jobs (profiles, caches)
      cache/                        # content-addressed results (by sha256)
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from studio.core import jsonsafe
from studio.core.errors import StudioError
from studio.core.model import ModelHandle, load
from studio.core.paths import atomic_write_text, safe_name
from studio.core.uploads import UploadedFile, write_upload
from studio.core.save import save_model

log = logging.getLogger(__name__)


def user_cache_dir() -> Path:
    """Per-user cache of facts about installed tools (kernel registries, headers):
    ``$XDG_CACHE_HOME/onnx-studio``, so a CLI run leaves nothing in the current folder."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "onnx-studio"


def default_root() -> Path:
    """Workspace root: $ONNX_STUDIO_WORKSPACE, else ./workspace."""
    return Path(os.environ.get("ONNX_STUDIO_WORKSPACE", "workspace")).resolve()


@dataclass(frozen=True)
class Version:
    id: str                    # "v0", "v1", ...
    label: str                 # "original", "safe", "fix: mmdeploy grid_sampler"...
    path: str                  # model file, relative to the workspace root
    sha256: str
    parent: str | None
    created: float
    provenance: dict = field(default_factory=dict)   # pass records, fix names, source


class Workspace:
    """Versions of models in one folder. Thread-safe for one session's use."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()   # add_model calls handle() while holding it
        self._handles: dict[str, ModelHandle] = {}
        self._versions: list[Version] = self._read_index()

    @classmethod
    def create(cls, parent: Path | None = None, prefix: str = "session") -> Workspace:
        """A fresh workspace folder under ``parent`` (default: the workspace root)."""
        base = Path(parent) if parent else default_root()
        base.mkdir(parents=True, exist_ok=True)
        return cls(Path(tempfile.mkdtemp(prefix=f"{safe_name(prefix)}-", dir=base)))

    # -- index -------------------------------------------------------------
    def _index_path(self) -> Path:
        return self.root / "versions.json"

    def _read_index(self) -> list[Version]:
        try:
            raw = json.loads(self._index_path().read_text())
            return [Version(**v) for v in raw.get("versions", [])]
        except FileNotFoundError:
            return []
        except (ValueError, TypeError) as exc:
            raise StudioError(f"workspace index is corrupt ({exc}); start a new workspace") from None

    def _write_index(self) -> None:
        atomic_write_text(self._index_path(), jsonsafe.dumps(
            {"versions": [asdict(v) for v in self._versions]}, indent=2))

    @property
    def versions(self) -> tuple[Version, ...]:
        return tuple(self._versions)

    def version(self, vid: str) -> Version:
        for v in self._versions:
            if v.id == vid:
                return v
        raise StudioError(f"no version '{safe_name(vid)}' in this workspace")

    def handle(self, vid: str) -> ModelHandle:
        """The loaded model of a version (loaded once, then kept)."""
        with self._lock:
            h = self._handles.get(vid)
            if h is None:
                h = load(self.root / self.version(vid).path)
                self._handles[vid] = h
            return h

    # -- adding versions ---------------------------------------------------
    def _new_dir(self, label: str) -> tuple[str, Path]:
        vid = f"v{len(self._versions)}"
        folder = self.root / f"{vid}-{safe_name(label, default='version', max_len=40)}"
        folder.mkdir(parents=True, exist_ok=False)
        return vid, folder

    def _register(self, vid: str, label: str, model_path: Path, parent: str | None,
                  provenance: dict) -> Version:
        try:
            handle = load(model_path)
        except Exception:
            shutil.rmtree(model_path.parent, ignore_errors=True)  # scratch: the version folder this call made
            raise
        v = Version(vid, label, str(model_path.relative_to(self.root)), handle.sha256, parent,
                    time.time(), provenance)
        self._handles[vid] = handle
        self._versions.append(v)
        self._write_index()
        return v

    def add_upload(self, files: list[UploadedFile], label: str = "original") -> Version:
        """Import uploaded files (a model, its data files, or a zip) as a new root version."""
        with self._lock:
            vid, folder = self._new_dir(label)
            try:
                path = write_upload(files, folder)
            except Exception:
                shutil.rmtree(folder, ignore_errors=True)  # scratch: the version folder this call made
                raise
            return self._register(vid, label, path, None, {"source": "upload",
                                                           "files": [safe_name(f.name) for f in files]})

    def add_file(self, source: Path, label: str = "original", parent: str | None = None,
                 provenance: dict | None = None) -> Version:
        """Copy a model file (and its external data files) into the workspace as a version.

        The source is loaded (validated) first and only read, never modified.
        """
        src = load(source)
        with self._lock:
            vid, folder = self._new_dir(label)
            target = folder / f"{safe_name(src.name)}.onnx"
            shutil.copyfile(src.path, target)  # scratch: into the new version folder made above (exist_ok=False)
            for f in src.external_files:
                rel = f.relative_to(src.folder.resolve())
                dst = folder / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dst)  # scratch: into the new version folder made above
            prov = {"source": "file", "name": safe_name(src.path.name), **(provenance or {})}
            return self._register(vid, label, target, parent, prov)

    def add_model(self, model, label: str, parent: str | None, provenance: dict | None = None,
                  *, name: str | None = None) -> Version:
        """Save a derived ModelProto (or onnx_ir Model) as a new version."""
        with self._lock:
            vid, folder = self._new_dir(label)
            base = safe_name(name or (self.handle(parent).name if parent else "model"))
            target = folder / f"{base}.onnx"
            try:
                save_model(model, target)
            except Exception:
                shutil.rmtree(folder, ignore_errors=True)  # scratch: the version folder this call made
                raise
            return self._register(vid, label, target, parent, provenance or {})

    # -- scratch -----------------------------------------------------------
    def job_dir(self, kind: str) -> Path:
        """A new empty folder for one job's side files (profiles, caches, exports)."""
        d = self.root / "jobs" / f"{safe_name(kind)}-{uuid.uuid4().hex[:10]}"
        d.mkdir(parents=True)
        return d

    def cache_dir(self) -> Path:
        d = self.root / "cache"
        d.mkdir(exist_ok=True)
        return d

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)  # scratch: the workspace's own root (a temp workspace)
