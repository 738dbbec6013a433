"""The verifying pass pipeline: presets, passes, peers (onnxsim, onnxslim) and keeping a result.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from passes.catalog import catalog
from passes.memory_whatif import memory_reorder as _reorder
from passes.merge_decoders import merge_decoders as _merge
from passes.optimize import (
    add_version,
    cli_command as optimize_command,
    optimize_model,
    OptimizeRequest,
    report_rows as optimize_report_rows,
)
from passes.peers import compare_peers as _compare
from passes.pipeline import op_count_diff
from studio.core.model import ModelHandle
from studio.core.workspace import Version, Workspace

if TYPE_CHECKING:
    from passes.memory_whatif import MemoryReorder
    from passes.merge_decoders import MergeResult
    from passes.pipeline import PipelineResult
    from studio.projects import ProjectModel

__all__ = [
    "merge_decoders", "memory_reorder",
    "list_passes", "optimize", "compare_peers", "add_optimized_version", "optimize_report_rows",
    "optimize_command", "op_count_diff",
]


def list_passes() -> dict:
    """Registered passes and presets with their one-line descriptions (``optimize --list``)."""
    return catalog()


def optimize(handle: ModelHandle, *, preset: str | None = None, passes: Sequence[str] | None = None,
             dims: Mapping[str, int] | None = None, pass_options: Mapping[str, Mapping] | None = None,
             on_failure: str = "stop", verify: bool = True, out_path: str | Path | None = None,
             on_progress: Callable[[int, int, str], None] | None = None,
             pool_key: str = "default", time_budget_s: float | None = None,
             partial: str | Path = "output", inputs: str | Path | None = None,
             dump_dir: str | Path | None = None) -> PipelineResult:
    """Run a preset (default ``safe``) or named passes, verifying after every modifying pass.

    ``dims`` fix symbolic dims for verification feeds and are what ``fix-input-shapes``
    specializes. The result is written to ``out_path`` (default: a new job folder in
    the workspace root); the input file is only read. Refuses models that fail
    ``onnx.checker`` (R17). ``time_budget_s`` skips passes that would start later.
    ``partial``: where the last verified model goes when the result is not ok ("output":
    ``out_path`` itself, "none": nowhere, ``result.output`` is None, or another path).
    ``inputs``: an .npz of real verification inputs; ``dump_dir``: the model after each pass.
    """
    return optimize_model(handle, OptimizeRequest(
        preset=preset, passes=passes, dims=dims, pass_options=pass_options, on_failure=on_failure, verify=verify,
        out_path=out_path, on_progress=on_progress, pool_key=pool_key, time_budget_s=time_budget_s, partial=partial,
        inputs=inputs, dump_dir=dump_dir))


def compare_peers(model: ModelHandle | str | Path, out_dir: str | Path | None = None, *,
                  timeout_s: float = 300.0) -> tuple:
    """onnxsim's and onnxslim's node counts on the same model (``optimize --compare-peers``), each run
    in a fresh sandbox worker with a timeout; a crash or a missing tool is that peer's ``error``.
    With ``out_dir`` their results are kept there as ``onnxsim.onnx`` / ``onnxslim.onnx``."""
    path = model.path if isinstance(model, ModelHandle) else Path(model)
    return _compare(path, out_dir, timeout_s=timeout_s)


def add_optimized_version(workspace: Workspace | ProjectModel, parent: str, result: PipelineResult, *,
                          preset: str | None = None, label: str | None = None) -> Version:
    """Save a pipeline's result as a new workspace version whose provenance holds the
    lineage the graph view reads: ``{"pipeline": [...], "preset": ..., "parent": ...}``."""
    return add_version(workspace, parent, result, preset=preset, label=label)


def merge_decoders(decoder: str | Path, with_past: str | Path, output: str | Path, *, verify: bool = True,
                   dims: Mapping[str, int] | None = None, pool_key: str = "default") -> MergeResult:
    """One model from a decoder and its decoder-with-past (either order), under an ``If`` on
    ``use_cache_branch`` (optimum's merged convention), weights deduplicated by content, written to
    ``output``; with ``verify``, ONNX Runtime runs a prefill step (against the decoder) and a decode
    step (against the decoder with past) and every output must be equal. A pair whose inputs, outputs
    or cache do not fit together is a one-line StudioError naming both sides."""
    return _merge(decoder, with_past, output, verify=verify, pool_key=pool_key, dims=dims)


def memory_reorder(handle: ModelHandle, out_path: str | Path, dims: Mapping[str, int] | None = None, *,
                   measure: bool = True, pool_key: str = "default",
                   measure_timeout_s: float = 120.0) -> MemoryReorder:
    """The what-if: ``reorder-for-memory`` as a verified pass written to ``out_path``, with the predicted
    (and, with ``measure``, ORT's measured) peak before and after at the same dims."""
    return _reorder(handle, out_path, dims, measure=measure, pool_key=pool_key, timeout_s=measure_timeout_s)
