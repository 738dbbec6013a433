"""ONNX Runtime nests its run errors, one "Non-zero status code returned while running <Op> node. Name:'<n>'
Status Message: " per level, before the cause; the studio's short messages (160-200 characters) kept only that
boilerplate. Corpus silero_vad_op18_ifless (an If on sr whose branch reflect-pads the audio), memory: 'dims searched:
ONNX Runtime cannot run the seeded ones (...: InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT :
Non-zero status code returned while runn)'. The cause now comes first, the nodes after it. Oracle: plain
onnxruntime's own error on the same inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio import api
from studio.core.errors import engine_message
from tests.seeded_input_models import vad_with_sample_rate


def _plain_error(path) -> str:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as exc:       # noqa: PT011 - whatever ORT raises; its text is the oracle
        sess.run(None, {"input": np.zeros((1, 16), np.float32), "sr": np.array(16000, np.int64)})
    return f"{type(exc.value).__name__}: {exc.value}"


def test_nested_ort_error_keeps_its_cause_in_a_short_message(tmp_path):
    path = tmp_path / "vad.onnx"
    onnx.save(vad_with_sample_rate(), path)
    raw = _plain_error(path)
    assert raw.count("Status Message: ") == 2
    cause = raw.rsplit("Status Message: ", 1)[1].strip()
    short = engine_message(raw, 160)
    assert cause[:60] in short and "Non-zero status code" not in short
    assert engine_message(raw).endswith("(Pad node 't_pad' in If node 'branch')")

    report = api.check(api.load(path), ["onnxruntime"])
    (seeded,) = [f for f in report.findings if f.code == "SEEDED-SIZE"]
    assert cause[:40] in seeded.message


def test_memory_plan_note_keeps_the_whole_cause(tmp_path, capsys):
    # Corpus silero_vad_op18_ifless, memory: the dims-searched note was cut at 160 characters inside the cause
    # ('...INVALID_ARGUMENT : Pad reflect: post-pad (64) exceeds maxim)'), and the CLI's 300 inside the dims.
    from studio.cli import main

    path = tmp_path / "vad.onnx"
    onnx.save(vad_with_sample_rate(), path)
    cause = _plain_error(path).rsplit("Status Message: ", 1)[1].strip()
    assert main(["memory", str(path), "--no-measure"]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "dims searched" in ln]
    assert f"fail: {cause} (Pad node 't_pad' in If node 'branch')" in line, line
    assert "sr int64=16000" in line and "[ONNXRuntimeError]" not in line and not line.endswith("…"), line
