"""Projects on disk: models, version trees, artifacts, jobs and settings (DESIGN.md section 8).

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TYPE_CHECKING

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import load as _load, ModelHandle
from studio.core.outputs import input_run as _run
from studio.core.paths import user_data_path
from studio.core.uploads import UploadedFile
from studio.core.workspace import Version
from studio.projects import (
    create_project as _create,
    default_projects_root,
    delete_project as _delete,
    duplicate_project as _dup,
    export_project as _export,
    import_project as _import,
    list_projects as _list,
    open_or_create,
    open_project as _open,
    Project,
    project_with_content,
    rename_project as _rename,
)

if TYPE_CHECKING:
    from studio.projects import DatasetEntry, Job, ModelInfo, ProjectArtifact, ProjectInfo, ProjectModel

__all__ = [
    "input_run", "shared_mode", "projects_root", "create_project", "list_projects", "open_project",
    "project_for_model", "rename_project", "duplicate_project", "delete_project", "export_project",
    "import_project", "project_models", "project_model", "add_model", "model_for", "add_version",
    "list_versions", "record_artifact", "project_artifacts", "project_datasets", "project_jobs",
    "get_settings", "set_setting", "job",
]


def input_run():
    """A context manager for one request of a long-lived front end (a page's script run): the files it
    reads stay protected from being overwritten by any output until it ends (``outputs.input_run``)."""
    return _run()


def shared_mode() -> bool:
    """True on a team server (``serve --shared``): no path input, sessions see only their projects."""
    return os.environ.get("ONNX_STUDIO_SHARED") == "1"


def projects_root(root: str | Path | None = None) -> Path:
    """The projects root: ``root``, else $ONNX_STUDIO_PROJECTS_ROOT, else ~/.local/share/onnx-studio/projects."""
    return Path(root).expanduser().resolve() if root else default_projects_root()


def project_of(project: Project | str, root: str | Path | None = None) -> Project:

    return project if isinstance(project, Project) else _open(str(project), root, by_name=False)


def create_project(name: str, root: str | Path | None = None) -> Project:
    """A new, empty project with an unguessable id and a human ``name``."""
    return _create(name, root)


def list_projects(root: str | Path | None = None) -> list[ProjectInfo]:
    """Every project under the root (id, name, counts, size), most recently changed first."""
    return _list(root)


def open_project(id_or_name: str, root: str | Path | None = None, *, by_name: bool = True,
                 create: bool = False, unique: bool = False) -> Project:
    """A project by id (or name: where several share it, the most recently changed one; ``unique``:
    an error naming their ids, for what renames or removes); jobs left running by a dead process are
    marked interrupted. ``create``: make a project of that name when there is none."""
    return open_or_create(id_or_name, root) if create else _open(id_or_name, root, by_name=by_name, unique=unique)


def project_for_model(source: str | Path | ModelHandle, root: str | Path | None = None
                      ) -> tuple[Project, ProjectModel, Version]:
    """Where a model opened by path lives (``serve MODEL``): the most recently changed project that
    holds this exact content (by sha256, whatever the projects are named), else a new project named
    after the model. Never ambiguous: names are labels, the content decides."""
    handle = source if isinstance(source, ModelHandle) else _load(source)
    project = project_with_content(handle.sha256, root) or _create(handle.name, root)
    model, version = project.find_content(handle.sha256) or project.add_model_file(handle)
    return project, model, version


def rename_project(project: Project | str, name: str, root: str | Path | None = None) -> Project:

    return _rename(project_of(project, root), name)


def duplicate_project(project: Project | str, name: str | None = None, root: str | Path | None = None) -> Project:
    """A copy of the project under a new id (jobs running in the source show as interrupted there)."""
    return _dup(project_of(project, root), name)


def delete_project(project: Project | str, root: str | Path | None = None) -> None:
    """Remove a project and its files; a damaged one (listed with ``damaged`` set) by its id."""
    try:
        target: Project | str = project_of(project, root)
    except StudioError as exc:
        if exc.code != ErrorCode.BAD_CATALOG:
            raise
        target = str(project)
    _delete(target, root)


def export_project(project: Project | str, out: str | Path, root: str | Path | None = None) -> Path:
    """The project as one zip (catalog, models, artifacts, data); written atomically to ``out``."""
    return _export(project_of(project, root), out)


def import_project(archive: str | Path | bytes, root: str | Path | None = None, *, name: str | None = None) -> Project:
    """A new project from an exported zip, checked like an upload (no '..', absolute or link members, no bombs)."""
    src = archive if isinstance(archive, bytes) else user_data_path(archive, label="project archive")
    return _import(src, root, name=name)


def project_models(project: Project | str) -> list[ModelInfo]:
    return project_of(project).models()


def project_model(project: Project | str, model_id: str) -> ProjectModel:
    """One model of a project: its version tree, with the Workspace methods the other functions take."""
    return project_of(project).model(model_id)


def add_model(project: Project | str, source: str | Path | ModelHandle | Sequence[UploadedFile], *,
              name: str | None = None, label: str = "original") -> tuple[ProjectModel, Version]:
    """A new model in the project from a file (only read), a loaded handle, or uploaded files."""
    p = project_of(project)
    if isinstance(source, (list, tuple)):
        return p.add_model_upload(list(source), label=label)
    return p.add_model_file(source, name=name, label=label)


def model_for(project: Project | str, source: str | Path | ModelHandle) -> tuple[ProjectModel, Version]:
    """The project's model and version holding this content, added as a new model when absent."""
    p = project_of(project)
    handle = source if isinstance(source, ModelHandle) else _load(source)
    return p.find_content(handle.sha256) or p.add_model_file(handle)


def add_version(model: ProjectModel, source: str | Path | ModelHandle, *, label: str, parent: str | None,
                provenance: dict | None = None, job_id: str | None = None, source_sha256: str | None = None,
                refuse_same: bool = False) -> Version:
    """Store a model file as a new version of ``model`` (content-addressed, written once). A result derived
    from a model (a precision variant) passes ``source_sha256``, the content it was computed on: unless
    that is ``parent``'s, nothing is saved (``WrongSourceError``, R59). ``refuse_same``: a byte-identical
    version is refused as "same as vN" (``SameContentError``, R63)."""
    return model.add_file(source, label=label, parent=parent, provenance=provenance, job_id=job_id,
                          source_sha256=source_sha256, refuse_same=refuse_same)


def list_versions(model: ProjectModel) -> tuple[Version, ...]:
    return model.versions


def record_artifact(project: Project | str, path: str | Path, kind: str, *, job_id: str | None = None,
                    model_id: str | None = None, version_id: str | None = None, meta: dict | None = None
                    ) -> ProjectArtifact:
    """Name a file or folder inside the project as a kept result (export bundle, report, profile...)."""
    return project_of(project).record_artifact(path, kind, job_id=job_id, model_id=model_id, version_id=version_id,
                                             meta=meta)


def project_artifacts(project: Project | str, model_id: str | None = None) -> list[ProjectArtifact]:
    return project_of(project).artifacts(model_id)


def project_datasets(project: Project | str) -> list[DatasetEntry]:
    """The project's datasets (catalog rows; :func:`dataset` opens one)."""
    return project_of(project).datasets()


def project_jobs(project: Project | str) -> list[Job]:
    """Jobs with their state; a job whose process died is reported "interrupted"."""
    return project_of(project).jobs()


def get_settings(project: Project | str, model_id: str | None = None) -> dict[str, Any]:
    """Project settings, or one model's (dims, engines, tolerances, per-page settings)."""
    return project_of(project).settings(model_id)


def set_setting(project: Project | str, key: str, value: Any, model_id: str | None = None) -> None:
    """Store one setting (JSON value; None removes it)."""
    project_of(project).set_setting(key, value, model_id)


def job(project: Project | str, kind: str, args: Mapping[str, Any] | None = None, *, model_id: str | None = None,
        version_id: str | None = None):
    """``with api.job(project, "optimize", {...}) as j:`` writes the job row (running) before the block and
    closes it after (done/failed); ``j.dir`` is its artifact folder, ``j.id`` its id."""
    return project_of(project).job(kind, dict(args or {}), model_id=model_id, version_id=version_id)

