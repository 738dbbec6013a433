"""A dim written as a formula of other input dims (``past_sequence_length + sequence_length`` on
every optimum decoder's attention mask) gets the formula's value, never a size of its own: feeds
whose mask disagrees with the cache make ONNX Runtime fail at the first Add, and the check called
every KV-cache decoder "not run". Oracle: the arithmetic by hand on the feed shapes, and a plain
onnxruntime session in the test that runs the feeds."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from diagnostics.input_search import free_axes
from studio import api
from studio.core.feeds import choose_dims, input_specs, random_feeds
from tests.conftest import SAMPLES


def _ort_runs(path, feeds) -> None:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess.run(None, feeds)


def test_optimum_decoder_mask_is_past_plus_sequence_and_runs_in_plain_onnxruntime():
    path = SAMPLES / "gpt2_decoder_with_past.onnx"
    specs = input_specs(onnx.load(str(path), load_external_data=False))
    feeds = random_feeds(specs, {"past_sequence_length": 5, "sequence_length": 3})
    assert feeds["attention_mask"].shape == (1, 5 + 3)
    assert feeds["past_key_values.0.key"].shape[2] == 5 and feeds["input_ids"].shape == (1, 3)
    _ort_runs(path, feeds)
    axes = free_axes(specs)
    assert "past_sequence_length + sequence_length" not in axes and "sequence_length" in axes


def test_check_runs_every_kv_cache_decoder_on_the_first_input_set():
    for name in ("gpt2_decoder_with_past", "llama_optimum"):
        report = api.check(api.load(SAMPLES / f"{name}.onnx"), engines=["onnxruntime"])
        (v,) = report.verdicts
        assert v.verdict == "runs" and v.ran_on["tries"] == 1, (name, v.summary)
        shapes = v.ran_on["inputs"]
        past = int(shapes["past_key_values.0.key"].split("[")[1].split(",")[2])
        seq = int(shapes["input_ids"].split("[")[1].rstrip("]").split(",")[1])
        assert shapes["attention_mask"] == f"int64[1, {past + seq}]"


def test_a_dim_label_with_a_dash_is_a_name_not_a_formula(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch-size", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch-size", 4])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    specs = input_specs(m)
    dims = choose_dims(specs)
    assert dims["batch-size"] == 1 and "batch" not in dims and "size" not in dims
    assert free_axes(specs) == {"batch-size": "batch"}
    np.testing.assert_array_equal(random_feeds(specs)["x"].shape, (1, 4))
