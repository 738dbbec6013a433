"""A set_input that pins unnamed free dims (Silero VAD's input [?, ?]) is a pin, verified at its sizes."""

from __future__ import annotations

import numpy as np
import onnx

from studio import api
from tests.conftest import ort_reference


# The else branch's TopK k = len(x) + 1: never taken (x's max is above -1e30), but once x's size is pinned
# ONNX Runtime's default session folds k to a constant past the input's length and refuses the model at load.
_TOPK_PAST_ITS_INPUT = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[%s] x) => (float[?] y) <float lo = {-1e30}, int64[1] one = {1}> {
      mx = ReduceMax<keepdims = 0>(x)
      c = Greater(mx, lo)
      y = If(c) <
        then_branch = t () => (float[?] a) { a = Identity(x) },
        else_branch = e () => (float[?] b) {
            s = Shape(x)
            k = Add(s, one)
            b, i = TopK(x, k)
        }
      >
    }"""


def test_a_pin_of_unnamed_free_dims_is_verified_at_its_sizes(tmp_path):
    """Corpus silero_vad_v5 set_input input [1, 512], state [2, 1, 128] read 'numbers not compared: an input's
    shape changes beyond pinning its free dims' on the old code; unnamed dims are pinned under INPUT[AXIS]."""
    m = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[?, ?] audio, float[2, ?, 4] state) => (float[?, ?] y, float[?] s) <int64[1] ax = {1}> {
      y = Relu(audio)
      s = ReduceSum<keepdims = 0>(state, ax)
    }"""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(m), src)
    out = tmp_path / "o" / "pinned.onnx"
    res = api.edit(api.load(src), [{"op": "set_input", "input": "audio", "shape": [1, 64]},
                                   {"op": "set_input", "input": "state", "shape": [2, 1, 4]}], out)
    assert res.verification.status == "passed", res.verification
    assert "audio[0]=1" in res.verification.message and "audio[1]=64" in res.verification.message
    shape = [d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert shape == [1, 64]
    rng = np.random.default_rng(3)
    feeds = {"audio": rng.normal(size=(1, 64)).astype(np.float32), "state": rng.normal(size=(2, 1, 4)).astype(np.float32)}
    for name, want in ort_reference(src, feeds).items():      # the oracle: plain ORT on the original
        np.testing.assert_array_equal(ort_reference(out, feeds)[name], want)


def test_a_pin_the_optimizer_refuses_is_refused(tmp_path):
    """A pin makes sizes static, and ONNX Runtime's default session folds constants over them in every If
    branch, the one never taken included: here the else branch's TopK k = len(x) + 1 becomes 5 over 4
    elements and the model does not load, while the verification's optimizer-off session runs it (corpus
    silero_vad_v5 pinned to [1, 512]: 'passed' on the old code, and plain ORT could not load the file)."""
    import onnxruntime as ort
    import pytest

    from studio.core.errors import StudioError

    m = _TOPK_PAST_ITS_INPUT % "?"
    model = onnx.parser.parse_model(m)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 4
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    with pytest.raises(Exception, match="requested k"):        # the oracle: plain ORT refuses the pinned model
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out = tmp_path / "o" / "pinned.onnx"
    with pytest.raises(StudioError, match="does not load in ONNX Runtime with its optimizer on.*requested k"):
        api.edit(api.load(src), [{"op": "set_input", "input": "x", "shape": [4]}], out)
    assert not out.exists()


def test_a_pin_beside_an_added_output_is_load_checked_too(tmp_path):
    """The same pin with an output exposed goes through the reproduce path (a structure change): it is also
    refused when ONNX Runtime's default session cannot load the result."""
    import pytest

    from studio.core.errors import StudioError

    m = _TOPK_PAST_ITS_INPUT % "n"
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(m), src)
    out = tmp_path / "o" / "pinned.onnx"
    with pytest.raises(StudioError, match="does not load in ONNX Runtime with its optimizer on.*requested k"):
        api.edit(api.load(src), [{"op": "add_output", "tensor": "mx"}, {"op": "set_input", "input": "x",
                                                                         "dims": {"n": 4}}], out)
    assert not out.exists()
