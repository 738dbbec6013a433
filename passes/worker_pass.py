"""Run a pass that calls an engine or a fragile native library (onnxsim, ORT's
optimizer, quantization) in a sandbox worker: a SIGFPE or a hang in there
becomes an error for that pass, not a dead studio."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job


def run_pass_in_worker(p: StudioPass, model: ir.Model, workdir: Path, *, limits: Limits | None = None,
                       pool_key: str = "default") -> PassResult:
    from passes.pipeline import save_ir

    src = save_ir(model, workdir / "worker-in" / "model.onnx")
    out_dir = workdir / "worker-out"
    out_dir.mkdir(parents=True, exist_ok=True)
    res = run_job("passes.run_pass", {"name": p.name, "options": p.options, "model_path": str(src)},
                  stage=f"pass {p.name}", limits=limits, out_dir=out_dir, pool_key=pool_key, fresh=False)
    changes = tuple(Change(c["kind"], tuple(c["nodes"]), c.get("detail", "")) for c in res.data["changes"])
    result_model = ir.load(out_dir / "model.onnx") if res.data["modified"] else model
    return PassResult(result_model, bool(res.data["modified"]), changes, dict(res.data.get("counts", {})),
                      tuple(res.data.get("warnings", ())), dict(res.data.get("details", {})))


@job("passes.run_pass")
def run_pass_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    from passes.pipeline import save_ir
    from passes.registry import make_pass

    ctx.set_stage(f"pass {args['name']}")
    p = make_pass(args["name"], **args.get("options", {}))
    p.job_context = ctx          # passes that run engines report their stages through it
    model = ir.load(args["model_path"])
    res = p.call(model)   # already in a worker: run the pass body directly
    if res.modified:
        save_ir(res.model, ctx.out_dir / "model.onnx")
    return JobOutput(data={"modified": bool(res.modified),
                           "changes": [c.to_dict() for c in getattr(res, "changes", ())],
                           "counts": dict(getattr(res, "counts", {})),
                           "warnings": list(getattr(res, "warnings", ())),
                           "details": dict(getattr(res, "details", {}) or {})})
