"""``edge_shapes.resolve_table`` takes a value that inference gave whole (every dim a number) and the file
declares alike, or not at all, as it is: nothing to fill or check (issue 35 item 2: a fresh copy of each of
a 10k-node model's values before). The shortcut must not swallow a value the file declares otherwise.
Oracle: the resolved shapes, hints and mismatches worked out by hand."""

from __future__ import annotations

from studio.core.types import TensorInfo
from studio.inspect.edge_shapes import RANK_AXIS, FormulaMismatch, resolve_table
from studio.inspect.shapes import ShapeTable


def _t(name: str, shape) -> TensorInfo:
    return TensorInfo(name, "float32", None if shape is None else tuple(shape), "tensor", 1)


def test_whole_inferred_values_pass_and_declared_differences_are_still_checked():
    inferred = {"same": [1, 4, 8, 8], "undeclared": [2, 3], "stale": [1, 4, 8, 8], "formula": [1, 4],
                "wrong_formula": [1, 4], "rank": [1, 4], "open": [1, "s"]}
    declared = {"same": [1, 4, 8, 8], "stale": [1, 3, 8, 8], "formula": [1, "2*n"], "wrong_formula": [1, "3*n"],
                "rank": [4], "open": [1, "2*n"], "declared_only": [5]}
    got = resolve_table(ShapeTable({k: _t(k, v) for k, v in declared.items()}),
                        ShapeTable({k: _t(k, v) for k, v in inferred.items()}), {"n": 2})
    shapes = {k: v.shape for k, v in got.table.values.items()}
    assert shapes == {"same": (1, 4, 8, 8), "undeclared": (2, 3), "stale": (1, 4, 8, 8), "formula": (1, 4),
                      "wrong_formula": (1, 4), "rank": (1, 4), "open": (1, 4), "declared_only": (5,)}
    assert got.table.values["same"] == _t("same", [1, 4, 8, 8])
    assert set(got.mismatches) == {
        FormulaMismatch("stale", 1, "3", 3, 4, "ONNX shape inference"),
        FormulaMismatch("wrong_formula", 1, "3*n", 6, 4, "ONNX shape inference"),
        FormulaMismatch("rank", RANK_AXIS, "[4]", 1, 2, "ONNX shape inference")}
    assert got.hinted == {"open": ((1, "2*n", 4),)}
