"""Persistent projects: models with version trees, artifacts, datasets, jobs and
settings under a projects root, with a SQLite catalog (DESIGN.md §8)."""

from studio.projects.project import (
    DatasetEntry,
    Job,
    ModelInfo,
    Project,
    ProjectArtifact,
    ProjectInfo,
    ProjectModel,
    RunningJob,
)
from studio.projects.registry import (
    create_project,
    default_projects_root,
    delete_project,
    duplicate_project,
    export_project,
    import_project,
    is_project_id,
    list_projects,
    open_or_create,
    open_project,
    project_with_content,
    rename_project,
)

__all__ = ["DatasetEntry", "Job", "ModelInfo", "Project", "ProjectArtifact", "ProjectInfo", "ProjectModel", "RunningJob",
           "create_project", "default_projects_root", "delete_project", "duplicate_project", "export_project",
           "import_project", "is_project_id", "list_projects", "open_or_create", "open_project", "project_with_content",
           "rename_project"]
