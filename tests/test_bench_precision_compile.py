"""benchmarks/bench_precision.py times OpenVINO as the studio's profiler runs it: compiled at the timed feeds'
static shapes (``compile_at_feeds``, through the runner's own ``reshape_to_shapes``), not at the file's dynamic
ones, which OpenVINO runs slower (shape inference and dynamic kernels per request). The oracle: a plain
OpenVINO compile of the same file, its ports read from OpenVINO itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from benchmarks.bench_precision import compile_at_feeds

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "transformer_block.onnx"


def _feeds(model: ov.Model) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for port in model.inputs:
        shape = [d.get_length() if d.is_static else 3 for d in port.get_partial_shape()]
        dtype = np.int64 if port.get_element_type() == ov.Type.i64 else np.float32
        out[port.get_any_name()] = (rng.integers(0, 5, shape) if dtype == np.int64
                                    else rng.standard_normal(shape)).astype(dtype)
    return out


def test_compiled_at_the_feeds_static_shapes_with_the_plain_compiles_answer():
    core = ov.Core()
    plain_model = core.read_model(str(SAMPLE))
    if not plain_model.inputs[0].get_partial_shape().is_dynamic:
        pytest.fail(f"{SAMPLE.name} has static inputs: the test needs a dynamic one")
    feeds = _feeds(plain_model)
    request = compile_at_feeds(core, SAMPLE, {"INFERENCE_PRECISION_HINT": "f32"}, feeds)
    compiled_shapes = {p.get_any_name(): p.get_partial_shape() for p in request.get_compiled_model().inputs}
    for name, array in feeds.items():
        assert compiled_shapes[name].is_static and list(compiled_shapes[name].to_shape()) == list(array.shape)
    plain = core.compile_model(plain_model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    assert any(p.get_partial_shape().is_dynamic for p in plain.get_compiled_model().inputs)
    np.testing.assert_allclose(np.asarray(request.infer(feeds)[0]), np.asarray(plain.infer(feeds)[0]),
                               rtol=1e-4, atol=1e-5)
