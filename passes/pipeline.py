"""Run passes in order, verifying after every modifying pass.

The model is loaded once into onnx-ir (weights mapped lazily, never copied)
and changed in place. After a modifying pass the result is saved as a
checkpoint and verified against the original (``passes.verify``); a failed
verification either stops the pipeline or reverts that pass (the caller's
choice, ``on_failure``), naming the pass and the first differing output.
Reverting reloads the last verified checkpoint, so no in-memory copy of the
weights is ever made. Instruments (timing, NVTX ranges, dumps) wrap passes
from outside (``passes.instruments``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, all_nodes, count_ops
from passes.instruments import Instrument
from passes.registry import make_pass, preset
from passes.verify import Verifier, VerifyResult
from studio.core.compare import Tolerance
from studio.core.errors import StudioError
from studio.core.feeds import Feeds
from studio.core.sandbox import Limits

log = logging.getLogger(__name__)

# Above this many bytes of weights, checkpoints keep weights in an external file.
EXTERNAL_THRESHOLD = 64 * 2**20


@dataclass(frozen=True)
class PassRecord:
    """What one pass did, in the lineage format the graph diff reads."""

    name: str
    status: str                    # changed | unchanged | reverted | failed | error
    modified: bool                 # whether the pass's change is in the result
    changes: tuple[Change, ...]
    counts: Mapping[str, int]
    seconds: float
    verify_seconds: float
    nodes_before: int
    nodes_after: int
    params_before: int
    params_after: int
    verification: VerifyResult | None
    message: str = ""
    warnings: tuple[str, ...] = ()
    details: Mapping = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "modified": self.modified,
                "changes": [c.to_dict() for c in self.changes], "counts": dict(self.counts),
                "seconds": round(self.seconds, 4), "verify_seconds": round(self.verify_seconds, 4),
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "params_before": self.params_before, "params_after": self.params_after,
                "verification": self.verification.to_dict() if self.verification else None,
                "message": self.message, "warnings": list(self.warnings), "details": dict(self.details)}


@dataclass(frozen=True)
class PipelineResult:
    output: Path | None                      # the saved result (None when nothing was saved)
    records: tuple[PassRecord, ...]
    ok: bool                                 # every pass ran and every verification passed
    stopped_at: str | None                   # the pass that stopped the pipeline
    ops_before: Mapping[str, int] = field(default_factory=dict)
    ops_after: Mapping[str, int] = field(default_factory=dict)
    reference: str = ""                      # how numbers were verified ("ORT CPU, optimizations off" / why not)
    seconds: float = 0.0

    @property
    def modified(self) -> bool:
        return any(r.modified for r in self.records)

    def summary(self) -> str:
        if self.stopped_at:
            rec = next(r for r in self.records if r.name == self.stopped_at)
            return f"stopped at '{self.stopped_at}': {rec.message}"
        changed = [r.name for r in self.records if r.modified]
        reverted = [r.name for r in self.records if r.status == "reverted"]
        text = f"{len(changed)} of {len(self.records)} passes changed the model"
        if reverted:
            text += f"; reverted: {', '.join(reverted)}"
        return text

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(), "stopped_at": self.stopped_at,
                "output": self.output.name if self.output else None, "reference": self.reference,
                "seconds": round(self.seconds, 3), "ops_before": dict(self.ops_before),
                "ops_after": dict(self.ops_after), "records": [r.to_dict() for r in self.records]}

    def lineage(self) -> list[dict]:
        """Records in the format workspace versions keep as provenance["pipeline"]."""
        return [r.to_dict() for r in self.records]


def resolve_passes(preset_name: str | None = None, names: Sequence[str] | None = None,
                   options: Mapping[str, Mapping] | None = None) -> list[StudioPass]:
    """Pass instances from a preset name or explicit names (one of them)."""
    if bool(preset_name) == bool(names):
        raise StudioError("give either a preset or a list of passes", code="BAD-OPTION")
    chosen = list(preset(preset_name).passes) if preset_name else list(names or [])
    opts = options or {}
    return [make_pass(n, **dict(opts.get(n, {}))) for n in chosen]


def _param_count(model: ir.Model) -> int:
    total = 0
    for v in model.graph.initializers.values():
        if v.const_value is not None:
            total += v.const_value.size
    return total


def _weight_bytes(model: ir.Model) -> int:
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def save_ir(model: ir.Model, path: Path) -> Path:
    """Save a checkpoint/result; weights to ``<name>.data`` when large."""
    path.parent.mkdir(parents=True, exist_ok=True)
    external = f"{path.name}.data" if _weight_bytes(model) > EXTERNAL_THRESHOLD else None
    ir.save(model, path, external_data=external)
    return path


class _Checkpoints:
    """Checkpoint files in a private folder; the model's lazy weights may point
    into the one it was last loaded from, so that one is kept."""

    def __init__(self, workdir: Path, original: Path) -> None:
        self.dir = workdir
        self.last_good = original
        self.loaded_from = original
        self._n = 0

    def save(self, model: ir.Model) -> Path:
        self._n += 1
        return save_ir(model, self.dir / f"step{self._n}" / "model.onnx")

    def accept(self, path: Path) -> None:
        old = self.last_good
        self.last_good = path
        self._drop(old)

    def reject(self, path: Path) -> ir.Model:
        self._drop(path)
        return self.restore()

    def restore(self) -> ir.Model:
        """The last verified model (the original when nothing was verified yet)."""
        self.loaded_from = self.last_good
        return ir.load(self.last_good)

    def _drop(self, path: Path) -> None:
        if path.parent.parent == self.dir and path not in (self.last_good, self.loaded_from):
            shutil.rmtree(path.parent, ignore_errors=True)


def run_pipeline(model_path: Path, passes: Sequence[StudioPass], output: Path, *,
                 verify: bool = True, on_failure: str = "stop", dims: Mapping[str, int] | None = None,
                 feeds: list[Feeds] | None = None, tolerance: Tolerance | None = None,
                 limits: Limits | None = None, pool_key: str = "default",
                 instruments: Sequence[Instrument] = (),
                 on_progress: Callable[[int, int, str], None] | None = None) -> PipelineResult:
    """Run ``passes`` on the model at ``model_path`` and save the result to ``output``.

    ``on_failure``: "stop" keeps the last verified model and stops; "revert"
    undoes the failing pass and continues. The input file is only read.
    """
    if on_failure not in ("stop", "revert"):
        raise StudioError("on_failure must be 'stop' or 'revert'", code="BAD-OPTION")
    started = time.perf_counter()
    model_path = Path(model_path)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=".pipeline-", dir=output.parent))
    try:
        model = ir.load(model_path)
        ops_before = count_ops(model)
        verifier = Verifier(model_path, dims=dims, feeds=feeds, tolerance=tolerance, limits=limits,
                            pool_key=pool_key) if verify else None
        ckpt = _Checkpoints(workdir, model_path)
        records: list[PassRecord] = []
        stopped: str | None = None
        for i, p in enumerate(passes):
            if on_progress:
                on_progress(i, len(passes), p.name)
            for inst in instruments:
                inst.before_pass(p, model)
            nodes_before, params_before = sum(1 for _ in all_nodes(model)), _param_count(model)
            t0 = time.perf_counter()
            try:
                res: PassResult = _apply(p, model, workdir, limits, pool_key)
                model = res.model
            except Exception as exc:   # a pass bug must not lose the user's work
                seconds = time.perf_counter() - t0
                msg = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"
                model = ckpt.restore()
                rec = PassRecord(p.name, "error", False, (), {}, seconds, 0.0, nodes_before,
                                 sum(1 for _ in all_nodes(model)), params_before, _param_count(model), None,
                                 f"pass '{p.name}' failed: {msg}")
                records.append(rec)
                _after(instruments, p, model, rec)
                if on_failure == "stop":
                    stopped = p.name
                    break
                continue
            seconds = time.perf_counter() - t0
            changes = tuple(res.changes) if isinstance(res, PassResult) else ()
            counts = dict(res.counts) if isinstance(res, PassResult) else {}
            modified = bool(res.modified)
            verification: VerifyResult | None = None
            status, message = ("changed" if modified else "unchanged"), ""
            if modified and verifier is not None:
                candidate = ckpt.save(model)
                verification = verifier.verify(candidate, allow_fixed_dims=p.changes_interface,
                                               tolerance=p.verify_tolerance, quantized=p.verify_quantized)
                message = verification.message
                if verification.ok:
                    ckpt.accept(candidate)
                else:
                    model = ckpt.reject(candidate)
                    status = "reverted" if on_failure == "revert" else "failed"
                    modified = False
                    message = f"pass '{p.name}' broke the model: {verification.message}"
            rec = PassRecord(p.name, status, modified, changes, counts, seconds,
                             verification.seconds if verification else 0.0, nodes_before,
                             sum(1 for _ in all_nodes(model)), params_before, _param_count(model),
                             verification, message, tuple(getattr(res, "warnings", ())),
                             dict(getattr(res, "details", {}) or {}))
            records.append(rec)
            _after(instruments, p, model, rec)
            if status == "failed":
                stopped = p.name
                break
        if on_progress:
            on_progress(len(passes), len(passes), "saving")
        save_ir(model, output)
        reference = "not verified"
        if verifier is not None:
            reference = ("ONNX Runtime CPU, graph optimizations off, "
                         f"{len(verifier.feed_sets)} seeded feed set(s)") if verifier.reference_error is None \
                else f"structure only: {verifier.reference_error}"
        ok = stopped is None and all(r.status in ("changed", "unchanged") for r in records)
        return PipelineResult(output, tuple(records), ok, stopped, dict(ops_before), dict(count_ops(model)),
                              reference, time.perf_counter() - started)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _after(instruments: Sequence[Instrument], p: StudioPass, model: ir.Model, rec: PassRecord) -> None:
    for inst in instruments:
        inst.after_pass(p, model, rec)


def _apply(p: StudioPass, model: ir.Model, workdir: Path, limits: Limits | None, pool_key: str) -> PassResult:
    """Run one pass: in process, or in a sandbox worker for passes that call engines."""
    if not p.calls_engines:
        return p(model)
    from passes.worker_pass import run_pass_in_worker

    return run_pass_in_worker(p, model, workdir, limits=limits, pool_key=pool_key)


def op_count_diff(before: Mapping[str, int], after: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(op, before, after) rows where the count changed, largest change first."""
    ops = set(before) | set(after)
    rows = [(op, before.get(op, 0), after.get(op, 0)) for op in ops if before.get(op, 0) != after.get(op, 0)]
    return sorted(rows, key=lambda r: -abs(r[1] - r[2]))


__all__ = ["PassRecord", "PipelineResult", "op_count_diff", "resolve_passes", "run_pipeline", "save_ir"]
