"""Which variant to recommend. The fastest variant that meets the accuracy target, is at least 5% faster than
fp32 (``RECOMMEND_MAX_RATIO``) *and* whose interval of the per-round ratio lies wholly below 1.0 (an interval that
includes 1.0 is "no significant difference", never a reason to change precision); a reduced-precision variant must
also beat its own engine's fp32 variant timed in the same run (``engine_gain_note``: OpenVINO INT8 no faster than
OpenVINO fp32 on an AVX2-only CPU is not recommended there, the note names the CPU kind); when none is, fp32."""

from __future__ import annotations

from collections.abc import Sequence

from profilers.latency import LatencyRun
from studio.precision.catalog import VARIANTS
from studio.precision.cpu import INT8_ON, cpu_kind
from studio.precision.report import VariantResult

__all__ = ["ENGINE_FP32", "RECOMMEND_MAX_RATIO", "engine_gain_note", "recommend", "recommendable", "speed_note"]

# A variant is recommended only when at least this much faster than fp32: ratios on a shared
# machine move by a few percent between runs, and "0.98x" is not a reason to change precision.
RECOMMEND_MAX_RATIO = 0.95


# Each engine's own fp32 row: a reduced-precision variant on that engine has to beat it, not only ORT fp32.
ENGINE_FP32 = {"openvino": "fp32-ov", "mnn": "fp32-mnn", "litert": "fp32-litert"}


def speed_note(ratio: float | None, ci: tuple[float, float] | None, rounds: int) -> str | None:
    """Why a variant is not recommended for speed, or None when it may be."""
    if ratio is None:
        return None
    if ci is None:
        return f"{ratio:.2f}x of fp32 but no interval ({rounds} round(s)): no speed claim, not recommended"
    lo, hi = ci
    spread = f"95 % CI {lo:.2f}–{hi:.2f} over {rounds} rounds"
    if lo > 1.0:
        return f"slower than fp32 here ({ratio:.2f}x, {spread}): not recommended"
    if hi >= 1.0:
        return f"no significant difference from fp32 ({ratio:.2f}x, {spread}): not recommended"
    if ratio > RECOMMEND_MAX_RATIO:
        return f"less than {100 * (1 - RECOMMEND_MAX_RATIO):.0f}% faster than fp32 ({ratio:.2f}x, {spread}): " \
               "not recommended"
    return None


def engine_gain_note(name: str, run: LatencyRun | None, isa: str | None = None) -> str | None:
    """Why reduced-precision variant ``name`` is not recommended on this CPU kind: it is no faster than its own
    engine's fp32 variant timed in the same run, by the rule it must meet against ORT fp32 (at least 5 % faster,
    :data:`RECOMMEND_MAX_RATIO`, and the 95 % interval of their per-round ratio wholly below 1.0), e.g.
    OpenVINO INT8 on an AVX2-only CPU. None when it is faster, or its engine's fp32 was not timed.
    ``isa``: the CPU kind (amx | vnni | avx2 | ...), this machine's when None."""
    spec = VARIANTS[name]
    twin = ENGINE_FP32.get(spec.engine)
    if spec.precision == "fp32" or twin is None or twin == name or run is None:
        return None
    est = run.ratio(twin, name)
    if est is None or est.ci_high is None or (est.ci_high < 1.0 and est.ratio <= RECOMMEND_MAX_RATIO):
        return None
    if isa is None:
        isa = cpu_kind()
    kind = INT8_ON.get(isa, f"CPU kind {isa}") if spec.precision.startswith("int") else f"CPU kind {isa}"
    return (f"no faster than {VARIANTS[twin].label} on this CPU ({est.ratio:.2f}x of it, 95 % CI "
            f"{est.ci_low:.2f}–{est.ci_high:.2f} over {est.rounds} rounds; {kind}): not recommended here, "
            f"{twin} is the {spec.engine} choice")


def recommendable(v: VariantResult) -> bool:
    """fp32 (the baseline) when it ran and meets the target; another variant only when it also is
    significantly faster: ratio <= RECOMMEND_MAX_RATIO and its whole interval below 1.0."""
    if v.status != "ok" or not v.meets_target or v.latency_p10_ms is None:
        return False
    if v.asked_precision is not None:
        return False               # not what its name says on this CPU (a copy of another row): never offered
    if v.no_gain_over is not None:
        return False               # no faster than its own engine's fp32 on this CPU kind (engine_gain_note)
    if v.name == "fp32":
        return True
    return v.ratio is not None and v.ratio <= RECOMMEND_MAX_RATIO and v.faster_than_fp32


def recommend(results: Sequence[VariantResult]) -> VariantResult | None:
    """The recommended variant: the fastest recommendable one, fp32 when no other qualifies."""
    eligible = [v for v in results if recommendable(v)]
    others = [v for v in eligible if v.name != "fp32"]
    if others:
        return min(others, key=lambda v: v.ratio if v.ratio is not None else float("inf"))
    return next((v for v in eligible if v.name == "fp32"), None)
