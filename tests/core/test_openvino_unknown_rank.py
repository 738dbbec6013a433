"""A model OpenVINO converts only with a tensor's rank known (a Reshape to a shape of dynamic length feeding a
Conv; held-out silero_vad_16k_op15) runs on OpenVINO at the run's input shapes: compare, the profilers' runner
(static shapes at open) and a set of another shape each convert a copy in the job's scratch folder and say so.
Oracles: OpenVINO's own frontend (fails on the file, converts it with the input pinned) and a plain
onnxruntime.InferenceSession on the same feeds; the user's file is byte for byte what it was, alone in its folder."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.accuracy.runs import run_feed_sets
from studio.core.engines import get_engine
from studio.core.engines.sessions import open_runner
from studio.core.errors import StudioError
from studio.core.jobs import JobContext

V = helper.make_tensor_value_info


def _note(length: int) -> str:
    return f"converted at the input shapes x=[1, {length}], shape=[3]: OpenVINO cannot convert a tensor of unknown rank"


def _model(path: Path, shape_dims=("n",), x_dims=(1, "m")) -> Path:
    """x [1, m] reshaped to the fed ``shape`` (its length a dynamic dim), then a Conv with 64 output channels
    (its 1,280-byte weight goes to the copy's external data)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 1, 5)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                           helper.make_node("Conv", ["r", "w"], ["y"])], "g",
                          [V("x", TensorProto.FLOAT, x_dims), V("shape", TensorProto.INT64, shape_dims)],
                          [V("y", TensorProto.FLOAT, None)], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)
    return path


def _feeds(length: int = 16) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(length).standard_normal((1, length)).astype(np.float32),
            "shape": np.array([1, 1, length], np.int64)}


def _ort(path: Path, feeds) -> np.ndarray:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], feeds)[0]


def _ov_converts(path: Path) -> bool:
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("onnx")
    try:
        fe.convert(fe.load(str(path)))
        return True
    except Exception:  # noqa: BLE001 - the oracle records that it failed
        return False


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def model(tmp_path) -> Path:
    (tmp_path / "user").mkdir()
    path = _model(tmp_path / "user" / "m.onnx")
    assert not _ov_converts(path)
    pinned = onnx.load(path)
    pinned.graph.input[1].type.tensor_type.shape.dim[0].dim_value = 3
    onnx.save(pinned, tmp_path / "pinned.onnx")
    assert _ov_converts(tmp_path / "pinned.onnx")
    return path


def test_compare_runs_it_on_openvino_at_the_input_shapes_and_says_so(model, tmp_path):
    before = _sha(model)
    feeds = _feeds()
    np.savez(tmp_path / "in.npz", **feeds)
    result = api.compare(model, model, engine="ort", engine_b="openvino", inputs=tmp_path / "in.npz")
    assert result.ok, result.summary()
    assert result.candidate.note == _note(16) and f"m.onnx on openvino: {_note(16)}" in result.shape_notes
    assert result.reference.note is None
    y = result.comparison.outputs["y"]
    assert y.ref_shape == y.got_shape == (1, 64, 12) and y.max_abs < 1e-4
    # the numbers themselves, against a plain ONNX Runtime session on the same feeds
    ran = get_engine("openvino").run(model, feeds)
    assert ran.details["conversion_note"] == _note(16)
    np.testing.assert_allclose(ran.outputs["y"], _ort(model, feeds), rtol=1e-4, atol=1e-4)
    assert _sha(model) == before and sorted(p.name for p in model.parent.iterdir()) == ["m.onnx"]


def test_a_set_of_other_shapes_is_converted_again(model):
    sets = [_feeds(16), _feeds(24)]
    runs = run_feed_sets(model, "openvino", sets)
    assert runs.errors == (None, None)
    for feeds, out in zip(sets, runs.outputs):
        np.testing.assert_allclose(out["y"], _ort(model, feeds), rtol=1e-4, atol=1e-4)
    assert runs.details["conversion_note"] == _note(24)       # converted again at the second set's shapes


def test_the_profilers_static_shapes_convert_it_at_open(model, tmp_path):
    feeds = _feeds(20)
    scratch = tmp_path / "job"
    scratch.mkdir()
    runner = open_runner("openvino", model, {"static_shapes": {n: list(a.shape) for n, a in feeds.items()}},
                         JobContext(scratch=scratch, out_dir=scratch))
    try:
        assert runner.conversion_note == runner.details["conversion_note"] == _note(20)   # before any feed
        runner.bind(feeds)()
        got = runner.request.get_output_tensor(runner.port_of["y"]).data
        np.testing.assert_allclose(got, _ort(model, feeds), rtol=1e-4, atol=1e-4)
    finally:
        runner.close()
    assert list(scratch.rglob("*.onnx*")) == []       # the copy is gone once read


def test_nothing_to_fix_keeps_the_advice(tmp_path):
    """Every input that declares a shape is static ('shape' declares none): pinning the inputs changes nothing,
    so the error still says what to do."""
    path = _model(tmp_path / "m.onnx", shape_dims=None, x_dims=(1, 16))
    assert not _ov_converts(path)
    with pytest.raises(StudioError) as info:
        get_engine("openvino").run(path, _feeds())
    text = str(info.value)
    assert "OpenVINO cannot convert a tensor of unknown rank: fix the input shapes first" in text
    assert "\n" not in text.strip()


def test_a_rank_the_input_shapes_do_not_give_says_so(tmp_path):
    """x is dynamic and pinned, but 'shape' declares no shape: the copy still fails, and the error says that fixing
    the input shapes was tried rather than advising it."""
    path = _model(tmp_path / "m.onnx", shape_dims=None)
    with pytest.raises(StudioError) as info:
        get_engine("openvino").run(path, _feeds())
    text = str(info.value)
    assert "cannot convert a tensor of unknown rank, even at the input shapes x=[1, 16]: use another engine" in text
    assert "fix the input shapes first" not in text


def test_nncf_int8_quantizes_it_at_the_calibration_shapes_and_says_so(model, tmp_path):
    """precision's NNCF INT8 reads the model in its own job: converted at the calibration samples' shapes too, the
    note in the variant's notes, and the INT8 IR's output close to a plain ONNX Runtime run of the fp32 file."""
    import openvino as ov
    import onnxruntime as ort

    from studio.core.feeds import save_npz
    from studio.precision import variants as V

    before = _sha(model)
    feeds = _feeds()
    # calibrated on real feeds: random ones would give the shape-valued input any length
    calibration = save_npz([{**_feeds(), "x": np.random.default_rng(i).standard_normal((1, 16)).astype(np.float32)}
                            for i in range(4)], tmp_path / "calib.npz")
    report = V.evaluate_variants(model, variants=["int8-nncf"], inputs=save_npz([feeds], tmp_path / "in.npz"),
                                 calibration=calibration, samples=4, target_cosine=0.9, latency_budget_s=0.2,
                                 out_dir=tmp_path / "o")
    row = report.variant("int8-nncf")
    assert row.status == "ok", (row.error, row.notes)
    assert _note(16) in row.notes                                 # said once, in the variant's notes
    assert row.path.suffix == ".xml"                              # NNCF's IR, at the pinned shapes
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(["y"], feeds)[0].ravel()
    got = np.asarray(ov.Core().compile_model(str(row.path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(feeds)[0])
    got = got.ravel().astype(np.float64)
    cos = float(want.astype(np.float64) @ got / (np.linalg.norm(want) * np.linalg.norm(got)))
    assert cos > 0.98 and row.cosine == pytest.approx(cos, abs=1e-4)
    assert _sha(model) == before and sorted(p.name for p in model.parent.iterdir()) == ["m.onnx"]
