"""RELIABILITY R22-R24: a user's Python custom op that raises, returns None, the wrong dtype or shape,
loops forever, exits, segfaults, writes outside its scratch folder or reads the environment gives one clear
message, and the studio (this test process) lives on. Each run is a fresh worker, so the same op registered
again with edited code runs the current code."""

from __future__ import annotations

import os

import pytest

from studio import api
from studio.plugins.confine import landlock_abi
from tests.conftest import assert_user_message
from tests.plugins.plugin_models import OP, inject


def _run(handle, sig, code, **kw):
    return api.run_python_op(handle, OP, code, signature=sig, **kw)


def test_generated_body_matches_the_reference(mm_handle, mm_sig, ort_body):
    result = _run(mm_handle, mm_sig, ort_body)
    assert result and result.status == "ok", result.message
    assert result.samples and all(s.ok for s in result.samples)
    assert result.model and result.model["ok"]
    assert result.confinement.get("audit_hook") is True


@pytest.mark.parametrize("line,expected", [
    ("    raise ValueError('grid out of range')\n", "custom op `grid_sampler` raised ValueError: grid out of range"),
    ("    return None\n", "custom op `grid_sampler` returned None, declared 1 output(s) float32[1,4,8,8]"),
    ("    return np.zeros((1000, 1000))\n", "returned float64[1000,1000], declared float32[1,4,8,8]"),
    ("    return np.zeros((3,), np.float32)\n", "returned float32[3], declared float32[1,4,8,8]"),
    ("    return [1, 2]\n", "returned 2 output(s), declared 1"),
    ("    return 7\n", "output 0 is a int, declared a numpy array float32[1,4,8,8]"),
    ("    import sys; sys.exit(4)\n", "custom op `grid_sampler` raised SystemExit: 4"),
])
def test_bad_python_op_gives_a_clear_message(mm_handle, mm_sig, ort_body, line, expected):
    result = _run(mm_handle, mm_sig, inject(ort_body, line))
    assert not result and result.status == "error"
    assert expected in result.message, result.message
    assert_user_message(result.message)


def test_endless_loop_times_out(mm_handle, mm_sig, ort_body):
    # the loop never ends, so it waits out the whole limit: the shortest one that still tests it
    result = _run(mm_handle, mm_sig, inject(ort_body, "    while True:\n        pass\n"), timeout_s=1)
    assert result.status == "error"
    assert "did not finish within 1 s" in result.message
    assert_user_message(result.message)


@pytest.mark.parametrize("line,expected", [
    ("    import os; os._exit(3)\n", "exited with code 3"),
    ("    import ctypes; ctypes.string_at(0)\n", "SIGSEGV"),
])
def test_exit_and_segfault_end_only_the_worker(mm_handle, mm_sig, ort_body, line, expected):
    result = _run(mm_handle, mm_sig, inject(ort_body, line))
    assert result.status == "error" and expected in result.message, result.message
    assert "the studio is fine" in result.message
    assert_user_message(result.message)
    # The studio process is alive and the next run works.
    assert _run(mm_handle, mm_sig, ort_body)


def test_writes_land_only_in_the_scratch_folder(mm_handle, mm_sig, ort_body, tmp_path):
    outside = tmp_path / "escape.txt"
    line = (f"    open('relative.txt', 'w').write('ok')\n"
            f"    open({str(outside)!r}, 'w').write('escaped')\n")
    result = _run(mm_handle, mm_sig, inject(ort_body, line))
    assert result.status == "error"
    assert "raised PermissionError" in result.message and "scratch folder" in result.message
    assert not outside.exists()
    assert not (tmp_path.parent / "relative.txt").exists()


@pytest.mark.skipif(landlock_abi() == 0, reason="the kernel has no Landlock")
def test_native_writes_are_blocked_by_landlock(mm_handle, mm_sig, ort_body, tmp_path):
    """ctypes goes around Python's audit hook; Landlock stops the write in the kernel."""
    outside = tmp_path / "native.txt"
    line = (f"    import ctypes\n"
            f"    libc = ctypes.CDLL(None)\n"
            f"    libc.fopen.restype = ctypes.c_void_p\n"
            f"    if libc.fopen({str(outside).encode()!r}, b'w'):\n"
            f"        raise RuntimeError('native write was allowed')\n")
    result = _run(mm_handle, mm_sig, inject(ort_body, line))
    assert result, result.message
    assert result.confinement["landlock_abi"] >= 1
    assert not outside.exists()


def test_child_sees_a_stripped_environment(mm_handle, mm_sig, ort_body, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    monkeypatch.setenv("ONNX_STUDIO_TEST_TOKEN", "do-not-leak")
    line = ("    import os\n"
            "    seen = open('/proc/self/environ', 'rb').read().decode(errors='replace')\n"
            "    raise ValueError(','.join(sorted(os.environ)) + ('|LEAK' if 'do-not-leak' in seen else '|clean'))\n")
    result = _run(mm_handle, mm_sig, inject(ort_body, line))
    assert "raised ValueError" in result.message
    assert "|clean" in result.message and "LEAK" not in result.message
    assert "AWS_SECRET_ACCESS_KEY" not in result.message and "ONNX_STUDIO_TEST_TOKEN" not in result.message
    assert "HOME" not in result.message.split("ValueError:")[1].split("|")[0].split(",")
    assert os.environ["AWS_SECRET_ACCESS_KEY"] == "do-not-leak"   # the studio's own environment is untouched


def test_same_op_registered_again_runs_the_current_code(mm_handle, mm_sig, ort_body):
    """R24: two runs of the same op type (a Streamlit rerun with edited code) never conflict."""
    first = _run(mm_handle, mm_sig, ort_body)
    edited = _run(mm_handle, mm_sig, ort_body.replace("return grid_sample(", "return 2 * grid_sample(", 1))
    again = _run(mm_handle, mm_sig, ort_body)
    assert first.status == "ok" and again.status == "ok"
    assert edited.status == "mismatch", edited.message
    assert "Conflicting" not in edited.message
    got = edited.outputs["output"]
    ref = mm_sig.model_outputs["output"]
    assert abs(float(got.sum()) - 2 * float(ref.sum())) < 1e-3 * max(1.0, abs(float(ref.sum())))


@pytest.mark.parametrize("code,expected", [
    ("def compute(x, grid,\n", "syntax error at line 1"),
    ("import numpy as np\n", "defines no function `compute(...)`"),
    ("raise ImportError('no such module')\ndef compute(*a, **k): pass\n", "importing the code raised ImportError"),
])
def test_broken_code_files(mm_handle, mm_sig, code, expected):
    result = _run(mm_handle, mm_sig, code)
    assert result.status == "error" and expected in result.message, result.message
    assert_user_message(result.message)


def test_empty_or_oversized_code_is_refused(mm_handle, mm_sig):
    from studio.core.errors import StudioError

    with pytest.raises(StudioError, match="empty"):
        _run(mm_handle, mm_sig, "   \n")
    with pytest.raises(StudioError, match="over 1 MiB"):
        _run(mm_handle, mm_sig, "#" * (2**20 + 10) + "\n")
