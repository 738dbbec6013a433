"""What every target adapter needs while an export runs: the options, the
bundle folder being written, the deploy model, the reference outputs and the
criteria, the sandbox pool, and the progress callbacks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.model import ModelHandle, sha256_file
from studio.export.facts import ModelFacts
from studio.export.options import ExportOptions
from studio.export.reference import Criteria, Reference
from studio.export.results import Artifact, Verification


@dataclass
class ExportContext:
    options: ExportOptions
    bundle: Path                     # the bundle folder (a temporary name until the export finishes)
    work: Path                       # scratch for pipelines and side files (inside the output folder)
    source: ModelHandle              # the user's model (only read)
    deploy: Path                     # the model the targets start from (the source, or the preset's result)
    deploy_facts: ModelFacts
    deploy_precision: str            # what the deploy model computes in: fp32 | fp16 | int8
    reference: Reference
    criteria: Criteria
    input_shapes: dict[str, tuple[int, ...]]      # verification shapes (opt)
    pool_key: str = "default"
    fresh: bool = False                             # large model: every engine job in a fresh worker
    on_tick: Callable[[float], None] | None = None
    on_progress: Callable[[str, str], None] | None = None
    pipeline_records: list[dict] = field(default_factory=list)
    shared: dict = field(default_factory=dict)    # artifacts targets hand to each other (Triton reuses them)

    def progress(self, target: str, stage: str) -> None:
        if self.on_progress is not None:
            self.on_progress(target, stage)

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.bundle).as_posix()

    def artifact(self, path: Path, kind: str, label: str, *, companions: tuple[Path, ...] = (),
                 precision: str | None = None, portable: bool | None = None,
                 verification: Verification | None = None, notes: tuple[str, ...] = ()) -> Artifact:
        """An Artifact record for a file just written (sha256 and size of the main file)."""
        return Artifact(self.rel(path), kind, label, sha256_file(path), Path(path).stat().st_size,
                        tuple(self.rel(c) for c in companions), precision, portable, verification, notes)
