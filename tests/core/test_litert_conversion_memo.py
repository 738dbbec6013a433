"""One onnx2tf run per distinct conversion in a LiteRT worker (studio/core/engines/litert.py, ``CONVERSIONS``):
the same model content at the same input shapes, precision and options converts to the same file, so a check, a
precision report's comparison and latency runs and an export of it reuse the first run's file (an f16 run also
yields the fp32 file). The oracle for "onnx2tf ran" is a counter outside the studio: a ``sitecustomize`` on the
workers' PYTHONPATH wraps ``onnx2tf.convert`` itself and appends one line per call to a file; the numbers are
checked against plain ONNX Runtime."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from studio.core.engines.conversion import ConversionFailed, OptionSet
from studio.core.engines.litert_convert import ConversionMemo, conversion_key
from tests.conftest import SAMPLES
from tests.import_hooks import patch_in_workers
from tests.requirements import require_engine

NONE = OptionSet((), {}, "defaults")
KAT = OptionSet(("-kat", "x"), {"keep_shape_absolutely_input_names": ["x"]}, "layout")


def test_the_key_is_what_decides_the_result():
    shapes = {"x": (1, 3, 8, 8)}
    calib = {"x": np.zeros((2, 3, 8, 8), np.float32)}
    key = conversion_key("a" * 64, shapes, "f32", None, NONE)
    assert key == conversion_key("a" * 64, {"x": [1, 3, 8, 8]}, "default", calib, NONE)   # calibration: int8 only
    others = [conversion_key("b" * 64, shapes, "f32", None, NONE), conversion_key("a" * 64, {"x": (1, 3, 9, 8)},
              "f32", None, NONE), conversion_key("a" * 64, shapes, "f16", None, NONE),
              conversion_key("a" * 64, shapes, "f32", None, KAT), conversion_key("a" * 64, shapes, "int8", calib, NONE),
              conversion_key("a" * 64, shapes, "int8", {"x": calib["x"] + 1}, NONE)]
    assert len({key, *others}) == 1 + len(others)


def test_the_memo_writes_a_remembered_file_raises_a_remembered_refusal_and_stays_bounded(tmp_path):
    memo = ConversionMemo(limit_bytes=100)
    assert memo.reuse("k1", tmp_path / "a.tflite") is None
    memo.remember("k1", {"ok": True, "seconds": 3.0}, b"x" * 40)
    info = memo.reuse("k1", tmp_path / "a.tflite")
    assert info == {"ok": True, "seconds": 3.0, "reused": True} and (tmp_path / "a.tflite").read_bytes() == b"x" * 40
    memo.remember("refused", {"ok": False, "error": "onnx2tf fails at node /If"}, None)
    with pytest.raises(ConversionFailed, match="fails at node /If") as refused:
        memo.reuse("refused", tmp_path / "b.tflite")
    assert refused.value.info["reused"] and not (tmp_path / "b.tflite").exists()
    memo.remember("big", {"ok": True}, b"y" * 51)              # over half the limit: converted again, not held
    assert memo.reuse("big", tmp_path / "c.tflite") is None
    memo.remember("k2", {"ok": True}, b"z" * 40)
    memo.remember("k3", {"ok": True}, b"w" * 40)               # 120 bytes > 100: the least recently used goes
    assert memo.reuse("k1", tmp_path / "d.tflite") is None
    assert memo.reuse("k2", tmp_path / "d.tflite") is not None and memo.reuse("k3", tmp_path / "d.tflite") is not None
    with pytest.raises(ConversionFailed):                     # a refusal holds no bytes: it stays
        memo.reuse("refused", tmp_path / "e.tflite")


# the oracle for "onnx2tf ran": one line per onnx2tf.convert call in the workers
_COUNT_CONVERSIONS = '''
def patch(module):
    convert = module.convert

    def counted(**kw):
        with open(os.environ["MEMO_TEST_COUNT"], "a") as f:
            f.write(json.dumps([kw.get("overwrite_input_shape"), bool(kw.get("output_integer_quantized_tflite"))]) + "\\n")
        return convert(**kw)
    module.convert = counted
'''


def _ort(path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _tflite(path: Path, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path), num_threads=1).get_signature_runner()
    ((name, detail),) = runner.get_input_details().items()
    feed = x if x.shape == tuple(detail["shape"]) else np.ascontiguousarray(np.moveaxis(x, 1, -1))
    (out,) = runner(**{name: feed}).values()
    return out


@pytest.mark.slow      # TensorFlow's import in a fresh worker, two onnx2tf runs, a precision report
def test_a_check_precision_and_conversions_of_one_model_run_onnx2tf_once_per_distinct_conversion(tmp_path,
                                                                                              monkeypatch):
    require_engine("litert")
    count = tmp_path / "onnx2tf_runs.jsonl"
    monkeypatch.setenv("MEMO_TEST_COUNT", str(count))
    patch_in_workers(tmp_path, monkeypatch, "onnx2tf", _COUNT_CONVERSIONS, "MEMO_TEST_COUNT")
    pool = f"memo-{tmp_path.name}"               # a worker of its own, started with the counter on its path
    try:
        _scenario(tmp_path, pool, count)
    finally:                                     # its TensorFlow worker serves no other test
        from studio.core.sandbox import shutdown_pool

        for key in (pool, f"{pool}:litert"):
            shutdown_pool(key)


def _scenario(tmp_path: Path, pool: str, count: Path) -> None:
    from studio import api
    from studio.core.engines import get_engine

    model = tmp_path / "m.onnx"
    shutil.copy(SAMPLES / "cnn_unfused.onnx", model)
    proto = onnx.load(str(model))
    (inp,) = proto.graph.input
    shape = tuple(d.dim_value or 1 for d in inp.type.tensor_type.shape.dim)
    x = np.random.default_rng(0).random(shape, dtype=np.float32)
    changed = tmp_path / "changed" / "m.onnx"         # the same name and shapes, one weight changed
    changed.parent.mkdir()
    weight = next(t for t in proto.graph.initializer if len(t.dims) == 4)
    values = onnx.numpy_helper.to_array(weight).copy()
    values.flat[0] += 1.0
    weight.CopyFrom(onnx.numpy_helper.from_array(values, weight.name))
    onnx.save(proto, str(changed))
    engine = get_engine("litert")

    def runs() -> list:
        return [json.loads(line) for line in count.read_text().splitlines()] if count.exists() else []

    report = api.precision(api.load(model), variants=["fp32", "fp32-litert", "fp16-litert"], samples=2,
                           latency_budget_s=0.5, out_dir=tmp_path / "precision", pool_key=pool)
    by = {v.name: v for v in report.variants}
    assert by["fp32-litert"].status == by["fp16-litert"].status == "ok"
    assert by["fp32-litert"].cosine > 0.9999 and by["fp16-litert"].cosine > 0.999
    # the fp16 comparison converts first and its run writes the fp32 file too: the fp32 comparison and both
    # latency runs reuse them
    assert len(runs()) == 1, runs()

    assert api.check(api.load(model), ["litert"], pool_key=pool).verdict("litert").verdict == "runs"
    assert len(runs()) == 1                                          # the check's fp32 conversion: the same file

    f32 = engine.convert(model, tmp_path / "f32" / "model.tflite", shapes={inp.name: shape}, pool_key=pool)
    assert f32.ok and f32.reused and len(runs()) == 1
    assert "Float16 tflite output complete" not in f32.log_tail        # the float32 file's own log
    np.testing.assert_allclose(_tflite(tmp_path / "f32" / "model.tflite", x), _ort(model, x), rtol=1e-4, atol=1e-4)

    other = engine.convert(changed, tmp_path / "other" / "model.tflite", shapes={inp.name: shape}, pool_key=pool)
    assert other.ok and not other.reused and len(runs()) == 2           # other content: onnx2tf runs
    got = _tflite(tmp_path / "other" / "model.tflite", x)
    np.testing.assert_allclose(got, _ort(changed, x), rtol=1e-4, atol=1e-4)
    assert not np.allclose(got, _ort(model, x), rtol=1e-4, atol=1e-4)  # and its file is not the first model's
    assert [r[0] for r in runs()] == [[f"{inp.name}:{','.join(map(str, shape))}"]] * 2
