"""The precision flow judges a token output on its real-token rows (issue 35 item 1) and says so: a variant's
details keep both figures (real-token rows, whole output) and a note names the padding rows left out; a model
the gate does not cover gets neither. Oracle: plain onnxruntime on the variant the flow wrote, numpy cosines.
The encoder is code-built (tests/accuracy/test_padding_rows.py), labelled so."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio.core.feeds import save_npz
from studio.precision.variants import PADDING_NOTE, evaluate_variants
from tests.accuracy.test_padding_rows import PAD_OFFSET, REAL_OFFSET, _cos, _encoder, _feeds, _padded_mask


def _run(path, feeds):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("mask_name", ["attention_mask", "mask"])
def test_variant_details_keep_both_figures_and_say_so(tmp_path, mask_name):
    src = tmp_path / "encoder.onnx"
    onnx.save(_encoder(REAL_OFFSET, PAD_OFFSET, mask_name=mask_name), str(src))
    mask = _padded_mask()
    sets = [_feeds(mask[i:i + 1], mask_name) for i in range(2)]     # two sentences of 5 and 11 tokens in 16
    report = evaluate_variants(src, variants=["fp32", "fp16"], inputs=save_npz(sets, tmp_path / "eval.npz"),
                               samples=2, latency_budget_s=1, out_dir=tmp_path / "out")
    row = report.variant("fp16")
    assert row.path is not None and row.cosine is not None
    a = [_run(src, f).astype(np.float64) for f in sets]
    b = [_run(row.path, f).astype(np.float64) for f in sets]
    whole = min(_cos(x, y) for x, y in zip(a, b))
    if mask_name == "attention_mask":
        real = min(_cos(x[f["attention_mask"] == 1], y[f["attention_mask"] == 1]) for x, y, f in zip(a, b, sets))
        assert row.cosine == pytest.approx(real, abs=1e-6)
        assert row.details["cosine_real_rows"] == row.cosine
        assert row.details["cosine_whole_output"] == pytest.approx(whole, abs=1e-6)
        assert row.details["padding_rows_left_out"] == {"last_hidden_state": 16 * 2 - 5 - 11}
        assert row.details["padding_mask"] == "attention_mask"
        assert any(n.startswith(PADDING_NOTE) for n in row.notes)
    else:                                          # no attention_mask input: compared whole, as before
        assert row.cosine == pytest.approx(whole, abs=1e-6)
        assert "cosine_whole_output" not in row.details and not any(PADDING_NOTE in n for n in row.notes)
