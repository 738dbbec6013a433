"""Presets: each is an explicit ordered list with a description; running one
twice changes nothing the second time; the tensorrt preset fixes the dims it is
given and folds the shape subgraphs they free."""

from __future__ import annotations

import onnx
import pytest

from passes.registry import known_passes, known_presets
from studio import api
from tests.conftest import SAMPLES


def test_presets_are_known_passes_with_descriptions():
    presets = known_presets()
    assert {"safe", "ort", "openvino", "tensorrt"} <= set(presets)
    passes = known_passes()
    for p in presets.values():
        assert p.description and all(name in passes for name in p.passes)
    # safe never contains passes that need a newer opset or change the interface.
    assert not {"fuse-layernorm", "fuse-gelu", "fix-input-shapes", "convert-opset"} & set(presets["safe"].passes)


@pytest.mark.parametrize("preset", ["ort", "openvino", "tensorrt"])
@pytest.mark.parametrize("sample", ["transformer_block", "cnn_unfused", "if_loop"])
def test_engine_presets_verify_and_are_idempotent(preset, sample, tmp_path):
    dims = {"batch": 1, "sequence": 16} if sample == "transformer_block" else None
    r = api.optimize(api.load(SAMPLES / f"{sample}.onnx"), preset=preset, dims=dims,
                     out_path=tmp_path / "a" / "m.onnx")
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    again = api.optimize(api.load(r.output), preset=preset, dims=dims, out_path=tmp_path / "b" / "m.onnx")
    assert not again.modified, [(x.name, x.changes) for x in again.records if x.modified]
    if sample == "transformer_block":
        ops = [n.op_type for n in onnx.load(str(r.output)).graph.node]
        assert "LayerNormalization" in ops
        if preset == "tensorrt":
            dims_out = [d.dim_value for d in onnx.load(str(r.output)).graph.input[0].type.tensor_type.shape.dim]
            assert dims_out == [1, 16] and "Shape" not in ops


@pytest.mark.parametrize("preset,engine", [("openvino", "openvino"), ("ort", "onnxruntime"),
                                           ("tensorrt", "onnxruntime")])
def test_best_of_peers_judges_by_the_presets_engine(preset, engine, tmp_path):
    """In the openvino preset the peers are judged by OpenVINO's compiled model (really compiled: the op counts
    in the note are plain OpenVINO's), elsewhere by ONNX Runtime's fusions; the user's --set still wins."""
    import openvino as ov

    from passes.pipeline import resolve_passes

    peers = next(p for p in resolve_passes(preset) if p.name == "best-of-peers")
    assert peers.options.get("engine", "onnxruntime") == engine
    assert next(p for p in resolve_passes(preset, options={"best-of-peers": {"engine": "onnxruntime"}})
                if p.name == "best-of-peers").options["engine"] == "onnxruntime"
    src = SAMPLES / "cnn_unfused.onnx"
    r = api.optimize(api.load(src), preset=preset, out_path=tmp_path / "a" / "m.onnx")
    rec = next(x for x in r.records if x.name == "best-of-peers")
    assert r.ok and rec.status == "changed", rec.notes
    assert rec.details["criterion"] == engine
    if engine == "openvino":
        core = ov.Core()
        base = len(core.compile_model(core.read_model(str(src)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
                   .get_runtime_model().get_ops())
        assert any("OpenVINO compiles" in n and n.endswith(f"ops vs {base}") for n in rec.notes), rec.notes
        assert not any("ORT runs" in n for n in rec.notes), rec.notes
    else:
        assert any("ORT runs" in n for n in rec.notes) and not any("OpenVINO" in n for n in rec.notes), rec.notes
