"""The memory what-if (``api.memory_reorder``): run ``reorder-for-memory`` as a verified pass at the
dims the user chose, then plan and measure the result beside the original.

Why a module of its own: the pass only writes a new node order; a user deciding whether to keep it
wants the predicted and the measured peak before and after, and the verification verdict, in one
result. It sits with the memory plan it compares (studio.inspect); inspect is the lowest capability, below
passes, so the verifying pipeline is handed in (``optimize``: the facade gives ``passes.optimize.optimize_model``)
and never imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.model import ModelHandle
from studio.core.model import load as load_model
from studio.core.requests import OptimizeRequest
from studio.inspect.memory_report import MemoryReport, memory_report

PASS = "reorder-for-memory"


@dataclass(frozen=True)
class MemoryReorder:
    """The original's plan, the reordered model's plan (None when the pass changed nothing or failed
    verification), and what the pipeline said."""

    before: MemoryReport
    after: MemoryReport | None
    modified: bool
    verified: bool                # the pass's verification passed (numbers equal to the original)
    verification: str             # its one line
    output: Path | None           # the reordered model (None when nothing was written)
    notes: tuple[str, ...] = ()

    @property
    def lowers_peak(self) -> bool:
        return self.after is not None and self.after.peak_bytes < self.before.peak_bytes

    def to_dict(self) -> dict:
        return {"before": self.before.to_dict(), "after": self.after.to_dict() if self.after else None,
                "modified": self.modified, "verified": self.verified, "verification": self.verification,
                "lowers_peak": self.lowers_peak, "output": str(self.output) if self.output else None,
                "notes": list(self.notes)}


def memory_reorder(handle: ModelHandle, out_path: str | Path, dims: Mapping[str, int] | None = None, *,
                   optimize: Callable[..., Any], measure: bool = True, pool_key: str = "default",
                   timeout_s: float = 120) -> MemoryReorder:
    """Plan ``handle``, run the reorder pass (sizes from that plan, verified against the original on the
    plan's seeded inputs), write it to ``out_path``, and plan/measure the result at the same dims.
    ``optimize(handle, request, out_path=, pool_key=, partial=)`` is the verifying pipeline
    (``passes.optimize.optimize_model``; its result's ``records``, ``ok``, ``output`` and ``summary()`` are read)."""
    before = memory_report(handle, dims, measure=measure, pool_key=pool_key, timeout_s=timeout_s, engine_graph=False)
    chosen = dict(before.dims)
    sizes = {t.name: t.bytes for t in before.plan.tensors}
    result = optimize(handle, OptimizeRequest(passes=[PASS], dims=chosen, pass_options={PASS: {"sizes": sizes}}),
                            out_path=out_path, pool_key=pool_key, partial="none")
    rec = next((r for r in result.records if r.name == PASS), None)
    modified = bool(rec and rec.modified)
    verified = bool(rec and rec.verification is not None and rec.verification.ok)
    line = rec.verification.message if rec and rec.verification else (rec.message if rec else result.summary())
    notes = tuple(rec.notes) if rec else ()
    after = None
    if modified and verified and result.ok and result.output is not None:
        after = memory_report(load_model(result.output), chosen, measure=measure, pool_key=pool_key,
                              timeout_s=timeout_s, engine_graph=False)
    return MemoryReorder(before, after, modified, verified, line, result.output if result.ok else None, notes)
