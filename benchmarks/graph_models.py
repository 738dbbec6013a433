"""Large graphs for the graph-view benchmark and tests, built in code (tiny
tensors so shape inference stays cheap; the graph size is what is measured).

- ``resnet_like(blocks)``: exporter-style scoped names (``/stage0/block3/conv1/Conv``),
  10 nodes per block, so ``blocks=1000`` gives a 10,000-node model.
- ``chain(n)``: one long chain with flat names (``n0``, ``n1``...), the R20 case.
- ``wide_io(n)``: ``n`` graph inputs and ``n`` outputs (R20's 10k graph I/O).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

if TYPE_CHECKING:
    from benchmarks.harness import ProcessRun

_OPSET = [helper.make_opsetid("", 17)]


def cached_graph(key: str, build: Callable[[Path], Path]) -> Path:
    """``benchmarks/.cache/graphview/<key>.onnx``, written by ``build(path)`` the first time (the graph-view
    benchmarks share these files)."""
    from benchmarks.models import CACHE

    path = CACHE / "graphview" / f"{key}.onnx"
    return path if path.exists() else build(path)


GraphCase = tuple[str, str, Callable[[Path], Path], float | None]   # label, cache key, builder, goal (s)


def run_graph_cases(cases: Sequence[GraphCase], prefix: str, setup: str, snippet: str,
                    suffix: str = "") -> Iterator[tuple[GraphCase, Path, ProcessRun]]:
    """Per case, in a fresh process: ``setup`` then ``snippet`` formatted with the cached model's ``path``
    and the page's ``html`` path (a fresh ``prefix`` folder, ``<key><suffix>.html``); yields
    (the case, the html path, the run: its ``result`` and peak RSS)."""
    from benchmarks.harness import run_snippet

    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    for case in cases:
        _, key, build, _ = case
        path, html = cached_graph(key, build), tmp / f"{key}{suffix}.html"
        yield case, html, run_snippet(setup, snippet.format(path=str(path), html=str(html)))


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(graph, opset_imports=_OPSET, ir_version=8, producer_name="onnx-studio-benchmarks")
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


def resnet_like(blocks: int, path: Path, *, channels: int = 4, blocks_per_stage: int = 50) -> Path:
    """``10 * blocks + 2`` nodes with scoped names, residual adds and shared weights."""
    rng = np.random.default_rng(0)
    c = channels
    inits = [numpy_helper.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w3"),
             numpy_helper.from_array(np.zeros(c, np.float32), "bias"),
             numpy_helper.from_array(np.full((1, c, 1, 1), 0.5, np.float32), "half")]
    nodes = [helper.make_node("Identity", ["input"], ["x0"], name="/stem/Identity")]
    x = "x0"
    for b in range(blocks):
        p = f"/stage{b // blocks_per_stage}/block{b % blocks_per_stage}"

        def n(op, ins, local, **attrs):
            out = f"{p}/{local}_output_0"
            nodes.append(helper.make_node(op, ins, [out], name=f"{p}/{local}", **attrs))
            return out
        h = n("Conv", [x, "w3", "bias"], "conv1/Conv", pads=[1, 1, 1, 1])
        h = n("Relu", [h], "relu/Relu")
        h = n("Conv", [h, "w3", "bias"], "conv2/Conv", pads=[1, 1, 1, 1])
        g = n("Sigmoid", [h], "gate/Sigmoid")
        g = n("Mul", [g, "half"], "gate/Mul")
        h = n("Mul", [h, g], "gate/Mul_1")
        h = n("Add", [h, x], "Add")
        h = n("Relu", [h], "relu_1/Relu")
        s = n("Neg", [h], "aux/Neg")
        x = n("Sub", [h, s], "aux/Sub")
    nodes.append(helper.make_node("Identity", [x], ["output"], name="/head/Identity"))
    graph = helper.make_graph(nodes, "resnet_like",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, 8, 8])],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    return _save(graph, path)


def chain(n: int, path: Path) -> Path:
    """``n`` nodes in one chain (alternating Relu/Neg), flat names ``n0``..."""
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Relu" if i % 2 == 0 else "Neg", [prev], [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return _save(graph, path)


def wide_io(n: int, path: Path) -> Path:
    """``n`` inputs, each through a Relu to its own output."""
    nodes = [helper.make_node("Relu", [f"in{i}"], [f"out{i}"], name=f"relu{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "wide_io",
                              [helper.make_tensor_value_info(f"in{i}", TensorProto.FLOAT, [1]) for i in range(n)],
                              [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, [1]) for i in range(n)])
    return _save(graph, path)
