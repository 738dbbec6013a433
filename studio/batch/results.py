"""What a batch run gives back: one row per model (``BatchRow``: the model and each stage's
``StageOutcome``) and the run (``BatchResult``); the runner fills them, the reports read them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from studio.batch.stages import StageOutcome
from studio.core.paths import safe_name


@dataclass(frozen=True)
class BatchModel:
    name: str
    path: Path
    sha256: str | None = None
    error: str | None = None          # could not be loaded: the row fails, nothing runs

    @property
    def folder_name(self) -> str:
        return f"{safe_name(self.name, max_len=60)}-{(self.sha256 or 'unloadable')[:8]}"


@dataclass(frozen=True)
class BatchRow:
    model: BatchModel
    outcomes: dict[str, StageOutcome]

    def status(self) -> str:
        if self.model.error:
            return "failed"
        statuses = {o.status for o in self.outcomes.values()}
        return "ok" if statuses <= {"ok", "skipped"} else "failed" if "failed" in statuses else \
            next(iter(statuses - {"ok", "skipped"}), "ok")


@dataclass(frozen=True)
class BatchResult:
    out_dir: Path
    stages: tuple[str, ...]
    rows: tuple[BatchRow, ...]
    executor: str
    seconds: float
    ran: int                        # tasks run this time
    skipped: int                    # tasks already finished in an earlier run
    files: dict = field(default_factory=dict)      # report kind -> path
    machine: dict = field(default_factory=dict)
    passed_over: tuple[tuple[str, str], ...] = ()   # (path, reason): what the folder scan did not run
    stage_options: dict = field(default_factory=dict)   # stage -> the options its tasks ran with (provenance)

    @property
    def ok(self) -> bool:
        return all(r.status() == "ok" for r in self.rows)

    def to_dict(self) -> dict:
        return {"out_dir": str(self.out_dir), "stages": list(self.stages), "executor": self.executor,
                "seconds": round(self.seconds, 3), "ran": self.ran, "skipped": self.skipped,
                "machine": self.machine, "files": {k: str(v) for k, v in self.files.items()},
                "passed_over": [{"path": p, "reason": r} for p, r in self.passed_over],
                "stage_options": self.stage_options,
                "rows": [{"model": r.model.name, "sha256": r.model.sha256, "status": r.status(),
                          "error": r.model.error,
                          "stages": {s: o.to_dict() for s, o in r.outcomes.items()}} for r in self.rows]}
