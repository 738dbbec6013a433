"""Datasets inside a project: ``<project>/data/<dataset id>/`` plus a catalog row.

The dataset folder is written completely (staging folder, then a rename) before the
catalog row exists, so a crash never leaves a row without its data; a folder
without a row is swept as litter.

A catalog row is data from disk, not a trusted path (R66): before anything is read
or deleted, the row's path is resolved (links followed, ``..`` collapsed) and must
be exactly ``<project>/data/<row id>`` inside the project. A row that points
anywhere else marks the dataset damaged with the reason; ``rm`` of it removes the
row and deletes nothing.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.paths import is_within, safe_name
from studio.data.datasets import Dataset, import_dataset, load_dataset

DATA_DIR = "data"


def add_dataset(project, source: str | Path, **kwargs) -> Dataset:
    """Import ``source`` into the project (kwargs as :func:`import_dataset`)."""
    name = kwargs.pop("name", None) or Path(source).stem or "dataset"
    project.require_writable()                 # a read-only project: one line before anything is imported
    taken = f"the project already has a dataset named {name[:60]!r}; choose another name"
    if any(d.name == name for d in project.datasets()):
        raise StudioError(taken, code=ErrorCode.EXISTS)
    data_root = project.root / DATA_DIR
    if data_root.is_symlink() or not is_within(data_root, project.root):
        raise StudioError("the project's data folder is a link out of the project (a damaged project); "
                          "nothing was imported", code=ErrorCode.BAD_CATALOG)
    ds = import_dataset(source, data_root, name=name, **kwargs)
    rel = ds.folder.relative_to(project.root).as_posix()
    if not project.insert_dataset(ds.id, ds.name, ds.kind, rel):   # another process took the name meanwhile
        shutil.rmtree(ds.folder, ignore_errors=True)  # scratch: the folder this call imported just above
        raise StudioError(taken, code=ErrorCode.EXISTS)
    return ds


def dataset_damage(project, row) -> str | None:
    """Why catalog ``row``'s path is not the project's own ``data/<id>`` folder, or None when it is.
    Works on resolved paths: a ``..``, an absolute path or a link out are all caught."""
    return _resolve_row(project, row)[1]


def _resolve_row(project, row) -> tuple[Path | None, str | None]:
    raw = str(row.path or "")
    rid = str(row.id or "")
    if not raw or "\x00" in raw or not rid or safe_name(rid) != rid or rid in (".", ".."):
        return None, "its catalog row has an empty or invalid path or id"
    if raw.startswith(("/", "\\")) or Path(raw).is_absolute() or (len(raw) > 1 and raw[1] == ":"):
        return None, f"its catalog row holds an absolute path ({printable(raw, 60)})"
    root = project.root.resolve()
    data_root = (project.root / DATA_DIR).resolve()
    if not is_within(data_root, root):
        return None, "the project's data folder is a link out of the project"
    try:
        folder = (project.root / raw).resolve()
    except (OSError, RuntimeError):         # a link loop
        return None, "its catalog path cannot be resolved (a link loop)"
    if any(part == ".." for part in PurePosixPath(raw.replace("\\", "/")).parts) or folder.parent != data_root:
        where = "outside the project" if not is_within(folder, root) else "outside the project's data folder"
        return None, f"its catalog row points {where} ({printable(raw, 60)})"
    if folder.name != rid:
        return None, f"its catalog row points at another folder than data/{rid} ({printable(raw, 60)})"
    try:
        st = os.lstat(data_root / rid)
    except FileNotFoundError:
        return None, f"its folder data/{rid} is missing"
    except OSError as exc:
        return None, f"its folder data/{rid} cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return None, f"data/{rid} is a link or not a folder"
    return data_root / rid, None


def _row(project, id_or_name: str):
    for row in project.datasets():
        if id_or_name in (row.id, row.name):
            return row
    known = ", ".join(d.name for d in project.datasets()[:10]) or "none"
    raise StudioError(f"no dataset {id_or_name[:60]!r} in project {project.name[:40]!r}; datasets: {known}",
                      code=ErrorCode.NOT_FOUND)


def get_dataset(project, id_or_name: str) -> Dataset:
    row = _row(project, id_or_name)
    folder, damage = _resolve_row(project, row)
    if damage is not None:
        raise StudioError(f"dataset {safe_name(row.name)[:60]!r} is damaged: {damage}; nothing was read. Remove the "
                          f"row with: onnx-studio data rm {safe_name(row.name)[:60]} --project "
                          f"{safe_name(project.name)[:40]} --yes (it deletes nothing outside the project)",
                          code=ErrorCode.BAD_CATALOG)
    return load_dataset(folder)


def remove_dataset(project, id_or_name: str) -> str | None:
    """Delete the dataset's catalog row and its own folder (``data/<id>``, golden outputs inside).
    A damaged row (pointing anywhere else) is removed and nothing is deleted: returns why."""
    row = _row(project, id_or_name)
    folder, damage = _resolve_row(project, row)
    with project.catalog.write() as con:
        con.execute("DELETE FROM datasets WHERE id=?", (row.id,))
        project.catalog.touch(con)
    if damage is not None:
        return f"removed the damaged catalog row only ({damage}); no file was deleted"
    shutil.rmtree(folder, ignore_errors=True)  # scratch: the dataset's own folder, resolved inside <project>/data
    return None
