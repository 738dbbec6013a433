"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.workspace import Workspace
from studio.inspect.summary import ModelSummary, summarize

if TYPE_CHECKING:
    from passes.pipeline import PipelineResult
    from studio.core.workspace import Version

__all__ = ["ModelHandle", "ModelSummary", "Workspace", "load", "inspect", "optimize", "add_optimized_version",
           "list_passes"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


def list_passes() -> dict:
    """Registered passes and presets with their one-line descriptions (``optimize --list``)."""
    from passes.catalog import catalog

    return catalog()


def optimize(handle: ModelHandle, *, preset: str | None = None, passes: Sequence[str] | None = None,
             dims: Mapping[str, int] | None = None, pass_options: Mapping[str, Mapping] | None = None,
             on_failure: str = "stop", verify: bool = True, out_path: str | Path | None = None,
             on_progress: Callable[[int, int, str], None] | None = None,
             pool_key: str = "default", time_budget_s: float | None = None) -> PipelineResult:
    """Run a preset (default ``safe``) or named passes, verifying after every modifying pass.

    ``dims`` fix symbolic dims for verification feeds and are what ``fix-input-shapes``
    specializes. The result is written to ``out_path`` (default: a new job folder in
    the workspace root); the input file is only read. Refuses models that fail
    ``onnx.checker`` (R17). ``time_budget_s`` skips passes that would start later.
    """
    from passes.optimize import optimize_model

    return optimize_model(handle, preset=preset, passes=passes, dims=dims, pass_options=pass_options,
                          on_failure=on_failure, verify=verify, out_path=out_path, on_progress=on_progress,
                          pool_key=pool_key, time_budget_s=time_budget_s)


def add_optimized_version(workspace: Workspace, parent: str, result: PipelineResult, *,
                          preset: str | None = None, label: str | None = None) -> Version:
    """Save a pipeline's result as a new workspace version whose provenance holds the
    lineage the graph view reads: ``{"pipeline": [...], "preset": ..., "parent": ...}``."""
    from passes.optimize import add_version

    return add_version(workspace, parent, result, preset=preset, label=label)
