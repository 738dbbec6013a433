"""MNN's thread count when none is asked for, and its process-wide thread pool.

A fixed default of 4 put 4 spinning pool threads on a 2-core machine: ``profile --engine mnn`` timed
mobilenet_like at 0.31 ms where plain MNN at the machine's 2 threads takes 0.19 ms. The default is now one
per usable CPU, at most 4 (:func:`studio.core.engines.base.default_cpu_threads`). The mechanism is read back
from MNN itself: its CPU pool starts ``numThread - 1`` OS threads, counted in ``/proc/self/task`` against a
plain ``MNN.nn`` oracle. MNN keeps that pool once per process (sized by the first multi-threaded model), so
a threads sweep of MNN runs each thread count in its own fresh worker."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tests.conftest import ROOT
from tests.requirements import require_engine

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="counts threads in /proc/self/task")


def _conv_model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])],
        [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def _child(code: str, cpus: int | None = None) -> dict:
    """Run ``code`` in a fresh Python (MNN's pool is per process), on its first ``cpus`` CPUs; its last line is JSON."""
    pin = f"import os; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{cpus}])\n" if cpus else ""
    prelude = "import os\ndef tasks():\n    return len(os.listdir('/proc/self/task'))\n"
    run = subprocess.run([sys.executable, "-c", pin + prelude + textwrap.dedent(code)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])   # MNN prints its CPU features on stdout first


def _studio_default(model: Path, scratch: Path, cpus: int | None) -> dict:
    scratch.mkdir(exist_ok=True)
    return _child(f"""
        import json, numpy as np
        from studio.core.engines import sessions
        from studio.core.jobs import JobContext
        import MNN, MNN.nn, MNN.expr
        before = tasks()
        ctx = JobContext(scratch={str(scratch)!r}, out_dir={str(scratch)!r})
        runner = sessions.open_runner("mnn", {str(model)!r}, {{}}, ctx)
        runner.bind({{"x": np.ones((1, 8, 16, 16), np.float32)}})()
        print(json.dumps({{"threads": runner.details["threads"], "cpus": len(os.sched_getaffinity(0)),
                          "note": runner.details.get("threads_note"), "pool": tasks() - before}}))
    """, cpus)


def _plain_pool(mnn_path: Path, threads: int) -> int:
    """OS threads plain MNN starts for ``numThread=threads`` (the oracle)."""
    return _child(f"""
        import json, numpy as np
        import MNN.nn as nn, MNN.expr as F
        before = tasks()
        rt = nn.create_runtime_manager(({{"backend": "CPU", "numThread": {threads}}},))
        m = nn.load_module_from_file({str(mnn_path)!r}, [], [], runtime_manager=rt)
        m.forward([F.const(np.ones((1, 8, 16, 16), np.float32), [1, 8, 16, 16], F.NCHW, F.float)])
        print(json.dumps({{"pool": tasks() - before}}))
    """)["pool"]


def _convert(model: Path, out: Path) -> None:
    """MNNConvert in the engine's worker: its converter aborts a process that loaded TensorFlow first (a test
    session that ran LiteRT; tests/core/test_mnn_after_tensorflow.py)."""
    from studio.core.engines.mnn import MnnEngine

    assert MnnEngine().convert(model, out).ok and out.is_file()


def test_the_default_mnn_thread_count_is_one_per_usable_cpu_at_most_four(tmp_path):
    require_engine("mnn")
    model = _conv_model(tmp_path / "conv.onnx")
    _convert(model, tmp_path / "conv.mnn")
    one = _studio_default(model, tmp_path / "s1", cpus=1)
    assert one["cpus"] == 1 and one["threads"] == 1          # the old default: 4 on a 1-CPU share
    assert one["pool"] == _plain_pool(tmp_path / "conv.mnn", 1) == 0
    assert one["note"] == "engine default (one per usable CPU, at most 4)"
    every = _studio_default(model, tmp_path / "s2", cpus=None)
    want = min(4, every["cpus"])
    assert every["threads"] == want
    # MNN's own pool agrees: as many OS threads as plain MNN starts at that numThread (numThread - 1)
    assert every["pool"] == _plain_pool(tmp_path / "conv.mnn", want) == want - 1


def test_mnn_keeps_one_thread_pool_per_process_so_a_threads_sweep_uses_fresh_workers(tmp_path, monkeypatch):
    require_engine("mnn")
    _convert(_conv_model(tmp_path / "conv.onnx"), tmp_path / "conv.mnn")
    # plain MNN: after a 4-thread model, a 2-thread one in the same process starts no pool of its own
    seen = _child(f"""
        import json, numpy as np
        import MNN.nn as nn, MNN.expr as F
        x = F.const(np.ones((1, 8, 16, 16), np.float32), [1, 8, 16, 16], F.NCHW, F.float)
        counts, keep = [], []
        for n in (4, 2):
            before = tasks()
            rt = nn.create_runtime_manager(({{"backend": "CPU", "numThread": n}},))
            m = nn.load_module_from_file({str(tmp_path / "conv.mnn")!r}, [], [], runtime_manager=rt)
            m.forward([x]); keep.append((rt, m)); counts.append(tasks() - before)
        print(json.dumps({{"new_threads": counts}}))
    """)
    assert seen["new_threads"] == [3, 0]

    from profilers import sweeps
    from studio.core.sandbox import Limits

    calls = []

    class _Result:
        def __init__(self, points):
            self.data = {"points": [{"value": p["value"], "ns": [1000], "wall_s": 0.001} for p in points],
                         "details": {}, "load": [0.0, 0.0, 0.0]}

    def fake_run_job(name, args, arrays, **kw):
        calls.append(([p["value"] for p in args["points"]], bool(kw.get("fresh"))))
        return _Result(args["points"])

    monkeypatch.setattr(sweeps, "run_job", fake_run_job)
    feeds = {"x": np.ones((1, 8, 16, 16), np.float32)}
    for engine in ("mnn", "onnxruntime"):
        variant = {"id": engine, "label": engine, "model_path": "m.onnx", "engine": {"engine": engine}}
        result = sweeps.measure_sweep(variant, "threads", [(4, feeds), (2, feeds)], warmup=1, iterations=1,
                                      out_dir=tmp_path, limits=Limits(), pool_key="t")
        assert [p.value for p in result.points] == [4, 2]
    assert calls == [([4], True), ([2], True), ([4, 2], False)]   # MNN: one fresh worker per thread count
