"""A --dim the model does not have is said on stderr by every command that takes --dim (inspect, check,
memory, optimize, export), not only by inspect.

Found on the held-out corpus model ddddocr_common (input1 [1, 1, 64, image_width]): `memory --dim
image_widht=224`, `check` and `optimize` with that typo ran silently at the seeded image_width=224 (memory
even noted "dims not given"); inspect alone warned. Reproduced on a code-built model."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from studio.cli import main
from tests.conftest import save


def _model(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "width"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "width"])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return save(m, tmp_path / "m.onnx")


@pytest.mark.parametrize("command", [["memory", "--no-measure", "--no-engine-graph"], ["check", "--engines", "ort"],
                                     ["optimize", "--passes", "eliminate-identity", "-o", "OUT"], ["inspect"]])
def test_a_dim_the_model_lacks_is_warned_once(capsys, tmp_path, command):
    path = _model(tmp_path)
    args = [str(tmp_path / "o" / "m.onnx") if a == "OUT" else a for a in command]
    main([args[0], str(path), *args[1:], "--dim", "widht=8"])
    err = capsys.readouterr().err
    assert err.count("warning: dim 'widht' is not a dim of this model; known: width") == 1, err


def test_a_known_dim_is_not_warned(capsys, tmp_path):
    path = _model(tmp_path)
    main(["memory", str(path), "--no-measure", "--no-engine-graph", "--dim", "width=8"])
    assert "not a dim of this model" not in capsys.readouterr().err
