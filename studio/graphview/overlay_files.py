"""Overlay data from the JSON files other commands write, for ``graph --overlay-data``.

The same ``data`` keys the UI's pages publish for the Graph page
(``studio.ui.state.publish_overlay_data``), made from the files instead:

* ``check --json`` (a Report)              -> ``data["compatibility"]``  (per engine target, as
  ``api.compatibility_overlay_data``)
* ``profile --json --per-op``               -> ``data["node_times"]``    (seconds per node, as
  ``OpsProfile.node_times_s``), from the variant of this model (by sha8) or the first with per-op times
* ``compare --layerwise --json``            -> ``data["node_errors"]``   (as ``LayerwiseResult.node_errors``)
* ``memory --json``                         -> ``data["node_memory"]``   (bytes live per node, the memory plan)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.graphview.overlays import compatibility_data

__all__ = ["DATA_OVERLAYS", "OverlayFileData", "overlay_data_from_json"]

# Overlay names that exist only with data, and which file provides it.
DATA_OVERLAYS = {"compatibility: <engine> <target>": "check --json",
                 "time share": "profile --per-op --json",
                 "numeric error": "compare --layerwise --json",
                 "live memory": "memory --json"}


@dataclass
class OverlayFileData:
    data: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    kind: str = ""              # check | profile | compare


def _check(doc: Mapping) -> dict[str, dict[str, str]]:
    rows = [SimpleNamespace(engine=str(n.get("engine") or ""), target=str(n.get("target") or ""),
                            node=str(n.get("node")), status=str(n.get("status")))
            for n in doc.get("nodes") or () if isinstance(n, Mapping) and n.get("node") is not None]
    return compatibility_data(rows)


def _numbers(values: object) -> dict[str, float]:
    if not isinstance(values, Mapping):
        return {}
    out: dict[str, float] = {}
    for k, v in values.items():
        if v is None:                       # to_dict writes non-finite errors as null
            out[str(k)] = float("inf")
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[str(k)] = float(v)
    return out


def _profile(doc: Mapping, sha256: str | None, result: OverlayFileData) -> None:
    timed = [v for v in doc.get("variants") or () if isinstance(v, Mapping) and isinstance(v.get("ops"), Mapping)
             and v["ops"].get("per_node_ms")]
    if not timed:
        raise StudioError("the profile file has no per-node times; profile with --per-op", code=ErrorCode.BAD_OPTION)
    sha8 = (sha256 or "")[:8]
    mine = [v for v in timed if sha8 and (v.get("variant") or {}).get("sha8") == sha8]
    chosen = (mine or timed)[0]
    label = (chosen.get("variant") or {}).get("label") or (chosen.get("variant") or {}).get("id") or "?"
    if not mine:
        result.notes.append(f"the profile measured another model version; node times from '{label}' "
                            "(nodes are matched by name)")
    elif len(timed) > 1:
        result.notes.append(f"node times from '{label}' (the first of {len(timed)} variants with per-op times)")
    # per_node_ms -> seconds, as OpsProfile.node_times_s() hands them to the Graph page.
    result.data["node_times"] = {k: v / 1000.0 for k, v in _numbers(chosen["ops"]["per_node_ms"]).items()}


def overlay_data_from_json(doc: object, *, sha256: str | None = None) -> OverlayFileData:
    """Recognise a ``check``/``profile``/``compare`` JSON document and turn it into overlay data.
    ``sha256``: the drawn model's, to pick its profile variant and say when a check was of another."""
    result = OverlayFileData()
    if not isinstance(doc, Mapping):
        raise StudioError("overlay data must be a JSON object written by check --json, profile --json or "
                          "compare --layerwise --json", code=ErrorCode.BAD_OPTION)
    if "verdicts" in doc and "nodes" in doc:
        result.kind = "check"
        result.data["compatibility"] = _check(doc)
        if sha256 and doc.get("sha256") and doc["sha256"] != sha256:
            result.notes.append("the check report is of another model version (nodes are matched by name)")
    elif "variants" in doc and "ratios" in doc:
        result.kind = "profile"
        _profile(doc, sha256, result)
    elif "comparison" in doc and "layerwise" in doc:
        result.kind = "compare"
        lw = doc.get("layerwise")
        if not isinstance(lw, Mapping):
            raise StudioError("the compare file has no layer-wise errors; compare with --layerwise",
                              code=ErrorCode.BAD_OPTION)
        result.data["node_errors"] = _numbers(lw.get("node_errors"))
    elif "node_live_bytes" in doc and "live_bytes" in doc:
        result.kind = "memory"
        result.data["node_memory"] = _numbers(doc.get("node_live_bytes"))
    else:
        raise StudioError("unrecognised overlay data: expected the JSON of check --json, profile --json, "
                          "compare --layerwise --json or memory --json", code=ErrorCode.BAD_OPTION)
    return result
