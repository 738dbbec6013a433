"""The verifying pass pipeline: presets, passes, peers (onnxsim, onnxslim) and keeping a result.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from passes.catalog import catalog
from studio.inspect.memory_whatif import memory_reorder as _reorder
from passes.merge_decoders import merge_decoders as _merge
from passes.optimize import (
    add_version,
    optimize_model,
    report_rows as optimize_report_rows,
)
from studio.peers.compare import compare_peers as _compare
from passes.pipeline import op_count_diff
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.requests import MemoryRequest, OptimizeRequest
from studio.core.workspace import Version, Workspace

if TYPE_CHECKING:
    from studio.inspect.memory_whatif import MemoryReorder
    from passes.merge_decoders import MergeResult
    from passes.pipeline import PipelineResult
    from studio.projects import ProjectModel

__all__ = [
    "merge_decoders", "memory_reorder",
    "list_passes", "optimize", "compare_peers", "add_optimized_version", "optimize_report_rows",
    "op_count_diff",
]


def list_passes() -> dict:
    """Registered passes and presets with their one-line descriptions (``optimize --list``)."""
    return catalog()


def optimize(handle: ModelHandle, request: OptimizeRequest | None = None, *, out_path: str | Path | None = None,
             on_progress: Callable[[int, int, str], None] | None = None, pool_key: str = "default",
             partial: str | Path = "output", dump_dir: str | Path | None = None, **fields) -> PipelineResult:
    """Run an ``OptimizeRequest`` (``studio.core.requests``; default preset ``safe``), verifying after every
    modifying pass. ``fields`` instead of ``request``: the request's own fields (``preset=``, ``passes=``,
    ``dims=``...), made into the one request here; an unknown one is refused (BAD-REQUEST).

    Where it writes is the call's: ``out_path`` (default: a new job folder in the workspace root; the
    input file is only read); ``partial``, where the last verified model goes when the result is not ok
    ("output": ``out_path`` itself, "none": nowhere, ``result.output`` is None, or another path);
    ``dump_dir``, the model after each pass. Refuses models that fail ``onnx.checker`` (R17).
    """
    if request is not None and fields:
        raise StudioError(f"give a request or its fields, not both ({', '.join(sorted(fields))[:80]})",
                          code=ErrorCode.BAD_REQUEST)
    request = request if request is not None else OptimizeRequest.from_dict(fields)
    return optimize_model(handle, request, out_path=out_path, on_progress=on_progress, pool_key=pool_key,
                          partial=partial, dump_dir=dump_dir)


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


def memory_reorder(handle: ModelHandle, request: MemoryRequest, out_path: str | Path, *,
                   pool_key: str = "default") -> MemoryReorder:
    """The what-if of ``request`` (a ``MemoryRequest``, as the CLI and the Overview build it):
    ``reorder-for-memory`` as a verified pass written to ``out_path``, with the predicted (and, with
    ``request.measure``, ORT's measured, within ``measure_timeout_s``) peak before and after at its dims."""
    if not isinstance(request, MemoryRequest):
        raise StudioError("memory_reorder takes a MemoryRequest", code=ErrorCode.BAD_REQUEST)
    return _reorder(handle, out_path, dict(request.dims), optimize=optimize_model, measure=request.measure,
                    pool_key=pool_key, timeout_s=request.measure_timeout_s)
