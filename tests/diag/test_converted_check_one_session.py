"""The converted check never holds ONNX Runtime's session of the original and the engine's session of the converted
file at once: each holds its own copy of the weights (corpus chython_rxnmap on MNN: the worker's peak RSS 1039 MB
with both open, 874 MB one at a time). The spy counts every runner the job opens as alive until its close and fails
when two are; it also records the inputs each one ran, so the gate (ONNX Runtime first, the engine only on inputs
the original takes) is checked on the same runs. Oracle for the numbers: plain onnxruntime."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from diagnostics import converted_check
from studio.core.jobs import JobContext
from tests.conftest import SAMPLES, save
from tests.quiet_image import quiet_image_model
from tests.requirements import require_engine
from tests.seeded_input_models import reflect_pad_over_free_length


@dataclass
class _Spy:
    alive: list[str] = field(default_factory=list)
    most: int = 0
    opened: list[str] = field(default_factory=list)
    runs: list[tuple[str, dict]] = field(default_factory=list)       # (engine, feeds) in call order
    outputs: list[dict] = field(default_factory=list)                # the engine's, in call order


class _Counted:
    """A runner counted alive from its opening until its close; every infer recorded."""

    def __init__(self, spy: _Spy, engine: str, runner) -> None:
        self._spy, self._engine, self._runner = spy, engine, runner
        spy.alive.append(engine)
        spy.opened.append(engine)
        spy.most = max(spy.most, len(spy.alive))
        assert len(spy.alive) == 1, f"open at once: {spy.alive}"     # fails at the opening, in the job's own stack

    def infer(self, feeds, *a, **k):
        self._spy.runs.append((self._engine, dict(feeds)))
        out = self._runner.infer(feeds, *a, **k)
        if self._engine != "onnxruntime":
            self._spy.outputs.append(out)
        return out

    def close(self) -> None:
        self._spy.alive.remove(self._engine)
        close = getattr(self._runner, "close", None)
        if close is not None:
            close()

    def __getattr__(self, name):
        return getattr(self._runner, name)


def _run_job(monkeypatch, tmp_path, engine: str, path, stand_in=None) -> tuple[dict, _Spy]:
    """The check job in this process, every runner it opens counted (``stand_in``: the engine's runner instead of
    the real one, a factory)."""
    spy, real = _Spy(), converted_check.sessions.open_runner

    def open_runner(name, *a, **k):
        runner = stand_in() if stand_in is not None and name == engine else real(name, *a, **k)
        return _Counted(spy, name, runner)

    monkeypatch.setattr(converted_check.sessions, "open_runner", open_runner)
    out = converted_check.converted_check_job({"engine": engine, "model_path": str(path), "run": True, "dims": {},
                                               "inputs": None, "tasks": {}}, {}, JobContext(tmp_path, tmp_path))
    assert spy.most == 1 and not spy.alive, spy        # one at a time, and both closed at the end
    return out.data, spy


def _gated(spy: _Spy, engine: str) -> None:
    """Every set the engine ran, ONNX Runtime ran first (the gate), though in an earlier session."""
    for i, (name, feeds) in enumerate(spy.runs):
        if name == engine:
            assert any(n == "onnxruntime" and feeds.keys() == f.keys()
                       and all(np.array_equal(feeds[k], f[k]) for k in feeds) for n, f in spy.runs[:i]), feeds


def test_mnn_check_runs_the_reference_then_the_engine_one_session_at_a_time(monkeypatch, tmp_path):
    require_engine("mnn")
    path = SAMPLES / "cnn_unfused.onnx"
    data, spy = _run_job(monkeypatch, tmp_path, "mnn", path)
    assert spy.opened == ["onnxruntime", "mnn"]            # the reference pass, closed, then the conversion
    _gated(spy, "mnn")
    assert data["compare"] and not [c for c in data["compare"] if c["problem"]], data["compare"]
    assert data["reference_error"] is None and data["outputs"]
    # oracle: plain ORT on the set the engine ran, against what MNN gave there: the same numbers the job found
    feeds = next(f for n, f in spy.runs if n == "mnn")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    assert [c["output"] for c in data["compare"]] == list(want)
    for name, w in want.items():
        np.testing.assert_allclose(np.asarray(spy.outputs[0][name]), w, rtol=1e-3, atol=1e-4)


def test_inputs_the_original_refuses_never_reach_the_engine_one_session_at_a_time(monkeypatch, tmp_path):
    require_engine("mnn")
    path = save(reflect_pad_over_free_length(), tmp_path / "pad.onnx")
    data, spy = _run_job(monkeypatch, tmp_path, "mnn", path)
    engine_sizes = [f["input"].shape for n, f in spy.runs if n == "mnn"]
    assert engine_sizes and (1, 16) not in engine_sizes, engine_sizes          # the refused seeded set stayed out
    assert any(n == "onnxruntime" and f["input"].shape == (1, 16) for n, f in spy.runs)   # ORT was asked
    assert "original refuses these inputs" in data["retried"] and data["compare"], data
    _gated(spy, "mnn")


def test_the_picture_is_chosen_in_the_reference_pass(monkeypatch, tmp_path):
    """The picture that lifts a quiet output is chosen with ORT before the conversion, and run on the engine after."""
    require_engine("mnn")
    path = save(quiet_image_model([1.0, 2.0]), tmp_path / "m.onnx")
    data, spy = _run_job(monkeypatch, tmp_path, "mnn", path)
    assert spy.opened == ["onnxruntime", "mnn"]
    assert "compared on a synthetic" in data["picture_note"], data
    _gated(spy, "mnn")


def test_an_engine_failing_where_the_original_runs_reopens_one_at_a_time(monkeypatch, tmp_path):
    """The engine fails on the set ORT ran: the search goes on to sets the reference pass did not reach, ORT runs
    each with the engine closed (reopened after), and the verdict is still 'fails' there (not 'needs inputs')."""
    graph = onnx.helper.make_graph([onnx.helper.make_node("Relu", ["x"], ["y"])], "g",
                                   [onnx.helper.make_tensor_value_info("x", 1, [1, 3, "H", "W"])],
                                   [onnx.helper.make_tensor_value_info("y", 1, [1, 3, "H", "W"])])
    path = save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8),
                tmp_path / "relu.onnx")

    class Broken:
        details: dict = {}

        def infer(self, feeds):
            raise RuntimeError("Given shapes, [1,14,14,96] and [1,7,14,96], are not broadcastable.")

    data, spy = _run_job(monkeypatch, tmp_path, "mnn", path, stand_in=Broken)
    engine_sizes = [f["x"].shape for n, f in spy.runs if n == "mnn"]
    assert len(engine_sizes) > 1 and spy.opened.count("mnn") == len(engine_sizes)     # reopened after each ORT run
    _gated(spy, "mnn")
    assert not data["needs_inputs"] and "not broadcastable" in data["run_error"]
    assert "ONNX Runtime runs the original on x float32[1, 3, 224, 224]" in data["feeds_note"]


def test_no_reference_means_the_engine_alone_decides(monkeypatch, tmp_path):
    """ORT cannot open the model (here: its session fails): the engine runs, 'not compared', one session."""
    require_engine("mnn")
    path = SAMPLES / "cnn_unfused.onnx"
    real = converted_check.sessions.open_runner

    def no_ort(name, *a, **k):
        if name == "onnxruntime":
            raise RuntimeError("ORT session failed")
        return real(name, *a, **k)

    monkeypatch.setattr(converted_check.sessions, "open_runner", no_ort)
    data, spy = _run_job(monkeypatch, tmp_path, "mnn", path)
    assert spy.opened == ["mnn"] and data["outputs"] and not data["compare"]
    assert "ORT session failed" in data["reference_error"]


@pytest.mark.parametrize("feeds", [{"x": np.zeros((1, 2), np.float32)}, {"x": [np.ones(2), np.ones(3)]}])
def test_the_digest_tells_sets_apart_by_content(feeds):
    same = {k: (v.copy() if isinstance(v, np.ndarray) else [a.copy() for a in v]) for k, v in feeds.items()}
    assert converted_check._digest(feeds) == converted_check._digest(same)
    other = {k: (v + 1 if isinstance(v, np.ndarray) else [a + 1 for a in v]) for k, v in feeds.items()}
    assert converted_check._digest(feeds) != converted_check._digest(other)
