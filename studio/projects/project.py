"""A project: models, each with its version tree, their artifacts, datasets, jobs and
settings, in one folder with one catalog (DESIGN.md §8)::

    <projects root>/<project id>/
        catalog.sqlite
        models/<sha256>/model.onnx (+ external data)
        artifacts/<job id>/...
        data/<dataset id>/...
        tmp/                      scratch of running work, swept on open

``ProjectModel`` offers the ``Workspace`` methods (versions, version, handle,
add_file, add_model, job_dir, cache_dir) so passes, fixes and lineage work on it unchanged.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import SameContentError, StudioError, WrongSourceError
from studio.core.model import ModelHandle, load
from studio.core.outputs import register_input
from studio.core.paths import is_within, safe_name
from studio.core.uploads import UploadedFile, write_upload
from studio.core.workspace import Version
from studio.projects import liveness
from studio.projects.catalog import Catalog
from studio.projects.store import artifact_dir, put_model, scratch_dir
from studio.core.save import save_model

CATALOG = "catalog.sqlite"
JOB_STATES = ("running", "done", "failed", "interrupted")
STALE_SCRATCH_S = 24 * 3600
MAX_CACHED_HANDLES = 16          # loaded models kept per process (keyed by project file + content)
_HANDLES: OrderedDict[tuple, ModelHandle] = OrderedDict()
_HANDLES_LOCK = threading.Lock()     # scratch older than this is left from a crash


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    created: float
    versions: int


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    state: str                 # running, done, failed, interrupted
    started: float
    ended: float | None
    args: dict = field(default_factory=dict)
    model_id: str | None = None
    version_id: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class ProjectArtifact:
    job_id: str | None
    model_id: str | None
    version_id: str | None
    kind: str
    name: str
    path: str                  # relative to the project root
    created: float
    meta: dict = field(default_factory=dict)


@dataclass(frozen=True)
class DatasetEntry:
    id: str
    name: str
    kind: str
    path: str
    created: float


@dataclass(frozen=True)
class ProjectInfo:
    id: str
    name: str
    created: float
    updated: float
    models: int
    versions: int
    jobs: int
    size_bytes: int
    damaged: str | None = None     # why the catalog is corrupt (then the counts are 0)
    unreadable: str | None = None  # why it cannot be read here (permissions, a failing disk): not damaged
    read_only: bool = False        # opened read-only (a read-only mount, another user's folder)


class RunningJob:
    """The job a ``Project.job`` block runs: its id, its artifact folder, and a way to
    attach the result (a version, files) before the row is closed."""

    def __init__(self, project: Project, job_id: str) -> None:
        self.project = project
        self.id = job_id
        self.dir = artifact_dir(project.root, job_id)
        self.message: str | None = None

    def record_artifact(self, path: str | Path, kind: str, *, model_id: str | None = None,
                        version_id: str | None = None, meta: dict | None = None) -> ProjectArtifact:
        return self.project.record_artifact(path, kind, job_id=self.id, model_id=model_id, version_id=version_id,
                                            meta=meta)


class Project:
    """One project folder. Cheap to construct; every read goes to the catalog, so two
    processes (the server and a CLI run) see each other's changes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.id = self.root.name
        self.catalog = Catalog(self.root / CATALOG)

    @classmethod
    def create(cls, root: Path, name: str) -> Project:
        root.mkdir(parents=True, exist_ok=False)
        try:
            cat = Catalog(root / CATALOG, create=True)
            now = time.time()
            with cat.write() as con:
                con.execute("INSERT INTO projects VALUES (?, ?, ?, ?)", (root.name, name, now, now))
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)  # scratch: the folder made just above, not yet a project
            raise
        return cls(root)

    def __repr__(self) -> str:
        return f"Project({self.id!r}, {self.name!r})"

    # -- the project ---------------------------------------------------------------
    @property
    def name(self) -> str:
        row = self.catalog.one("SELECT name FROM projects")
        return row["name"] if row else self.id

    def rename(self, name: str) -> None:
        with self.catalog.write() as con:
            con.execute("UPDATE projects SET name=?, updated=?", (name, time.time()))

    def info(self) -> ProjectInfo:
        row = self.catalog.one("SELECT * FROM projects")
        counts = self.catalog.one("SELECT (SELECT count(*) FROM models) AS m, (SELECT count(*) FROM versions) AS v,"
                                  " (SELECT count(*) FROM jobs) AS j")
        size = sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file() and not p.is_symlink())
        return ProjectInfo(self.id, row["name"] if row else self.id, row["created"] if row else 0.0,
                           row["updated"] if row else 0.0, counts["m"], counts["v"], counts["j"], size,
                           read_only=self.read_only)

    @property
    def read_only(self) -> bool:
        """Open read-only: its folder cannot be written by this process (reads work, writes refuse)."""
        return bool(self.catalog.read_only)

    def require_writable(self) -> None:
        """One line before any work that would write into a read-only project."""
        self.catalog.refuse_if_read_only()

    def reconcile(self) -> list[str]:
        """After a crash: jobs whose process is gone become interrupted; scratch is swept.
        Returns the ids of jobs marked interrupted."""
        stale = self._stale_jobs()
        if self.read_only:                 # nothing can be written: jobs() shows them interrupted all the same
            return stale
        if stale:
            with self.catalog.write() as con:
                for jid in stale:
                    con.execute("UPDATE jobs SET state='interrupted', message=coalesce(message, ?) "
                                "WHERE id=? AND state='running'",
                                ("the process running it ended before it finished", jid))
        tmp = self.root / "tmp"
        if tmp.is_dir():
            for d in tmp.iterdir():
                try:
                    if time.time() - d.stat().st_mtime > STALE_SCRATCH_S:
                        shutil.rmtree(d, ignore_errors=True)  # scratch: inside the projects root, the studio's own store
                except OSError:
                    pass
        return stale

    # -- models --------------------------------------------------------------------
    def models(self) -> list[ModelInfo]:
        return [ModelInfo(r["id"], r["name"], r["created"], r["n"]) for r in self.catalog.rows(
            "SELECT m.id, m.name, m.created, (SELECT count(*) FROM versions v WHERE v.model_id=m.id) AS n "
            "FROM models m ORDER BY m.created, m.id")]

    def model(self, model_id: str) -> ProjectModel:
        row = self.catalog.one("SELECT id, name FROM models WHERE id=?", (str(model_id),))
        if row is None:
            raise StudioError(f"no model '{safe_name(str(model_id))}' in project '{self.name[:60]}'",
                              code=ErrorCode.NO_MODEL)
        return ProjectModel(self, row["id"], row["name"])

    def find_content(self, sha256: str) -> tuple[ProjectModel, Version] | None:
        """The first version (of any model) with this content, if the project holds it."""
        row = self.catalog.one("SELECT model_id, id FROM versions WHERE sha256=? ORDER BY seq LIMIT 1", (sha256,))
        if row is None:
            return None
        model = self.model(row["model_id"])
        return model, model.version(row["id"])

    def _new_model(self, name: str) -> str:
        with self.catalog.write() as con:
            n = con.execute("SELECT count(*) FROM models").fetchone()[0]
            mid = f"m{n + 1}"
            while con.execute("SELECT 1 FROM models WHERE id=?", (mid,)).fetchone():
                n += 1
                mid = f"m{n + 1}"
            con.execute("INSERT INTO models VALUES (?, ?, ?)", (mid, name, time.time()))
            self.catalog.touch(con)
        return mid

    def add_model_file(self, source: str | Path | ModelHandle, *, name: str | None = None,
                       label: str = "original", provenance: dict | None = None) -> tuple[ProjectModel, Version]:
        """A new model (its first version) from a file; the file is only read."""
        handle = source if isinstance(source, ModelHandle) else load(source)
        model = self.model(self._new_model(name or handle.name))
        v = model.add_file(handle, label=label,
                           provenance={"source": "file", "name": safe_name(handle.path.name), **(provenance or {})})
        return model, v

    def add_model_upload(self, files: list[UploadedFile], *, label: str = "original") -> tuple[ProjectModel, Version]:
        """A new model from uploaded bytes (a model, its data files, or a zip), written inside the project."""
        tmp = scratch_dir(self.root, "upload")
        try:
            path = write_upload(files, tmp)
            handle = load(path)
            return self.add_model_file(handle, name=handle.name, label=label,
                                       provenance={"source": "upload", "files": [safe_name(f.name) for f in files]})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store

    def delete_model(self, model_id: str) -> None:
        with self.catalog.write() as con:
            con.execute("DELETE FROM settings WHERE scope=?", (f"model:{model_id}",))
            con.execute("DELETE FROM models WHERE id=?", (model_id,))
            self.catalog.touch(con)
        self.gc()

    def gc(self) -> None:
        """Remove stored model folders no version names any more."""
        used = {r["sha256"] for r in self.catalog.rows("SELECT DISTINCT sha256 FROM versions")}
        models = self.root / "models"
        if models.is_dir():
            for d in models.iterdir():
                if d.is_dir() and d.name not in used:
                    shutil.rmtree(d, ignore_errors=True)  # scratch: inside the projects root, the studio's own store

    def handle_for(self, rel_path: str, sha256: str, name: str) -> ModelHandle:
        """The loaded model of a stored version (validated and hashed once per process, then cached)."""
        path = (self.root / rel_path).resolve()
        if not is_within(path, self.root / "models"):
            raise StudioError("a version's file lies outside its project (damaged catalog)", code=ErrorCode.BAD_CATALOG)
        try:
            st = path.stat()
        except OSError:
            raise StudioError("a stored model file is missing (damaged project)", code=ErrorCode.BAD_CATALOG) from None
        key = (str(path), sha256, st.st_mtime_ns, st.st_size)
        with _HANDLES_LOCK:
            h = _HANDLES.get(key)
            if h is not None:
                _HANDLES.move_to_end(key)
        if h is not None:
            register_input(h.path, *h.external_files)   # protected in this run too (load registered it once)
        else:
            h = load(path)
            if h.sha256 != sha256:
                raise StudioError("a stored model does not match its catalog entry (damaged project)",
                                  code=ErrorCode.BAD_CATALOG)
            with _HANDLES_LOCK:
                _HANDLES[key] = h
                while len(_HANDLES) > MAX_CACHED_HANDLES:
                    _HANDLES.popitem(last=False)
        return replace(h, name=safe_name(name))

    # -- settings ------------------------------------------------------------------
    def settings(self, model_id: str | None = None) -> dict[str, Any]:
        return self.catalog.get_settings(f"model:{model_id}" if model_id else "project")

    def set_setting(self, key: str, value: Any, model_id: str | None = None) -> None:
        self.catalog.set_setting(f"model:{model_id}" if model_id else "project", key, value)

    # -- jobs and artifacts --------------------------------------------------------
    @contextmanager
    def job(self, kind: str, args: dict | None = None, *, model_id: str | None = None,
            version_id: str | None = None) -> Iterator[RunningJob]:
        """A job row is written (running, with this process as owner) before the block
        runs and closed after: done, or failed with the error's message. If the process
        dies inside the block, the next reader sees the owner gone: interrupted."""
        jid = f"{safe_name(kind, max_len=20)}-{secrets.token_hex(5)}"
        pid, start, token = liveness.owner()
        with self.catalog.write() as con:
            con.execute("INSERT INTO jobs(id, kind, state, started, args, model_id, version_id, pid, proc_start, token)"
                        " VALUES (?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                        (jid, kind, time.time(), json.dumps(args or {}, default=str), model_id, version_id,
                         pid, start, token))
        running = RunningJob(self, jid)
        try:
            yield running
        except Exception as exc:
            self._close_job(jid, "failed", str(exc)[:500] or type(exc).__name__)
            raise
        except BaseException:              # Ctrl+C, a Stop button (Streamlit's stop/rerun), exit
            self._close_job(jid, "failed", "stopped before it finished")
            raise
        self._close_job(jid, "done", running.message)

    def _close_job(self, jid: str, state: str, message: str | None) -> None:
        with self.catalog.write() as con:
            con.execute("UPDATE jobs SET state=?, ended=?, message=? WHERE id=?", (state, time.time(), message, jid))

    def _stale_jobs(self) -> list[str]:
        return [r["id"] for r in self.catalog.rows("SELECT id, pid, proc_start, token FROM jobs WHERE state='running'")
                if not liveness.owner_alive(r["pid"], r["proc_start"], r["token"])]

    def jobs(self, *, reconcile: bool = True) -> list[Job]:
        stale = set(self.reconcile()) if reconcile else set()
        if not self.read_only:
            stale = set()                  # reconcile wrote them as interrupted
        gone = ("interrupted", "the process running it ended before it finished")
        return [Job(r["id"], r["kind"], gone[0] if r["id"] in stale else r["state"], r["started"], r["ended"],
                    json.loads(r["args"] or "{}"), r["model_id"], r["version_id"],
                    r["message"] or (gone[1] if r["id"] in stale else None))
                for r in self.catalog.rows("SELECT * FROM jobs ORDER BY started, id")]

    def record_artifact(self, path: str | Path, kind: str, *, job_id: str | None = None, model_id: str | None = None,
                        version_id: str | None = None, meta: dict | None = None) -> ProjectArtifact:
        p = Path(path).resolve()
        if not is_within(p, self.root):
            raise StudioError("an artifact must be inside its project folder", code=ErrorCode.ARTIFACT_OUTSIDE)
        a = ProjectArtifact(job_id, model_id, version_id, kind, p.name, str(p.relative_to(self.root)), time.time(),
                     meta or {})
        with self.catalog.write() as con:
            con.execute("INSERT INTO artifacts(job_id, model_id, version_id, kind, name, path, created, meta) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (a.job_id, a.model_id, a.version_id, a.kind, a.name, a.path,
                                                           a.created, json.dumps(a.meta, default=str)))
            self.catalog.touch(con)
        return a

    def artifacts(self, model_id: str | None = None) -> list[ProjectArtifact]:
        sql = "SELECT * FROM artifacts" + (" WHERE model_id=?" if model_id else "") + " ORDER BY seq"
        return [ProjectArtifact(r["job_id"], r["model_id"], r["version_id"], r["kind"], r["name"], r["path"], r["created"],
                         json.loads(r["meta"] or "{}"))
                for r in self.catalog.rows(sql, (model_id,) if model_id else ())]

    def insert_dataset(self, dataset_id: str, name: str, kind: str, rel_path: str) -> bool:
        """Add a dataset row unless the name is taken: the check and the insert are one write transaction
        (SQLite's write lock), so of two concurrent ``data add --name dup`` one wins. False when taken."""
        with self.catalog.write() as con:
            cur = con.execute("INSERT INTO datasets SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS "
                              "(SELECT 1 FROM datasets WHERE name=?)",
                              (dataset_id, name, kind, rel_path, time.time(), name))
            if cur.rowcount != 1:
                return False
            self.catalog.touch(con)
        return True

    def datasets(self) -> list[DatasetEntry]:
        return [DatasetEntry(r["id"], r["name"], r["kind"], r["path"], r["created"])
                for r in self.catalog.rows("SELECT * FROM datasets ORDER BY created")]

    def scratch_dir(self, kind: str) -> Path:
        return scratch_dir(self.root, safe_name(kind, max_len=30))


class ProjectModel:
    """One model of a project and its version tree, with the ``Workspace`` methods."""

    def __init__(self, project: Project, model_id: str, name: str) -> None:
        self.project = project
        self.id = model_id
        self.name = name

    @property
    def root(self) -> Path:
        return self.project.root

    def __repr__(self) -> str:
        return f"ProjectModel({self.project.id!r}, {self.id!r}, {self.name!r})"

    @staticmethod
    def _version(r) -> Version:
        return Version(r["id"], r["label"], r["path"], r["sha256"], r["parent"], r["created"],
                       json.loads(r["provenance"] or "{}"))

    @property
    def versions(self) -> tuple[Version, ...]:
        return tuple(self._version(r) for r in self.project.catalog.rows(
            "SELECT * FROM versions WHERE model_id=? ORDER BY seq", (self.id,)))

    def version(self, vid: str) -> Version:
        r = self.project.catalog.one("SELECT * FROM versions WHERE model_id=? AND id=?", (self.id, str(vid)))
        if r is None:
            raise StudioError(f"no version '{safe_name(str(vid))}' of model '{self.name[:60]}'",
                              code=ErrorCode.NO_VERSION)
        return self._version(r)

    def version_with_content(self, sha256: str) -> Version | None:
        """This model's first version with this content, if any."""
        r = self.project.catalog.one("SELECT * FROM versions WHERE model_id=? AND sha256=? ORDER BY seq LIMIT 1",
                                     (self.id, sha256))
        return None if r is None else self._version(r)

    def handle(self, vid: str) -> ModelHandle:
        v = self.version(vid)
        return self.project.handle_for(v.path, v.sha256, self.name)

    def add_file(self, source: str | Path | ModelHandle, label: str = "original", parent: str | None = None,
                 provenance: dict | None = None, *, job_id: str | None = None, source_sha256: str | None = None,
                 refuse_same: bool = False) -> Version:
        """Store a model file (only read) as a new version of this model. ``source_sha256``: the content the
        file was computed from (a precision variant, an edit), which must be ``parent``'s, or nothing is
        saved (R59: another model's result is never filed here). ``refuse_same``: a file byte-identical
        to a version of this model is refused as "same as vN" (R63), not stored as a silent duplicate."""
        handle = source if isinstance(source, ModelHandle) else load(source)
        if parent is not None:
            base = self.version(parent)
            if source_sha256 is not None and source_sha256 != base.sha256:
                raise WrongSourceError(
                    f"not saved: this result was computed on another model (sha256 {source_sha256[:12]}), not on "
                    f"{parent} of '{safe_name(self.name)[:60]}' (sha256 {base.sha256[:12]}); run it again on "
                    f"this version", code=ErrorCode.WRONG_SOURCE)
        elif source_sha256 is not None:
            raise WrongSourceError("not saved: a derived result needs the version it was computed on as its parent",
                                   code=ErrorCode.WRONG_SOURCE)
        if refuse_same:
            same = self.version_with_content(handle.sha256)
            if same is not None:
                raise SameContentError(
                    f"no new version: the result is byte-identical to {same.id} ({safe_name(same.label)[:40]}) of "
                    f"'{safe_name(self.name)[:60]}' — same as {same.id}, sha256 {same.sha256[:12]}", version=same.id)
        sha, rel = put_model(self.root, handle)
        with self.project.catalog.write() as con:
            n = con.execute("SELECT count(*) FROM versions WHERE model_id=?", (self.id,)).fetchone()[0]
            vid = f"v{n}"
            created = time.time()
            con.execute("INSERT INTO versions(model_id, id, label, parent, sha256, path, created, provenance, job_id)"
                        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (self.id, vid, label, parent, sha, rel, created, json.dumps(provenance or {}, default=str),
                         job_id))
            self.project.catalog.touch(con)
        return Version(vid, label, rel, sha, parent, created, json.loads(json.dumps(provenance or {}, default=str)))

    def add_model(self, model, label: str, parent: str | None, provenance: dict | None = None,
                  *, name: str | None = None) -> Version:
        """Save a derived ModelProto (or onnx_ir Model) as a new version."""
        tmp = self.project.scratch_dir("save")
        try:
            path = save_model(model, tmp / "model.onnx")
            return self.add_file(path, label=label, parent=parent, provenance=provenance)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store

    def add_upload(self, files: list[UploadedFile], label: str = "original") -> Version:
        tmp = self.project.scratch_dir("upload")
        try:
            return self.add_file(write_upload(files, tmp), label=label,
                                 provenance={"source": "upload", "files": [safe_name(f.name) for f in files]})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store

    def job_dir(self, kind: str) -> Path:
        """A new folder for one piece of work's files (profiles, plugin packages, inputs), kept in the
        project under ``artifacts/`` and listed as an artifact of this model."""
        d = artifact_dir(self.root, f"{safe_name(kind, max_len=30)}-{secrets.token_hex(5)}")
        self.project.record_artifact(d, safe_name(kind, max_len=30).split("-")[0], model_id=self.id)
        return d

    def cache_dir(self) -> Path:
        d = self.root / "cache"
        d.mkdir(exist_ok=True)
        return d

    def settings(self) -> dict[str, Any]:
        return self.project.settings(self.id)

    def set_setting(self, key: str, value: Any) -> None:
        self.project.set_setting(key, value, self.id)
