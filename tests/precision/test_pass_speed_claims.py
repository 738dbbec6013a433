"""precision states one latency ratio per variant: the INT8 passes' own build-time timing claims (the pass
times its candidates while building) are named in ``details["speed_claims"]`` and not repeated as notes
beside the flow's side-by-side figure. Held-out rapidocr_ppocr_mobile_v2_cls printed both for int8-dynamic:
'dynamic INT8 is slower than fp32 on this machine (9.29x, 95 % CI 7.29-9.71 ...)' and 'slower than fp32 here
(6.21x, 95 % CI 5.14-8.35 ...)', the table saying 6.21. No test here depends on timing: the claim is forced."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
from onnx import helper, numpy_helper

import passes.pipeline
from passes.pipeline import run_passes
from passes.registry import make_pass
from studio.precision import catalog, variants
from tests.conftest import save
from tests.passes.pass_helpers import mlp

CLAIM = "dynamic INT8 is slower than fp32 on this machine (9.29x, 95 % CI 7.29–9.71 over 20 rounds): keep fp32 here"


def test_precision_drops_a_pass_speed_claim_and_keeps_its_other_warnings(tmp_path, monkeypatch):
    out = tmp_path / "int8-dynamic" / "m.onnx"
    record = SimpleNamespace(details={"speed_claims": [CLAIM], "chosen": {"name": "dynamic"}},
                             warnings=(CLAIM, "some layer kept in float"))
    result = SimpleNamespace(ok=True, modified=True, output=str(out), records=[record], lineage=lambda: [])
    monkeypatch.setattr(passes.pipeline, "run_pipeline", lambda *a, **k: result)
    spec = catalog.VariantSpec("int8-dynamic", "INT8 dynamic", "onnxruntime", "int8",
                                (catalog._p("quantize-int8-dynamic"),))
    path, _, details, warnings = variants._build(spec, tmp_path / "m.onnx", tmp_path, {},
                                                 SimpleNamespace(sets=[{}]), None, "t")
    assert path == Path(out)
    assert warnings == ["some layer kept in float"]
    assert details["speed_claims"] == [CLAIM]          # still in the JSON details, as the pass's own figure


def test_dynamic_int8_names_its_speed_claims(tmp_path):
    """Every speed statement among the pass's warnings (whatever this machine measured: faster, none
    made, or one) is listed in details['speed_claims'], and nothing else is."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "w")
    src = save(mlp([helper.make_node("MatMul", ["x", "w"], ["y"])], [w], 16, 8), tmp_path / "mlp.onnx")
    r = run_passes(src, [make_pass("quantize-int8-dynamic", budget_s=1)], tmp_path / "d" / "m.onnx")
    rec = r.records[0]
    assert r.ok and rec.status == "changed", rec.message
    claims = rec.details["speed_claims"]
    speed_words = ("slower than fp32", "difference from fp32")
    assert claims == [x for x in rec.warnings if any(s in x for s in speed_words)]


def test_the_int8_passes_time_their_configurations_within_the_runs_latency_budget(tmp_path):
    """The INT8 passes time fp32 and each configuration to choose one; inside precision they took their own 60 s
    default whatever ``--budget`` said (20 rounds each: ~7 s of a 27 s ``--budget 1`` run on cnn_unfused). The
    run's budget is their ``budget_s`` now (the default budget, 60 s, is theirs as before)."""
    ctx = SimpleNamespace(work=tmp_path, target_cosine=0.99, target=None,
                          weight_options=variants.check_weight_options(None))
    inp = SimpleNamespace(calib=SimpleNamespace(sets=[{"x": np.zeros((1, 4), np.float32)}]),
                          eval_feeds=SimpleNamespace(dims={}, sets=[{"x": np.ones((1, 4), np.float32)}]), golden=None)
    for budget in (1.5, 60.0):
        opts = variants._pass_options(ctx, inp, "minmax", budget)
        assert opts["quantize-int8-static"]["budget_s"] == budget
        assert opts["quantize-int8-dynamic"]["budget_s"] == budget
    assert "budget_s" not in opts["convert-fp16"]                   # precision's fp16 variant measures nothing
    assert np.load(opts["convert-fp16"]["inputs"])["x/0"].sum() == 4    # ranges measured on the evaluation sets
