"""Datasets inside a project: ``<project>/data/<dataset id>/`` plus a catalog row.

The dataset folder is written completely (staging folder, then a rename) before the
catalog row exists, so a crash never leaves a row without its data; a folder
without a row is swept as litter.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from studio.core.errors import StudioError
from studio.data.datasets import Dataset, import_dataset, load_dataset

DATA_DIR = "data"


def add_dataset(project, source: str | Path, **kwargs) -> Dataset:
    """Import ``source`` into the project (kwargs as :func:`import_dataset`)."""
    name = kwargs.pop("name", None) or Path(source).stem or "dataset"
    if any(d.name == name for d in project.datasets()):
        raise StudioError(f"the project already has a dataset named {name[:60]!r}; choose another name",
                          code="EXISTS")
    ds = import_dataset(source, project.root / DATA_DIR, name=name, **kwargs)
    rel = ds.folder.relative_to(project.root).as_posix()
    with project.catalog.write() as con:
        con.execute("INSERT INTO datasets VALUES (?, ?, ?, ?, ?)", (ds.id, ds.name, ds.kind, rel, time.time()))
        project.catalog.touch(con)
    return ds


def get_dataset(project, id_or_name: str) -> Dataset:
    for row in project.datasets():
        if id_or_name in (row.id, row.name):
            return load_dataset(project.root / row.path)
    known = ", ".join(d.name for d in project.datasets()[:10]) or "none"
    raise StudioError(f"no dataset {id_or_name[:60]!r} in project {project.name[:40]!r}; datasets: {known}",
                      code="NOT-FOUND")


def remove_dataset(project, id_or_name: str) -> None:
    ds = get_dataset(project, id_or_name)
    with project.catalog.write() as con:
        con.execute("DELETE FROM datasets WHERE id=?", (ds.id,))
        project.catalog.touch(con)
    if ds.folder.is_relative_to(project.root / DATA_DIR):
        shutil.rmtree(ds.folder, ignore_errors=True)  # scratch: the dataset's own folder in the project
