"""One batch task: one stage (inspect, check, optimize, precision, profile, export) of one model.

A task is plain, serializable data (the model's content hash, the stage and its
options) so it can run here or on a Dask worker; its outcome is plain data too,
with the machine that ran it. Every stage goes through the facade (``studio.api``),
so engines and passes still run inside the studio's sandbox workers. A stage that
fails, times out or meets a hostile model fails its own row, never the batch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from studio.core import outputs
from studio.core.errors import StudioError
from studio.core.requests import BATCH_ENGINES, BATCH_STAGE_DEFAULTS, batch_stage_request
from studio.core.engines import get_engine
from studio.core.error_codes import ErrorCode
from studio import api
from studio.core.outputs import disk_error

STAGES = ("inspect", "check", "optimize", "precision", "profile", "export")
# The stages a batch's --target sends to that machine: what they measure or verify is the target's (an
# optimize stage's task carries its OptimizeRequest, as `optimize --target` does, and its model comes back).
ON_TARGET = ("optimize", "precision", "profile")
STATUSES = ("ok", "failed", "error", "worker lost", "scheduler lost", "cancelled", "skipped", "not written")
NOT_WRITTEN = "not written"     # the output folder took no more (full, read-only, `ulimit -f`): the batch stops


@dataclass(frozen=True)
class StageTask:
    """What to run: a stage of the model with this content hash, with options (JSON-able)."""

    model_sha256: str
    model_name: str
    stage: str
    options: dict = field(default_factory=dict)
    target: str | None = None          # a remote target (Dask worker resource target-NAME)

    @property
    def key(self) -> str:
        """Stable id of (model content, stage, options, target): what resuming skips on."""
        blob = json.dumps([self.model_sha256, self.stage, self.options, self.target], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class StageOutcome:
    """How one task ended: status, a one-line verdict, key figures, artifacts and who ran it."""

    key: str
    model: str
    model_sha256: str
    stage: str
    status: str
    verdict: str
    figures: dict = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()     # paths relative to the batch output folder
    seconds: float = 0.0
    worker: dict = field(default_factory=dict)   # machine facts of whoever ran it
    attempts: int = 1
    target: str | None = None
    lost_workers: tuple[str, ...] = ()  # cluster workers that died while running earlier attempts

    def to_dict(self) -> dict:
        d = asdict(self)
        d["artifacts"] = list(self.artifacts)
        d["lost_workers"] = list(self.lost_workers)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> StageOutcome:
        d = dict(d)
        d["artifacts"] = tuple(d.get("artifacts") or ())
        d["lost_workers"] = tuple(d.get("lost_workers") or ())
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def machine_facts() -> dict:
    """CPU model, core count and engine versions of this machine (tags every figure)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    engines = {}
    for name in BATCH_ENGINES:
        try:
            engines[name] = get_engine(name).available().version
        except Exception:  # noqa: BLE001 - a missing engine is just absent from the facts
            engines[name] = None
    return {"host": platform.node()[:80], "cpu": cpu[:120], "cores": os.cpu_count() or 1,
            "target": os.environ.get("ONNX_STUDIO_TARGET") or None, "engines": engines}


def worker_facts(target: str | None = None) -> dict:
    """Machine facts plus the measuring process: pid and, on a Dask worker, its address."""
    facts = dict(machine_facts())
    facts["pid"] = os.getpid()
    try:
        from distributed import get_worker

        facts["worker"] = get_worker().address
    except (ImportError, ValueError):
        facts["worker"] = None
    if target is not None:
        facts["target"] = facts.get("target") or target
    return facts


def _check(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    """The stage's options are a ``CheckRequest``'s ``to_dict`` keys (engines default: ORT and OpenVINO)."""
    request = batch_stage_request("check", opts)
    report = api.check(handle, request, pool_key=pool_key)
    figures = {f"verdict:{v.engine}": v.verdict for v in report.verdicts}
    failing = [v.engine for v in report.verdicts if v.verdict == "fails"]
    path = out / "check.json"
    outputs.write_json(path, report.to_dict(), indent=1)
    verdict = ", ".join(f"{v.engine} {v.verdict}" for v in report.verdicts)
    return ("failed" if failing else "ok"), verdict, figures, [path]


def _inspect(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    s = api.inspect(handle, opts.get("dims") or None, pool_key=pool_key)
    figures = {"nodes": s.node_counts.total, "params": s.params.elements, "flops": s.flops.flops,
               "bytes": s.total_bytes, "opset": next((o.version for o in s.opsets if o.domain in ("", "ai.onnx")), None)}
    return "ok", f"{s.node_counts.total} nodes, {s.params.elements} params", figures, []


def _optimize(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    """The stage's options are an ``OptimizeRequest``'s ``to_dict`` keys ({} = the ``safe`` preset)."""
    target = out / "optimized.onnx"
    r = api.optimize(handle, batch_stage_request("optimize", opts), out_path=target, pool_key=pool_key)
    before, after = sum(r.ops_before.values()), sum(r.ops_after.values())
    figures = {"nodes_before": before, "nodes_after": after, "bytes_before": handle.total_bytes,
               "bytes_after": target.stat().st_size if target.exists() else None}
    status = "ok" if r.ok else "failed"
    # the model with its external data (a large one's weights in OUT.data): a remote task sends back these files
    files = [target, *sorted(set(map(Path, api.load(target).external_files)))] if target.exists() else []
    return status, r.summary()[:200], figures, files


def _precision(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    """The stage's options are a ``PrecisionRequest``'s ``to_dict`` keys, every one of them (a 20 s budget
    unless they say otherwise)."""
    r = api.precision(handle, batch_stage_request("precision", opts), out_dir=out / "precision",
                      pool_key=pool_key)
    figures = {"recommended": r.recommended}
    for v in r.variants:
        if getattr(v, "ratio", None) is not None:
            figures[f"ratio:{v.name}"] = v.ratio
    return ("ok" if r.recommended else "failed"), r.summary()[:200], figures, []


def _profile(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    """The stage's options are a ``ProfileRequest``'s ``to_dict`` keys (its option fields may be flat), over
    the batch's shorter defaults (``BATCH_STAGE_DEFAULTS``)."""
    request = batch_stage_request("profile", opts)
    p = api.profile([handle], request, out_dir=out / "profile", pool_key=pool_key)
    figures: dict[str, Any] = {}
    for v in p.variants:
        if v.latency is not None:
            figures[f"p50_ms:{v.variant.engine.label}"] = round(v.latency.p50_ms, 4)
    figures["measured_on"] = p.machine.cpu
    bad = [v.error for v in p.variants if v.error]
    verdict = "; ".join(f"{k.split(':', 1)[1]} p50 {val:.3f} ms" for k, val in figures.items() if k.startswith("p50"))
    return ("ok" if p.ok else "failed"), (verdict or (bad[0] or "no measurement"))[:200], figures, []


BATCH_EXPORT = BATCH_STAGE_DEFAULTS["export"]


def _export(handle, opts: dict, pool_key: str, out: Path) -> tuple[str, str, dict, list[Path]]:
    """The stage's options are an ``ExportRequest``'s ``to_dict`` keys, over :data:`BATCH_EXPORT`'s."""
    r = api.export(handle, batch_stage_request("export", opts), out / "export", pool_key=pool_key)
    status = "ok" if r.ok else "failed"
    verdict = "verified" if r.ok else (r.failures[0] if r.failures else "failed")
    return status, verdict[:200], {"targets": [t.target for t in r.targets]}, [r.bundle]


_RUNNERS = {"inspect": _inspect, "check": _check, "optimize": _optimize, "precision": _precision,
            "profile": _profile, "export": _export}


def _failed(exc: BaseException) -> tuple[str, str, dict, list]:
    """A refused task is a failed row; one whose artifacts the output folder could not take (a full or
    read-only disk, a file-size limit) is NOT_WRITTEN, with the errno, so the batch stops there and a
    resume runs it again (a 'failed' row would count as finished)."""
    disk = disk_error(exc)
    if disk is not None:
        return NOT_WRITTEN, str(disk)[:300], {"errno": disk.errno}, []
    if isinstance(exc, StudioError):
        return "failed", str(exc).splitlines()[0][:300] if str(exc) else "failed", {}, []
    return "error", f"{type(exc).__name__}: {str(exc)[:200]}", {}, []


def run_stage(task: StageTask, model_path: Path, out_dir: Path, *, pool_key: str = "batch") -> StageOutcome:
    """Run one task on the model at ``model_path``; artifacts land in ``out_dir``. Never raises
    for what the model or an engine does: the outcome says failed/error with one line."""
    started = time.perf_counter()
    facts = worker_facts()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        if task.stage not in _RUNNERS:
            raise StudioError(f"unknown stage {task.stage[:20]!r}; stages: {', '.join(STAGES)}",
                              code=ErrorCode.BAD_OPTION)
        handle = api.load(model_path)
        if handle.sha256 != task.model_sha256:
            raise StudioError("the model's content does not match the task's hash; refusing it",
                              code=ErrorCode.HASH_MISMATCH)
        status, verdict, figures, files = _RUNNERS[task.stage](handle, dict(task.options), pool_key, out_dir)
    except (StudioError, OSError) as exc:
        status, verdict, figures, files = _failed(exc)
    except Exception as exc:  # noqa: BLE001 - a batch row, never a dead batch
        where = traceback.extract_tb(exc.__traceback__)[-1]
        status, verdict = "error", f"{type(exc).__name__}: {str(exc)[:200]} (in {Path(where.filename).name})"
        figures, files = {}, []
    rel = tuple(str(Path(f).relative_to(out_dir.parent)) if Path(f).is_relative_to(out_dir.parent) else str(f)
                for f in files)
    return StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, status, verdict, figures, rel,
                        time.perf_counter() - started, facts, 1, task.target)
