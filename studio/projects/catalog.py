"""The project catalog: one SQLite file per project (stdlib ``sqlite3``, WAL), the
only mutable state of a project. Files it names are content-addressed and written
once (``store.py``), so a crash at any point leaves a catalog that names only
complete files; a job row is written before its job starts and closed after.

Writers take one lock: a per-file thread lock in this process and SQLite's own
``BEGIN IMMEDIATE`` write lock across processes (busy wait up to 30 s, then one line naming
the processes that hold the catalog open, never a raw "database is locked").

A catalog in a folder this process cannot write (a read-only mount, a folder of another user)
opens read-only (SQLite ``mode=ro``, else ``immutable=1`` when the WAL's shared-memory file
cannot be made): every read works, every write is refused in one line. Only a file SQLite
itself calls corrupt (``SQLITE_NOTADB``/``SQLITE_CORRUPT``) or one without a schema is
"damaged"; a permission or I/O error is "cannot be read", never advice to delete (R66).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import printable

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS projects(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS models(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS versions(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    model_id TEXT NOT NULL REFERENCES models(id) ON DELETE CASCADE,
    id TEXT NOT NULL, label TEXT NOT NULL, parent TEXT, sha256 TEXT NOT NULL, path TEXT NOT NULL,
    created REAL NOT NULL, provenance TEXT NOT NULL DEFAULT '{}', job_id TEXT,
    UNIQUE(model_id, id));
CREATE TABLE IF NOT EXISTS jobs(
    id TEXT PRIMARY KEY, kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK(state IN ('running', 'done', 'failed', 'interrupted')),
    started REAL NOT NULL, ended REAL, args TEXT NOT NULL DEFAULT '{}',
    model_id TEXT, version_id TEXT, message TEXT,
    pid INTEGER, proc_start REAL, token TEXT);
CREATE TABLE IF NOT EXISTS artifacts(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, model_id TEXT, version_id TEXT,
    kind TEXT NOT NULL, name TEXT NOT NULL, path TEXT NOT NULL, created REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}');
CREATE TABLE IF NOT EXISTS datasets(
    id TEXT PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, path TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS settings(
    scope TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated REAL NOT NULL,
    PRIMARY KEY(scope, key));
"""

_LOG = logging.getLogger(__name__)
_LOCKS: dict[str, threading.RLock] = {}
_LOCKS_GUARD = threading.Lock()


def _lock_for(path: Path) -> threading.RLock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(path), threading.RLock())


class CatalogError(StudioError):
    """The catalog cannot be used: not a project (NO-PROJECT), a damaged file (BAD-CATALOG), a file this
    process may not read (UNREADABLE), a read-only project written to (READ-ONLY), another process's write
    lock held past the wait (CATALOG-BUSY), or a disk that refused a write (CATALOG-WRITE)."""


MAX_BUSY_S = 3600.0


def busy_timeout_s() -> float:
    """How long a write waits for another process's write lock: env ONNX_STUDIO_CATALOG_BUSY_S, else 30 s."""
    raw = os.environ.get("ONNX_STUDIO_CATALOG_BUSY_S")
    if not raw:
        return BUSY_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_BUSY_S:
        raise StudioError(f"ONNX_STUDIO_CATALOG_BUSY_S must be seconds in (0, {MAX_BUSY_S:.0f}], got {raw[:20]!r}",
                          code=ErrorCode.BAD_OPTION)
    return value


def error_kind(exc: sqlite3.Error) -> str:
    """What an SQLite error means for a user: 'busy' (another writer), 'corrupt' (the file itself),
    'unreadable' (permissions, a read-only or failing disk), 'full' (no space, a file-size limit), 'other'."""
    name = str(getattr(exc, "sqlite_errorname", "") or "")
    text = str(exc).lower()
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text or "busy" in text:
        return "busy"
    if name.startswith(("SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_FORMAT")) or "not a database" in text \
            or "malformed" in text:
        return "corrupt"
    if name.startswith(("SQLITE_FULL", "SQLITE_TOOBIG")) or "full" in text:
        return "full"
    if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_AUTH")) \
            or "unable to open" in text or "readonly" in text or "disk i/o" in text:
        return "unreadable"
    return "other"


def folder_read_only(folder: Path) -> str | None:
    """Why this process cannot write into ``folder`` ('read-only file system', 'permission denied'), or None."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    return None if os.access(folder, os.W_OK | os.X_OK) else "permission denied"


def holders(path: Path, limit: int = 3) -> str:
    """The other processes that hold ``path`` open (pid and command), for a busy-lock message; '' if none seen."""
    import psutil

    target = str(Path(path).resolve())
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        try:
            if any(f.path == target for f in proc.open_files()):
                args = [Path(a).name if "/" in a else a for a in (proc.info.get("cmdline") or [])[:4]]
                cmd = printable(" ".join(" ".join(args).split()), 60)     # no folders: names only
                found.append(f"pid {proc.pid}" + (f": {cmd}" if cmd else ""))
        except (psutil.Error, OSError):
            continue
        if len(found) >= limit:
            break
    return ", ".join(found)


class Catalog:
    """Typed access to one ``catalog.sqlite``. A short-lived connection per call: safe
    from any thread, and nothing stays open when a Streamlit session goes away."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = Path(path)
        self._lock = _lock_for(self.path)
        self._immutable = False
        if not create and not self.path.is_file():
            raise CatalogError("not a project (no catalog)", code=ErrorCode.NO_PROJECT)
        self.read_only = None if create else (folder_read_only(self.path.parent) or
                                              (None if os.access(self.path, os.W_OK) else "permission denied"))
        if create:
            try:
                with self._lock, closing(self._connect()) as con:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(SCHEMA)
                    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            except sqlite3.DatabaseError as exc:     # a full or read-only projects root, a file-size limit
                raise CatalogError(f"cannot create the project catalog ({exc}: the disk may be full, read-only "
                                   "or past a file-size limit); free some space or choose a writable projects root "
                                   "(--projects-root DIR); nothing was written",
                                   code=ErrorCode.CATALOG_WRITE) from None
        else:
            schema = self.one("SELECT value FROM meta WHERE key='schema'")
            try:
                version = int(schema["value"]) if schema is not None else None
            except (TypeError, ValueError):
                version = None
            if version is None:
                raise CatalogError("the project catalog is damaged (no schema version)", code=ErrorCode.BAD_CATALOG)
            if version > SCHEMA_VERSION:
                raise CatalogError(f"the project catalog is from a newer onnx-studio (schema {version})",
                                   code=ErrorCode.BAD_CATALOG)
            if not self.read_only:
                self.ensure_wal()

    def journal_mode(self) -> str:
        """The catalog file's journal mode as SQLite reports it ('wal' for every project catalog)."""
        row = self.one("PRAGMA journal_mode")
        return str(row[0]).lower() if row is not None else ""

    def ensure_wal(self) -> None:
        """Put the catalog in WAL mode whatever made the file (a backup copy is DELETE, an imported or
        hand-copied catalog may be anything): readers then never block the writer. The mode is kept in
        the file, so this writes only once; a read-only catalog stays as it is, with a log note."""
        if self.journal_mode() == "wal":
            return
        try:
            with self._lock, closing(self._connect()) as con:
                con.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as exc:
            _LOG.warning("project catalog %s stays in its journal mode: %s", self.path.parent.name, exc)

    def _connect(self) -> sqlite3.Connection:
        busy = busy_timeout_s()
        try:
            con = self._open(busy)
        except sqlite3.Error as exc:
            raise self._error(exc, "cannot open the project catalog") from None
        con.row_factory = sqlite3.Row
        con.execute("PRAGMA foreign_keys=ON")
        con.execute("PRAGMA trusted_schema=OFF")     # an imported catalog is data, never code
        con.execute("PRAGMA synchronous=NORMAL")     # WAL + NORMAL: durable across process crashes
        con.execute(f"PRAGMA busy_timeout={int(busy * 1000)}")
        return con

    def _open(self, busy: float) -> sqlite3.Connection:
        """Read-write; read-only (``mode=ro``) where this process cannot write the folder; ``immutable=1``
        where even that fails because a WAL catalog's shared-memory file cannot be created there."""
        if not self.read_only:
            return sqlite3.connect(self.path, timeout=busy, isolation_level=None)
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro"
        if not self._immutable:
            try:
                con = sqlite3.connect(uri, uri=True, timeout=busy, isolation_level=None)
                con.execute("SELECT count(*) FROM sqlite_master").fetchone()
                return con
            except sqlite3.Error as exc:
                if error_kind(exc) != "unreadable":
                    raise
            self._immutable = True
        return sqlite3.connect(uri + "&immutable=1", uri=True, timeout=busy, isolation_level=None)

    def _error(self, exc: sqlite3.Error, what: str) -> CatalogError:
        """One line for an SQLite error, with the code that says what it means (see ``CatalogError``)."""
        kind = error_kind(exc)
        if kind == "busy":
            who = holders(self.path)
            return CatalogError(f"project {self.path.parent.name} is busy: another process is writing its catalog"
                                f" ({who or 'not visible from here'}) and kept the lock past {busy_timeout_s():g} s;"
                                " nothing was changed; try again when it ends", code=ErrorCode.CATALOG_BUSY)
        if kind == "corrupt":
            return CatalogError(f"{what} ({exc}): the file is damaged", code=ErrorCode.BAD_CATALOG)
        if kind == "full":
            return CatalogError(f"the project catalog cannot be written ({exc}: the disk may be full or past a "
                                "file-size limit); the change was not saved", code=ErrorCode.CATALOG_WRITE)
        if kind == "unreadable":
            why = folder_read_only(self.path.parent) or str(exc)
            return CatalogError(f"{what} ({why}); check the permissions and mount of the projects root",
                                code=ErrorCode.UNREADABLE)
        return CatalogError(f"{what} ({exc})", code=ErrorCode.BAD_CATALOG)

    def refuse_if_read_only(self) -> None:
        """A one-line refusal before any write to a project that is open read-only."""
        if self.read_only:
            raise CatalogError(f"project {self.path.parent.name} is open read-only ({self.read_only}: its folder "
                               "cannot be written here); nothing was changed", code=ErrorCode.READ_ONLY)

    # -- reading -------------------------------------------------------------------
    def rows(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            with closing(self._connect()) as con:
                return con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._error(exc, "the project catalog cannot be read") from None

    def one(self, sql: str, params: tuple = ()) -> sqlite3.Row | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    # -- writing -------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer lock (committed on success, rolled back otherwise)."""
        self.refuse_if_read_only()
        with self._lock:
            con = self._connect()
            with closing(con):
                try:
                    con.execute("BEGIN IMMEDIATE")
                    try:
                        yield con
                    except BaseException:
                        if con.in_transaction:
                            con.execute("ROLLBACK")
                        raise
                    con.execute("COMMIT")
                except sqlite3.OperationalError as exc:   # a full disk, a read-only root, another writer
                    if error_kind(exc) in ("busy", "corrupt"):
                        raise self._error(exc, "the project catalog cannot be written") from None
                    raise CatalogError(f"the project catalog cannot be written ({exc}); the change was not "
                                       "saved", code=ErrorCode.CATALOG_WRITE) from None

    def touch(self, con: sqlite3.Connection) -> None:
        con.execute("UPDATE projects SET updated=?", (time.time(),))

    # -- settings ------------------------------------------------------------------
    def get_settings(self, scope: str) -> dict[str, Any]:
        return {r["key"]: json.loads(r["value"]) for r in self.rows(
            "SELECT key, value FROM settings WHERE scope=? ORDER BY key", (scope,))}

    def set_setting(self, scope: str, key: str, value: Any) -> None:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
        with self.write() as con:
            if value is None:
                con.execute("DELETE FROM settings WHERE scope=? AND key=?", (scope, key))
            else:
                con.execute("INSERT INTO settings VALUES (?, ?, ?, ?) ON CONFLICT(scope, key) "
                            "DO UPDATE SET value=excluded.value, updated=excluded.updated",
                            (scope, key, text, time.time()))

    def checkpoint(self) -> None:
        """Fold the WAL into the main file (before a copy or a move)."""
        self.refuse_if_read_only()
        with self._lock, closing(self._connect()) as con:
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def backup_to(self, target: Path) -> None:
        """A consistent copy of the catalog (SQLite's online backup), e.g. for zips and duplicates."""
        try:
            with closing(self._connect()) as src, closing(sqlite3.connect(target)) as dst:
                src.backup(dst)
                dst.execute("PRAGMA journal_mode=DELETE")
        except sqlite3.DatabaseError as exc:     # a full disk, a file-size limit, a read-only folder
            raise CatalogError(f"cannot copy the project catalog ({exc}: the disk may be full, read-only or "
                               "past a file-size limit); free some space or choose another destination; "
                               "nothing was written", code=ErrorCode.CATALOG_WRITE) from None
