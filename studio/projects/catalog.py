"""The project catalog: one SQLite file per project (stdlib ``sqlite3``, WAL), the
only mutable state of a project. Files it names are content-addressed and written
once (``store.py``), so a crash at any point leaves a catalog that names only
complete files; a job row is written before its job starts and closed after.

Writers take one lock: a per-file thread lock in this process and SQLite's own
``BEGIN IMMEDIATE`` write lock across processes (busy wait up to 30 s).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from studio.core.errors import StudioError

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
    """The catalog cannot be read (not a project, or a damaged file)."""


class Catalog:
    """Typed access to one ``catalog.sqlite``. A short-lived connection per call: safe
    from any thread, and nothing stays open when a Streamlit session goes away."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = Path(path)
        self._lock = _lock_for(self.path)
        if not create and not self.path.is_file():
            raise CatalogError("not a project (no catalog)", code="NO-PROJECT")
        if create:
            try:
                with self._lock, closing(self._connect()) as con:
                    con.execute("PRAGMA journal_mode=WAL")
                    con.executescript(SCHEMA)
                    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            except sqlite3.DatabaseError as exc:     # a full or read-only projects root, a file-size limit
                raise CatalogError(f"cannot create the project catalog ({exc}: the disk may be full, read-only "
                                   "or past a file-size limit); nothing was written", code="CATALOG-WRITE") from None
        else:
            schema = self.one("SELECT value FROM meta WHERE key='schema'")
            try:
                version = int(schema["value"]) if schema is not None else None
            except (TypeError, ValueError):
                version = None
            if version is None:
                raise CatalogError("the project catalog is damaged (no schema version)", code="BAD-CATALOG")
            if version > SCHEMA_VERSION:
                raise CatalogError(f"the project catalog is from a newer onnx-studio (schema {version})",
                                   code="BAD-CATALOG")
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
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise CatalogError(f"cannot open the project catalog ({exc})", code="BAD-CATALOG") from None
        con.row_factory = sqlite3.Row
        con.execute("PRAGMA foreign_keys=ON")
        con.execute("PRAGMA trusted_schema=OFF")     # an imported catalog is data, never code
        con.execute("PRAGMA synchronous=NORMAL")     # WAL + NORMAL: durable across process crashes
        con.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")
        return con

    # -- reading -------------------------------------------------------------------
    def rows(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        try:
            with closing(self._connect()) as con:
                return con.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise CatalogError(f"the project catalog cannot be read ({exc})", code="BAD-CATALOG") from None

    def one(self, sql: str, params: tuple = ()) -> sqlite3.Row | None:
        found = self.rows(sql, params)
        return found[0] if found else None

    # -- writing -------------------------------------------------------------------
    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction under the writer lock (committed on success, rolled back otherwise)."""
        with self._lock:
            try:
                con = self._connect()
            except sqlite3.DatabaseError as exc:
                raise CatalogError(f"the project catalog cannot be written ({exc})", code="BAD-CATALOG") from None
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
                except sqlite3.OperationalError as exc:   # a full disk or a read-only projects root
                    if "locked" in str(exc) or "busy" in str(exc):
                        raise
                    raise CatalogError(f"the project catalog cannot be written ({exc}); the change was not "
                                       "saved", code="CATALOG-WRITE") from None

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
                               "past a file-size limit); nothing was written", code="CATALOG-WRITE") from None
