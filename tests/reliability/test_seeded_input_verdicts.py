"""RELIABILITY R39: seeded inputs the model cannot take. The studio's own inputs (16 samples,
random small integers) are too short for a reflect Pad, not a multiple a Reshape hard-codes,
or the wrong sample rate for an If; before a verdict the studio searches sizes and values,
says which inputs ran, and when none ran says "compiles; not run: needs inputs", never
"fails". Every verdict is checked against the engine really running the model."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import helper as h

from diagnostics.input_search import NEEDS_INPUTS, InputRecipe, recipe_feeds, search_recipes
from studio import api
from studio.core.engines import get_engine
from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds
from tests.conftest import ROOT, sha256_file
from tests.forked_cli import run_forked
from tests.seeded_input_models import (fixed_size_reshape, framed_by_7, framed_by_80, hidden_gather,
                                       rate_below_16k_fails, silero_like, vad_with_picked_rate,
                                       vad_with_sample_rate)

ENGINES = ("onnxruntime", "openvino")
RUNS = ("runs", "runs with warnings")


def _save(model, tmp_path, name):
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    return path


def _really_runs(engine, path, feeds) -> bool:
    try:
        get_engine(engine).run(path.resolve(), feeds)
        return True
    except StudioError:
        return False


SEARCHED = {
    "silero_like": (silero_like, {"input": "float32[1, 512]"}),
    "framed_by_80": (framed_by_80, {"x": "float32[1, 16000]"}),
    "vad_with_sample_rate": (vad_with_sample_rate, {"input": "float32[1, 512]", "sr": "int64=16000"}),
    "vad_with_picked_rate": (vad_with_picked_rate, {"input": "float32[1, 512]", "sr": "int64=16000"}),
    "rate_below_16k_fails": (rate_below_16k_fails, {"input": "float32[1, 16]", "sr": "int64=16000"}),
}


@pytest.mark.parametrize("name", sorted(SEARCHED))
def test_r39_search_finds_inputs_that_run_and_the_engines_agree(tmp_path, name):
    build, expected = SEARCHED[name]
    path = _save(build(), tmp_path, name)
    before = sha256_file(path)
    report = api.check(api.load(path), ENGINES)
    specs = input_specs(onnx.load(path))
    seeded = random_feeds(specs, seed=0)
    for engine in ENGINES:
        v = report.verdict(engine)
        assert v.verdict in RUNS, (engine, v.summary)
        assert v.ran_on["inputs"] == expected
        # Reality: the engine runs the model on the reported inputs, and fails on the seeded ones.
        feeds = recipe_feeds(specs, InputRecipe(v.ran_on["dims"], v.ran_on["values"]))
        assert _really_runs(engine, path, feeds), engine
        assert not _really_runs(engine, path, seeded), engine
        seeded_size = [f for f in report.findings if f.code == "SEEDED-SIZE" and f.engine == engine]
        assert seeded_size and all(f"{k} {t}" in seeded_size[0].message for k, t in expected.items())
        assert not any(f.is_error for f in report.findings if f.engine == engine)
    data = json.loads(report.to_json())
    assert {v["engine"]: v["ran_on"]["inputs"] for v in data["verdicts"]} == {e: expected for e in ENGINES}
    assert sha256_file(path) == before


def _npz(tmp_path, **arrays):
    path = tmp_path / "real_inputs.npz"
    np.savez(path, **arrays)
    return path


NEEDS = {
    # name: (builder, engines that cannot run any searched set, suitable real inputs)
    "framed_by_7": (framed_by_7, ENGINES, {"x": np.ones((2, 7), np.float32)}),
    # OpenVINO's Gather returns zeros for out-of-range ids instead of failing: it really runs.
    "hidden_gather": (hidden_gather, ("onnxruntime",),
                      {"table": np.ones((3, 4), np.float32), "ids": np.array([0, 2, 1], np.int64)}),
}


@pytest.mark.parametrize("name", sorted(NEEDS))
def test_r39_none_ran_is_not_run_needs_inputs_never_fails(tmp_path, name):
    build, blocked, real = NEEDS[name]
    path = _save(build(), tmp_path, name)
    model = onnx.load(path)
    specs = input_specs(model)
    report = api.check(api.load(path), ENGINES)
    for engine in ENGINES:
        v = report.verdict(engine)
        if engine in blocked:
            assert (v.verdict, v.summary, v.ran_on) == ("not run", NEEDS_INPUTS, None)
            needs = [f for f in report.findings if f.code == "NEEDS-INPUTS" and f.engine == engine]
            assert len(needs) == 1 and needs[0].severity == "warning" and "--inputs" in needs[0].fix_hint
            assert not report.has_errors_for([engine])
            # Reality: the engine fails on the seeded set and on every searched one...
            sets = [random_feeds(specs, seed=0)] + [recipe_feeds(specs, r) for r in search_recipes(model)]
            assert not any(_really_runs(engine, path, f) for f in sets), engine
        else:
            assert v.verdict in RUNS and _really_runs(engine, path, random_feeds(specs, seed=0))
        # ...and runs on suitable real inputs, where check agrees.
        assert _really_runs(engine, path, real), engine
    given = api.check(api.load(path), ENGINES, inputs=_npz(tmp_path, **real))
    assert all(given.verdict(e).verdict in RUNS for e in ENGINES)
    if blocked == ENGINES:
        _real_failures_stay_failures(tmp_path, path)


def _real_failures_stay_failures(tmp_path, path):
    """The search is no excuse: a fixed-shape float model that cannot run fails, and so does a
    model on inputs the user gave."""
    report = api.check(api.load(_save(fixed_size_reshape(), tmp_path, "fixed")), ENGINES)
    assert [report.verdict(e).verdict for e in ENGINES] == ["fails", "fails"]
    given = api.check(api.load(path), ENGINES, inputs=_npz(tmp_path, x=np.ones((1, 16), np.float32)))
    assert [given.verdict(e).verdict for e in ENGINES] == ["fails", "fails"]
    assert not any(f.code == "NEEDS-INPUTS" for f in given.findings)


def test_r39_cli_exit_code_0_and_says_not_run(tmp_path):
    path = _save(framed_by_7(), tmp_path, "framed_by_7")
    out = run_forked(["check", str(path), "--engines", "ort,openvino"], cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not run" in out.stdout and NEEDS_INPUTS in out.stdout and "NEEDS-INPUTS" in out.stdout
    js = run_forked(["check", str(_save(silero_like(), tmp_path, "vad")), "--engines", "ort", "--json"], cwd=ROOT,
                    timeout=300)
    assert js.returncode == 0, js.stderr
    assert json.loads(js.stdout)["verdicts"][0]["ran_on"]["inputs"] == {"input": "float32[1, 512]"}


def _with_identity(model):
    """A pass has something to do (eliminate-identity), so optimize verifies numerically."""
    first = model.graph.node
    x = first[3].input[0]          # Unsqueeze's data input
    first[3].input[0] = "input_copy"
    first.insert(0, h.make_node("Identity", [x], ["input_copy"], name="copy"))
    return model


def test_r39_optimize_and_export_verify_on_searched_inputs(tmp_path):
    path = _save(_with_identity(silero_like()), tmp_path, "vad")
    before = sha256_file(path)
    result = api.optimize(api.load(path), passes=["eliminate-identity"], out_path=tmp_path / "o" / "vad.onnx")
    record = next(r for r in result.records if r.name == "eliminate-identity")
    assert record.modified and record.verification.numeric_status == "passed", record.verification
    bundle = api.export(api.load(path), "onnxruntime,openvino", tmp_path / "out", zip=False)
    assert bundle.ok, bundle.failures
    assert bundle.manifest["verification"]["input_shapes"] == {"input": [1, 512]}
    assert "searched inputs" in json.dumps(bundle.manifest)
    assert sha256_file(path) == before
