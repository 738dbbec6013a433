"""Running onnxscript rewrite rules as a studio pass: what matched, what it
became, and why a candidate was left alone.

Fusions are written as onnxscript rules (a pattern like the math, a ``check``
that returns a reason, a ``rewrite``). The rule set itself only returns a
count, so each rule is wrapped to record every applied rewrite (the matched
nodes and the new ones) and every failed check (with its reason). New nodes
inherit the name of the matched node of the same op, so the graph diff shows
"Conv 'conv1' changed" rather than a fresh anonymous node.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import onnx_ir as ir

from passes.base import Change, node_label
from passes.ir_helpers import drop_orphaned_initializers, preserved_annotations, has_ops, inferred_shapes


@dataclasses.dataclass
class RuleApplication:
    rule: str
    matched: tuple[str, ...]             # labels of the matched nodes (before)
    matched_ops: tuple[str, ...]
    matched_names: tuple[str, ...]
    new_nodes: list[ir.Node]
    inputs: list[ir.Value] = dataclasses.field(default_factory=list)   # inputs of the matched nodes


class _Collector:
    """Tracer stand-in: keeps the reason of every failed ``check``."""

    def __init__(self) -> None:
        self.refused: dict[str, str] = {}
        self.spans: dict[str, frozenset[str]] = {}     # refused root -> the nodes its match covered

    def log(self, rule, container, node, match_result, status) -> None:
        from onnxscript.rewriter._basics import MatchStatus

        if status == MatchStatus.CONDITION_FAILED:
            reason = getattr(match_result, "reason", "") or "condition failed"
            self.refused[node_label(node)] = f"{rule}: {reason}"
            self.spans[node_label(node)] = frozenset(node_label(n) for n in (getattr(match_result, "nodes", None) or ()))


class _Recording:
    """A RewriteRule that records what it rewrote (delegates everything else)."""

    def __init__(self, rule, applied: list[RuleApplication], collector: _Collector) -> None:
        self._rule = rule
        self._applied = applied
        self._collector = collector

    def __getattr__(self, name):
        return getattr(self._rule, name)

    def __str__(self) -> str:
        return str(self._rule)

    def try_rewrite(self, model, graph_or_function, node, *, verbose=None, tracer=None):
        delta = self._rule.try_rewrite(model, graph_or_function, node, verbose=verbose,
                                       tracer=tracer if tracer is not None else self._collector)
        if delta is not None and tracer is None:
            nodes = list(delta.match.nodes)
            self._applied.append(RuleApplication(str(self._rule) if self._rule.name else type(self._rule).__name__,
                                         tuple(node_label(n) for n in nodes), tuple(n.op_type for n in nodes),
                                         tuple(n.name or "" for n in nodes), list(delta.new_nodes),
                                         [v for n in nodes for v in n.inputs if v is not None]))
        return delta


def _drop_orphaned_initializers(applied: list[RuleApplication]) -> None:
    """Weights only the replaced nodes used (BatchNormalization statistics...) go with them."""
    for a in applied:
        drop_orphaned_initializers(a.inputs)


@dataclasses.dataclass
class RewriteOutcome:
    applied: list[RuleApplication]
    refused: dict[str, str]            # node label -> why the rule did not apply
    spans: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)   # refused label -> nodes it matched

    @property
    def count(self) -> int:
        return len(self.applied)


def apply_rules(model: ir.Model, rules: Sequence) -> RewriteOutcome:
    """Apply onnxscript rules to the model in place; return what happened."""
    from onnxscript.rewriter import RewriteRuleSet

    applied: list[RuleApplication] = []
    collector = _Collector()
    with preserved_annotations(model):
        RewriteRuleSet([_Recording(r, applied, collector) for r in rules]).apply_to_model(model)
    applied = [a for a in applied if all(n.graph is not None for n in a.new_nodes)]   # really inserted
    _drop_orphaned_initializers(applied)
    for a in applied:
        names = {op: name for op, name in zip(a.matched_ops, a.matched_names) if name}
        scope = next((nm.rsplit("/", 1)[0] for nm in a.matched_names if "/" in nm), "")
        for n in a.new_nodes:
            n.metadata_props.pop("pkg.onnxscript.rewriter.rule_name", None)   # the record says it; the file need not
            inherited = names.pop(n.op_type, None)
            if inherited:
                n.name = inherited
            elif scope:
                n.name = f"{scope}/{n.op_type}"
    return RewriteOutcome(applied, collector.refused, collector.spans)


def changes_for(outcome: RewriteOutcome, *, fused_ops: Sequence[str] = (), detail: str = "") -> list[Change]:
    """Change records: nodes of ``fused_ops`` are "fused" (absorbed into another node);
    the rest of each match is "replaced"."""
    changes: list[Change] = []
    for a in outcome.applied:
        fused = tuple(lbl for lbl, op in zip(a.matched, a.matched_ops) if op in fused_ops)
        replaced = tuple(lbl for lbl, op in zip(a.matched, a.matched_ops) if op not in fused_ops)
        into = ", ".join(f"{n.op_type} '{n.name}'" if n.name else n.op_type for n in a.new_nodes) or "nothing"
        text = detail or f"{' + '.join(a.matched_ops)} -> {into}"
        if fused:
            changes.append(Change("fused", fused, f"{text} (folded into {into})"))
        if replaced:
            changes.append(Change("replaced", replaced, text))
    return changes


def refusal_notes(outcome: RewriteOutcome, limit: int = 10) -> list[str]:
    reasons: dict[str, list[str]] = {}
    for label, why in outcome.refused.items():
        reasons.setdefault(why, []).append(label)
    return [f"{why} ({len(labels)} node(s), e.g. '{labels[0]}')" for why, labels in list(reasons.items())[:limit]]


def merge_outcomes(outcomes: Sequence[RewriteOutcome]) -> RewriteOutcome:
    """One outcome for rules applied in phases; a node rewritten in a later phase is no longer listed as
    refused, and a candidate inside one an earlier (longer) phase refused is that candidate again, said once
    (fuse-layernorm's three phases had printed each refused LayerNorm three times)."""
    applied = [a for o in outcomes for a in o.applied]
    done = {label for a in applied for label in a.matched}
    refused: dict[str, str] = {}
    spans: dict[str, frozenset[str]] = {}
    for o in outcomes:
        seen = frozenset().union(*spans.values()) if spans else frozenset()
        for k, v in o.refused.items():
            if k in done or k in seen:
                continue
            refused[k] = v
            spans[k] = o.spans.get(k, frozenset())
    return RewriteOutcome(applied, refused, spans)


def rewrite_if_present(model: ir.Model, triggers: Sequence[str],
                       phases: Callable[[], Sequence[Sequence]]) -> RewriteOutcome | None:
    """Each rule set of ``phases()`` applied in turn with shapes inferred (one outcome), or None, with no shape
    inference run, when the model has none of the ``triggers`` ops (a fusion's quick way out)."""
    if not has_ops(model, *triggers):
        return None
    with inferred_shapes(model):
        outcomes = [apply_rules(model, rules) for rules in phases()]
    return outcomes[0] if len(outcomes) == 1 else merge_outcomes(outcomes)


def fusion_notes(outcome: RewriteOutcome, fused_note: str = "") -> list[str]:
    """Why candidates were left alone, then ``fused_note`` (what the fused op does differently) when anything
    was fused."""
    notes = refusal_notes(outcome)
    return [*notes, fused_note] if fused_note and outcome.count else notes
