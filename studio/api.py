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
    from profilers.profile import Profile, ProfileOptions
    from profilers.variants import EngineSpec, ProfileTarget

__all__ = ["ModelHandle", "ModelSummary", "Workspace", "load", "inspect", "profile"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


def profile(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]],
            engines: Sequence[str | EngineSpec] | str = ("ort",), options: ProfileOptions | None = None, *,
            workspace: Workspace | None = None, out_dir: Path | None = None, pool_key: str = "default",
            on_progress: Callable[[float, str], None] | None = None) -> Profile:
    """Latency (cold start, warm percentiles, interleaved ratios), and optionally per-op time,
    memory and sweeps, of every model version on every engine (``profilers.profile``).

    ``engines``: specs such as "ort", "ov", "ov:bf16", "trt", or "all". Side files (ORT
    profiles, traces, caches) go to ``out_dir``, else to a job folder of ``workspace``,
    else to a temporary folder removed afterwards. ``on_progress(fraction, message)``
    may raise to stop: the running worker is killed and the exception propagates.
    """
    import shutil
    import tempfile
    from dataclasses import replace

    from profilers.profile import ProfileOptions, run_profile
    from profilers.variants import EngineSpec, ProfileTarget, parse_engines

    chosen: list[ProfileTarget] = []
    for item in targets:
        if isinstance(item, ProfileTarget):
            chosen.append(item)
        elif isinstance(item, ModelHandle):
            chosen.append(ProfileTarget(item.name, item))
        else:
            label, handle = item
            chosen.append(ProfileTarget(str(label), handle))
    specs: list[EngineSpec] = []
    for item in [engines] if isinstance(engines, str) else engines:
        for spec in [item] if isinstance(item, EngineSpec) else parse_engines(item):
            if spec not in specs:
                specs.append(spec)
    temporary = out_dir is None and workspace is None
    folder = Path(out_dir) if out_dir is not None else (
        workspace.job_dir("profile") if workspace is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-profile-")))
    try:
        result = run_profile(chosen, specs, options or ProfileOptions(), out_dir=folder, pool_key=pool_key,
                             on_progress=on_progress)
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
    return replace(result, out_dir=None) if temporary else result
