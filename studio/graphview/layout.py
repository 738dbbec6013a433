"""Layered layout in Python, O((N + E) · sweeps) plus a sort per layer.

Hand-written because the usual libraries do not fit: graphviz ``dot`` (and
its browser build in ``st.graphviz_chart``) is super-linear and stalls or
renders blank past a few thousand nodes; grandalf/networkx Sugiyama
implementations are pure-Python O(N·E)-ish. Here: longest-path layers, a
few barycenter sweeps to order each layer, then positions that keep a node
near its neighbours' mean. Very deep graphs (a 100k chain) wrap into
side-by-side columns so the overview is not a one-pixel line.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from studio.graphview.order import topo_depth

DX = 1.0        # horizontal gap between nodes of a layer
DY = 1.0        # vertical gap between layers
SWEEPS = 2      # barycenter sweeps (down then up, each)
WRAP_LAYERS = 120   # deeper graphs wrap into columns


@dataclass(frozen=True)
class Layout:
    x: tuple[float, ...]
    y: tuple[float, ...]
    layers: int
    columns: int          # >1 when deep layers were wrapped into columns

    @property
    def width(self) -> float:
        return (max(self.x) - min(self.x)) if self.x else 0.0

    @property
    def height(self) -> float:
        return (max(self.y) - min(self.y)) if self.y else 0.0


def _pack(desired: list[float], gap: float) -> list[float]:
    """Positions as close to ``desired`` (already sorted) as a minimum gap allows:
    push right, push left, average (the classic two-pass placement)."""
    n = len(desired)
    if n == 0:
        return []
    right = desired[:]
    for i in range(1, n):
        right[i] = max(right[i], right[i - 1] + gap)
    left = desired[:]
    for i in range(n - 2, -1, -1):
        left[i] = min(left[i], left[i + 1] - gap)
    out = [(a + b) / 2 for a, b in zip(left, right)]
    for i in range(1, n):                      # averaging can undercut the gap; repair left to right
        if out[i] < out[i - 1] + gap:
            out[i] = out[i - 1] + gap
    return out


def layered_layout(n: int, edges: Sequence[tuple[int, int]], aspect: float = 1.6) -> Layout:
    """Positions for ``n`` items joined by ``edges`` (item indices); y grows downwards.

    ``aspect`` is the width/height of the canvas the overview fills; deep
    graphs are wrapped into columns to approach it.
    """
    if n == 0:
        return Layout((), (), 0, 1)
    _, layer = topo_depth(n, edges)
    n_layers = max(layer) + 1
    rows: list[list[int]] = [[] for _ in range(n_layers)]
    for i in range(n):
        rows[layer[i]].append(i)
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for s, d in edges:
        if s != d:
            preds[d].append(s)
            succs[s].append(d)
    pos = [0.0] * n
    for row in rows:
        for j, i in enumerate(row):
            pos[i] = float(j)

    def sweep(seq: Sequence[list[int]], nbrs: list[list[int]]) -> None:
        for row in seq:
            if len(row) < 2:
                continue
            key = {}
            for i in row:
                ns = nbrs[i]
                key[i] = sum(pos[j] for j in ns) / len(ns) if ns else pos[i]
            row.sort(key=key.__getitem__)
            for j, i in enumerate(row):
                pos[i] = float(j)

    for _ in range(SWEEPS):
        sweep(rows, preds)
        sweep(rows[::-1], succs)
    # Coordinates: each node near the mean of its predecessors (chains stay straight);
    # sources keep their barycenter rank. Order by that wish, then pack apart.
    x = [0.0] * n
    for row in rows:
        half = (len(row) - 1) / 2
        desired = {}
        for i in row:
            ns = preds[i]
            desired[i] = sum(x[j] for j in ns) / len(ns) if ns else (pos[i] - half) * DX
        row.sort(key=lambda i: (desired[i], pos[i]))
        for i, v in zip(row, _pack([desired[i] for i in row], DX)):
            x[i] = v
    width = max(x) - min(x) + DX
    stride = width + 2 * DX
    columns = max(1, round(math.sqrt(n_layers * DY * aspect / stride))) if n_layers > WRAP_LAYERS else 1
    columns = min(columns, n_layers)
    y = [0.0] * n
    if columns == 1:
        for i in range(n):
            y[i] = layer[i] * DY
        return Layout(tuple(x), tuple(y), n_layers, 1)
    per_col = math.ceil(n_layers / columns)
    xmin = min(x)
    for i in range(n):
        c, r = divmod(layer[i], per_col)
        x[i] = x[i] - xmin + c * stride
        y[i] = r * DY
    return Layout(tuple(x), tuple(y), n_layers, columns)
