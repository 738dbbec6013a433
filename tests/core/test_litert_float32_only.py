"""An fp32 LiteRT conversion stops once onnx2tf's float32 file is written (studio/core/engines/litert.py,
``_float32_only``): onnx2tf always converts a float16 copy next, at about the cost of the float32 one, and an
fp32 conversion never reads it. The oracle is onnx2tf's own log (it prints a line when each file is complete)
and LiteRT's interpreter against plain onnxruntime on the same input; an f16 conversion in the same warm
worker afterwards still gets its float16 file (the converter is restored after each conversion).

The same conversions trace onnx2tf's Keras model into a SavedModel once (``_saved_model_once``): TFLite's Keras
converter saves that model again for each file it writes, and copies onnx2tf's folder instead; the studio's
log line says so (for fp32's file, and for f16's float16 file too), and the numbers are plain ORT's."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import SAMPLES, ort_reference
from tests.requirements import require_engine


def _tflite(path, name: str, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path), num_threads=1).get_signature_runner()
    (detail,) = runner.get_input_details().values()
    shape = tuple(int(d) for d in detail["shape"])
    feed = x if x.shape == shape else np.ascontiguousarray(np.moveaxis(x, 1, -1))      # onnx2tf: channels-last
    (out,) = runner(**{next(iter(runner.get_input_details())): feed}).values()
    return out


@pytest.mark.slow      # two onnx2tf conversions and TensorFlow's import in a fresh worker
def test_fp32_conversion_skips_the_float16_copy_and_f16_still_gets_it(tmp_path):
    import onnx

    from studio.core.engines import get_engine

    require_engine("litert")
    path = SAMPLES / "cnn_unfused.onnx"
    (inp,) = [i for i in onnx.load_model(str(path), load_external_data=False).graph.input]
    name = inp.name
    shape = tuple(d.dim_value or 1 for d in inp.type.tensor_type.shape.dim)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    engine = get_engine("litert")

    fp32 = engine.convert(path, tmp_path / "fp32" / "model.tflite", shapes={name: shape}, pool_key="f32only")
    assert fp32.ok, fp32.error
    assert "Float32 tflite output complete" in fp32.log_tail
    assert "Float16 tflite output complete" not in fp32.log_tail      # onnx2tf never converted the copy
    assert fp32.log_tail.count("SavedModel copied from") == 1, fp32.log_tail       # the converter's save: a copy
    (want,) = ort_reference(path, {name: x}).values()
    got = _tflite(tmp_path / "fp32" / "model.tflite", name, x)
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-4)

    f16 = engine.convert(path, tmp_path / "f16" / "model.tflite", shapes={name: shape}, precision="f16",
                         pool_key="f32only")
    assert f16.ok, f16.error
    assert "Float16 tflite output complete" in f16.log_tail
    tail = f16.log_tail          # the float16 file's converter copied the SavedModel too (the float32 one's line
    assert "SavedModel copied from" in tail[tail.index("Float32 tflite output complete"):], tail   # is cut off)
    got16 = _tflite(tmp_path / "f16" / "model.tflite", name, x)
    assert got16.shape == want.shape and np.allclose(got16, want, rtol=1e-2, atol=1e-2)
    assert (tmp_path / "f16" / "model.tflite").stat().st_size < (tmp_path / "fp32" / "model.tflite").stat().st_size
