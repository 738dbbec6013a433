"""Worker limits scale with the model (a 440 MB BERT died in ORT's transformer optimizer at the 3 GiB
default): the figures are worked out here by hand, and the limits a pass's worker is started with are
read from the job request itself (run_job captured), not from the function that computes them."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

import passes.worker_pass as worker_pass
from passes.registry import make_pass
from studio.core.sandbox import GiB, Limits, scaled_to_model


@pytest.fixture(autouse=True)
def _plain_defaults(monkeypatch, tmp_path):
    for env in ("ONNX_STUDIO_MEMORY_GB", "ONNX_STUDIO_TIMEOUT_S", "ONNX_STUDIO_CPU_THREADS"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("ONNX_STUDIO_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)


def test_small_models_keep_the_default_and_large_ones_get_3_gib_plus_six_copies(monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"total": 64 * GiB})())
    assert scaled_to_model(None, 10 * 2**20).memory_bytes == 3 * GiB          # 60 MiB of copies: default
    # 440 MB: 3 GiB + 2.64 GB = 5.46 GiB, rounded up to whole GiB -> 6 GiB
    assert scaled_to_model(None, 440_000_000).memory_bytes == 6 * GiB
    # capped at half the machine: 64 GiB / 2
    assert scaled_to_model(None, 20 * GiB).memory_bytes == 32 * GiB
    given = Limits(timeout_s=5.0, memory_bytes=GiB)
    assert scaled_to_model(given, 440_000_000) is given                        # the caller's limits stand


def test_a_configured_limit_is_never_lowered(monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_MEMORY_GB", "12")
    assert scaled_to_model(None, 440_000_000).memory_bytes == 12 * GiB


def _model_with_weight(n_floats: int) -> ir.Model:
    w = numpy_helper.from_array(np.zeros((n_floats,), np.float32), "w")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n_floats])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n_floats])], [w])
    return ir.serde.deserialize_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_the_pass_worker_is_started_with_limits_scaled_to_the_weights(monkeypatch, tmp_path):
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"total": 64 * GiB})())
    seen: list[Limits | None] = []

    def fake_run_job(kind, args, *, limits=None, **kw):
        seen.append(limits)
        raise RuntimeError("stop here: only the request is under test")

    monkeypatch.setattr(worker_pass, "run_job", fake_run_job)
    p = make_pass("fold-constants")
    big = _model_with_weight(25_000_000)          # 100 MB of weights -> 600 MB of copies: scaled
    with pytest.raises(RuntimeError):
        worker_pass.run_pass_in_worker(p, big, tmp_path / "a", data_dir=tmp_path)
    assert seen[-1].memory_bytes == 4 * GiB       # ceil((3 GiB + 600 MB) / GiB)
    small = _model_with_weight(1000)
    with pytest.raises(RuntimeError):
        worker_pass.run_pass_in_worker(p, small, tmp_path / "b", data_dir=tmp_path)
    assert seen[-1].memory_bytes == 3 * GiB
    given = Limits(timeout_s=7.0, memory_bytes=GiB)
    with pytest.raises(RuntimeError):
        worker_pass.run_pass_in_worker(p, big, tmp_path / "c", data_dir=tmp_path, limits=given)
    assert seen[-1] == given
