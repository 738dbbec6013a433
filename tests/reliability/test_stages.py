"""RELIABILITY cases that cross features: an endless Loop in every stage (R15),
hostile path inputs in the UI (R21)."""

from __future__ import annotations

import os
import time

import onnx
import pytest

from studio import api
from studio.core.sandbox import pool_info
from tests.conftest import assert_user_message, sha256_file
from tests.hostile_models import endless_loop


@pytest.fixture
def loop_model(tmp_path):
    p = tmp_path / "in" / "loop.onnx"
    p.parent.mkdir()
    onnx.save(endless_loop(), p)
    return p


def test_r15_export_convert_and_verify_stop_at_their_timeout(loop_model, tmp_path, monkeypatch):
    monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "5")
    before = sha256_file(loop_model)
    started = time.monotonic()
    r = api.export(api.load(loop_model), "openvino", tmp_path / "out", zip=False, pool_key="r15")
    assert time.monotonic() - started < 90      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert not r.ok
    messages = " ".join(f.message if hasattr(f, "message") else str(f) for f in r.failures)
    assert "timed out" in messages
    assert sha256_file(loop_model) == before
    assert all(p["pool"] != "r15" or not p["busy"] for p in pool_info())


def test_r15_profile_run_stops_at_its_timeout(loop_model, monkeypatch):
    from studio.core.engines import get_engine
    from studio.core.errors import WorkerError
    from studio.core.sandbox import Limits

    started = time.monotonic()
    with pytest.raises(WorkerError) as info:
        get_engine("ort").run(loop_model, {"x": __import__("numpy").zeros(1, "float32")},
                              limits=Limits(timeout_s=1), pool_key="r15")   # never ends: the least limit
    assert info.value.kind == "timeout" and time.monotonic() - started < 30      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert_user_message(str(info.value), "timed out")


def test_r15_optimize_never_evaluates_the_loop(loop_model, tmp_path):
    started = time.monotonic()
    result = api.optimize(api.load(loop_model), preset="safe", out_path=tmp_path / "o" / "m.onnx")
    assert time.monotonic() - started < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert result.output is not None and result.output.exists()


@pytest.mark.parametrize("typed", ["/proc/self/environ", "~/.ssh/id_rsa", "/dev/zero", "../../etc/passwd",
                                   "link_out.onnx", "fifo.onnx", "folder"])
def test_r21_hostile_paths_in_the_ui(app, tmp_path, typed):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link_out.onnx").symlink_to("/etc/passwd")
    os.mkfifo(root / "fifo.onnx")
    (root / "folder").mkdir()
    at = app(ONNX_STUDIO_PATH_ROOT=str(root)).run()
    at.text_input(key="model_path").input(typed).run()
    at.button(key="open_path").click().run()
    assert not at.exception and not at.metric
    errors = [e.value for e in at.error]
    assert errors and all("\n" not in e for e in errors)
    assert "root:" not in " ".join(errors)         # nothing of the target's content shown
