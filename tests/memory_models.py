"""Models the memory-plan tests share (tests/inspect, tests/cli, tests/ui): a stem into two parallel
branches into a Concat, written so that ORT runs the branch with the large output first."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

C, HW, WIDE = 4, 32, 8
BIG = C * WIDE * HW * HW * 4        # one wide activation (bytes)
STEM = C * HW * HW * 4              # one narrow activation


def two_branch(c: int = C, hw: int = HW, wide: int = WIDE) -> onnx.ModelProto:
    """x -> s -> (q1 -> q2 -> q3 narrow) and (p1 -> p2 -> p3 wide) -> Concat. ORT's order runs the p
    branch first (written last), so p3 (wide) stays alive while the q branch runs: peak p3+q1+q2 = 3 BIG;
    the q branch first keeps only q3 (narrow) alive: peak at the Concat p3+q3+y = 2 BIG + 2 STEM."""
    nodes, inits = [], []
    rng = np.random.RandomState(0)

    def conv(x: str, y: str, cin: int, cout: int) -> None:
        inits.append(onnx.numpy_helper.from_array((rng.randn(cout, cin, 1, 1) * 0.1).astype(np.float32), f"w_{y}"))
        nodes.append(h.make_node("Conv", [x, f"w_{y}"], [y], name=y))
    conv("x", "s", 3, c)
    conv("s", "q1", c, c * wide); conv("q1", "q2", c * wide, c * wide); conv("q2", "q3", c * wide, c)
    conv("s", "p1", c, c * wide); conv("p1", "p2", c * wide, c * wide); conv("p2", "p3", c * wide, c * wide)
    nodes.append(h.make_node("Concat", ["p3", "q3"], ["y"], name="cat", axis=1))
    g = h.make_graph(nodes, "branches", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, hw, hw])],
                     [h.make_tensor_value_info("y", T.FLOAT, [1, c * wide + c, hw, hw])], inits)
    return onnx.shape_inference.infer_shapes(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
