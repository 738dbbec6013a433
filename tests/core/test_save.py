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


def test_atomic_writes_get_normal_permissions(tmp_path):
    """Atomically written outputs are 0666 & ~umask like any other file, not mkstemp's 0600."""
    import os
    import stat

    from studio.cli import main
    from studio.core.outputs import current_umask
    from studio.core.paths import atomic_write_bytes, atomic_write_text

    old = os.umask(0o022)
    try:
        assert current_umask() == 0o022
        atomic_write_text(tmp_path / "a.txt", "x")
        atomic_write_bytes(tmp_path / "b.bin", b"x")
        assert main(["graph", str(SAMPLES / "cnn_unfused.onnx"), "-o", str(tmp_path / "g.html")]) == 0
        for name in ("a.txt", "b.bin", "g.html"):
            assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name
        os.umask(0o027)
        atomic_write_text(tmp_path / "a.txt", "y")        # replaced: the new umask applies
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
    finally:
        os.umask(old)
