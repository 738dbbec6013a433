"""Result objects of an export: what was written, how it was verified, what failed.

The CLI's ``--json``, the Export page and ``manifest.json`` all render these.
An artifact's verification is the one ``studio.core.compare.Verification``: ``passed``, ``failed``,
``not verified`` (with the reason: TensorRT without a GPU) or ``error`` (the engine could not load
the artifact).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.compare import Verification, VerifyStatus

# the one verification vocabulary (studio.core.compare), also a target's overall status
PASSED, FAILED, NOT_VERIFIED, ERROR = (VerifyStatus.PASSED, VerifyStatus.FAILED, VerifyStatus.NOT_VERIFIED,
                                       VerifyStatus.ERROR)


def json_safe(obj: Any) -> Any:
    """The same structure with non-finite floats as strings ("inf", "nan"): JSON without NaN/Infinity."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


@dataclass(frozen=True)
class Artifact:
    """A deployable file (with its companion files) inside the bundle."""

    path: str                        # relative to the bundle folder, '/'-separated
    kind: str                        # onnx | ort | session-options | openvino-ir | tensorrt-onnx | ...
    label: str                       # one line for people
    sha256: str
    bytes: int
    companions: tuple[str, ...] = ()  # files that belong to it (model.onnx.data, model.bin)
    precision: str | None = None
    portable: bool | None = None     # False: hardware-specific (ORT NCHWc layout ops)
    verification: Verification | None = None
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "label": self.label, "sha256": self.sha256,
                "bytes": self.bytes, "companions": list(self.companions), "precision": self.precision,
                "portable": self.portable, "notes": list(self.notes),
                "verification": self.verification.to_dict() if self.verification else None}


@dataclass(frozen=True)
class TargetResult:
    """One target's folder: artifacts, their verification, timings, notes."""

    target: str                      # onnxruntime | openvino | tensorrt | triton
    status: str                      # passed | failed | not verified | error
    message: str                     # one line: what happened
    artifacts: tuple[Artifact, ...] = ()
    notes: tuple[str, ...] = ()
    benchmarks: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status in (FAILED, ERROR)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "status": self.status, "message": self.message,
                "artifacts": [a.to_dict() for a in self.artifacts], "notes": list(self.notes),
                "benchmarks": self.benchmarks, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class ExportResult:
    """The bundle written by ``api.export``: folder, zip, per-target results and the manifest."""

    bundle: Path
    zip_path: Path | None
    targets: tuple[TargetResult, ...]
    manifest: dict[str, Any]
    seconds: float = 0.0

    @property
    def failures(self) -> tuple[str, ...]:
        """One line per failed target or artifact, worst first (the report shows these first)."""
        lines: list[str] = []
        for t in self.targets:
            bad = [a for a in t.artifacts if a.verification is not None and a.verification.failed]
            if t.failed and not bad:
                lines.append(f"{t.target}: {t.message}")
            for a in bad:
                where = "" if a.kind.endswith("-error") else f"{a.path}: "    # error notes carry no artifact
                lines.append(f"{t.target}: {where}{a.verification.message}")  # type: ignore[union-attr]
        return tuple(lines)

    @property
    def ok(self) -> bool:
        """Every artifact that could be verified here was verified and passed."""
        return not self.failures

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def target(self, name: str) -> TargetResult:
        return next(t for t in self.targets if t.target == name)

    def to_dict(self) -> dict[str, Any]:
        return json_safe({"ok": self.ok, "failures": list(self.failures), "bundle": str(self.bundle),
                          "zip": str(self.zip_path) if self.zip_path else None, "seconds": round(self.seconds, 3),
                          "targets": [t.to_dict() for t in self.targets], "manifest": self.manifest})


def target_result(target: str, artifacts: list[Artifact], notes: list[str], bench: dict,
                   started: float) -> TargetResult:
    """Status of a target from its verified artifacts: error/failed first, then passed."""
    verified = [a.verification for a in artifacts if a.verification is not None]
    bad = [v for v in verified if v.failed]
    if bad:
        status = ERROR if all(v.status == ERROR for v in bad) else FAILED
        message = f"{len(bad)} of {len(verified)} artifact(s) failed verification: {bad[0].message}"
    elif verified and all(v.status == NOT_VERIFIED for v in verified):
        status, message = NOT_VERIFIED, verified[0].message
    elif verified:
        status = PASSED
        message = f"{sum(v.ok for v in verified)} artifact(s) reloaded and verified"
        skipped = [v for v in verified if v.status == NOT_VERIFIED]
        if skipped:
            message += f"; {len(skipped)} not verified here ({skipped[0].message})"
    else:
        status, message = NOT_VERIFIED, "nothing to verify"
    return TargetResult(target, status, message, tuple(artifacts), tuple(notes), bench,
                        time.perf_counter() - started)


def unless_refused(target: str, refusal: Callable[[Any], str | None]
                   ) -> Callable[[Callable[[Any], TargetResult]], Callable[[Any], TargetResult]]:
    """Wrap a target's export function: a model ``refusal(ctx)`` turns away gets an error result naming why,
    before any work (and before the target's folder is made)."""
    def wrap(export: Callable[[Any], TargetResult]) -> Callable[[Any], TargetResult]:
        @functools.wraps(export)
        def run(ctx: Any) -> TargetResult:
            started = time.perf_counter()
            refused = refusal(ctx)
            if refused:
                return TargetResult(target, ERROR, refused, seconds=time.perf_counter() - started)
            return export(ctx)
        return run
    return wrap
