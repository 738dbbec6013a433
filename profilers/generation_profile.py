"""Generation profile of KV-cache decoders: time to first token, per-token decode latency, tokens/s and
peak memory, per prompt length and batch, for every (version x engine) variant, A/B interleaved.

Steps (each a sandbox job, :mod:`profilers.generation_jobs`):

1. every target is recognized as a decoder (``DecoderSpec``, graph only) and its loop contract read
   (:func:`studio.inspect.decoder_contract.contract_of`); each case must fit the context;
2. one worker opens every variant and times greedy generations of each case in interleaved rounds
   (:func:`profilers.latency.timed_rounds`); if that shared worker dies, each variant is timed alone;
3. optionally, a fresh worker per variant measures peak memory per case (``VmHWM``) and resident
   memory after every token.

The figures and their definitions: :mod:`profilers.generation_results`. Ratios of TTFT and decode latency against the first variant are paired round by round
(:meth:`profilers.latency.LatencyRun.ratio`); the tokens each variant generated are compared too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from profilers import generation_jobs  # noqa: F401 - registers the profile.generate* jobs
from profilers.generation import prompt_ids
from profilers.generation_results import (CaseResult, GenerationOptions, GenerationProfile, GenerationRatio,
                                          GenerationVariant)
from profilers.latency import LatencyRun
from profilers.profile import machine_facts
from profilers.stats import RatioEstimate, latency_stats
from profilers.variants import EngineSpec, ProfileTarget, Variant, make_variants, unavailable_reason
from studio.core.engines.table import engine_row
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.model import model_weight_bytes
from studio.core.sandbox import Limits, limit_refusal, require_memory, room_for_weights, run_job
from studio.inspect.decoder import DecoderSpec, recognize
from studio.inspect.decoder_cache import short
from studio.inspect.decoder_contract import GenerationContract, contract_of
from studio.core.engines.openvino_ir import check_ir_matches
from studio.core.engines.base import check_model_file

__all__ = ["CaseResult", "GenerationOptions", "GenerationProfile", "GenerationRatio", "GenerationVariant",
           "decoder_contract", "run_generation"]

GENERATION_ENGINES = ("onnxruntime", "openvino")
Progress = Callable[[float, str], None]
_BUDGET_SHARE, _HARD_SHARE = 0.8, 0.9      # of a job's time limit, as the latency job plans


# ============================================================================ orchestration

def decoder_contract(target: ProfileTarget) -> tuple[DecoderSpec, GenerationContract]:
    """The target's decoder spec and loop contract, or one error line naming what is missing."""
    handle = target.handle
    name = handle.path.name
    spec = recognize(handle.proto, folder=handle.path.parent, filename=name)
    if spec is None:
        raise StudioError(f"{short(name, 80)} is not a KV-cache decoder: it has no past_key_values.N.key/value "
                          "inputs and present.N.key/value outputs, which a generation profile needs (profile it "
                          "without --generate)", code=ErrorCode.GENERATE_NOT_DECODER)
    return spec, contract_of(handle.proto, spec, name)


def _check_cases(name: str, contract: GenerationContract, options: GenerationOptions) -> None:
    if contract.context is None:
        return
    for p in options.prompt_lengths:
        need = contract.positions_needed(p, options.new_tokens)
        if need > contract.context:
            fit = contract.context - options.new_tokens + 1
            what = (f"prompt length {p} is longer than the context of {short(name, 60)} ({contract.context} positions)"
                    if p > contract.context else
                    f"prompt length {p} + {options.new_tokens} new tokens needs {need} positions, but the context of "
                    f"{short(name, 60)} is {contract.context}")
            hint = f"use prompt lengths up to {fit}" if fit >= 1 else "use fewer new tokens"
            raise StudioError(f"{what}: {hint} (or fewer new tokens)", code=ErrorCode.GENERATE_CONTEXT)


def _contract_names(contract: GenerationContract) -> tuple[list[str], list[str]]:
    """The inputs and outputs the loop feeds and reads, by name."""
    inputs = [n for n in (contract.input_ids, contract.attention_mask, contract.position_ids,
                          contract.use_cache_branch) if n] + [c[0] for c in contract.cache]
    return inputs, [n for n in (contract.logits,) if n] + [c[1] for c in contract.cache]


def _check_ir_target(t: ProfileTarget, contract: GenerationContract, engines: Sequence[EngineSpec]) -> None:
    """An OpenVINO IR target: run on OpenVINO, and holding every name its source decoder is stepped by."""
    if not any(engine_row(e.engine).suffix == t.openvino_ir.xml.suffix for e in engines):   # engines reading an IR
        raise StudioError(f"{short(t.openvino_ir.xml.name, 60)} is an OpenVINO IR: it runs on OpenVINO only; "
                          "add --engine ov", code=ErrorCode.BAD_OPTION)
    check_ir_matches(t.openvino_ir, *_contract_names(contract), t.path.name)


def _vargs(v: Variant, target: ProfileTarget, contract: GenerationContract) -> dict[str, Any]:
    source = str(check_model_file(target.path))
    out = {"id": v.id, "label": v.label, "model_path": source, "engine": v.engine.to_args(),
           "contract": contract.to_args()}
    if target.openvino_ir is not None:     # the IR runs; its source ONNX gives the output names (source_model)
        out.update(model_path=str(target.openvino_ir.xml), openvino_ir=True, onnx_path=source)
    return out


def run_generation(targets: Sequence[ProfileTarget], engines: Sequence[EngineSpec], options: GenerationOptions, *,
                   out_dir: Path, pool_key: str = "default", on_progress: Progress | None = None) -> GenerationProfile:
    """Generation profile of every target on every engine; see the module docstring for the steps."""
    if not targets:
        raise StudioError("nothing to profile: give at least one model", code=ErrorCode.BAD_OPTION)
    if not engines:
        raise StudioError("no engine given", code=ErrorCode.BAD_OPTION)
    started = time.perf_counter()
    paths = [t.path for t in targets]   # one generation worker holds every model's session, under _room_for
    refusal = limit_refusal("the generation profile", sum(model_weight_bytes(p) for p in paths),
                            _room_for(options.limits(), paths).memory_bytes)
    if refusal is not None:
        raise StudioError(refusal, code=ErrorCode.TOO_LARGE)
    for p in paths:
        require_memory(p, "the generation profile", in_worker=False)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    specs, contracts = [], []
    for t in targets:
        spec, contract = decoder_contract(t)
        _check_cases(t.path.name, contract, options)
        if t.openvino_ir is not None:
            _check_ir_target(t, contract, engines)
        specs.append(spec)
        contracts.append(contract)
    vocab = min((c.vocab for c in contracts if c.vocab), default=None)
    if vocab is None:
        raise StudioError(f"{short(targets[0].path.name, 60)}: the vocabulary size is not in the graph (no "
                          "embedding table, no fixed logits dim): prompts cannot be drawn",
                          code=ErrorCode.GENERATE_VOCAB)
    variants = make_variants(targets, engines)
    results: dict[str, dict[str, Any]] = {v.id: {"variant": v} for v in variants}
    runnable = []
    for v in variants:
        reason = unavailable_reason(v.engine)
        if v.engine.engine not in GENERATION_ENGINES:
            reason = f"the generation loop runs on ONNX Runtime and OpenVINO, not {v.engine.label}"
        elif v.engine.needs_gpu:
            reason = reason or "the generation profile is verified on CPU only; GPU providers are not offered"
        if reason:
            results[v.id].update(error=reason, error_kind="unavailable")
        else:
            runnable.append(v)
    arrays = {f"prompt{i}": prompt_ids(vocab, b, p, options.seed) for i, (p, b) in enumerate(options.cases)}
    vargs = {v.id: _vargs(v, targets[v.target_index], contracts[v.target_index]) for v in runnable}
    limits = options.limits()
    if options.memory_gb is None:         # the shared worker holds a session of every variant at once
        limits = _room_for(limits, [targets[v.target_index].path for v in runnable])
    warnings: list[str] = []
    progress = on_progress or (lambda fraction, message: None)
    progress(0.05, "timed generations")
    timing = _timed(runnable, vargs, arrays, options, limits, out_dir, pool_key, warnings, results)
    if options.memory:
        for i, v in enumerate(runnable):
            if "error" in results[v.id]:
                continue
            progress(0.5 + 0.5 * i / max(len(runnable), 1), f"{v.label}: memory")
            _memory(v, vargs[v.id], arrays, options, limits, out_dir, pool_key, results[v.id], specs[v.target_index])
    final = tuple(_variant_result(results[v.id], options) for v in variants)
    ratios = _ratios(final, options)
    progress(1.0, "done")
    decoders = tuple({"target": t.label, "convention": s.convention, "layers": s.layers, "heads": s.heads,
                      "kv_heads": s.kv_heads, "head_dim": s.head_dim, "vocab": s.vocab, "context": s.context,
                      "kv_bytes_per_token": s.kv_bytes_per_token(), "kv_dtype": s.kv_dtype}
                     for t, s in zip(targets, specs))
    machine = machine_facts(timing.get("load_before", ()), timing.get("load_after", ()), bool(timing.get("nvtx")))
    prompts = {f"p{p}b{b}": tuple(tuple(int(x) for x in row) for row in arrays[f"prompt{i}"])
               for i, (p, b) in enumerate(options.cases)}
    return GenerationProfile(final, ratios, options, decoders, prompts, machine, bool(timing.get("interleaved")),
                             time.perf_counter() - started, tuple(warnings))


def _room_for(limits: Limits, paths: Sequence[Path]) -> Limits:
    """``limits`` with memory for the sessions of the models at ``paths`` (their weights once each, on top
    of the defaults): the 3 GiB default refused a 6.4 GiB decoder ("std::bad_alloc" at session creation)."""
    return room_for_weights(limits, sum(model_weight_bytes(p) for p in paths))


def _job_limits(limits: Limits, n_variants: int, options: GenerationOptions) -> Limits:
    timeout = limits.timeout_s * max(1, n_variants) * max(1, len(options.cases))
    return replace(limits, timeout_s=timeout)


def _timed(runnable: Sequence[Variant], vargs: Mapping[str, dict], arrays: Mapping[str, np.ndarray],
           options: GenerationOptions, limits: Limits, out_dir: Path, pool_key: str, warnings: list[str],
           results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Step 2: one shared worker (interleaved); if it dies, one worker per variant."""
    if not runnable:
        return {}
    try:
        data = _generate(runnable, vargs, arrays, options, limits, out_dir, pool_key)
        _store(data, runnable, results)
        return {**data.data, "interleaved": len(runnable) > 1}
    except WorkerError as exc:
        if exc.kind == "cancelled":
            raise
        if len(runnable) == 1:
            results[runnable[0].id].update(error=str(exc), error_kind=exc.kind)
            return {}
        warnings.append(f"the shared generation worker failed ({exc}); variants were timed one at a time, so "
                        "their ratios include the machine's drift")
    last: dict[str, Any] = {}
    for v in runnable:
        try:
            single = _generate([v], vargs, arrays, options, limits, out_dir, pool_key)
        except WorkerError as exc:
            if exc.kind == "cancelled":
                raise
            results[v.id].update(error=str(exc), error_kind=exc.kind)
            continue
        _store(single, [v], results)
        last = dict(single.data)
    return last


def _generate(variants: Sequence[Variant], vargs: Mapping[str, dict], arrays: Mapping[str, np.ndarray],
              options: GenerationOptions, limits: Limits, out_dir: Path, pool_key: str) -> Any:
    job_limits = _job_limits(limits, len(variants), options)
    args = {"variants": [vargs[v.id] for v in variants], "cases": [list(c) for c in options.cases],
            "new_tokens": options.new_tokens, "generations": options.generations, "warmup": options.warmup,
            "seed": options.seed, "io_binding": options.io_binding,
            "budget_s": job_limits.timeout_s * _BUDGET_SHARE, "hard_budget_s": job_limits.timeout_s * _HARD_SHARE}
    return run_job("profile.generate", args, dict(arrays), stage="timed generations", limits=job_limits,
                   out_dir=out_dir, pool_key=pool_key)


def _store(result: Any, variants: Sequence[Variant], results: dict[str, dict[str, Any]]) -> None:
    data = result.data
    for v in variants:
        r = results[v.id]
        if v.id in data.get("errors", {}):
            r.update(error=data["errors"][v.id], error_kind="error")
            continue
        r["details"] = dict(data.get("details", {}).get(v.id, {}))
        cases = r.setdefault("cases", {})
        for ci, case in enumerate(data.get("cases", [])):
            if v.id in case.get("errors", {}):
                cases[ci] = {"error": case["errors"][v.id]}
            if v.id not in case.get("ids", []):
                continue
            key = f"c{ci}_{v.id}"
            steps = result.arrays[f"{key}_steps"].astype(np.float64) / 1e6
            cases[ci] = {"steps_ms": steps, "rounds_of": result.arrays[f"{key}_rounds"],
                         "tokens": result.arrays[f"{key}_tokens"],
                         "past_lengths": tuple(case["past_lengths"][v.id]),
                         "deterministic": bool(case.get("deterministic", {}).get(v.id, True)),
                         "stopped": case.get("stopped")}


def _memory(v: Variant, vargs: dict, arrays: Mapping[str, np.ndarray], options: GenerationOptions, limits: Limits,
            out_dir: Path, pool_key: str, result: dict[str, Any], spec: DecoderSpec) -> None:
    """Step 3: peak memory per case in a fresh worker; a failure is a note on the cases, not an error."""
    try:
        mem = run_job("profile.generate_memory", {"variant": vargs, "cases": [list(c) for c in options.cases],
                                                  "new_tokens": options.new_tokens, "io_binding": options.io_binding},
                      dict(arrays), stage=f"{v.label} (generation memory)",
                      limits=replace(limits, timeout_s=limits.timeout_s * max(1, len(options.cases))),
                      out_dir=out_dir, fresh=True, pool_key=pool_key)
    except WorkerError as exc:
        if exc.kind == "cancelled":
            raise
        result["memory_error"] = f"memory: {exc}"
        return
    result["baseline_rss"] = int(mem.data["baseline_rss"])
    result["opened_rss"] = int(mem.data["opened_rss"])
    for peak in mem.data["peaks"]:
        ci = int(peak["case"])
        if "error" in peak:
            continue
        p, b = options.cases[ci]
        rss = mem.arrays[f"c{ci}_rss"]
        case = result.setdefault("cases", {}).setdefault(ci, {})
        case.update(peak_rss=int(peak["peak_rss"]), peak_source=str(peak["peak_source"]),
                    rss_by_length=tuple((p + i, int(x)) for i, x in enumerate(rss)),
                    kv_cache_bytes=spec.kv_bytes_per_token() * b * (p + options.new_tokens - 1))


def _variant_result(r: dict[str, Any], options: GenerationOptions) -> GenerationVariant:
    v: Variant = r["variant"]
    if "error" in r:
        return GenerationVariant(v, error=r["error"], error_kind=r.get("error_kind"), details=r.get("details", {}))
    cases = []
    for ci, (p, b) in enumerate(options.cases):
        c = r.get("cases", {}).get(ci, {})
        cases.append(_case_result(p, b, options.new_tokens, c))
    return GenerationVariant(v, tuple(cases), details=r.get("details", {}), baseline_rss=r.get("baseline_rss"),
                             opened_rss=r.get("opened_rss"),
                             notes=(r["memory_error"],) if r.get("memory_error") else ())


def _case_result(p: int, b: int, n: int, c: Mapping[str, Any]) -> CaseResult:
    steps = c.get("steps_ms")
    memory = {k: c[k] for k in ("peak_rss", "peak_source", "rss_by_length", "kv_cache_bytes") if k in c}
    if steps is None or steps.shape[0] == 0:
        return CaseResult(p, b, n, error=c.get("error") or c.get("stopped") or "no timed generation completed",
                          **memory)
    decode = steps[:, 1:]
    by_position = tuple(float(x) for x in np.median(decode, axis=0)) if decode.size else ()
    tokens = tuple(tuple(int(x) for x in row) for row in c["tokens"])
    return CaseResult(p, b, n, ttft=latency_stats(steps[:, 0]),
                      decode=latency_stats(decode.reshape(-1)) if decode.size else None,
                      generation=latency_stats(steps.sum(axis=1)), decode_by_position_ms=by_position,
                      past_lengths=tuple(c.get("past_lengths", ())), tokens=tokens,
                      deterministic=bool(c.get("deterministic", True)), generations=int(steps.shape[0]),
                      steps_ms=steps, rounds_of=c["rounds_of"],
                      **memory)


def _pair(base: CaseResult, other: CaseResult, base_id: str, other_id: str, what: str) -> RatioEstimate | None:
    """``other / base`` of TTFT ("ttft") or decode ("decode"), round by round through :class:`LatencyRun`."""
    def samples(c: CaseResult) -> tuple[np.ndarray, np.ndarray]:
        if what == "ttft":
            return c.steps_ms[:, 0], c.rounds_of
        n = c.steps_ms.shape[1] - 1
        return c.steps_ms[:, 1:].reshape(-1), np.repeat(c.rounds_of, n)
    (bs, br), (os_, or_) = samples(base), samples(other)
    if bs.size == 0 or os_.size == 0:
        return None
    run = LatencyRun({base_id: bs, other_id: os_}, {base_id: br, other_id: or_},
                     {base_id: np.zeros(0), other_id: np.zeros(0)}, (), int(max(br.max(), or_.max())) + 1)
    return run.ratio(base_id, other_id)


def _ratios(variants: Sequence[GenerationVariant], options: GenerationOptions) -> tuple[GenerationRatio, ...]:
    ok = [v for v in variants if v.error is None and v.cases]
    if len(ok) < 2:
        return ()
    base = ok[0]
    rows = []
    for other in ok[1:]:
        for p, b in options.cases:
            bc, oc = base.case(p, b), other.case(p, b)
            if bc is None or oc is None or not bc.ok or not oc.ok:
                continue
            a, o = np.array(bc.tokens), np.array(oc.tokens)
            diff = np.nonzero((a != o).any(axis=0))[0] if a.shape == o.shape else np.array([0])
            rows.append(GenerationRatio(p, b, base.id, other.id, _pair(bc, oc, base.id, other.id, "ttft"),
                                        _pair(bc, oc, base.id, other.id, "decode"), diff.size == 0,
                                        int(diff[0]) if diff.size else None))
    return tuple(rows)
