"""The projects root: where projects live, and creating, listing, opening, renaming,
duplicating, deleting, exporting and importing them.

Root: ``--projects-root``, else ``$ONNX_STUDIO_PROJECTS_ROOT``, else
``$XDG_DATA_HOME/onnx-studio/projects`` (``~/.local/share/onnx-studio/projects``).
Ids are unguessable (``secrets.token_urlsafe``): on a shared server the id is the key.
"""

from __future__ import annotations

import fcntl
import os
import re
import secrets
import shutil
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from studio.core import outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import safe_child
from studio.core.uploads import zip_members
from studio.projects.catalog import Catalog, CatalogError, folder_read_only
from studio.projects.project import CATALOG, Project, ProjectInfo

ID_RE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")
SKIP_IN_ZIP = ("tmp", "cache")
MAX_NAME = 120


def default_projects_root() -> Path:
    env = os.environ.get("ONNX_STUDIO_PROJECTS_ROOT")
    if env:
        return Path(env).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(data) / "onnx-studio" / "projects").resolve()


def _root(root: str | Path | None) -> Path:
    r = Path(root).expanduser().resolve() if root else default_projects_root()
    with outputs.translated(outputs.shown_path(r)):
        r.mkdir(parents=True, exist_ok=True)
    return r


def _clean_name(name: str) -> str:
    text = " ".join(str(name).split())[:MAX_NAME]
    if not text:
        raise StudioError("a project needs a name", code=ErrorCode.BAD_NAME)
    return text


def new_id() -> str:
    """An unguessable id that never starts with '-' or '_' (a leading '-' reads as an option on a command line)."""
    while True:
        pid = secrets.token_urlsafe(16)
        if pid[0].isalnum():
            return pid


def is_project_id(text: str) -> bool:
    return bool(ID_RE.match(text or ""))


def create_project(name: str, root: str | Path | None = None) -> Project:
    r = _root(root)
    why = folder_read_only(r)
    if why:
        raise CatalogError(f"cannot create project '{_clean_name(name)[:60]}': the projects root "
                           f"{outputs.shown_path(r)} cannot be written ({why}); its projects open read-only",
                           code=ErrorCode.READ_ONLY)
    return Project.create(r / new_id(), _clean_name(name))


@contextmanager
def _root_lock(root: Path) -> Iterator[None]:
    """Across processes (``flock`` on the root folder itself: no lock file is left behind): one finds-or-creates
    a project name at a time, so two first uses of ``--project shared`` at once make one project, not two."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise outputs.describe(exc, outputs.shown_path(root)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                        # closing drops the lock


def _updated(project: Project) -> float:
    row = project.catalog.one("SELECT updated FROM projects")
    return float(row["updated"]) if row else 0.0


def open_project(id_or_name: str, root: str | Path | None = None, *, by_name: bool = True,
                 unique: bool = False) -> Project:
    """A project by id (or, with ``by_name``, by its name); stale jobs are reconciled.

    Names are labels, ids are identity: where several projects share the name, the most recently
    changed one opens. ``unique`` (for what changes or removes a project by name): that is an error
    naming the ids instead."""
    r = _root(root)
    key = str(id_or_name)
    if is_project_id(key) and (r / key / CATALOG).is_file():
        project = Project(r / key)
    elif is_project_id(key) and _lost_catalog(r / key):
        raise CatalogError(f"project {key} is damaged: its catalog.sqlite is missing", code=ErrorCode.BAD_CATALOG)
    else:
        scanned = _scan(r) if by_name else []
        matches = [p for p in scanned if isinstance(p, Project) and p.name == key]
        if not matches:
            unread = [p.id for p in scanned if isinstance(p, ProjectInfo) and p.unreadable]
            hint = (f" ({len(unread)} project(s) under the root cannot be read here: {', '.join(unread[:3])})"
                    if unread else "")
            raise StudioError(f"no project '{key[:60]}'{hint}", code=ErrorCode.NO_PROJECT)
        if len(matches) > 1 and unique:
            raise StudioError(f"{len(matches)} projects are named '{key[:60]}'; use the id "
                              f"({', '.join(p.id for p in matches)})", code=ErrorCode.AMBIGUOUS_PROJECT)
        project = max(matches, key=_updated)
    project.reconcile()
    return project


def project_with_content(sha256: str, root: str | Path | None = None) -> Project | None:
    """The most recently changed project holding a version with this content (sha256), if any."""
    holders = [p for p in _all(_root(root)) if p.catalog.one("SELECT 1 FROM versions WHERE sha256=? LIMIT 1",
                                                              (sha256,)) is not None]
    if not holders:
        return None
    project = max(holders, key=_updated)
    project.reconcile()
    return project


def open_or_create(name: str, root: str | Path | None = None) -> Project:
    """The project of that name or id; a new one when there is none. The look-up and the creation hold
    the root's lock, so concurrent first uses agree on one project."""
    try:
        return open_project(name, root)
    except StudioError as exc:
        if exc.code != ErrorCode.NO_PROJECT:
            raise
    r = _root(root)
    why = folder_read_only(r)
    if why:
        return create_project(name, r)         # the one-line refusal (a read-only root makes nothing)
    with _root_lock(r):
        try:
            return open_project(name, r)       # made by another process while this one waited
        except StudioError as exc:
            if exc.code != ErrorCode.NO_PROJECT:
                raise
        return create_project(name, r)


def _scan(root: Path) -> list[Project | ProjectInfo]:
    """Every project folder under the root: a ``Project``, or a ``ProjectInfo`` with ``damaged`` set
    (a catalog that cannot be read, or a folder with files but no catalog) -- never silently left out."""
    found: list[Project | ProjectInfo] = []
    for d in sorted(root.iterdir()):
        if not (is_project_id(d.name) and d.is_dir() and not d.is_symlink()):
            continue
        if not (d / CATALOG).is_file():
            if _lost_catalog(d):
                found.append(_damaged(d, "its catalog.sqlite is missing"))
            continue                     # a folder being created (the catalog comes next) or not ours
        try:
            found.append(Project(d))
        except CatalogError as exc:
            found.append(_damaged(d, str(exc)) if exc.code == ErrorCode.BAD_CATALOG else _unreadable(d, str(exc)))
    return found


def _lost_catalog(folder: Path) -> bool:
    """A project folder with stored files but no catalog (an empty one may be a project being created)."""
    return folder.is_dir() and not folder.is_symlink() and not (folder / CATALOG).is_file() and any(
        (folder / sub).is_dir() for sub in ("models", "artifacts", "data"))


def _damaged(folder: Path, reason: str) -> ProjectInfo:
    try:
        changed = folder.stat().st_mtime
    except OSError:
        changed = 0.0
    return ProjectInfo(folder.name, folder.name, changed, changed, 0, 0, 0, 0, damaged=reason[:300])


def _unreadable(folder: Path, reason: str) -> ProjectInfo:
    """A project this process cannot read now (permissions, a busy or failing disk): not damaged."""
    try:
        changed = folder.stat().st_mtime
    except OSError:
        changed = 0.0
    return ProjectInfo(folder.name, folder.name, changed, changed, 0, 0, 0, 0, unreadable=reason[:300])


def _all(root: Path) -> list[Project]:
    return [p for p in _scan(root) if isinstance(p, Project)]


def list_projects(root: str | Path | None = None) -> list[ProjectInfo]:
    """Every project under the root, newest change first; a damaged one is listed with the reason
    (``ProjectInfo.damaged``) so a user sees it and can remove or restore it."""
    infos = []
    for p in _scan(_root(root)):
        if isinstance(p, ProjectInfo):
            infos.append(p)
            continue
        try:
            infos.append(p.info())
        except CatalogError as exc:
            infos.append(_damaged(p.root, str(exc)) if exc.code == ErrorCode.BAD_CATALOG else _unreadable(p.root, str(exc)))
        except (StudioError, OSError) as exc:
            infos.append(_unreadable(p.root, str(exc) if isinstance(exc, StudioError) else
                                     f"its files cannot be read ({(exc.strerror or type(exc).__name__).lower()})"))
    return sorted(infos, key=lambda i: -i.updated)


def rename_project(project: Project, name: str) -> Project:
    project.rename(_clean_name(name))
    return project


def _copy_tree(project: Project, dest: Path) -> None:
    """Files of a project (not its scratch) and a consistent copy of its catalog (in the projects root:
    a full disk or a file-size limit there is one line, and the copy is removed by the caller)."""
    with outputs.translated(outputs.shown_path(project.root.parent)):      # the projects root
        _copy_files(project, dest)
    project.catalog.backup_to(dest / CATALOG)


def _copy_files(project: Project, dest: Path) -> None:
    dest.mkdir(parents=True)
    for item in project.root.iterdir():
        if item.name in SKIP_IN_ZIP or item.name.startswith(CATALOG):
            continue
        if item.is_dir() and not item.is_symlink():
            _copy_dir(item, dest / item.name)
        elif item.is_file() and not item.is_symlink():
            shutil.copy2(item, dest / item.name)  # scratch: inside the projects root, the studio's own store


def _copy_dir(src: Path, dst: Path) -> None:
    """``shutil.copytree(symlinks=True)`` that lets the first OSError through as it is (copytree gathers
    them into one ``shutil.Error`` without an errno, so a full disk could not be told apart)."""
    dst.mkdir()
    for item in src.iterdir():
        target = dst / item.name
        if item.is_symlink():
            os.symlink(os.readlink(item), target)  # scratch: inside the projects root, the studio's own store
        elif item.is_dir():
            _copy_dir(item, target)
        elif item.is_file():
            shutil.copy2(item, target)  # scratch: inside the projects root, the studio's own store


def _adopt(folder: Path, root: Path, name: str | None) -> Project:
    """Give a complete copied/unpacked folder a new id and move it into place (one rename)."""
    pid = new_id()
    cat = Catalog(folder / CATALOG)
    with cat.write() as con:
        row = con.execute("SELECT name FROM projects").fetchone()
        con.execute("DELETE FROM projects")
        now = time.time()
        con.execute("INSERT INTO projects VALUES (?, ?, ?, ?)",
                    (pid, _clean_name(name or (row[0] if row else "imported")), now, now))
        con.execute("UPDATE jobs SET state='interrupted', message='copied while running' WHERE state='running'")
    cat.checkpoint()
    os.rename(folder, root / pid)  # scratch: inside the projects root, the studio's own store
    project = Project(root / pid)
    project.reconcile()
    return project


def duplicate_project(project: Project, name: str | None = None) -> Project:
    root = project.root.parent
    tmp = root / f".tmp-{new_id()}"
    try:
        _copy_tree(project, tmp)
        return _adopt(tmp, root, name or f"{project.name} (copy)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store


def delete_project(project: Project | str, root: str | Path | None = None) -> None:
    """Gone at once for readers (one rename), then removed. An id names the folder directly, so a
    damaged project (one whose catalog cannot be read) can be removed too."""
    if isinstance(project, Project):
        folder = project.root
    else:
        folder = _root(root) / str(project)
        if not (is_project_id(str(project)) and folder.is_dir() and not folder.is_symlink()):
            raise StudioError(f"no project '{str(project)[:60]}'", code=ErrorCode.NO_PROJECT)
    why = folder_read_only(folder.parent)
    if why:
        raise CatalogError(f"project {folder.name} cannot be removed: the projects root cannot be written ({why});"
                           " nothing was deleted", code=ErrorCode.READ_ONLY)
    trash = folder.parent / f".trash-{new_id()}"
    os.rename(folder, trash)  # scratch: inside the projects root, the studio's own store
    shutil.rmtree(trash, ignore_errors=True)  # scratch: inside the projects root, the studio's own store


def export_project(project: Project, out: str | Path) -> Path:
    """The project as one zip (catalog, models, artifacts, data; no scratch)."""
    shown = outputs.shown_path(out)
    out = outputs.check_destination(out, shown=shown)
    root = project.root.parent
    # A read-only project's catalog snapshot goes to the system's temp folder (it is small); else beside it.
    tmp = Path(tempfile.mkdtemp(prefix="onnx-studio-export-")) if project.read_only else root / f".tmp-{new_id()}"
    try:
        # Only the catalog is copied first (a consistent snapshot); every other file goes into the zip
        # straight from the project (content-addressed, written once), so the export needs no second
        # copy of the models on the projects root's disk.
        with outputs.translated(outputs.shown_path(root)):
            tmp.mkdir(exist_ok=project.read_only)
        project.catalog.backup_to(tmp / CATALOG)
        with outputs.open_output(out, "wb", shown=shown) as fh, zipfile.ZipFile(fh, "w", zipfile.ZIP_DEFLATED,
                                                                               allowZip64=True) as zf:
            zf.write(tmp / CATALOG, CATALOG)
            for p in sorted(project.root.rglob("*")):
                rel = p.relative_to(project.root)
                if rel.parts[0] in SKIP_IN_ZIP or rel.parts[0].startswith(CATALOG) or p.is_symlink() \
                        or not p.is_file() or any(part.startswith(".onnx-studio-") for part in rel.parts):
                    continue
                zf.write(p, rel.as_posix())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store
    return out


def import_project(archive: str | Path | bytes, root: str | Path | None = None, *, name: str | None = None) -> Project:
    """A new project (new id) from an exported zip. Members are checked first, as uploads
    are (no absolute or ``..`` paths, no links, no bombs), and the catalog must open."""
    r = _root(root)
    data = archive if isinstance(archive, bytes) else Path(archive).read_bytes()
    members = zip_members(data)
    if not any(rel.as_posix() == CATALOG for _, rel in members):
        raise StudioError("not an onnx-studio project archive (no catalog.sqlite at its top)",
                          code=ErrorCode.NOT_A_PROJECT)
    tmp = r / f".tmp-{new_id()}"
    try:
        with outputs.translated(outputs.shown_path(r)):
            tmp.mkdir()
            _unpack(data, members, tmp)
        return _adopt(tmp, r, name)
    except CatalogError as exc:
        if exc.code == ErrorCode.CATALOG_WRITE:      # the projects root's disk, not the archive
            raise
        raise StudioError(f"the archive's catalog cannot be read ({exc})", code=ErrorCode.NOT_A_PROJECT) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # scratch: inside the projects root, the studio's own store


def _unpack(data: bytes, members, tmp: Path) -> None:  # noqa: ANN001 - zip_members' (ZipInfo, Path) pairs
    """The checked archive members, written under ``tmp``."""
    import io

    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info, rel in members:
            target = safe_child(tmp, rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:  # scratch: inside the projects root, the studio's own store
                blob = src.read(info.file_size + 1)
                if len(blob) > info.file_size:
                    raise StudioError("archive member larger than declared; refusing the archive")
                dst.write(blob)
