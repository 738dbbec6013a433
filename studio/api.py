"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from collections.abc import Sequence

from studio.core.findings import Finding, Report
from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.workspace import Version, Workspace
from studio.inspect.summary import ModelSummary, summarize

__all__ = ["Finding", "ModelHandle", "ModelSummary", "Report", "Version", "Workspace", "apply_fix", "check",
           "inspect", "load"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


def check(handle: ModelHandle, engines: Sequence[str] | str = ("onnxruntime", "openvino", "tensorrt"), *,
          eps: Sequence[str] = ("cpu",), trt_version: str | int = "10", run: bool = True,
          dims: Mapping[str, int] | None = None, pool_key: str = "default") -> Report:
    """Compatibility per node and per engine (ONNX Runtime and OpenVINO decided by a real session in a
    worker, TensorRT by its support table), plus lint and custom ops. See docs/findings.md."""
    from diagnostics.compatibility import check_model

    return check_model(handle, engines, eps=eps, trt_version=trt_version, run=run, dims=dims, pool_key=pool_key)


def apply_fix(workspace: Workspace, version_id: str, fix: Finding | str, *, verify: bool = True,
              pool_key: str = "default") -> Version:
    """Run the fix pass (a pass name, or a finding's ``fix_pass``) through the verifying pipeline
    and add the result as a new version whose provenance records the fix and the pipeline."""
    from diagnostics.fixes import apply_fix as _apply_fix

    return _apply_fix(workspace, version_id, fix, verify=verify, pool_key=pool_key)


def release_session(pool_key: str) -> None:
    """Stop the sandbox workers of one session (a browser session that ended)."""
    from studio.core.sandbox import shutdown_pool

    shutdown_pool(pool_key)
