"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.workspace import Workspace
from studio.inspect.summary import ModelSummary, summarize

__all__ = ["ModelHandle", "ModelSummary", "Workspace", "load", "inspect"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)
