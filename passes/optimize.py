"""Optimizing a loaded model: the glue between the facade, the pipeline and the workspace.

Chooses the passes (a preset, default ``safe``, or names), routes ``dims`` to
``fix-input-shapes``, picks an output folder, runs the pipeline, and saves a
result as a workspace version with its lineage.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from passes.base import StudioPass
from passes.pipeline import PipelineResult, resolve_passes, run_pipeline
from studio.core.model import ModelHandle, require_valid
from studio.core.paths import safe_name
from studio.core.workspace import Version, Workspace, default_root

DEFAULT_PRESET = "safe"


def default_output(handle: ModelHandle, tag: str) -> Path:
    folder = default_root() / "jobs" / f"optimize-{safe_name(tag, max_len=20)}-{uuid.uuid4().hex[:8]}"
    return folder / f"{safe_name(handle.name, default='model')}.onnx"


@dataclass(frozen=True)
class OptimizeRequest:
    """What ``studio.api.optimize`` was asked for (its docstring says what each field does)."""

    preset: str | None = None
    passes: Sequence[str] | None = None
    dims: Mapping[str, int] | None = None
    pass_options: Mapping[str, Mapping] | None = None
    on_failure: str = "stop"
    verify: bool = True
    out_path: str | Path | None = None
    on_progress: Callable[[int, int, str], None] | None = None
    pool_key: str = "default"
    time_budget_s: float | None = None
    partial: str | Path = "output"
    inputs: str | Path | None = None        # an .npz of real inputs for verification (default: seeded ones)
    dump_dir: str | Path | None = None      # the model after every pass there (NN-pass/model.onnx), for debugging


def optimize_model(handle: ModelHandle, request: OptimizeRequest) -> PipelineResult:
    """Choose the passes, route ``dims`` to ``fix-input-shapes``, pick the output and run the pipeline."""
    preset, passes = request.preset, request.passes
    if not preset and not passes:
        preset = DEFAULT_PRESET
    dims = {str(k): int(v) for k, v in dict(request.dims or {}).items()}
    options = {k: dict(v) for k, v in dict(request.pass_options or {}).items()}
    if dims:
        options.setdefault("fix-input-shapes", {}).setdefault("dims", dims)
    chosen = resolve_user_paths(resolve_passes(preset, list(passes) if passes else None, options))
    if chosen and chosen[0].accepts_invalid:
        require_valid(handle, "optimize")
    # Otherwise the pipeline repairs what ONNX Runtime repairs (node order, duplicated opsets, old IR,
    # contradicting output shapes: passes.normalize) and then refuses, with the full check's words,
    # whatever is still invalid.
    out = Path(request.out_path) if request.out_path else default_output(handle, preset or "custom")
    feeds = None
    if request.inputs:
        from studio.core.feeds import input_specs, load_npz
        from studio.core.paths import user_data_path

        feeds = load_npz(user_data_path(request.inputs, label="inputs file"), input_specs(handle.proto))
    instruments = []
    if request.dump_dir:
        from passes.instruments import DumpInstrument

        instruments.append(DumpInstrument(Path(request.dump_dir).resolve()))
    return run_pipeline(handle.path, chosen, out, verify=request.verify, on_failure=request.on_failure,
                        dims=dims or None, feeds=feeds, pool_key=request.pool_key, on_progress=request.on_progress,
                        time_budget_s=request.time_budget_s, partial=request.partial, instruments=instruments)


def resolve_user_paths(chosen: Sequence[StudioPass]) -> list[StudioPass]:
    """Path-valued pass options (``quantize-int8-static.calibration``...) made absolute here, where
    the user's relative path means something (passes run in workers with their own cwd);
    a missing path is an error now, naming the option, not a pass failure later."""
    from studio.core.paths import user_data_path

    for p in chosen:
        for key in p.path_options:
            value = p.options.get(key)
            if value not in (None, ""):
                p.options[key] = str(user_data_path(value, label=f"{p.name}.{key}"))
    return list(chosen)


def add_version(workspace: Workspace, parent: str, result: PipelineResult, *, preset: str | None = None,
                label: str | None = None) -> Version:
    from studio.core.errors import StudioError

    if result.output is None or not result.output.exists():
        raise StudioError("the pipeline produced no model to save", code="NO-RESULT")
    names = [r.name for r in result.records]
    provenance = {"pipeline": result.lineage(), "preset": preset, "parent": parent, "passes": names,
                  "ok": result.ok, "reference": result.reference, "summary": result.summary()}
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


def cli_command(model_name: str, *, preset: str | None = None, passes: Sequence[str] | None = None,
                dims: Mapping[str, int] | None = None, on_failure: str = "stop", verify: bool = True,
                output: str | None = None, options: Mapping[str, Mapping] | None = None) -> str:
    """The ``onnx-studio optimize`` command line that does the same as a UI run (one builder for every
    page's hint: ``studio.core.cli_hints``)."""
    from studio.core.cli_hints import cli_command as build

    return build("optimize", [model_name], [
        ("-o", output or f"{Path(model_name).stem}-{preset or 'optimized'}.onnx"),
        ("--passes", list(passes) if passes else None), ("--preset", None if passes else preset or DEFAULT_PRESET),
        ("--dim", dict(dims or {})),
        *(("--set", f"{name}.{key}={json.dumps(value)}") for name, opts in (options or {}).items()
          for key, value in opts.items()),
        ("--on-failure", on_failure if on_failure != "stop" else None), ("--no-verify", not verify)])
