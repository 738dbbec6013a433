"""Pass lineage from pipeline records: which pass removed, added, fused,
replaced or changed which nodes.

The format (written by the passes pipeline into ``Version.provenance["pipeline"]``)::

    [{"name": "fuse-conv-bn", "modified": true,
      "changes": [{"kind": "fused", "nodes": ["/bn1/BatchNormalization", "/conv1/Conv"],
                   "detail": "BatchNormalization folded into Conv"}]}, ...]

A node named in a change's ``nodes`` was affected by that pass. Records come
from a workspace file, so they are validated here: malformed entries are
skipped (and logged), strings are capped, nothing is trusted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from studio.core.errors import StudioError
from studio.core.workspace import Workspace

log = logging.getLogger(__name__)

KINDS = ("removed", "added", "fused", "replaced", "changed")
MAX_RECORDS = 1000
MAX_CHANGES = 100_000
MAX_NAME = 4096


@dataclass(frozen=True)
class LineageChange:
    pass_name: str
    kind: str                 # removed | added | fused | replaced | changed
    nodes: tuple[str, ...]
    detail: str = ""


@dataclass(frozen=True)
class LineagePass:
    name: str
    modified: bool
    changes: tuple[LineageChange, ...]


def parse_pipeline(records: object) -> tuple[LineagePass, ...]:
    """Validated pass records; anything that does not fit the format is skipped."""
    if not isinstance(records, (list, tuple)):
        if records is not None:
            log.warning("pipeline lineage is not a list; ignored")
        return ()
    out: list[LineagePass] = []
    budget = MAX_CHANGES
    for rec in records[:MAX_RECORDS]:
        if not isinstance(rec, Mapping) or not isinstance(rec.get("name"), str):
            log.warning("pipeline record without a name; skipped")
            continue
        name = rec["name"][:200]
        changes: list[LineageChange] = []
        for ch in rec.get("changes") or ():
            if budget <= 0:
                break
            if not isinstance(ch, Mapping) or ch.get("kind") not in KINDS:
                log.warning("change of pass %s has no known kind; skipped", name[:60])
                continue
            nodes = tuple(n[:MAX_NAME] for n in (ch.get("nodes") or ()) if isinstance(n, str))
            detail = ch.get("detail")
            changes.append(LineageChange(name, ch["kind"], nodes, detail[:500] if isinstance(detail, str) else ""))
            budget -= 1
        out.append(LineagePass(name, bool(rec.get("modified", bool(changes))), tuple(changes)))
    return tuple(out)


def lineage_index(records: object) -> dict[str, list[LineageChange]]:
    """Node name -> the changes that name it, in pipeline order."""
    index: dict[str, list[LineageChange]] = {}
    for rec in parse_pipeline(records):
        for ch in rec.changes:
            for n in ch.nodes:
                index.setdefault(n, []).append(ch)
    return index


def describe(changes: list[LineageChange]) -> str:
    """'fused by fuse-conv-bn (BatchNormalization folded into Conv); ...'."""
    return "; ".join(f"{c.kind} by {c.pass_name}" + (f" ({c.detail})" if c.detail else "") for c in changes)


def lineage_between(ws: Workspace, a: str, b: str) -> list[dict]:
    """The pipeline records that lead from version ``a`` to version ``b`` (along
    ``b``'s parents), oldest first; empty when ``b`` does not descend from ``a``."""
    chain: list[list] = []
    vid: str | None = b
    seen: set[str] = set()
    while vid is not None and vid != a and vid not in seen:
        seen.add(vid)
        try:
            v = ws.version(vid)
        except StudioError:
            return []
        pipeline = v.provenance.get("pipeline") if isinstance(v.provenance, Mapping) else None
        chain.append(list(pipeline) if isinstance(pipeline, (list, tuple)) else [])
        vid = v.parent
    if vid != a:
        return []
    return [rec for records in reversed(chain) for rec in records]
