"""What one pass did (``PassRecord``): the pipeline writes it, instruments and reports read it,
in the lineage format the graph diff reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from passes.base import Change
from studio.core.compare import Verification


@dataclass(frozen=True)
class PassRecord:
    """What one pass did, in the lineage format the graph diff reads."""

    name: str
    status: str                    # changed | unchanged | reverted | failed | error | skipped
    modified: bool                 # whether the pass's change is in the result
    changes: tuple[Change, ...]
    counts: Mapping[str, int]
    seconds: float
    verify_seconds: float
    nodes_before: int
    nodes_after: int
    params_before: int
    params_after: int
    verification: Verification | None
    message: str = ""
    notes: tuple[str, ...] = ()    # where the pass did not apply, and why
    warnings: tuple[str, ...] = ()  # what the user must know (slower than fp32, degenerate ranges...)
    details: Mapping = field(default_factory=dict)   # the pass's JSON report (measurements, choices)

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "modified": self.modified,
                "changes": [c.to_dict() for c in self.changes], "counts": dict(self.counts),
                "seconds": round(self.seconds, 4), "verify_seconds": round(self.verify_seconds, 4),
                "nodes_before": self.nodes_before, "nodes_after": self.nodes_after,
                "params_before": self.params_before, "params_after": self.params_after,
                "verification": self.verification.to_dict() if self.verification else None,
                "message": self.message, "notes": list(self.notes), "warnings": list(self.warnings),
                "details": dict(self.details)}
