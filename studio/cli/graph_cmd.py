"""onnx-studio graph MODEL [--diff OTHER] [--focus NODE --hops K] [--level N] [--overlay NAME] -o FILE"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from studio import api
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.paths import check_regular_file

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
    p.add_argument("--hops", type=int, default=2, help="with --focus: how many edges away (default 2)")
    p.add_argument("--level", type=int, help="hierarchy level to draw (default: the deepest that fits)")
    p.add_argument("--overlay", default="op type", help="colour by: 'op type' (default), 'FLOPs share', ...")
    p.add_argument("--search", default="", help="highlight nodes whose name, op type or tensors contain this")


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


def run(args: argparse.Namespace) -> int:
    out = Path(args.output)
    if args.level is not None and args.level < 1:
        raise StudioError("--level must be 1 or more")
    if args.hops < 0:
        raise StudioError("--hops must be 0 or more")
    handle = api.load(args.model)
    fast = api.graph_prefers_fast_path(handle) and args.overlay == "op type" and not args.diff
    summary = None if fast else api.inspect(handle)
    if fast:
        print("note: a large model: drawn without shapes and FLOPs (any other --overlay computes them)")
    if args.diff:
        other = api.load(args.diff)
        d = api.diff(handle, other, lineage=_lineage(args.lineage), summary_a=summary,
                     summary_b=api.inspect(other))
        written = api.write_diff(d, out, mode=args.diff_mode, level=args.level)
        c = d.counts()
        print(f"diff: {c['removed']} removed, {c['added']} added, {c['changed']} changed, "
              f"{c['unchanged']} unchanged")
    else:
        index = api.graph_index(handle, summary)
        budget = None
        if out.suffix.lower() in (".dot", ".svg") and args.focus is None:
            from studio.graphview.dot import SVG_MAX_ITEMS
            budget = SVG_MAX_ITEMS
        view = api.graph_view(index=index, summary=summary, level=args.level, focus=args.focus, hops=args.hops,
                              overlay=args.overlay, query=args.search, budget=budget)
        if view.note:
            print(f"note: {printable(view.note, 400)}")
        written = api.write_graph_view(view, out)
    if written.note:
        print(f"note: {written.note}", file=sys.stderr)
    print(f"wrote {written.path} ({written.format}, {written.items:,} items)")
    return 0
