"""R48: non-finite figures (an infinite calibration range, NaN latency, inf cosine) give
valid JSON everywhere the studio writes it: null in place of the number, never the invalid
tokens NaN/Infinity, never a traceback or a cut-off document."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import numpy as np
import onnx
import pytest

from studio.cli import main
from studio.cli.common import print_json
from studio.core import jsonsafe
from studio.core.findings import Finding, Report
from studio.core.workspace import Workspace
from tests.conftest import parse_model, save

HOSTILE = {"range": [float("-inf"), float("inf")], "latency_ms": float("nan"), "cosine": np.float32("inf"),
           "per_output": {"y": np.float64("nan")}, "values": np.array([1.0, np.nan, -np.inf], np.float32),
           "count": np.int64(3), "ok": np.bool_(True), 7: (np.float16("inf"),)}


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity."""
    def refuse(token: str):
        raise AssertionError(f"invalid JSON token {token}")
    return json.loads(text, parse_constant=refuse)


def test_r48_encoder_writes_null_for_non_finite_numbers():
    doc = strict_loads(jsonsafe.dumps(HOSTILE))
    assert doc == {"range": [None, None], "latency_ms": None, "cosine": None, "per_output": {"y": None},
                   "values": [1.0, None, None], "count": 3, "ok": True, "7": [None]}


def test_r48_cli_json_output_is_valid_and_whole(capsys):
    print_json({"result": HOSTILE})
    out = capsys.readouterr().out
    assert strict_loads(out)["result"]["cosine"] is None


def test_r48_reports_and_indexes(tmp_path):
    report = Report(model="m", sha256="0" * 64, findings=(Finding("X", "warning", "inf range", "onnxruntime"),),
                    verdicts=(), seconds=float("nan"))
    assert strict_loads(report.to_json())["seconds"] is None
    ws = Workspace(tmp_path / "ws")
    model = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1] x) => (float[1] y) { y = Relu(x) }')
    ws.add_model(model, "derived", None, {"cosine": float("nan"), "ratio": np.float32("inf")})
    doc = strict_loads((tmp_path / "ws" / "versions.json").read_text())
    assert doc["versions"][0]["provenance"] == {"cosine": None, "ratio": None}
    assert Workspace(tmp_path / "ws").versions[0].provenance["cosine"] is None      # reads back


@pytest.fixture
def inf_model(tmp_path):
    """Outputs -inf and inf on every input: every comparison figure is non-finite."""
    return save(parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[4] x) => (float[4] y, float[4] z) '
                            '{ zero = Constant<value=float {0.0}>()\n s = Mul(x, zero)\n y = Log(s)\n'
                            ' z = Div(x, zero) }'), tmp_path / "in" / "inf.onnx")


@pytest.mark.parametrize("argv", [["inspect", "{m}", "--json"], ["check", "{m}", "--json"],
                                  ["compare", "{m}", "{m}", "--engine-b", "ov", "--json"],
                                  ["compare", "{m}", "{m}", "--layerwise", "--json"],
                                  ["optimize", "{m}", "-o", "{out}/o.onnx", "--report", "{out}/r.json", "--json"],
                                  ["profile", "{m}", "--engine", "ort", "--iterations", "3", "--json"]])
def test_r48_commands_on_a_model_of_infinities(inf_model, tmp_path, argv):
    before = inf_model.read_bytes()
    out_dir = tmp_path / "out"
    args = [a.format(m=inf_model, out=out_dir) for a in argv]
    buf = io.StringIO()
    with redirect_stdout(buf):
        code = main(args)
    assert code in (0, 1)
    strict_loads(buf.getvalue())
    if "--report" in args:
        strict_loads((out_dir / "r.json").read_text())
    assert inf_model.read_bytes() == before
    onnx.checker.check_model(str(inf_model))


def test_r48_plain_documents_skip_the_python_walk_and_read_the_same(monkeypatch):
    """A document of plain values is encoded in one C pass (no ``finite`` walk: it was 2/3 of encoding the
    graph viewer's scene); anything else still goes through ``finite``, and both give the text the walk gives."""
    plain = {"a": [1, 2.5, "x", None, True, (3, 4)], "b": {"c": -0.0, 1: "one", 2.5: [], None: False}}
    walked = json.dumps(jsonsafe.finite(plain), allow_nan=False, separators=(",", ":"))
    calls = []
    real = jsonsafe.finite
    monkeypatch.setattr(jsonsafe, "finite", lambda o: calls.append(1) or real(o))
    assert jsonsafe.dumps(plain, separators=(",", ":")) == walked
    assert calls == []
    for odd in (HOSTILE, {"s": {1, 2}}, {(1, 2): "tuple key"}, {"p": [float("nan")]}, {"n": np.float32(1.5)}):
        calls.clear()
        assert jsonsafe.dumps(odd) == json.dumps(real(odd), allow_nan=False, default=str)
        assert calls
