"""What each engine check returns, and helpers shared by the checks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from studio.core.findings import EngineVerdict, Finding, NodeVerdict
from studio.core.sandbox import scrub_message

__all__ = ["EngineCheck", "OutputInfo", "first_line", "run_candidates", "seeded_size_finding", "verdict_from"]


@dataclass(frozen=True)
class OutputInfo:
    """What a real run produced for one graph output."""

    name: str
    dtype: str | None
    shape: tuple[int, ...] | None
    kind: str = "tensor"           # tensor | sequence | map | none


@dataclass
class EngineCheck:
    """Findings, verdicts and node statuses of one engine's check."""

    findings: list[Finding] = field(default_factory=list)
    verdicts: list[EngineVerdict] = field(default_factory=list)
    nodes: list[NodeVerdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    outputs: tuple[OutputInfo, ...] | None = None   # from a real run, when one happened
    version: str | None = None


def first_line(text: object, limit: int = 400) -> str:
    """One scrubbed line (no absolute paths) of an engine message; OpenVINO's C++ source
    locations give way to the reason (``engine_message``)."""
    from studio.core.errors import engine_message, is_located

    s = scrub_message(engine_message(text, 10_000) if is_located(text) else str(text))
    s = re.sub(r"\s+", " ", s).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def verdict_from(engine: str, target: str, findings: list[Finding], decided_by: str, *,
                 version: str | None = None, ran: bool | None = None, summary: str | None = None) -> EngineVerdict:
    """Model-level verdict from this engine target's findings.

    ``ran``: a real session ran the model (True), failed (False) or was not tried (None).
    """
    mine = [f for f in findings if f.engine == engine and f.target in (target, None)]
    errors = sum(f.is_error for f in mine)
    warnings = sum(f.severity == "warning" for f in mine)
    if ran is False or errors:
        verdict = "fails"
    elif decided_by == "not checked":
        verdict = "unknown"
    else:
        verdict = "runs with warnings" if warnings else "runs"
    if summary is None:
        first_error = next((f for f in mine if f.is_error), None)
        summary = first_error.message if first_error else {
            "runs": "no problem found", "runs with warnings": f"{warnings} warning(s)",
            "unknown": "not checked"}.get(verdict, "fails")
    return EngineVerdict(engine, target, verdict, decided_by, summary, version, errors, warnings)


def run_candidates(candidates, infer, data: dict) -> None:
    """Run ``infer(feeds)`` on each (feeds, note) of ``studio.core.feeds.check_feeds`` until one
    works; record in ``data`` the outputs (and ``retried`` when a later set ran), or the first
    error with its note. Shared by the ONNX Runtime and OpenVINO check jobs (worker side)."""
    from studio.core.feeds import retried_note

    first_error = None
    for feeds, feeds_note in candidates:
        data["feeds_note"] = feeds_note
        try:
            data["outputs"] = infer(feeds)
        except Exception as exc:  # noqa: BLE001 - the engine's message is the finding
            first_error = first_error or (f"{type(exc).__name__}: {exc}"[:2000], feeds_note)
            continue
        if first_error is not None:
            data["retried"] = retried_note(first_error, feeds)
        return
    if first_error is not None:
        data["run_error"], data["feeds_note"] = first_error


def seeded_size_finding(engine: str, label: str, data: dict, target: str) -> Finding | None:
    """SEEDED-SIZE: the run failed on the first seeded size and worked on the second."""
    if not data.get("retried"):
        return None
    return Finding("SEEDED-SIZE", "info", f"{label}: {data['retried']}", engine, target=target,
                   fix_hint="check with the sizes you deploy (--dim, or --inputs X.npz)", source="real session")
