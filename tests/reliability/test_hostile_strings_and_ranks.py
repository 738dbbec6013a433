"""R38 (strings and ranks): a rank-65 input (ONNX allows it, NumPy and the engines do not),
raw non-UTF-8 bytes in names/metadata/doc strings (made by editing the serialized protobuf,
since onnx.helper refuses them), and names of 5,000 characters: load, inspect, check, graph
and optimize give a correct result or a one-line error, and never touch the input."""

from __future__ import annotations

import json

import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.cli import main
from studio.core.errors import ModelLoadError
from tests.conftest import assert_user_message, sha256_file

MARK = "QQMARKQQ"
BAD = b"\xff\xfe\x80(\xa0\xe2(z"          # the same length as MARK, invalid UTF-8
LONG = "A" * 5000


def _model(nodes, inputs, outputs, opsets=(("", 17),)) -> onnx.ModelProto:
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def _vi(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def rank65(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [1] * 65)], [_vi("y", [1] * 65)]),
              path)
    return path


def bad_utf8(path, field: str):
    """A valid model whose ``field`` holds raw bytes that are not UTF-8."""
    names = {"input": "x", "node": "n", "doc": "", "producer": "", "meta_key": "k", "meta_value": "v", "output": "y"}
    t = {k: (v + MARK if k == field else v) for k, v in names.items()}
    node = helper.make_node("Relu", [t["input"]], [t["output"]], name=t["node"],
                            doc_string=MARK if field == "node_doc" else "")
    m = _model([node], [_vi(t["input"], [2])], [_vi(t["output"], [2])])
    m.doc_string = MARK if field == "doc" else ""
    m.producer_name = MARK if field == "producer" else "test"
    helper.set_model_props(m, {t["meta_key"]: t["meta_value"]})
    data = m.SerializeToString()
    assert data.count(MARK.encode()) >= 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.replace(MARK.encode(), BAD))
    return path


def long_names(path):
    nodes = [helper.make_node("Relu", ["x" + LONG], ["h" + LONG], name="n" + LONG),
             helper.make_node("Op" + LONG, ["h" + LONG], ["c" + LONG], name="c" + LONG, domain="dom" + LONG),
             helper.make_node("Relu", ["h" + LONG], ["y" + LONG], name="m" + LONG)]
    m = _model(nodes, [_vi("x" + LONG, [2])], [_vi("y" + LONG, [2]), _vi("c" + LONG, [2])],
               opsets=(("", 17), ("dom" + LONG, 1)))
    m.doc_string = LONG
    helper.set_model_props(m, {"k" + LONG: "v" + LONG})
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(m, path)
    return path


def _commands(model, out):
    return {"inspect": ["inspect", str(model), "--json"],
            "check": ["check", str(model), "--json"],
            "graph": ["graph", str(model), "-o", str(out / "g.html")],
            "optimize": ["optimize", str(model), "-o", str(out / "o" / "m.onnx")]}


def _run(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.out, captured.err.strip()


@pytest.mark.parametrize("command", ["inspect", "check", "graph", "optimize"])
def test_r38_rank_65_input(tmp_path, capsys, command):
    model = rank65(tmp_path / "in" / "rank65.onnx")
    before = sha256_file(model)
    code, out, err = _run(capsys, _commands(model, tmp_path / "out")[command])
    if command == "optimize":           # the result cannot be verified: said in one line
        assert code == 2
        assert_user_message(err.removeprefix("error: "), "rank 65", "64")
    else:
        assert code in (0, 1), err
        if command in ("inspect", "check"):
            json.loads(out)
    if command == "check":
        report = json.loads(out)
        assert all("\n" not in f["message"] for f in report["findings"])
    assert sha256_file(model) == before


@pytest.mark.parametrize("field", ["input", "node", "node_doc", "doc", "producer", "meta_key", "meta_value"])
def test_r38_invalid_utf8_is_refused_at_load_naming_the_field(tmp_path, field):
    model = bad_utf8(tmp_path / "in" / "m.onnx", field)
    with pytest.raises(ModelLoadError) as info:
        api.load(model)
    assert_user_message(str(info.value), "not valid UTF-8")
    assert BAD.decode("latin-1") not in str(info.value)


@pytest.mark.parametrize("command", ["inspect", "check", "graph", "optimize"])
def test_r38_invalid_utf8_in_every_command(tmp_path, capsys, command):
    model = bad_utf8(tmp_path / "in" / "m.onnx", "node")
    before = sha256_file(model)
    code, _, err = _run(capsys, _commands(model, tmp_path / "out")[command])
    assert code == 2
    assert_user_message(err.removeprefix("error: "), "utf-8", "node")
    assert sha256_file(model) == before
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.onnx"))


@pytest.mark.parametrize("command", ["inspect", "check", "graph", "optimize"])
def test_r38_names_of_5000_characters(tmp_path, capsys, command):
    model = long_names(tmp_path / "in" / "long.onnx")
    before = sha256_file(model)
    code, out, err = _run(capsys, _commands(model, tmp_path / "out")[command])
    assert code in (0, 1), err
    if command == "inspect":
        summary = json.loads(out)
        assert summary["node_counts"]["total"] == 3
    if command == "check":
        report = json.loads(out)
        assert any(f["code"] == "CUSTOM-OP" for f in report["findings"])
        assert all("\n" not in f["message"] for f in report["findings"])
    if command == "graph":
        assert (tmp_path / "out" / "g.html").stat().st_size > 0
    if command == "optimize":
        assert (tmp_path / "out" / "o" / "m.onnx").exists()
        assert len(onnx.load(str(tmp_path / "out" / "o" / "m.onnx")).graph.node) >= 2
    assert sha256_file(model) == before
