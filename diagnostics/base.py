"""What each engine check returns, and helpers shared by the checks."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from studio.core.findings import EngineVerdict, Finding, NodeVerdict
from studio.core.sandbox import scrub_message
from studio.core.errors import engine_message, is_located
from diagnostics.input_search import NEEDS_INPUTS, run_search

__all__ = ["EngineCheck", "OutputInfo", "first_line", "limit_reached", "needs_inputs_finding", "recorded_limit",
           "run_candidates",
           "seeded_size_finding",
           "verdict_from"]


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
    s = scrub_message(engine_message(text, 10_000) if is_located(text) else str(text))
    s = re.sub(r"\s+", " ", s).strip()
    return s if len(s) <= limit else s[: limit - 1] + "…"


def verdict_from(engine: str, target: str, findings: list[Finding], decided_by: str, *,
                 version: str | None = None, ran: bool | None = None, summary: str | None = None,
                 needs_inputs: bool = False, ran_on: dict | None = None) -> EngineVerdict:
    """Model-level verdict from this engine target's findings.

    ``ran``: a real session ran the model (True), failed (False) or was not tried (None).
    ``needs_inputs``: the engine compiled the model but no input the studio tried ran it
    (diagnostics.input_search): "not run", not "fails". ``ran_on``: the inputs a real run used.
    """
    mine = [f for f in findings if f.engine == engine and f.target in (target, None)]
    errors = sum(f.is_error for f in mine)
    warnings = sum(f.severity == "warning" for f in mine)
    if ran is False or errors:
        verdict = "fails"
    elif needs_inputs:
        verdict = "not run"
        summary = summary or NEEDS_INPUTS
    elif decided_by == "not checked":
        verdict = "unknown"
    else:
        verdict = "runs with warnings" if warnings else "runs"
    if summary is None:
        first_error = next((f for f in mine if f.is_error), None)
        summary = first_error.message if first_error else {
            "runs": "no problem found", "runs with warnings": f"{warnings} warning(s)",
            "unknown": "not checked"}.get(verdict, "fails")
    return EngineVerdict(engine, target, verdict, decided_by, summary, version, errors, warnings,
                         ran_on=ran_on if verdict in ("runs", "runs with warnings") else None)


def run_candidates(model, infer, data: dict, *, dims=None, inputs=None) -> None:
    """Run ``infer(feeds)`` on the seeded feeds, then on the input search's sets
    (``diagnostics.input_search``) until one works; record in ``data`` the outputs, the inputs
    that ran (``ran_on``; ``retried`` when not the first set), or the first error with its note
    and whether the model only needs other inputs (``needs_inputs``). Shared by the ONNX Runtime
    and OpenVINO check jobs (worker side)."""
    data.update(run_search(model, infer, dims=dims, inputs=inputs).to_data())


def seeded_size_finding(engine: str, label: str, data: dict, target: str) -> Finding | None:
    """SEEDED-SIZE: the run failed on the seeded inputs and worked on others (which ones, said)."""
    if not data.get("retried"):
        return None
    return Finding("SEEDED-SIZE", "info", f"{label}: {data['retried']}", engine, target=target,
                   fix_hint="check with the sizes you deploy (--dim, or --inputs X.npz)", source="real session")


def needs_inputs_finding(engine: str, label: str, data: dict, target: str) -> Finding | None:
    """NEEDS-INPUTS: the model compiled, but neither the seeded inputs nor the searched sizes and
    values ran it, with an error that depends on the inputs: the verdict is "not run", not "fails"."""
    if not data.get("needs_inputs"):
        return None

    tried = data.get("tried") or []
    count = int(data.get("tries") or len(tried))
    shown = "; ".join(tried[:3]) + (f"; {count - 3} more" if count > 3 else "")
    return Finding("NEEDS-INPUTS", "warning",
                   f"{label} compiles the model, but no input the studio tried runs it "
                   f"({count} input set(s): {shown}); first error: "
                   f"{first_line(engine_message(data.get('run_error') or '', 300), 300)}", engine, target=target,
                   fix_hint="give real inputs with --inputs X.npz, or the sizes it needs with --dim NAME=VALUE "
                   "(INPUT[AXIS]=VALUE for an unnamed dim)", source="real session")


def limit_reached(exc, engine: str, label: str, prefix: str,
                  target: str | None) -> tuple[Finding, EngineVerdict] | None:
    """A check whose worker hit the studio's own time or memory limit (a ``WorkerError`` of kind
    "timeout" or "memory") has learnt nothing about the engine: the verdict is "unknown", with
    a finding that says which limit to raise, never "fails". None for a real crash or error."""
    if getattr(exc, "kind", None) not in ("timeout", "memory"):
        return None
    what = "time" if exc.kind == "timeout" else "memory"
    hint = "raise --timeout" if exc.kind == "timeout" else "raise --memory-gb"
    finding = Finding(f"{prefix}-LIMIT", "warning", f"{label} not verified: the check reached the studio's {what} "
                      f"limit ({first_line(exc, 200)})", engine, target=target,
                      fix_hint=f"{hint} and check again; a busy machine is slower", source="studio limits")
    verdict = verdict_from(engine, target or "", [], "not checked",
                           summary=f"not verified: the studio's {what} limit was reached ({hint})")
    return finding, verdict


def recorded_limit(result: EngineCheck, exc, engine: str, label: str, prefix: str, target: str | None) -> bool:
    """Record :func:`limit_reached`'s finding and "unknown" verdict in ``result``; False (nothing
    recorded) when ``exc`` is a real crash or error."""
    limit = limit_reached(exc, engine, label, prefix, target)
    if limit is None:
        return False
    result.findings.append(limit[0])
    result.verdicts.append(limit[1])
    return True

