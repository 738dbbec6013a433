"""The worked example of the README, end to end on the CPU: the mmdeploy sample's `grid_sampler` is detected
as custom; (a) legalized to the standard GridSample and run on ONNX Runtime and OpenVINO; (b) implemented as
an ONNX Runtime Python op and as an OpenVINO conversion extension, both matching the reference and the
legalized model; (c) a TensorRT plugin skeleton is generated. (d), the OpenVINO C++ extension built against
the wheel's headers, is in test_build.py (slow tier)."""

from __future__ import annotations

import numpy as np

from diagnostics.custom_ops import detect_custom_ops
from studio import api
from studio.core.compare import compare_outputs
from studio.core.engines import RunOptions, get_engine
from studio.core.workspace import Workspace
from studio.plugins.scaffold import render_python_impl
from tests.conftest import sha256_file
from tests.plugins.plugin_models import MMDEPLOY, OP


def test_worked_example(mm_handle, mm_sig, tmp_path):
    before = sha256_file(MMDEPLOY)
    customs = detect_custom_ops(mm_handle.proto)
    assert [c.qualified for c in customs] == [OP]

    # (a) legalized by the fix pass, run on ONNX Runtime and OpenVINO.
    ws = Workspace.create(tmp_path / "ws")
    v0 = ws.add_file(MMDEPLOY, label="original")
    v1 = api.apply_fix(ws, v0.id, "legalize-grid-sampler")
    legal = ws.handle(v1.id)
    assert not detect_custom_ops(legal.proto)
    feeds = mm_sig.model_feeds
    reference = mm_sig.model_outputs
    legal_out = {}
    for engine in ("ort", "ov"):
        out = get_engine(engine).run(legal.path, feeds, options=RunOptions()).outputs
        assert compare_outputs(reference, out), engine
        legal_out[engine] = out

    # (b) the op as an ORT Python op and as an OpenVINO conversion extension.
    for target in ("ort-python", "openvino-python"):
        result = api.run_python_op(mm_handle, OP, render_python_impl(mm_sig, target), target=target, signature=mm_sig)
        assert result and result.model["ok"], (target, result.message)
        for engine, out in legal_out.items():
            assert compare_outputs(out, result.outputs), (target, engine)
        np.testing.assert_allclose(result.outputs["output"], reference["output"], rtol=1e-5, atol=1e-5)

    # (c) the TensorRT plugin skeleton.
    sc = api.scaffold_plugin(mm_handle, OP, "tensorrt", tmp_path / "plugins", signature=mm_sig)
    trt = sc.package("tensorrt")
    assert trt.complete and "NOT COMPILED HERE" in trt.status
    assert {f.path for f in trt.files} >= {"grid_sampler_plugin.h", "grid_sampler_plugin.cpp", "grid_sampler_kernel.cu",
                                           "CMakeLists.txt", "grid_sampler_plugin.py", "test_plugin.py", "README.md"}
    assert sha256_file(MMDEPLOY) == before      # the user's file is never modified


def test_openvino_extension_failures_are_clear(mm_handle, mm_sig):
    body = render_python_impl(mm_sig, "openvino-python")
    raising = body.replace("    align = bool(", "    raise KeyError('no such attribute')\n    align = bool(", 1)
    result = api.run_python_op(mm_handle, OP, raising, target="openvino-python", signature=mm_sig)
    assert result.status == "error"
    assert "conversion extension for `grid_sampler` raised KeyError: 'no such attribute'" in result.message
    wrong = body.replace('"padding_mode": padding}', '"padding_mode": "border"}', 1)
    result = api.run_python_op(mm_handle, OP, wrong, target="openvino-python", signature=mm_sig)
    assert result.status == "mismatch" and "differs from the reference" in result.message
