"""Compatibility per node and engine, and the fixes its findings propose.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TYPE_CHECKING

from diagnostics.compatibility import check_model, default_engines as _default_engines, normalize_engines
from diagnostics.fixes import apply_fix as _apply_fix, default_dims, fix_to_file as _fix_to_file
from studio.core.findings import Finding, Report
from studio.core.model import ModelHandle
from studio.core.requests import CheckRequest
from studio.core.workspace import Version, Workspace

if TYPE_CHECKING:
    from passes.pipeline import PipelineResult
    from studio.projects import ProjectModel

__all__ = [
    "default_engines", "check", "apply_fix", "check_engines", "fix_to_file", "default_dims",
]


def default_engines() -> tuple[str, ...]:
    """The engines :func:`check` checks by default: ONNX Runtime, OpenVINO, TensorRT, and MNN and
    LiteRT wherever their stack is installed."""
    return _default_engines()


def check(handle: ModelHandle, engines: CheckRequest | Sequence[str] | str | None = None, *,
          eps: Sequence[str] = ("cpu",), trt_version: str | int = "10", run: bool = True,
          dims: Mapping[str, int] | None = None, inputs: str | Path | None = None,
          pool_key: str = "default", tasks: Mapping[str, str] | None = None,
          files: Mapping[str, str | Path] | None = None) -> Report:
    """Compatibility per node and per engine (ONNX Runtime and OpenVINO decided by a real session in a
    worker, TensorRT by its support table, MNN and LiteRT by a real conversion and run), plus lint and
    custom ops. See docs/findings.md. ``engines``: a ``CheckRequest`` (``studio.core.requests``: what the
    CLI, the Compatibility page and batch build), or the engines (default :func:`default_engines`) with
    the other options as keywords. ``inputs``: an .npz of real inputs for the runs (default: seeded
    inputs). ``tasks``: {output: kind} (see :func:`output_tasks`): how the converted engines' outputs are
    compared with ONNX Runtime's. ``files``: where a request's inputs file is on this machine (a remote
    request's package)."""
    if isinstance(engines, CheckRequest):
        r = engines
        located = (files or {}).get("inputs") or r.inputs
        return check_model(handle, list(r.engines) if r.engines else None, eps=r.eps, trt_version=r.trt_version,
                           run=r.run, dims=dict(r.dims) or None, inputs=located, pool_key=pool_key,
                           tasks=dict(r.tasks) or None)
    return check_model(handle, engines, eps=eps, trt_version=trt_version, run=run, dims=dims, inputs=inputs,
                       pool_key=pool_key, tasks=tasks)


def apply_fix(workspace: Workspace | ProjectModel, version_id: str, fix: Finding | str, *, verify: bool = True,
              options: Mapping[str, Any] | None = None, dims: Mapping[str, int] | None = None,
              pool_key: str = "default") -> Version:
    """Run the fix pass (a pass name, or a finding's ``fix_pass``) through the verifying pipeline
    and add the result as a new version whose provenance records the fix and the pipeline.
    ``options`` are the pass's options (a finding brings its own); ``dims`` fix-input-shapes' values."""
    return _apply_fix(workspace, version_id, fix, verify=verify, options=options, dims=dims, pool_key=pool_key)


def check_engines(engines: Sequence[str] | str | None) -> tuple[str, ...]:
    """Engine names of ``--engines`` (aliases such as ort/ov/trt, "all") in canonical form; unknown ones raise."""
    return normalize_engines(engines)


def fix_to_file(model_path: str | Path, fixes: Sequence[str], output: str | Path, *,
                options: Mapping[str, Mapping[str, Any]] | None = None, dims: Mapping[str, int] | None = None,
                inputs: str | Path | None = None, pool_key: str = "default") -> PipelineResult:
    """Run the fix passes ``fixes`` on a model file through the verifying pipeline and save the result to
    ``output`` (nothing is left there when the fix fails or changes nothing); ``check --fix``."""
    return _fix_to_file(model_path, list(fixes), output, options=options, dims=dims, inputs=inputs,
                        pool_key=pool_key)

