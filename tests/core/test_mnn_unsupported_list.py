"""MNN's converter lists the ops it cannot convert on one line separated by " | " ("These Op Not Support:
ONNX::ConvInteger | ONNX::DynamicQuantizeLSTM", corpus ddddocr_common_old_int8); the studio split it on commas and
spaces only and said "MNN has no conversion for ConvInteger, |, DynamicQuantizeLSTM". The oracle is plain
mnnconvert's own line on the same file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
from onnx import TensorProto as T
from onnx import helper as h

from studio import api
from tests.requirements import require_engine


def _two_unsupported(path: Path) -> None:
    nodes = [h.make_node("BitwiseAnd", ["a", "a"], ["b"]), h.make_node("Hardmax", ["f"], ["g"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", T.INT32, [4, 4]),
                                  h.make_tensor_value_info("f", T.FLOAT, [4, 4])],
                     [h.make_tensor_value_info("b", T.INT32, [4, 4]), h.make_tensor_value_info("g", T.FLOAT, [4, 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    onnx.save(m, path)


def test_mnn_names_each_unsupported_op_once_without_separators(tmp_path):
    require_engine("mnn")
    path = tmp_path / "two_ops.onnx"
    _two_unsupported(path)
    tool = shutil.which("mnnconvert") or str(Path(sys.executable).with_name("mnnconvert"))
    plain = subprocess.run([tool, "-f", "ONNX", "--modelFile", str(path), "--MNNModel", str(tmp_path / "p.mnn")],
                           capture_output=True, text=True, timeout=120)
    line = next(x for x in (plain.stdout + plain.stderr).splitlines() if "These Op Not Support" in x)
    want = re.findall(r"ONNX::(\w+)", line)
    assert sorted(want) == ["BitwiseAnd", "Hardmax"] and "|" in line

    r = api.export(api.load(path), "mnn", tmp_path / "out", zip=False)
    (t,) = r.targets
    assert t.status == "error"
    assert f"MNN has no conversion for {', '.join(want)}" in t.message
    assert "|" not in t.message
