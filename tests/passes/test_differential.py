"""The differential test of RELIABILITY.md R30: the ``safe`` preset over every
sample model and every model of the onnx wheel's backend test data.

For each model: outputs within tolerance (the pipeline's ORT verification,
numeric where ORT can run the original), interface unchanged, full check
passes, a second run changes nothing, and the file is never larger than 1.1x
the original. Fast tier: the sample models and a handful of backend models;
the slow tier runs all of them and prints pass/skip counts with reasons.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import onnx
import pytest

from studio.verification.verifier import full_check, interface_problems
from studio import api
from studio.core.errors import StudioError
from tests.conftest import ONNX_DATA, SAMPLES, backend_models

HANDFUL = ["light/light_resnet50.onnx", "pytorch-converted/test_ConvTranspose2d/model.onnx",
           "pytorch-operator/test_operator_repeat/model.onnx", "simple/test_sequence_model5/model.onnx",
           "simple/test_expand_shape_model1/model.onnx", "pytorch-converted/test_BatchNorm2d_eval/model.onnx"]


def _files(model: Path) -> int:
    h = api.load(model)
    return h.total_bytes


def differential(model: Path, out_dir: Path) -> tuple[str, str]:
    """('pass' | 'skip', detail). Raises AssertionError on a real failure."""
    try:
        handle = api.load(model)
        result = api.optimize(handle, preset="safe", out_path=out_dir / "a" / "model.onnx")
    except StudioError as exc:
        return "skip", str(exc)
    bad = [(r.name, r.status, r.message) for r in result.records if r.status not in ("changed", "unchanged")]
    assert not bad, bad
    original = onnx.load(str(model), load_external_data=False)
    optimized = onnx.load(str(result.output), load_external_data=False)
    assert interface_problems(original, optimized) == []
    assert full_check(result.output) is None
    again = api.optimize(api.load(result.output), preset="safe", out_path=out_dir / "b" / "model.onnx")
    assert not again.modified, [(r.name, r.changes) for r in again.records if r.modified]
    assert _files(result.output) <= 1.1 * handle.total_bytes, (_files(result.output), handle.total_bytes)
    if result.reference.startswith("structure only"):
        return "pass", "numbers not compared: " + result.reference
    return "pass", "verified numerically" if result.modified else "nothing to change"


def _id(p: Path) -> str:
    return f"{p.parent.name}/{p.name}" if p.name == "model.onnx" else p.name


SAMPLE_FILES = sorted(SAMPLES.glob("*.onnx"))


FAST_TIER = SAMPLE_FILES + [ONNX_DATA / h for h in HANDFUL]


@pytest.mark.covered_by("test_safe_preset_differential_all_backend_models")   # its models, held to "pass" there too
@pytest.mark.parametrize("model", FAST_TIER, ids=_id)
def test_safe_preset_differential_fast(model, tmp_path):
    if not model.exists():
        pytest.skip(f"{_id(model)} is not in this onnx wheel")
    status, detail = differential(model, tmp_path)
    assert status == "pass", detail         # every model of the fast tier loads and optimizes (none is excused)


@pytest.mark.slow
def test_safe_preset_differential_all_backend_models(tmp_path, capsys):
    counts: Counter = Counter()
    skipped: dict[str, str] = {}
    for i, model in enumerate(SAMPLE_FILES + backend_models()):
        status, detail = differential(model, tmp_path / str(i))
        assert status == "pass" or model not in FAST_TIER, (_id(model), detail)   # the fast tier's claim, kept
        counts[status] += 1
        counts[detail if status == "pass" else "skip"] += 1
        if status == "skip" or "not compared" in detail:
            skipped[_id(model)] = detail
    with capsys.disabled():
        print(f"\nsafe preset differential: {counts['pass']} passed, {counts['skip']} skipped; "
              f"{counts['verified numerically']} changed and verified numerically, "
              f"{counts['nothing to change']} unchanged")
        for name, why in sorted(skipped.items()):
            print(f"  {name}: {why[:200]}")
    assert counts["pass"] >= 150
