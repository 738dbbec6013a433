"""INT8 NNCF with its float layers in bf16 (issue 35 item 1): on the real MiniLM-L6 the transformer guard keeps the
6 FFN down-projections in float, and in f32 they cost more than the 30 INT8 layers together (OpenVINO's per-op
counters); run in bf16 where the CPU computes bf16, the same IR went from 0.42x to 0.31x ORT fp32 at the same
real-token cosine. ``int8-nncf-bf16`` is that IR (not quantized a second time) compiled with OpenVINO's
``INFERENCE_PRECISION_HINT`` bf16, offered only where the CPU has AVX-512 BF16 or AMX-BF16.

Oracles: CPU flags written here by hand; plain openvino compiling the variant's IR with the bf16 hint and plain
onnxruntime running the original, on the feeds this test writes (the row's cosine is theirs, whatever this CPU
computes: a CPU without bf16 computes f32 under the hint in both); a count of NNCF runs. Nothing CPU-dependent is
asserted."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio.core.feeds import save_npz
from studio.precision import catalog as C
from studio.precision import variants as V
from studio.precision.cpu import cpu_has_bf16
from tests.conftest import SAMPLES
from tests.requirements import require_module

require_module("nncf")

SRC = SAMPLES / "transformer_block.onnx"
NATIVE = {"AVX512F": True, "AVX512VNNI": True}


def test_cpu_has_bf16_reads_avx512_bf16_or_amx_and_believes_the_cpu_over_an_emulator():
    assert cpu_has_bf16({"avx2", "avx512f", "avx512_vnni", "avx512_bf16"}, NATIVE)        # Zen 4, Cooper Lake
    assert cpu_has_bf16({"avx2", "avx512f", "amx_bf16", "amx_int8", "amx_tile"}, NATIVE)  # Sapphire Rapids
    assert not cpu_has_bf16({"avx2", "avx512f", "avx512_vnni"}, NATIVE)                   # Cascade Lake: VNNI only
    assert not cpu_has_bf16({"avx2", "fma"}, {"AVX512F": False})                          # AVX2-only
    # qemu-user -cpu EPYC-Rome on a Zen 4 host: /proc/cpuinfo says avx512_bf16, the emulated CPU has no AVX-512
    assert not cpu_has_bf16({"avx2", "avx512f", "avx512_bf16"}, {"AVX512F": False, "AVX512VNNI": False})


@pytest.mark.parametrize("bf16", [True, False])
def test_an_encoder_gets_the_bf16_islands_variant_only_where_the_cpu_computes_bf16(monkeypatch, bf16):
    monkeypatch.setattr(C, "cpu_has_bf16", lambda *a, **k: bf16)
    encoder = onnx.load(str(SRC), load_external_data=False)
    decoder = onnx.load(str(SAMPLES / "gpt2_decoder_with_past.onnx"), load_external_data=False)
    got = C.default_variants(encoder)
    assert "int8-nncf" in got
    assert ("int8-nncf-bf16" in got) is bf16
    assert "int8-nncf-bf16" not in C.default_variants(decoder)       # decoders: weight-only, no full INT8
    assert "int8-nncf-sq" in got and "int8-nncf-sq" not in C.default_variants(decoder)   # SmoothQuant, all INT8
    assert C.VARIANTS["int8-nncf-sq"].builder == "nncf-sq"
    spec = C.VARIANTS["int8-nncf-bf16"]
    assert spec.builder == "nncf" and spec.run_options.precision == "bf16" and spec.run_options.openvino_ir


@pytest.mark.slow
def test_the_bf16_islands_variant_is_the_nncf_ir_run_in_bf16(tmp_path, monkeypatch):
    import openvino as ov

    calls = []
    real = V.quantize_openvino

    def counting(*a, **k):
        calls.append(a[0])
        return real(*a, **k)

    monkeypatch.setattr(V, "quantize_openvino", counting)
    rng = np.random.default_rng(5)
    feeds = {"input_ids": rng.integers(0, 1000, (1, 16), dtype=np.int64), "attention_mask": np.ones((1, 16), np.int64)}
    report = V.evaluate_variants(SRC, variants=["int8-nncf", "int8-nncf-bf16"], inputs=save_npz([feeds], tmp_path /
                                 "eval.npz"), samples=4, target_cosine=1.0, latency_budget_s=0.5,
                                 out_dir=tmp_path / "o")
    f32, bf16 = report.variant("int8-nncf"), report.variant("int8-nncf-bf16")
    assert f32.status == "ok" and bf16.status == "ok", (f32.error, bf16.error, bf16.notes)
    assert len(calls) == 1                                        # one NNCF run: the bf16 row reuses its IR
    assert bf16.path == f32.path and bf16.details["float_layers"] == f32.details["float_layers"]
    want = ort.InferenceSession(str(SRC), providers=["CPUExecutionProvider"]).run(None, feeds)[0].ravel()
    for row, hint in ((f32, "f32"), (bf16, "bf16")):
        got = np.asarray(ov.Core().compile_model(str(row.path), "CPU", {"INFERENCE_PRECISION_HINT": hint})(feeds)[0])
        got = got.ravel().astype(np.float64)
        cos = float(want.astype(np.float64) @ got / (np.linalg.norm(want) * np.linalg.norm(got)))
        assert row.cosine == pytest.approx(cos, abs=1e-5), hint
