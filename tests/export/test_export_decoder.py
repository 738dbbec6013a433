"""Exporting a KV-cache decoder verifies every artifact on the decoder's decode step (issue 26 item 3): past
8, one new token, a mask of 9 ones, use_cache_branch True for the merged model, instead of feeds drawn dim by
dim (a mask that is not past + new long, use_cache_branch False beside a past: MNN's worker was killed)."""

from __future__ import annotations

import json

import numpy as np
import onnx

from studio import api
from studio.export.options import ShapeRange
from studio.export.reference import decoder_feeds
from tests.conftest import SAMPLES, ort_reference
from tests.requirements import require_engine


def test_merged_decoder_exports_verified_on_its_decode_step(tmp_path):
    require_engine("mnn")
    r = api.export(api.load(SAMPLES / "gpt2_decoder_merged.onnx"), "onnxruntime,mnn", tmp_path / "out", zip=False,
                   pool_key="decoder-export")
    manifest = json.loads((r.bundle / "manifest.json").read_text())
    shapes = manifest["verification"]["input_shapes"]
    assert shapes["attention_mask"] == [1, 9] and shapes["input_ids"] == [1, 1]
    assert shapes["past_key_values.0.key"] == [1, 4, 8, 8] and shapes["use_cache_branch"] == [1]
    assert {t.target: t.status for t in r.targets} == {"onnxruntime": "passed", "mnn": "passed"}, [
        (t.target, t.message) for t in r.targets]


def test_decode_feeds_are_the_decode_step_and_user_shapes_rule():
    model = onnx.load(str(SAMPLES / "gpt2_decoder_merged.onnx"))
    feeds = decoder_feeds(model, {})
    assert feeds["use_cache_branch"].tolist() == [True] and (feeds["attention_mask"] == 1).all()
    assert feeds["position_ids"].tolist() == [[8]]
    out = ort_reference(model, feeds)                   # the contract holds: present = past + 1
    assert out["present.0.key"].shape == (1, 4, 9, 8) and np.isfinite(out["logits"]).all()
    assert decoder_feeds(model, {"input_ids": ShapeRange((1, 4), (1, 4), (1, 4))}) is None
    assert decoder_feeds(onnx.load(str(SAMPLES / "image_classifier.onnx")), {}) is None
