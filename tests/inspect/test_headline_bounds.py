"""A headline figure computed with unresolved dims says so ("≥ 460 FLOPs, x[2] and x[3] unresolved"),
and the studio proposes the size the model itself states: metadata ``imgsz``, a number in the dim's
name, a Resize (or Reshape) of the input to a constant size. FLOPs are checked against a hand count
(module doc of studio/inspect/flops.py: a MAC is 2 FLOPs, Relu 1 and Sigmoid 4 per element)."""

from __future__ import annotations

import json

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from studio import api
from tests.conftest import save


def _text_detector(dims=(None, 3, None, None), resize_to: list[int] | None = None,
                   meta: str | None = None) -> onnx.ModelProto:
    """A DBNet-like probability map: Conv 3->8 (k3, pad 1), Relu, Conv 8->1 (k1), Sigmoid; no biases.
    FLOPs per pixel: 2*(8*27 + 8) + 8 + 4 = 460."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "w2")]
    nodes, src = [], "x"
    if resize_to is not None:
        inits.append(numpy_helper.from_array(np.array(resize_to, np.int64), "sizes"))
        nodes.append(helper.make_node("Resize", ["x", "", "", "sizes"], ["xr"], mode="linear", name="resize"))
        src = "xr"
    nodes += [helper.make_node("Conv", [src, "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
              helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
              helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2"),
              helper.make_node("Sigmoid", ["c2"], ["prob"], name="sigmoid")]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(dims))],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if meta:
        m.metadata_props.add(key="imgsz", value=meta)
    return m


def test_flops_with_unresolved_dims_are_a_marked_lower_bound(tmp_path, capsys):
    from studio.cli import main

    path = save(_text_detector(), tmp_path / "det.onnx")
    s = api.inspect(api.load(path))
    assert s.flops.flops == 460 and s.flops.lower_bound
    assert s.flops.assumed_dims == ("x[0]", "x[2]", "x[3]")
    assert s.flops.open_text() == "x[0], x[2] and x[3] unresolved, counted as 1"
    assert api.dim_hints(api.load(path)) == ()                       # the model says nothing
    assert main(["inspect", str(path)]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FLOPs"))
    assert line.startswith("FLOPs      ≥ 460") and "counted as 1: x[0], x[2], x[3]" in line
    assert main(["inspect", str(path), "--json", "--no-nodes"]) == 0
    flops = json.loads(capsys.readouterr().out)["flops"]
    assert flops["lower_bound"] is True and flops["open"].startswith("x[0], x[2] and x[3] unresolved")
    # every dim set: the exact count, no longer marked
    given = api.inspect(api.load(path), {"x[0]": 1, "x[2]": 736, "x[3]": 736})
    assert given.flops.flops == 460 * 736 * 736 and not given.flops.lower_bound and given.flops.open_text() == ""
    assert main(["inspect", str(path), "--dim", "x[0]=1", "--dim", "x[2]=736", "--dim", "x[3]=736"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("FLOPs"))
    assert "≥" not in line and "counted as 1" not in line


def test_the_size_the_model_states_is_proposed(tmp_path):
    resized = api.load(save(_text_detector((1, 3, "H", "W"), resize_to=[1, 3, 736, 736]), tmp_path / "r.onnx"))
    hints = {h.key: h for h in api.dim_hints(resized)}
    assert (hints["H"].value, hints["W"].value) == (736, 736)
    assert hints["H"].source.startswith("Resize to [1, 3, 736, 736]")
    named = api.load(save(_text_detector((1, 3, "640", "width=512")), tmp_path / "n.onnx"))
    hints = {h.key: (h.value, h.source) for h in api.dim_hints(named)}
    assert hints == {"640": (640, "dim name"), "width=512": (512, "the dim's default in its name")}
    meta = api.load(save(_text_detector((1, 3, "H", "W"), meta="[960, 1280]"), tmp_path / "m.onnx"))
    assert {h.key: h.value for h in api.dim_hints(meta)} == {"H": 960, "W": 1280}
    # metadata wins over what the graph says
    both = api.load(save(_text_detector((1, 3, "H", "W"), resize_to=[1, 3, 736, 736], meta="[320, 320]"),
                         tmp_path / "b.onnx"))
    assert {h.key: h.value for h in api.dim_hints(both)} == {"H": 320, "W": 320}


def test_overview_marks_the_headline_and_offers_the_unnamed_dims(app, tmp_path):
    path = save(_text_detector(), tmp_path / "det.onnx")
    at = app(str(path)).run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["FLOPs"].startswith("≥ ")
    assert any("lower bound" in c.value and "x\\[2\\]" in c.value.replace("x[2]", "x\\[2\\]") for c in at.caption)
    boxes = {n.label: n for n in at.number_input if n.key and n.key.startswith("dim_")}
    assert set(boxes) == {"x[0]", "x[2]", "x[3]"} and all(b.value is None for b in boxes.values())
    boxes["x[0]"].set_value(1)
    boxes["x[2]"].set_value(736)
    at = boxes["x[3]"].set_value(736).run()
    metrics = {m.label: m.value for m in at.metric}
    assert not metrics["FLOPs"].startswith("≥")
    assert at.session_state["onnx_studio_dims"] == {"x[0]": 1, "x[2]": 736, "x[3]": 736}
