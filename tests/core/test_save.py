"""save_model writes self-contained files: an onnx-ir model whose weights live in
the source's external data is saved inline (or with its own data file)."""

from __future__ import annotations

import shutil

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from studio.core.model import load
from studio.core.save import save_model
from tests.conftest import SAMPLES


def _run(path):
    x = np.ones((2, 128), np.float32)
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]


def test_ir_model_with_external_weights_saved_inline_is_self_contained(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("external_data.onnx", "external_data.onnx.data"):
        shutil.copy(SAMPLES / f, src / f)
    expected = _run(src / "external_data.onnx")
    model = ir.load(src / "external_data.onnx")
    out = save_model(model, tmp_path / "out" / "m.onnx", external_data=False)
    shutil.rmtree(src)                               # the saved file must not need the source
    assert load(out).external_files == ()
    np.testing.assert_allclose(_run(out), expected, rtol=1e-6)


def test_ir_model_saved_with_its_own_data_file(tmp_path):
    model = ir.load(SAMPLES / "external_data.onnx")
    out = save_model(model, tmp_path / "m.onnx", external_data=True)
    h = load(out)
    assert [f.name for f in h.external_files] == ["m.onnx.data"]
