"""Run a pass that calls an engine or a fragile native library (onnxsim, ORT's
optimizer, quantization) in a sandbox worker: a SIGFPE or a hang in there
becomes an error for that pass, not a dead studio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass
from studio.core.model_io import Checkpoint, Linker, load_checkpoint, save_checkpoint
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job, scaled_to_model
from passes.registry import make_pass


def run_pass_in_worker(p: StudioPass, model: ir.Model, workdir: Path, *, data_dir: Path,
                       linker: Linker | None = None, limits: Limits | None = None,
                       pool_key: str = "default") -> PassResult:
    """Hand ``model`` to a worker through ``workdir`` (a folder that must outlive the
    returned model: its weights may be read from there lazily). ``data_dir``: the
    original model's folder, where unchanged external weights are read from."""
    linker = linker or Linker(workdir)
    src = save_checkpoint(model, workdir / "in" / "model.onnx", data_dir=data_dir, linker=linker)
    out_dir = workdir / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    res = run_job("passes.run_pass", {"name": p.name, "options": p.options, **src.to_args(),
                                      "work_dir": str(workdir)},
                  stage=f"pass {p.name}", limits=pass_limits(p, model, limits), out_dir=out_dir, pool_key=pool_key,
                  fresh=False)
    changes = tuple(Change(c["kind"], tuple(c["nodes"]), c.get("detail", "")) for c in res.data["changes"])
    result_model = load_checkpoint(Checkpoint.from_args({"model_path": str(out_dir / "model.onnx"),
                                                         "data_dir": res.data["data_dir"]})) \
        if res.data["modified"] else model
    return PassResult(result_model, bool(res.data["modified"]), changes, dict(res.data.get("counts", {})),
                      tuple(str(n) for n in res.data.get("notes", ())),
                      warnings=tuple(str(w) for w in res.data.get("warnings", ())),
                      details=dict(res.data.get("details", {})))


def pass_limits(p: StudioPass, model: ir.Model, limits: Limits | None) -> Limits:
    """The pass's own limits (a fold timeout) over the caller's; when nobody set any, the defaults
    scaled to the model's weights: ORT's transformer optimizer and the quantizers hold several
    copies of them, and a 440 MB BERT died at the 3 GiB default."""
    chosen = p.worker_limits(limits)
    if limits is not None:
        return chosen if chosen is not None else limits
    from passes.fold_constants import constant_bytes  # heavy: fold_constants imports onnxscript (~0.4 s)

    scaled = scaled_to_model(None, constant_bytes(model))
    if chosen is None:
        return scaled
    from dataclasses import replace

    return replace(chosen, memory_bytes=max(chosen.memory_bytes, scaled.memory_bytes))


@job("passes.run_pass")
def run_pass_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage(f"pass {args['name']}")
    p = make_pass(args["name"], **args.get("options", {}))
    p.job_context = ctx          # passes that run engines report their stages through it
    src = Checkpoint.from_args(args)
    model = load_checkpoint(src)     # a checkpoint the parent wrote
    res = p.call(model)   # already in a worker: run the pass body directly
    data_dir = ""
    if res.modified:
        out = save_checkpoint(res.model, ctx.out_dir / "model.onnx", data_dir=src.data_dir,
                              linker=Linker(Path(args["work_dir"])))
        data_dir = str(out.data_dir)
    return JobOutput(data={"modified": bool(res.modified), "data_dir": data_dir,
                           "changes": [c.to_dict() for c in getattr(res, "changes", ())],
                           "counts": dict(getattr(res, "counts", {})),
                           "notes": list(getattr(res, "notes", ())),
                           "warnings": list(getattr(res, "warnings", ())),
                           "details": dict(getattr(res, "details", {}) or {})})
