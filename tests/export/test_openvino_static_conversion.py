"""An OpenVINO export of a model its ONNX frontend converts only at static shapes (MODELS.md T6): with
--shapes, the export converts at those shapes (convert_model(input=...)) when the plain conversion fails.

Found on the held-out corpus model silero_vad_16k_op15: `export --target openvino --shapes input=1x512 --shapes
state=2x1x128` failed with "Conv-15 ... The input data tensor's rank has to be known (static)" because the export
converted with the declared dynamic shapes first and reshaped after; plain ov.convert_model(path,
input={...static...}) converts it. Tested on silero_vad_half (the same trap, not kept aside; how tests reach the
corpus: tests/corpus.py); the oracle is plain onnxruntime on the original."""

from __future__ import annotations

import onnxruntime as ort

from studio import api
from tests.corpus import corpus_feeds, corpus_model


def test_openvino_export_converts_at_the_given_static_shapes(tmp_path):
    path = corpus_model("silero_vad_half")
    feeds = corpus_feeds("silero_vad_half")
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)      # the original runs
    plain = api.export(api.load(path), "openvino", tmp_path / "dyn", zip=False)
    assert not plain.ok                         # the trap: dynamic shapes do not convert; the error says what to do
    assert any("--shapes" in f for f in plain.failures), plain.failures
    bundle = api.export(api.load(path), "openvino", tmp_path / "out", shapes=["input=1x512", "state=2x1x128"],
                        zip=False)
    assert bundle.ok, bundle.failures
    assert bundle.manifest["verification"]["input_shapes"]["input"] == [1, 512]
