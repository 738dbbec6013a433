"""A set_input that pins unnamed free dims (Silero VAD's input [?, ?]) is a pin, verified at its sizes."""

from __future__ import annotations

import numpy as np
import onnx

from studio import api
from tests.conftest import ort_reference


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
