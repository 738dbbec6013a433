"""MNN's converter extension aborts a process that loaded TensorFlow first (``import tensorflow; import
_tools``: SIGABRT). A process holding TensorFlow (a notebook, a test session that ran LiteRT) that opens
an MNN runner on an ONNX file must convert in the engine's worker pool instead: the runner's outputs
equal plain onnxruntime's, and ``_tools`` was never loaded in that process (the mechanism)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tests.conftest import ROOT
from tests.requirements import require_engine, require_module

pytestmark = pytest.mark.slow


def test_an_mnn_runner_opened_after_tensorflow_converts_in_a_worker(tmp_path):
    require_engine("mnn")
    require_module("tensorflow")
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])
    model = tmp_path / "conv.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    child = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        import tensorflow  # noqa: F401 - first, as a notebook that ran LiteRT would have it
        from studio.core.engines import sessions
        from studio.core.jobs import JobContext
        scratch = {str(tmp_path / "scratch")!r}
        import os; os.makedirs(scratch, exist_ok=True)
        runner = sessions.open_runner("mnn", {str(model)!r}, {{}}, JobContext(scratch=scratch, out_dir=scratch))
        y = runner.infer({{"x": np.load({str(tmp_path / "x.npy")!r})}})["y"]
        runner.close()
        np.save({str(tmp_path / "y.npy")!r}, y)
        print(json.dumps({{"tools_loaded_here": "_tools" in sys.modules}}))
    """)
    run = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == {"tools_loaded_here": False}
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4)
