"""Optimizing a loaded model: the glue between the facade, the pipeline and the workspace.

Runs an ``OptimizeRequest`` (``studio.core.requests``: what was asked, built once by the CLI, the Optimize
page or batch) on a loaded model in an output folder, and saves a result as a workspace version with its
lineage and the request.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

from passes.base import StudioPass
from passes.instruments import DumpInstrument
from passes.pipeline import PipelineResult, request_passes, run_pipeline
from passes.registry import known_passes
from studio.core.error_codes import ErrorCode
from studio.core.model import ModelHandle, require_valid
from studio.core.paths import safe_name
from studio.core.requests import OptimizeRequest
from studio.core.sandbox import require_memory
from studio.core.workspace import Version, Workspace, default_root
from studio.core.errors import StudioError

__all__ = ["add_version", "optimize_model", "report_rows"]


def default_output(handle: ModelHandle, tag: str) -> Path:
    folder = default_root() / "jobs" / f"optimize-{safe_name(tag, max_len=20)}-{uuid.uuid4().hex[:8]}"
    return folder / f"{safe_name(handle.name, default='model')}.onnx"


# Passes that rewrite every weight through an in-memory ModelProto (ORT's quantizers, the float16
# converter): the int4 weight-only worker passed 1.66x the weights (10.55 GiB) on the 6.36 GiB decoder of
# benchmarks/bench_large.py and was still growing when stopped. Graph passes and verification: ~1x.
_WEIGHT_REWRITERS = ("quantize-", "convert-fp16")


def _copies(p: StudioPass) -> float:
    """The weights a pass's worker holds at its peak, in copies of the model's."""
    return 2.0 if p.name.startswith(_WEIGHT_REWRITERS) else 1.2


def optimize_model(handle: ModelHandle, request: OptimizeRequest, *, out_path: str | Path | None = None,
                   on_progress: Callable[[int, int, str], None] | None = None, pool_key: str = "default",
                   partial: str | Path = "output", dump_dir: str | Path | None = None) -> PipelineResult:
    """Run ``request`` on ``handle``: the output (default: a new job folder), ``partial`` and ``dump_dir``
    (the model after every pass there, NN-pass/model.onnx) are where this call writes, not what was asked."""
    chosen = request_passes(request)
    _check_option_passes(request, chosen)
    # a pass worker and the verification's session hold the weights: their limit and this machine's memory
    require_memory(handle.path, "optimize with verification" if request.verify else "optimize",
                   copies=max([_copies(p) for p in chosen], default=1.2))
    if chosen and chosen[0].accepts_invalid:
        require_valid(handle, "optimize")
    # Otherwise the pipeline repairs what ONNX Runtime repairs (node order, duplicated opsets, old IR,
    # contradicting output shapes: passes.normalize) and then refuses, with the full check's words,
    # whatever is still invalid.
    out = Path(out_path) if out_path else default_output(handle, request.preset or "custom")
    instruments = [DumpInstrument(Path(dump_dir).resolve())] if dump_dir else []
    return run_pipeline(handle.path, request, out, passes=chosen, pool_key=pool_key, on_progress=on_progress,
                        partial=partial, instruments=instruments)


def _check_option_passes(request: OptimizeRequest, chosen: list[StudioPass]) -> None:
    """An option of a pass this run does not include is refused in one line: it was dropped without a word
    (corpus onnx_light_inception_v1, --preset ort --set onnxsim.max_growth=1000, as best-of-peers' own note
    advises: the peers were still refused at 1.1x; --set nosuchpass.x=1 was accepted too). A pass that runs
    inside one of the run's passes (onnxsim, onnxslim in best-of-peers) takes that pass's options: said."""
    names = [p.name for p in chosen]
    for name, opts in request.pass_options:
        if name in names:
            continue
        key = str(next((k for k, _ in opts), "KEY"))[:40]
        if name not in known_passes():
            raise StudioError(f"option {name[:40]}.{key}: there is no pass '{name[:40]}' (optimize --list names "
                              "them)", code=ErrorCode.BAD_OPTION)
        host = next((p.name for p in chosen if name in getattr(p, "candidates", ())), None)
        run = f"the {request.preset} preset's passes" if request.preset and not request.passes else \
            "the passes named"
        where = (f"it runs inside {host}, which hands it its own options: set {host}.{key}" if host else
                 "add it to the passes run (--passes), or drop the option")
        raise StudioError(f"option {name[:40]}.{key}: '{name[:40]}' is not one of {run}; {where}",
                          code=ErrorCode.BAD_OPTION)


def add_version(workspace: Workspace, parent: str, result: PipelineResult, *, preset: str | None = None,
                label: str | None = None) -> Version:
    if result.output is None or not result.output.exists():
        raise StudioError("the pipeline produced no model to save", code=ErrorCode.NO_RESULT)
    names = [r.name for r in result.records]
    provenance = {"pipeline": result.lineage(), "preset": preset, "parent": parent, "passes": names,
                  "ok": result.ok, "reference": result.reference, "summary": result.summary(),
                  "request": result.request.to_dict() if result.request is not None else None}
    # A project refuses a result byte-identical to one of the model's versions as "same as vN" (R63): the
    # same preset run again on a version it already made. The session workspace of the old API keeps all.
    same = {} if isinstance(workspace, Workspace) else {"refuse_same": True}
    return workspace.add_file(result.output, label=label or (preset or "optimized"), parent=parent,
                              provenance=provenance, **same)


def report_rows(result: PipelineResult) -> list[dict]:
    """One row per pass, for tables (UI) and reports."""
    rows = []
    for r in result.records:
        v = r.verification
        rows.append({"pass": r.name, "changed": r.modified, "status": r.status,
                     "nodes": f"{r.nodes_before} → {r.nodes_after}",
                     "params": f"{r.params_before:,} → {r.params_after:,}",
                     "time s": round(r.seconds + r.verify_seconds, 3),
                     "verification": (v.message if v else (r.message or ("not needed" if not r.modified else "off"))),
                     "notes": "; ".join(r.notes[:3])})
    return rows
