"""fuse-transformers / the ort-transformers preset: ONNX Runtime's transformer fusions as one verified pass.

Oracles: ``onnxruntime.transformers.optimizer.optimize_model`` called here directly on the original
(what it fuses is what the preset must fuse), plain onnxruntime on the original (the outputs), and
hand-written CPU flag sets for the per_channel/reduce_range choice.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from passes.transformer_fusion import detect_model_type, fusion_switches
from studio import api
from studio.core.engines.ort_int8 import int8_kernel_choice, u8s8_saturates
from studio.core.errors import StudioError
from tests.conftest import SAMPLES, ort_reference

FUSED = ("Attention", "SkipLayerNormalization", "BiasGelu", "EmbedLayerNormalization", "FastGelu",
         "MultiHeadAttention", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization")


def _oracle_stats(path, model_type: str, **switches) -> dict[str, int]:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    fo = FusionOptions(model_type)
    for k, v in switches.items():
        setattr(fo, f"enable_{k}", v)
    m = optimize_model(str(path), model_type=model_type, optimization_options=fo, opt_level=0, use_gpu=False)
    return {k: v for k, v in m.get_fused_operator_statistics().items() if v}


def _feeds(seq: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"input_ids": rng.integers(0, 1000, (2, seq), dtype=np.int64),
            "attention_mask": np.ones((2, seq), np.int64)}


def _fuse_record(result):
    return next(r for r in result.records if r.name == "fuse-transformers")


@pytest.mark.slow
def test_preset_fuses_what_ort_fuses_and_keeps_the_outputs(tmp_path):
    src = SAMPLES / "transformer_block.onnx"
    expected = _oracle_stats(src, "bert")
    assert {"Attention", "SkipLayerNormalization", "BiasGelu", "EmbedLayerNormalization"} <= set(expected)
    r = api.optimize(api.load(src), preset="ort-transformers", dims={"batch": 1, "sequence": 16},
                     out_path=tmp_path / "a" / "m.onnx")
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    rec = _fuse_record(r)
    assert rec.status == "changed" and rec.details["model_type"] == "bert", rec.details
    assert rec.details["fused"] == expected                                 # same fusions as ORT called directly
    assert {k: v for k, v in rec.counts.items() if k.startswith("fused_")} == {f"fused_{k}": v
                                                                                for k, v in expected.items()}
    out = onnx.load(str(r.output))
    ops = [n.op_type for n in out.graph.node]
    for op, n in expected.items():
        assert ops.count(op) == n, (op, ops)
    assert "Softmax" not in ops and "Erf" not in ops                        # the decomposed patterns are gone
    assert any("ONNX Runtime only" in w for w in rec.warnings)
    feeds = _feeds()
    want = ort_reference(src, feeds)
    got = dict(zip([o.name for o in out.graph.output],
                   ort.InferenceSession(str(r.output), providers=["CPUExecutionProvider"]).run(None, feeds)))
    assert want.keys() == got.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4)
    again = api.optimize(api.load(r.output), preset="ort-transformers", dims={"batch": 1, "sequence": 16},
                         out_path=tmp_path / "b" / "m.onnx")
    assert not again.modified and "already fused" in " ".join(_fuse_record(again).notes)


@pytest.mark.slow
def test_freshly_initialised_layernorms_still_fuse(tmp_path):
    """LayerNorm gamma = 1 and beta = 0 (a model at initialisation, the benchmark BERT): nothing before the
    fusions may simplify Mul-by-1 / Add-of-0 away, or ORT's LayerNorm, SkipLayerNorm and Attention
    patterns (anchored on them) no longer match."""
    from onnx import numpy_helper

    m = onnx.load(str(SAMPLES / "transformer_block.onnx"))
    for t in m.graph.initializer:
        if "LayerNorm" in t.name and t.name.endswith((".weight", ".bias")):
            arr = numpy_helper.to_array(t)
            fill = np.ones_like(arr) if t.name.endswith(".weight") else np.zeros_like(arr)
            t.CopyFrom(numpy_helper.from_array(fill, t.name))
    src = tmp_path / "init.onnx"
    onnx.save(m, str(src))
    expected = _oracle_stats(src, "bert")
    assert expected.get("Attention") and expected.get("SkipLayerNormalization")
    r = api.optimize(api.load(src), preset="ort-transformers", dims={"batch": 1, "sequence": 16},
                     out_path=tmp_path / "m.onnx")
    assert r.ok and _fuse_record(r).details["fused"] == expected


@pytest.mark.slow
def test_rmsnorm_decoder_fuses_and_passes_the_checker(tmp_path):
    """LLaMA-style: ORT's SkipSimplifiedLayerNormalization (com.microsoft) is kept; its standalone
    SimplifiedLayerNormalization lives in the ONNX domain, which onnx.checker refuses, so it is written
    back as plain ops, and the result still computes what the original does."""
    src = SAMPLES / "llama_optimum.onnx"
    expected = _oracle_stats(src, "gpt2")
    assert expected.get("SimplifiedLayerNormalization") and expected.get("SkipSimplifiedLayerNormalization")
    r = api.optimize(api.load(src), preset="ort-transformers", out_path=tmp_path / "m.onnx")
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    rec = _fuse_record(r)
    assert rec.details["model_type"] == "gpt2"
    assert rec.details["fused"] == {"SkipSimplifiedLayerNormalization": expected["SkipSimplifiedLayerNormalization"]}
    assert any("SimplifiedLayerNormalization left decomposed" in n for n in rec.notes), rec.notes
    out = onnx.load(str(r.output))
    onnx.checker.check_model(out, full_check=True)
    assert not [n for n in out.graph.node if n.op_type == "SimplifiedLayerNormalization"]
    feeds = api.make_inputs(api.load(src), count=1).sets[0]
    want = ort_reference(src, feeds)
    got = ort_reference(r.output, feeds)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-3, atol=1e-4)


def test_no_transformer_pattern_is_a_noop_with_a_note(tmp_path):
    src = SAMPLES / "cnn_unfused.onnx"
    r = api.optimize(api.load(src), passes=["fuse-transformers"], out_path=tmp_path / "m.onnx")
    rec = _fuse_record(r)
    assert r.ok and not r.modified and rec.status == "unchanged"
    assert any("no transformer pattern" in n for n in rec.notes), rec.notes


@pytest.mark.slow
def test_fusion_options_reach_the_optimizer(tmp_path):
    """disable=attention: the oracle with FusionOptions.enable_attention=False fuses no Attention; nor does the pass."""
    src = SAMPLES / "transformer_block.onnx"
    expected = _oracle_stats(src, "bert", attention=False)
    assert "Attention" not in expected and expected
    r = api.optimize(api.load(src), passes=["fuse-transformers"], out_path=tmp_path / "m.onnx",
                     pass_options={"fuse-transformers": {"disable": "attention", "model_type": "bert"}},
                     dims={"batch": 1, "sequence": 16})
    rec = _fuse_record(r)
    assert r.ok and rec.status == "changed" and rec.details["fusion_options"]["attention"] is False
    assert rec.details["fused"] == expected
    ops = [n.op_type for n in onnx.load(str(r.output)).graph.node]
    assert "Attention" not in ops and "Softmax" in ops and ops.count("SkipLayerNormalization") == expected[
        "SkipLayerNormalization"]


def test_model_type_read_from_the_graph():
    def header(name):
        return onnx.load(str(SAMPLES / f"{name}.onnx"), load_external_data=False)

    assert detect_model_type(header("transformer_block")).name == "bert"
    assert detect_model_type(header("gpt2_decoder_with_past")).name == "gpt2"
    none = detect_model_type(header("cnn_unfused"))
    assert none.name is None and "no attention" in none.reason
    with pytest.raises(StudioError, match="unknown fusion"):
        fusion_switches(disable=["attentoin"])


def test_presets_listed_through_the_facade():
    presets = {p["name"]: p for p in api.list_passes()["presets"]}
    assert "fuse-transformers" in presets["ort-transformers"]["passes"]
    assert presets["ort-transformers-int8"]["passes"][-1] == "quantize-int8-dynamic"
    assert presets["ort-transformers-int8-static"]["passes"][-1] == "quantize-int8-static"


@pytest.mark.parametrize("flags,machine,reduce_range,isa", [
    ({"sse4_2", "avx", "avx2", "fma"}, "x86_64", True, "avx2"),
    ({"avx2", "avx512f", "avx512bw"}, "x86_64", True, "avx2"),              # AVX-512 without VNNI saturates too
    ({"avx2", "avx512f", "avx512_vnni"}, "x86_64", False, "vnni"),
    ({"avx2", "avx_vnni"}, "x86_64", False, "vnni"),
    ({"avx2", "avx512_vnni", "amx_tile", "amx_int8"}, "x86_64", False, "amx"),
    ({"asimd", "asimddp"}, "aarch64", False, "arm"),
])
def test_int8_choice_follows_the_cpu_flags(flags, machine, reduce_range, isa):
    c = int8_kernel_choice(flags, machine)
    assert (c.reduce_range, c.isa, c.per_channel) == (reduce_range, isa, True)
    assert ("reduce_range" in c.reason) == reduce_range


def test_engine_probe_overrides_the_flags():
    c = int8_kernel_choice({"avx2", "avx512_vnni"}, "x86_64", saturates=True)
    assert c.reduce_range and "engine's probe" in c.reason
    c = int8_kernel_choice({"avx2"}, "x86_64", saturates=False)
    assert not c.reduce_range and "engine's probe" in c.reason


@pytest.mark.slow
def test_dynamic_int8_of_the_fused_graph(tmp_path):
    """ort-transformers-int8: the fused graph's Attention becomes QAttention; the choice is recorded."""
    r = api.optimize(api.load(SAMPLES / "transformer_block.onnx"), preset="ort-transformers-int8",
                     dims={"batch": 1, "sequence": 16}, out_path=tmp_path / "m.onnx",
                     pass_options={"quantize-int8-dynamic": {"budget_s": 0.5}})
    assert r.ok, [(x.name, x.status, x.message) for x in r.records]
    assert _fuse_record(r).status == "changed"
    rec = r.records[-1]
    assert "already-fused" in rec.details["chosen"]["description"]        # quantized the fused graph as it is
    ops = {n.op_type for n in onnx.load(str(r.output)).graph.node}
    assert "QAttention" in ops and "Attention" not in ops
    k = rec.details["int8_kernels"]
    assert k["reduce_range"] == u8s8_saturates() and k["per_channel_source"] == "cpu" and k["reason"]
    assert rec.details["runs_on"] == ["onnxruntime"]
