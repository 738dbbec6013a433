"""The precision flow recommends per CPU kind from what it measured (issue 35 item 1): a reduced-precision
variant no faster than its own engine's fp32 variant in the same interleaved run (OpenVINO INT8 vs OpenVINO
fp32 on an AVX2-only CPU, where an int8 dot product is about twice the fp32 FMA rate at best) is not
recommended there, with the reason; where it is faster, nothing changes. The run is built by hand (a
LatencyRun of known per-round timings), so no figure depends on this machine's CPU or load."""

from __future__ import annotations

import numpy as np

from profilers.latency import LatencyRun
from studio.core.engines.ort_int8 import int8_kernel_choice
from studio.precision.recommend import engine_gain_note, recommend, recommendable
from studio.precision.report import VariantResult

ROUNDS = 12


def _run(ms: dict[str, float], jitter: float = 0.02) -> LatencyRun:
    """Three calls per round per variant at ``ms`` (± a seeded relative ``jitter``), interleaved."""
    rng = np.random.default_rng(7)
    samples = {k: v * (1 + jitter * rng.standard_normal(3 * ROUNDS)) for k, v in ms.items()}
    rounds = {k: np.repeat(np.arange(ROUNDS), 3) for k in ms}
    return LatencyRun(samples, rounds, {k: np.zeros(0) for k in ms}, tuple(tuple(ms) for _ in range(ROUNDS)), ROUNDS)


def _row(name: str, engine: str, precision: str, run: LatencyRun, gain: str | None) -> VariantResult:
    est = run.ratio("fp32", name) if name != "fp32" else None
    return VariantResult(name, name, engine, precision, "ok", latency_p10_ms=run.stats(name).p10_ms,
                         ratio=est.ratio if est else None, ratio_ci=(est.ci_low, est.ci_high) if est else None,
                         ratio_rounds=est.rounds if est else 0, meets_target=True, no_gain_over=gain)


def test_openvino_int8_no_faster_than_openvino_fp32_on_avx2_is_not_recommended():
    # AVX2-only (the EPYC): OpenVINO fp32 0.60x of ORT fp32, its NNCF INT8 no faster (0.60x)
    run = _run({"fp32": 10.0, "fp32-ov": 6.0, "int8-nncf": 6.0})
    avx2 = int8_kernel_choice({"avx2", "fma"}).isa
    note = engine_gain_note("int8-nncf", run, isa=avx2)
    assert avx2 == "avx2" and note is not None
    assert "no faster than fp32 · OpenVINO" in note and "AVX2 without VNNI/AMX" in note and "not recommended" in note
    assert "generic int8 GEMM (no brgemm kernel without VNNI)" in note      # what OpenVINO's counters showed
    est = run.ratio("fp32-ov", "int8-nncf")
    assert est.ratio > 0.95 and f"{est.ratio:.2f}x of it" in note        # not 5 % faster than its engine
    rows = [_row("fp32", "onnxruntime", "fp32", run, None), _row("fp32-ov", "openvino", "fp32", run, None),
            _row("int8-nncf", "openvino", "int8", run, "fp32-ov")]
    assert rows[2].faster_than_fp32 and rows[2].ratio <= 0.95   # recommendable against ORT fp32 alone...
    assert not recommendable(rows[2])                    # ...but no gain over its own engine's fp32
    assert recommend(rows).name == "fp32-ov"
    assert rows[2].to_dict()["no_gain_over"] == "fp32-ov"


def test_int8_that_beats_its_engine_fp32_keeps_its_recommendation():
    # VNNI: OpenVINO INT8 0.31x of ORT fp32, clearly under OpenVINO fp32's 0.52x
    run = _run({"fp32": 10.0, "fp32-ov": 5.2, "int8-nncf": 3.1})
    vnni = int8_kernel_choice({"avx2", "avx512_vnni"}).isa
    assert engine_gain_note("int8-nncf", run, isa=vnni) is None
    rows = [_row("fp32", "onnxruntime", "fp32", run, None), _row("fp32-ov", "openvino", "fp32", run, None),
            _row("int8-nncf", "openvino", "int8", run, None)]
    assert recommend(rows).name == "int8-nncf"


def test_only_reduced_precision_rows_with_a_timed_engine_fp32_are_judged():
    run = _run({"fp32": 10.0, "fp32-ov": 6.0, "int8-nncf": 6.0, "int8": 6.0})
    assert engine_gain_note("fp32-ov", run, isa="avx2") is None          # the baseline of its engine
    assert engine_gain_note("int8", run, isa="avx2") is None             # ORT: judged against ORT fp32 already
    assert engine_gain_note("int8-ov", run, isa="avx2") is None          # not timed: nothing measured, no claim
    no_twin = _run({"fp32": 10.0, "int8-nncf": 6.0})
    assert engine_gain_note("int8-nncf", no_twin, isa="avx2") is None    # OpenVINO fp32 not in the run


def test_the_cpu_kind_believes_the_cpu_over_an_emulators_proc_cpuinfo():
    from studio.precision.cpu import cpu_kind

    host = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni")       # what qemu-user's /proc/cpuinfo shows
    assert cpu_kind(host, {"AVX2": True, "AVX512F": True, "AVX512VNNI": True}) == "vnni"
    assert cpu_kind(host, {"AVX2": True, "AVX512F": False, "AVX512VNNI": False}) == "avx2"   # EPYC-Rome emulated
    assert cpu_kind(("avx2", "fma"), {}) == "avx2"
