"""What a generation profile measured (``api.profile_generation``'s result): the options, one
:class:`CaseResult` per variant x (prompt length, batch), the variants, the paired ratios and the whole
:class:`GenerationProfile` with its JSON (docs/profile-json.md). Built by :mod:`profilers.generation_profile`.

Definitions: TTFT is the prefill step (its feeds, the model call and the argmax of the first token); a decode
step is one token after that; ``tokens_per_s`` = batch x 1000 / decode p50 (the batch's decode rate; per
sequence: 1000 / p50); ``e2e_tokens_per_s`` = batch x new tokens x 1000 / the median whole generation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profilers.profile import MachineInfo
from profilers.stats import LatencyStats, RatioEstimate
from profilers.variants import Variant
from studio.core.bounds import OutOfRange, bounded_int, number_text
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.sandbox import GiB, Limits, default_limits

__all__ = ["CaseResult", "GenerationOptions", "GenerationProfile", "GenerationRatio", "GenerationVariant"]


# The tokens one case may feed (prompt length x batch): 2^24 int64 ids are 128 MiB per input, far beyond any
# decoder's context; 10^9 would be 7.45 GiB allocated before the model says no (a context the model does not
# declare is not checked against it).
MAX_CASE_TOKENS = 2**24
MAX_GENERATIONS = 10_000


def _ints(values: Sequence[int], name: str, low: int = 1, high: int = MAX_CASE_TOKENS) -> tuple[int, ...]:
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or int(v) < low:
            raise StudioError(f"{name} must be integers >= {low}, got {number_text(v)}", code=ErrorCode.BAD_OPTION)
        out.append(bounded_int(int(v), f"each of the {name}", low, high))
    if not out:
        raise StudioError(f"give at least one {name.rstrip('s')}", code=ErrorCode.BAD_OPTION)
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class GenerationOptions:
    """What to generate: prompts of each length x batch, ``new_tokens`` tokens each, ``generations``
    timed generations per variant and case (one per interleaved round) after ``warmup`` untimed ones."""

    prompt_lengths: tuple[int, ...] = (16, 64)
    new_tokens: int = 32
    batch_sizes: tuple[int, ...] = (1,)
    generations: int = 5
    warmup: int = 1
    seed: int = 0
    io_binding: bool = True                 # ONNX Runtime: keep the cache as OrtValues between steps
    memory: bool = True                     # peak memory per case in a fresh worker per variant
    timeout_s: float | None = None          # per job step; None: the worker default
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "prompt_lengths", _ints(self.prompt_lengths, "prompt lengths"))
        object.__setattr__(self, "batch_sizes", _ints(self.batch_sizes, "batch sizes"))
        for name, low, high in (("new_tokens", 2, MAX_CASE_TOKENS), ("generations", 1, MAX_GENERATIONS),
                                ("warmup", 0, MAX_GENERATIONS)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise StudioError(f"{name.replace('_', ' ')} must be an integer >= {low}, got {number_text(value)}",
                                  code=ErrorCode.BAD_OPTION)
            bounded_int(value, name.replace("_", " "), low, high)
        longest = max(self.prompt_lengths) + self.new_tokens
        if longest * max(self.batch_sizes) > MAX_CASE_TOKENS:
            raise OutOfRange(f"prompt length {max(self.prompt_lengths):,} + {self.new_tokens:,} new tokens at batch "
                             f"{max(self.batch_sizes):,} is {number_text(longest * max(self.batch_sizes))} tokens: "
                             f"a case may hold at most {MAX_CASE_TOKENS:,} (2^24) tokens")
        for name in ("timeout_s", "memory_gb"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise StudioError(f"{name} must be a positive number", code=ErrorCode.BAD_OPTION)

    @property
    def cases(self) -> tuple[tuple[int, int], ...]:
        """(prompt length, batch) of every case, lengths first."""
        return tuple((p, b) for p in self.prompt_lengths for b in self.batch_sizes)

    def limits(self) -> Limits:
        base = default_limits()
        return Limits(timeout_s=float(self.timeout_s or base.timeout_s),
                      memory_bytes=int(self.memory_gb * GiB) if self.memory_gb else base.memory_bytes,
                      cpu_threads=base.cpu_threads)

    def to_dict(self) -> dict:
        return {"prompt_lengths": list(self.prompt_lengths), "new_tokens": self.new_tokens,
                "batch_sizes": list(self.batch_sizes), "generations": self.generations, "warmup": self.warmup,
                "seed": self.seed, "io_binding": self.io_binding, "memory": self.memory,
                "timeout_s": self.timeout_s, "memory_gb": self.memory_gb}


def _r(x: float | None, digits: int = 5) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


@dataclass(frozen=True)
class CaseResult:
    """One variant on one case (prompt length x batch)."""

    prompt_length: int
    batch: int
    new_tokens: int
    ttft: LatencyStats | None = None
    decode: LatencyStats | None = None
    generation: LatencyStats | None = None       # whole generations (prefill + decode steps)
    decode_by_position_ms: tuple[float, ...] = ()   # median decode step per past length
    past_lengths: tuple[int, ...] = ()           # what the loop fed: 0 (prefill), then P, P+1, ...
    tokens: tuple[tuple[int, ...], ...] = ()     # generated ids per sequence
    deterministic: bool = True                   # every timed generation gave the same tokens
    generations: int = 0
    peak_rss: int | None = None
    peak_source: str | None = None
    rss_by_length: tuple[tuple[int, int], ...] = ()   # (total positions, resident bytes) after each token
    kv_cache_bytes: int | None = None            # the cache at the last step, from the DecoderSpec
    error: str | None = None
    steps_ms: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False, compare=False)
    rounds_of: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32), repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None and self.decode is not None

    @property
    def tokens_per_s(self) -> float | None:
        """Decode rate of the batch: batch x 1000 / decode p50 (ms)."""
        return self.batch * 1000.0 / self.decode.p50_ms if self.decode and self.decode.p50_ms > 0 else None

    @property
    def e2e_tokens_per_s(self) -> float | None:
        g = self.generation
        return self.batch * self.new_tokens * 1000.0 / g.p50_ms if g and g.p50_ms > 0 else None

    @property
    def key(self) -> str:
        return f"p{self.prompt_length}b{self.batch}"

    def to_dict(self) -> dict:
        return {"prompt_length": self.prompt_length, "batch": self.batch, "new_tokens": self.new_tokens,
                "ok": self.ok, "error": self.error, "generations": self.generations,
                "ttft_ms": _r(self.ttft.p50_ms) if self.ttft else None,
                "ttft": self.ttft.to_dict() if self.ttft else None,
                "decode_p50_ms": _r(self.decode.p50_ms) if self.decode else None,
                "decode_p99_ms": _r(self.decode.p99_ms) if self.decode else None,
                "decode": self.decode.to_dict() if self.decode else None,
                "generation": self.generation.to_dict() if self.generation else None,
                "tokens_per_s": _r(self.tokens_per_s, 2), "tokens_per_s_per_sequence":
                    _r(self.tokens_per_s / self.batch, 2) if self.tokens_per_s else None,
                "e2e_tokens_per_s": _r(self.e2e_tokens_per_s, 2),
                "decode_by_position_ms": [_r(x) for x in self.decode_by_position_ms],
                "past_lengths": list(self.past_lengths), "tokens": [list(t) for t in self.tokens],
                "deterministic": self.deterministic, "peak_rss": self.peak_rss, "peak_source": self.peak_source,
                "rss_by_length": [list(x) for x in self.rss_by_length], "kv_cache_bytes": self.kv_cache_bytes}


@dataclass(frozen=True)
class GenerationVariant:
    variant: Variant
    cases: tuple[CaseResult, ...] = ()
    error: str | None = None
    error_kind: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    baseline_rss: int | None = None
    opened_rss: int | None = None
    notes: tuple[str, ...] = ()         # a memory pass that could not run, and why

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.cases) and all(c.ok for c in self.cases)

    @property
    def id(self) -> str:
        return self.variant.id

    def case(self, prompt_length: int, batch: int) -> CaseResult | None:
        return next((c for c in self.cases if (c.prompt_length, c.batch) == (prompt_length, batch)), None)

    def to_dict(self) -> dict:
        return {"variant": self.variant.to_dict(), "ok": self.ok, "error": self.error, "error_kind": self.error_kind,
                "details": {str(k): v for k, v in self.details.items()}, "baseline_rss": self.baseline_rss,
                "opened_rss": self.opened_rss, "notes": list(self.notes), "cases": [c.to_dict() for c in self.cases]}


@dataclass(frozen=True)
class GenerationRatio:
    """``other`` vs ``baseline`` on one case: TTFT and decode ratios (< 1: other is faster), paired by
    round, and whether both generated the same tokens."""

    prompt_length: int
    batch: int
    baseline_id: str
    other_id: str
    ttft: RatioEstimate | None
    decode: RatioEstimate | None
    tokens_agree: bool
    first_difference: int | None      # the first token index where they differ (any sequence)

    def to_dict(self) -> dict:
        return {"prompt_length": self.prompt_length, "batch": self.batch, "baseline": self.baseline_id,
                "other": self.other_id, "ttft": self.ttft.to_dict() if self.ttft else None,
                "decode": self.decode.to_dict() if self.decode else None, "tokens_agree": self.tokens_agree,
                "first_difference": self.first_difference}


@dataclass(frozen=True)
class GenerationProfile:
    """The result of :func:`run_generation` (and of ``api.profile_generation``)."""

    variants: tuple[GenerationVariant, ...]
    ratios: tuple[GenerationRatio, ...]
    options: GenerationOptions
    decoders: tuple[dict, ...]               # per target: convention, layers, KV bytes per token, context
    prompts: Mapping[str, tuple[tuple[int, ...], ...]]   # case key -> the prompt's ids
    machine: MachineInfo
    interleaved: bool
    seconds: float
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return bool(self.variants) and all(v.ok for v in self.variants)

    def variant(self, variant_id: str) -> GenerationVariant:
        for v in self.variants:
            if v.id == variant_id:
                return v
        raise KeyError(variant_id)

    def to_dict(self) -> dict:
        return {"kind": "generation", "ok": self.ok, "seconds": round(self.seconds, 3),
                "interleaved": self.interleaved, "options": self.options.to_dict(), "decoders": list(self.decoders),
                "prompts": {k: [list(r) for r in v] for k, v in self.prompts.items()},
                "machine": self.machine.to_dict(), "warnings": list(self.warnings),
                "variants": [v.to_dict() for v in self.variants], "ratios": [r.to_dict() for r in self.ratios],
                "definitions": {"ttft_ms": "p50 of the prefill step (feeds, model call, argmax of the first token)",
                                "decode_p50_ms": "p50 of one decode step (one token per sequence)",
                                "tokens_per_s": "batch x 1000 / decode_p50_ms",
                                "e2e_tokens_per_s": "batch x new_tokens x 1000 / median generation ms",
                                "peak_rss": "the worker's resident high-water mark over one generation (VmHWM)"}}
