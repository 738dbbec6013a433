"""optimize --compare-peers: onnxsim's and onnxslim's node counts, run in sandbox workers,
equal to what the libraries give when called directly here; a crash is that peer's error."""

from __future__ import annotations

import json

import onnx
import onnxsim
import onnxslim
import pytest

from studio.peers.compare import count_all_nodes, run_peer
from studio import api
from studio.cli import main
from tests.conftest import parse_model, save

SHAPE_CHAIN = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[2,3,4,4] x) => (float[2,48] y) {
  s = Shape(x)
  i0 = Constant<value = int64 {0}>()
  b = Gather<axis = 0>(s, i0)
  ax = Constant<value = int64[1] {0}>()
  bu = Unsqueeze(b, ax)
  m1 = Constant<value = int64[1] {-1}>()
  shp = Concat<axis = 0>(bu, m1)
  r = Reshape(x, shp)
  y = Relu(r)
}"""


@pytest.mark.slow
def test_compare_peers_counts_equal_direct_calls(tmp_path, capsys):
    src = save(parse_model(SHAPE_CHAIN), tmp_path / "in" / "m.onnx")
    sim, _ = onnxsim.simplify(onnx.load(str(src)), check_n=0)       # the oracle: the libraries themselves
    slim = onnxslim.slim(onnx.load(str(src)))
    peers = {p.tool: p for p in api.compare_peers(src, tmp_path / "peers")}
    assert peers["onnxsim"].ok and peers["onnxsim"].all_nodes == count_all_nodes(sim.graph)
    assert peers["onnxslim"].ok and peers["onnxslim"].all_nodes == count_all_nodes(slim.graph)
    assert (tmp_path / "peers" / "onnxslim.onnx").exists()

    out = tmp_path / "out" / "m.onnx"
    assert main(["optimize", str(src), "-o", str(out), "--compare-peers", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    counts = {p["tool"]: p["all_nodes"] for p in report["peers"]}
    assert counts == {"onnxsim": count_all_nodes(sim.graph), "onnxslim": count_all_nodes(slim.graph)}
    ours = len(onnx.load(str(out)).graph.node)
    assert ours <= min(counts.values())            # the studio reaches the better peer on this chain
    assert main(["optimize", str(src), "-o", str(tmp_path / "o2" / "m.onnx"), "--compare-peers"]) == 0
    text = capsys.readouterr().out
    assert f"onnxsim {counts['onnxsim']} nodes" in text and f"onnxslim {counts['onnxslim']} nodes" in text


def test_a_peer_that_crashes_is_an_error_not_a_dead_studio(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"not a model")
    r = run_peer("onnxsim", bad, timeout_s=60)
    assert not r.ok and r.nodes is None and "onnxsim" in r.error
    assert run_peer("nope", bad).error.startswith("unknown peer")
