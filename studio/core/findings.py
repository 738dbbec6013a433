"""Findings and reports: what a compatibility check says about a model (DESIGN.md §4).

A :class:`Finding` is one fact a user can act on ("node /GridSample: OpenVINO
supports GridSample only for 4-D inputs"), with a stable ``code`` (documented
in docs/findings.md), a severity and, when one exists, the registered pass that
fixes it (``fix_pass``). A :class:`Report` groups findings by engine, node and
op type, holds one :class:`EngineVerdict` per engine target (does the model
run there, and how that was decided) and one :class:`NodeVerdict` per node and
engine (the rows of the Compatibility page's matrix). Everything here is plain
data: the checks live in ``diagnostics/``.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from studio.core import jsonsafe

__all__ = [
    "DECIDED_BY",
    "NODE_STATUSES",
    "SEVERITIES",
    "VERDICTS",
    "EngineVerdict",
    "Finding",
    "FindingGroup",
    "NodeVerdict",
    "Report",
    "group_findings",
    "worst_severity",
]

SEVERITIES = ("error", "warning", "info")
# Model-level verdicts, best first. "not run": the engine loaded and compiled the model, but no input
# the studio could make ran it (it needs real inputs or sizes; diagnostics.input_search).
VERDICTS = ("runs", "runs with warnings", "not run", "fails", "unknown")
# How a verdict was reached, most trustworthy first.
DECIDED_BY = ("real session", "real parser", "kernel registry", "table only", "not checked")
# Per-node statuses in the engines x op-type matrix.
NODE_STATUSES = ("supported", "restricted", "unsupported", "unknown")

_RANK = {s: i for i, s in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Finding:
    """One diagnosed fact. ``code`` is stable; ``message`` is one line a user understands."""

    code: str
    severity: str                      # error | warning | info
    message: str
    engine: str | None = None          # onnxruntime | openvino | tensorrt | None (engine-independent)
    node: str | None = None            # node id (scope/name, as in the inspect summary)
    op_type: str | None = None
    domain: str | None = None          # "" for ai.onnx
    target: str | None = None          # EP / device / version: "CPUExecutionProvider", "CPU", "10.x"
    fix_hint: str | None = None        # what to do, one line
    fix_pass: str | None = None        # a registered pass that fixes it (the UI offers "apply")
    source: str = ""                   # what produced it: "ORT kernel registry", "OpenVINO query_model"...
    # Options the fix pass needs to fix *this* finding (e.g. convert-opset's target); not part of identity.
    fix_options: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        # One line: model-supplied text must not forge extra lines.
        object.__setattr__(self, "message", " ".join(str(self.message).split()))
        if self.fix_hint is not None:
            object.__setattr__(self, "fix_hint", " ".join(str(self.fix_hint).split()))

    @property
    def is_error(self) -> bool:
        return self.severity == "error"

    def key(self) -> tuple:
        """Identity for de-duplication (same fact reported twice)."""
        return (self.code, self.engine, self.target, self.node, self.message)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Finding:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class NodeVerdict:
    """Support of one node by one engine target."""

    node: str
    op_type: str
    domain: str
    engine: str
    target: str
    status: str                        # supported | restricted | unsupported | unknown
    reason: str = ""
    source: str = ""                   # "kernel registry", "query_model", "support table 10.x"...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class EngineVerdict:
    """Does the model run on this engine target, and how was that decided."""

    engine: str
    target: str                        # "CPUExecutionProvider", "CPU", "10.x"...
    verdict: str                       # runs | runs with warnings | not run | fails | unknown
    decided_by: str                    # real session | real parser | table only | not checked
    summary: str                       # one line
    engine_version: str | None = None
    errors: int = 0
    warnings: int = 0
    # The inputs a real run used: {"inputs": {name: "float32[1, 512]"}, "dims": {...}, "values": {...},
    # "tries": n} (dims/values reproduce them with diagnostics.input_search.recipe_feeds).
    ran_on: Mapping[str, Any] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")
        object.__setattr__(self, "summary", " ".join(str(self.summary).split()))

    @property
    def label(self) -> str:
        return f"{self.engine} ({self.target})" if self.target else self.engine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FindingGroup:
    """Findings that say the same thing (same code and message) about different nodes or engines.

    A detector with 38 unsupported nodes of one op gets one line "×38" with the nodes listed,
    not 38 copies of the same sentence."""

    code: str
    severity: str                      # the worst of the group
    message: str
    findings: tuple[Finding, ...]

    @property
    def count(self) -> int:
        return len(self.findings)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes named by the group, first-seen order, each once."""
        return tuple(dict.fromkeys(f.node for f in self.findings if f.node))

    @property
    def engines(self) -> tuple[str, ...]:
        """``engine (target)`` labels of the group, each once; empty for engine-independent findings."""
        return tuple(dict.fromkeys(f"{f.engine} ({f.target})" if f.target else f.engine
                                   for f in self.findings if f.engine))

    @property
    def first(self) -> Finding:
        return self.findings[0]


def group_findings(findings: Iterable[Finding]) -> tuple[FindingGroup, ...]:
    """Findings grouped by (code, message), most severe group first; otherwise in the order found."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.code, f.message), []).append(f)
    out = [FindingGroup(code, worst_severity(items) or items[0].severity, message, tuple(items))
           for (code, message), items in groups.items()]
    return tuple(sorted(out, key=lambda g: _RANK[g.severity]))     # stable: found order within a severity


def worst_severity(findings: Iterable[Finding]) -> str | None:
    worst = None
    for f in findings:
        if worst is None or _RANK[f.severity] < _RANK[worst]:
            worst = f.severity
    return worst


@dataclass(frozen=True)
class Report:
    """All findings of one check, with per-engine verdicts and per-node statuses."""

    model: str
    sha256: str
    findings: tuple[Finding, ...]
    verdicts: tuple[EngineVerdict, ...]
    nodes: tuple[NodeVerdict, ...] = ()
    engines: tuple[str, ...] = ()
    seconds: float = 0.0
    notes: tuple[str, ...] = ()        # how the check ran ("TensorRT check: table only"...)
    tool_versions: Mapping[str, str] = field(default_factory=dict)

    # -- queries ---------------------------------------------------------------
    @property
    def ok(self) -> bool:
        """No error finding."""
        return not any(f.is_error for f in self.findings)

    def errors(self, engine: str | None = None) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.is_error and (engine is None or f.engine in (engine, None)))

    def has_errors_for(self, engines: Iterable[str]) -> bool:
        """An error for one of ``engines``, or an engine-independent error that breaks loading."""
        wanted = set(engines)
        return any(f.is_error and (f.engine in wanted or f.engine is None) for f in self.findings)

    def verdict(self, engine: str, target: str | None = None) -> EngineVerdict | None:
        for v in self.verdicts:
            if v.engine == engine and (target is None or v.target == target):
                return v
        return None

    def by_engine(self) -> dict[str, list[Finding]]:
        return self._by(lambda f: f.engine or "any")

    def by_node(self) -> dict[str, list[Finding]]:
        return self._by(lambda f: f.node)

    def by_op_type(self) -> dict[str, list[Finding]]:
        return self._by(lambda f: f.op_type)

    def _by(self, key: Callable[[Finding], str | None]) -> dict[str, list[Finding]]:
        """The findings by ``key`` (in order; those whose key is None left out)."""
        out: dict[str, list[Finding]] = defaultdict(list)
        for f in self.findings:
            k = key(f)
            if k is not None:
                out[k].append(f)
        return dict(out)

    def grouped(self) -> tuple[FindingGroup, ...]:
        """The findings grouped by (code, message), severity order kept (the Compatibility page's list)."""
        return group_findings(self.findings)

    def fixes(self) -> tuple[str, ...]:
        """Registered passes offered by the findings, most-needed first (errors, then count)."""
        score: Counter[str] = Counter()
        for f in self.findings:
            if f.fix_pass:
                score[f.fix_pass] += 1000 if f.is_error else (10 if f.severity == "warning" else 1)
        return tuple(name for name, _ in score.most_common())

    def fix_options(self, name: str) -> dict[str, Any]:
        """Options for fix pass ``name`` taken from the most severe finding that offers it."""
        offering = [f for f in self.findings if f.fix_pass == name and f.fix_options]
        offering.sort(key=lambda f: _RANK[f.severity])
        return dict(offering[0].fix_options) if offering else {}

    def matrix(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{op_type: {engine target label: {status: count}}}`` for the engines x op-type view."""
        out: dict[str, dict[str, dict[str, int]]] = defaultdict(lambda: defaultdict(Counter))
        for n in self.nodes:
            label = f"{n.engine} ({n.target})" if n.target else n.engine
            op = f"{n.domain}::{n.op_type}" if n.domain else n.op_type
            out[op][label][n.status] += 1
        return {op: {k: dict(v) for k, v in cols.items()} for op, cols in sorted(out.items())}

    def summary(self) -> str:
        parts = [f"{v.label}: {v.verdict}" for v in self.verdicts]
        counts = Counter(f.severity for f in self.findings)
        parts.append(f"{counts['error']} errors, {counts['warning']} warnings, {counts['info']} notes")
        return "; ".join(parts)

    # -- serialization ---------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "model": self.model,
            "sha256": self.sha256,
            "ok": self.ok,
            "summary": self.summary(),
            "engines": list(self.engines),
            "verdicts": [v.to_dict() for v in self.verdicts],
            "findings": [f.to_dict() for f in self.findings],
            "nodes": [n.to_dict() for n in self.nodes],
            "matrix": self.matrix(),
            "fixes": list(self.fixes()),
            "notes": list(self.notes),
            "tool_versions": dict(self.tool_versions),
            "seconds": round(self.seconds, 3),
        }

    def to_json(self, **kwargs: Any) -> str:
        return jsonsafe.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Report:
        return cls(model=data["model"], sha256=data["sha256"],
                   findings=tuple(Finding.from_dict(f) for f in data.get("findings", [])),
                   verdicts=tuple(EngineVerdict(**v) for v in data.get("verdicts", [])),
                   nodes=tuple(NodeVerdict(**n) for n in data.get("nodes", [])),
                   engines=tuple(data.get("engines", [])), seconds=float(data.get("seconds", 0.0)),
                   notes=tuple(data.get("notes", [])), tool_versions=dict(data.get("tool_versions", {})))


def dedupe(findings: Iterable[Finding]) -> tuple[Finding, ...]:
    """Drop repeated facts, keeping the first; order: errors, warnings, notes (stable)."""
    seen: set[tuple] = set()
    out: list[Finding] = []
    for f in findings:
        k = f.key()
        if k not in seen:
            seen.add(k)
            out.append(f)
    return tuple(sorted(out, key=lambda f: _RANK[f.severity]))
