"""MNN and LiteRT checks: verdicts from a real conversion and run, conversion failures
attributed to ONNX nodes from the converters' logs, versions reported, layout and name
mapping said in the notes."""

from __future__ import annotations

from studio import api
from tests.conftest import SAMPLES
from tests.requirements import require_engine
from tests.seeded_input_models import reflect_pad_over_free_length


def _needs(*engines):
    for e in engines:
        require_engine(e)


def test_runs_on_both_with_versions_and_layout_note():
    _needs("mnn", "litert")
    report = api.check(api.load(SAMPLES / "cnn_unfused.onnx"), "mnn,litert")
    for engine in ("mnn", "litert"):
        v = report.verdict(engine)
        assert v.verdict == "runs" and v.decided_by == "real session"
        assert report.tool_versions[engine]
    # onnx2tf's defaults convert this NCHW model to ONNX Runtime's numbers: no option was tried
    assert not [f for f in report.findings if f.code.endswith("-CONVERTER-OPTIONS")]
    assert any("LiteRT: layout handled" in n and "N..C" in n for n in report.notes)
    assert any("MNN: outputs mapped to ONNX names" in n for n in report.notes)
    nodes = [n for n in report.nodes if n.engine == "mnn"]
    assert nodes and all(n.status == "supported" for n in nodes)


def test_unsupported_custom_op_is_attributed_to_its_node():
    _needs("mnn", "litert")
    report = api.check(api.load(SAMPLES / "mmdeploy_grid_sampler.onnx"), "mnn,litert")
    for engine, code in (("mnn", "MNN-UNSUPPORTED"), ("litert", "LITERT-UNSUPPORTED")):
        assert report.verdict(engine).verdict == "fails"
        hits = [f for f in report.findings if f.engine == engine and f.code == code]
        assert [f.node for f in hits] == ["/grid_sampler"], hits
        statuses = {n.node: n.status for n in report.nodes if n.engine == engine}
        assert statuses["/grid_sampler"] == "unsupported"
        assert {s for k, s in statuses.items() if k != "/grid_sampler"} == {"unknown"}


def test_litert_converts_a_channels_last_grid_with_the_option_onnx2tf_names():
    """onnx2tf stops at /GridSample with its defaults (it takes the [N, D, H, W, 3] grid for NCDHW);
    its advice (-kat) converts it, and the numbers are ONNX Runtime's (no mismatch)."""
    _needs("litert")
    report = api.check(api.load(SAMPLES / "gridsample_5d.onnx"), "litert")
    assert report.verdict("litert").verdict == "runs", report.verdict("litert")
    (f,) = [f for f in report.findings if f.code == "LITERT-CONVERTER-OPTIONS"]
    assert "fails at node /GridSample" in f.message and "converted with -kat grid" in f.message, f.message
    assert f.fix_hint.endswith("-kat grid")
    assert not [f for f in report.findings if f.code in ("LITERT-MISMATCH", "LITERT-UNSUPPORTED")]


def test_engines_all_includes_both():
    from diagnostics.compatibility import normalize_engines

    assert normalize_engines("ort,openvino,tensorrt,mnn,litert,ncnn") == normalize_engines("all")   # every row


def test_a_refused_onnx2tf_conversion_gives_advice_a_studio_user_can_follow():
    """held-out brainmaze_seizure_b: the hint quoted onnx2tf's 'use the -b or -ois option ...', flags the studio's
    user cannot pass (the studio converts at the run's shapes; --dim sets them). The hint says that, and what was
    tried; another converter's own advice is still quoted."""
    from diagnostics.converted_check import _refusal_hint

    conversion = {"advice": ["Alternatively, if the input OP has a dynamic dimension, use the -b or -ois option to "
                             "rewrite it to a static shape and try again."],
                  "attempts": [{"options": []}, {"options": ["-kat", "x"]}, {"options": ["-onnxsim"]}]}
    hint = _refusal_hint("onnx2tf", conversion)
    assert "--dim NAME=VALUE" in hint and "use the -b or -ois option" not in hint
    assert "tried -kat x, -onnxsim without success" in hint
    assert "MNNConvert advises: use --fp16" in _refusal_hint("MNNConvert", {"advice": ["use --fp16"], "attempts": []})
    assert _refusal_hint("onnx2tf", {"advice": [], "attempts": [{"options": []}]}) is None


def test_a_converted_engine_runs_only_on_inputs_the_original_takes(tmp_path):
    """The seeded inputs the original refuses never reach the converted engine: the search goes on to a set
    ONNX Runtime runs, and the engine is compared with it there. On the old code MNN ran the 16 samples
    (MNN segfaulted on corpus silero_vad_v5's, 'MNN crashed'; here it pads anyway) and read 'runs' with
    'not compared with ONNX Runtime'."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    import pytest

    _needs("mnn")
    model = reflect_pad_over_free_length()
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="reflect"):           # the oracle: the original refuses 16 samples
        sess.run(None, {"input": np.zeros((1, 16), np.float32)})
    assert sess.run(None, {"input": np.zeros((1, 512), np.float32)})[0].shape == (1, 4, 159)
    path = tmp_path / "pad.onnx"
    onnx.save(model, str(path))
    report = api.check(api.load(path), "mnn")
    assert report.verdict("mnn").verdict == "runs"
    assert not [n for n in report.notes if "not compared" in n], report.notes
    seeded = next(f for f in report.findings if f.code == "SEEDED-SIZE" and f.engine == "mnn")
    assert "ran on input float32[1, 512]" in seeded.message and "original refuses these inputs" in seeded.message


def test_a_converted_model_that_fails_where_the_original_runs_fails(tmp_path, monkeypatch):
    """An engine error that reads like a size problem ('not broadcastable') on inputs ONNX Runtime runs the
    original on is the converted model's fault: 'fails', not 'not run: needs inputs' (corpus
    paddleocr_en_ppocrv3_det on LiteRT: onnx2tf's ADD [1,14,14,96] + [1,7,14,96] at every size tried)."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import helper

    from diagnostics import converted_check
    from studio.core.jobs import JobContext

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [1, 3, "H", "W"])],
                              [helper.make_tensor_value_info("y", 1, [1, 3, "H", "W"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    sizes = []

    class Broken:                          # a converted model whose Add was built with the wrong height
        details: dict = {}

        def infer(self, feeds):
            # the oracle: plain ONNX Runtime runs the original on every set the engine is handed
            ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
            sizes.append(feeds["x"].shape)
            raise RuntimeError("Given shapes, [1,14,14,96] and [1,7,14,96], are not broadcastable.Node number 127 "
                               "(ADD) failed to prepare.")

    real = converted_check.sessions.open_runner
    monkeypatch.setattr(converted_check.sessions, "open_runner",
                        lambda engine, *a, **k: Broken() if engine == "mnn" else real(engine, *a, **k))
    out = converted_check.converted_check_job({"engine": "mnn", "model_path": str(path), "run": True, "dims": {},
                                               "inputs": None, "tasks": {}}, {}, JobContext(tmp_path, tmp_path))
    data = out.data
    assert len(sizes) > 1 and data.get("outputs") is None                 # the search did try other sizes
    assert not data["needs_inputs"] and "not broadcastable" in data["run_error"]
    assert "ONNX Runtime runs the original on x float32[1, 3, 224, 224]" in data["feeds_note"]
