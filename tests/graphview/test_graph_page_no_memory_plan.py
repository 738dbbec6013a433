"""The graph page builds no memory plan (issue 35 item 2: the fully opened 10k graph's build was ~45%
inside ``graph_plan``, which the viewer never draws), yet shows the same edge shapes, the ones measured by
an ONNX Runtime run included."""

from __future__ import annotations

import pytest

import studio.inspect.summary as summary_mod
from studio import api
from studio.cli import main
from studio.graphview.boxes import edge_shape
from tests.conftest import save
from tests.spies import count_calls
from tests.inspect.test_dims_flow import _data_dependent


@pytest.fixture
def plans(monkeypatch) -> list[tuple]:
    """Counts calls of the memory planner ``summarize`` uses."""
    return count_calls(monkeypatch, summary_mod, "graph_plan")


def test_graph_page_has_the_same_measured_shapes_without_the_memory_plan(tmp_path, plans):
    h = api.load(save(_data_dependent(), tmp_path / "m.onnx"))
    dims = {"a": 3, "b": 4}
    full = api.inspect(h, dims)
    assert len(plans) == 1 and full.memory is not None and full.memory_plan is not None
    lean = api.inspect(h, dims, memory=False)
    assert len(plans) == 1                       # the planner did not run again
    assert lean.memory is None and lean.memory_plan is None
    assert lean.to_dict()["memory"] is None
    # the same edges, the Range length only a real run can tell (oracle: 3 + 4 = 7) among them
    assert lean.edges == full.edges and lean.shape_note == full.shape_note
    assert "measured by an ONNX Runtime run" in lean.shape_note
    assert [n.flops for n in lean.nodes] == [n.flops for n in full.nodes]
    gi_lean, gi_full = api.graph_index(h, lean), api.graph_index(h, full)
    assert edge_shape(gi_lean.graph, "r") == edge_shape(gi_full.graph, "r") == "7"
    a, b = tmp_path / "lean.html", tmp_path / "full.html"
    api.write_graph_viewer(gi_lean, a, summary=lean)
    api.write_graph_viewer(gi_full, b, summary=full)
    assert a.read_bytes() == b.read_bytes()


def test_graph_cli_page_does_not_plan_memory(tmp_path, plans, capsys):
    path = save(_data_dependent(), tmp_path / "m.onnx")
    out = tmp_path / "g.html"
    assert main(["graph", str(path), "--dim", "a=3", "--dim", "b=4", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert plans == []
    assert out.stat().st_size > 0
