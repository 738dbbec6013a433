"""onnx-studio graph MODEL [--diff OTHER] [--focus NODE --hops K] [--level N] [--overlay NAME]
[--overlay-data FILE ...] -o FILE"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from studio import api
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.paths import check_regular_file
from studio.core.requests import GraphRequest
from studio.cli.common import parse_dims
from studio.core.error_codes import ErrorCode

NAME = "graph"
HELP = ("Draw the graph: a self-contained interactive .html (zoom, pan, search, details), .dot or .svg; "
        "an overview aggregated to fit, a node's neighbourhood, or a before/after diff.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a .onnx file (the 'before' model with --diff)")
    p.add_argument("-o", "--output", required=True, help="output file: .html, .dot or .svg")
    p.add_argument("--diff", metavar="OTHER", help="diff against this model (the 'after' version)")
    p.add_argument("--lineage", metavar="JSON", help="with --diff: pipeline records (a JSON list of passes)")
    p.add_argument("--diff-mode", choices=["overlay", "side-by-side"], default="overlay",
                   help="with --diff and .html: one union graph, or both graphs side by side")
    p.add_argument("--focus", metavar="NODE", help="draw the neighbourhood of this node (id or name)")
    p.add_argument("--hops", type=int, default=None, help="with --focus: how many edges away (default 2)")
    p.add_argument("--group", metavar="KEY", help="draw this group of the hierarchy (its key, as the Graph page's "
                   "Detail view names it), opened one level")
    p.add_argument("--level", type=int, help="hierarchy level to draw (default: the deepest that fits)")
    p.add_argument("--overlay", default=None,
                   help="colour by: 'op type' (default), 'FLOPs share', and with --overlay-data "
                        "'compatibility: ENGINE TARGET', 'time share', 'numeric error' or 'live memory'")
    p.add_argument("--overlay-data", metavar="JSON", action="append", default=[],
                   help="feed overlays from a file another command wrote: check --json (engine support), "
                        "profile --per-op --json (time share), compare --layerwise --json (numeric error), "
                        "memory --json (live memory); "
                        "repeatable")
    p.add_argument("--search", default=None, help="highlight nodes whose name, op type or tensors contain this")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="value for a symbolic dim, so edges are labelled with numeric shapes (repeatable)")
    p.add_argument("--renderer", choices=["auto", "boxes", "echarts"], default="auto",
                   help=".html renderer: 'boxes' (op boxes with attributes and weight shapes, ELK layout, groups "
                        "expand in place, minimap) or 'echarts' (the dot overview with overlay tooltips); 'auto' "
                        "(default): boxes unless --level, --search, --overlay or --overlay-data is given")

# Options of the single-graph view that a diff does not take.
_NOT_WITH_DIFF = (("focus", "--focus"), ("hops", "--hops"), ("group", "--group"), ("overlay", "--overlay"),
                  ("overlay_data", "--overlay-data"), ("search", "--search"))


def _lineage(path: str | None) -> object:
    if not path:
        return None
    p = Path(path)
    check_regular_file(p, max_bytes=64 * 2**20, label="lineage file")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StudioError(f"lineage file is not JSON ({type(exc).__name__})") from None
    # Accept the records list, a Version.provenance dict, or an `optimize --report` file.
    if isinstance(data, dict):
        return data.get("pipeline") or data.get("records")
    return data


def _overlay_data(paths: list[str], sha256: str) -> dict:
    data: dict = {}
    for raw in paths:
        p = Path(raw)
        check_regular_file(p, max_bytes=256 * 2**20, label="overlay data file")
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StudioError(f"overlay data file {printable(p.name, 80)} is not JSON ({type(exc).__name__})",
                              code=ErrorCode.BAD_OPTION) from None
        got = api.overlay_data_from_json(doc, sha256=sha256)
        for note in got.notes:
            print(f"note: {printable(p.name, 80)}: {printable(note, 300)}")
        for key, value in got.data.items():
            if key == "compatibility":
                data.setdefault(key, {}).update(value)
            else:
                data[key] = value
    return data


def _check_overlay(name: str, available: list[str]) -> None:
    if name in available:
        return
    needs = next((src for ov, src in api.DATA_OVERLAYS.items() if name == ov or (
        ov.startswith("compatibility:") and name.startswith("compatibility:"))), None)
    extra = f" ('{printable(name, 60)}' needs --overlay-data with the output of {needs})" if needs else ""
    raise StudioError(f"no overlay '{printable(name, 60)}' for this model; valid here: "
                      f"{', '.join(repr(a) for a in available)}{extra}", code=ErrorCode.BAD_OPTION)


def request_of(args: argparse.Namespace) -> GraphRequest:
    """The one ``GraphRequest`` these flags ask for (what the Graph page's hint prints); the models, the
    lineage and overlay-data files and the output are the call's."""
    return GraphRequest(dims=parse_dims(args.dim), level=args.level, overlay=args.overlay, search=args.search,
                        focus=args.focus, hops=args.hops, group=args.group, diff_mode=args.diff_mode,
                        renderer=args.renderer)


def run(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if args.level is not None and args.level < 1:
        raise StudioError("--level must be 1 or more")
    if args.diff:
        given = [flag for attr, flag in _NOT_WITH_DIFF if getattr(args, attr) not in (None, [])]
        if given:
            raise StudioError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to --diff "
                              "(a diff colours nodes by removed/added/changed and draws the whole graph); "
                              "with --diff use --lineage, --diff-mode and --level", code=ErrorCode.BAD_OPTION)
    if args.lineage and not args.diff:
        raise StudioError("--lineage applies only with --diff", code=ErrorCode.BAD_OPTION)
    hops = 2 if args.hops is None else args.hops
    if hops < 0:
        raise StudioError("--hops must be 0 or more")
    if args.hops is not None and args.focus is None:
        raise StudioError("--hops applies only with --focus", code=ErrorCode.BAD_OPTION)
    if args.group is not None and args.focus is not None:
        raise StudioError("--group and --focus each choose the region to draw: give one", code=ErrorCode.BAD_OPTION)

    r = request_of(args)
    dims = dict(r.dims)
    handle = api.load(args.model)
    echarts_only = r.level is not None or r.search is not None or r.overlay is not None or bool(args.overlay_data)
    boxes = out.suffix.lower() == ".html" and r.focus is None and r.group is None \
        and (r.renderer == "boxes" or r.renderer == "auto" and not echarts_only)
    overlay_data = _overlay_data(args.overlay_data, handle.sha256) if args.overlay_data else {}
    overlay = r.overlay or "op type"
    fast = api.graph_prefers_fast_path(handle) and overlay == "op type" and not args.diff and not overlay_data
    # the graph draws no memory plan; without --diff the hierarchy is built while inspect runs
    summary = api.inspect(handle, dims, memory=False) if args.diff else None
    if fast:
        print("note: a large model: drawn without shapes and FLOPs (any other --overlay computes them)")
    if args.diff:
        other = api.load(args.diff)
        d = api.diff(handle, other, lineage=_lineage(args.lineage), summary_a=summary,
                     summary_b=api.inspect(other, dims, memory=False))
        written = api.write_diff_viewer(d, out, r) if boxes else api.write_diff(d, out, r)
        c = d.counts()
        print(f"diff: {c['removed']} removed, {c['added']} added, {c['changed']} changed, "
              f"{c['unchanged']} unchanged")
    else:
        index, summary = (api.graph_index(handle, None), None) if fast else api.graph_index_inspected(handle, r)
        available = list(api.graph_overlays(index, summary, overlay_data))
        if overlay_data:
            fed = [n for n in available if n not in ("op type", "FLOPs share")]
            print(f"overlays from data: {', '.join(fed) if fed else 'none'}")
            if r.overlay is None and fed:
                overlay = fed[0]
                r = replace(r, overlay=overlay)              # the request drawn: the data's overlay chosen
                print(f"note: colouring by '{printable(overlay, 80)}' (choose with --overlay)")
        _check_overlay(overlay, available)
        if boxes:
            written = api.write_graph_viewer(index, out, r, summary=summary, overlay_data=overlay_data)
            if written.note:
                print(f"note: {written.note}")
                written = replace(written, note=None)
            print(f"wrote {written.path} ({written.format}, {written.items:,} items)")
            return 0
        budget = None
        if out.suffix.lower() in (".dot", ".svg") and r.focus is None and r.group is None:
            budget = api.SVG_MAX_ITEMS
        view = api.graph_view(index=index, summary=summary, request=r, overlay_data=overlay_data, budget=budget)
        if view.note:
            print(f"note: {printable(view.note, 400)}")
        written = api.write_graph_view(view, out)
    if written.note:
        print(f"note: {written.note}", file=sys.stderr)
    print(f"wrote {written.path} ({written.format}, {written.items:,} items)")
    return 0
