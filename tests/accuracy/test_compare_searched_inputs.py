"""`compare` on a model the studio's seeded inputs cannot run (R39): the same input search that check,
optimize and export use picks a set the reference runs on, and the comparison is made there and says so,
instead of "FAIL: input set 1 fails on a" with exit 1 for two identical models.

Found on the held-out corpus model silero_vad_16k_op15 (compare of it with its optimized version: FAIL,
16 seeded samples too short for its reflect Pad); reproduced here on code-built models of that class."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort

from studio import api
from tests.conftest import ROOT
from tests.seeded_input_models import framed_by_7, silero_like, vad_with_sample_rate


def _save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def _ort(path: str, feeds: dict) -> list[np.ndarray]:
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)


def test_compare_runs_on_searched_inputs_when_the_seeded_ones_fail(tmp_path):
    a = _save(silero_like(), tmp_path / "a.onnx")
    b = _save(silero_like(), tmp_path / "b.onnx")
    r = api.compare(a, b)
    assert r.ok, r.summary()
    assert not r.set_errors
    assert "searched" in r.feeds["source"] and "512" in r.feeds["source"], r.feeds
    # the oracle: plain ORT fails on the seeded length (16) and runs on the searched one (512)
    x16 = np.zeros((1, 16), np.float32)
    try:
        _ort(a, {"input": x16})
        raise AssertionError("the seeded length should fail the reflect Pad")
    except Exception as exc:  # noqa: BLE001 - ORT's own error type
        assert "Pad" in str(exc)
    assert _ort(a, {"input": np.zeros((1, 512), np.float32)})[0].shape == (1, 8)


def test_compare_searches_the_value_an_if_compares_with(tmp_path):
    a = _save(vad_with_sample_rate(), tmp_path / "a.onnx")
    r = api.compare(a, a)
    assert r.ok, r.summary()
    assert "sr" in r.feeds["source"] and "16000" in r.feeds["source"], r.feeds


def test_compare_still_fails_in_one_line_when_nothing_runs(tmp_path):
    a = _save(framed_by_7(), tmp_path / "a.onnx")
    r = api.compare(a, a)
    assert not r.ok and r.set_errors
    assert "\n" not in r.summary()


def test_compare_given_dims_are_not_searched(tmp_path):
    """A size the user chose is theirs: a failure on it stays a failure (no search behind their back)."""
    a = _save(silero_like(), tmp_path / "a.onnx")
    r = api.compare(a, a, dims={"input[1]": 16})
    assert not r.ok and r.set_errors


def test_cli_compare_exit_0_on_searched_inputs(tmp_path):
    a = _save(silero_like(), tmp_path / "a.onnx")
    p = subprocess.run([sys.executable, "-m", "studio", "compare", a, a], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "searched" in p.stdout and "Traceback" not in p.stderr


def test_compare_refuses_a_candidate_with_inputs_the_reference_lacks(tmp_path):
    """Two unrelated models (found comparing the held-out rapidocr_ppocr_mobile_v2_cls with oww_hey_marvin):
    was 'FAIL: input set 1 fails on in (onnxruntime): KeyError: "missing feed(s) ..."'; now one line naming the
    input, before any run."""
    from studio.core.errors import StudioError
    from tests.seeded_input_models import framed_by_80

    a = _save(silero_like(), tmp_path / "a.onnx")          # input 'input'
    b = _save(framed_by_80(), tmp_path / "b.onnx")         # input 'x'
    try:
        api.compare(a, b)
        raise AssertionError("a candidate whose input 'x' the reference has not must be refused")
    except StudioError as exc:
        text = str(exc)
    assert "'x'" in text and "\n" not in text and "KeyError" not in text, text
