"""The generation profile's worker jobs: ``profile.generate`` times greedy generations of every variant,
interleaved, and ``profile.generate_memory`` measures one variant's peak memory per case in a fresh worker.

Timing (``profile.generate``): every variant is opened in the same worker; for each case (prompt
length x batch) each variant is warmed up by whole generations, then :func:`profilers.latency.timed_rounds`
(the studio's one latency loop) runs rounds of one generation per variant in a shuffled order. A
generation is one timed call; its per-token times are recorded by :class:`~profilers.generation.GreedyGeneration`
during the calls the loop's per-call hooks mark as timed, so call ``k`` of a variant pairs with
``rounds_of[k]`` of the loop's result and the parent can pair TTFT and decode latency round by round.

Memory (``profile.generate_memory``): the worker's resident high-water mark (Linux ``VmHWM``, reset
before each case) over one generation per case, the cases in increasing size so that what an earlier
case left in the allocator does not hide a later one's peak, and resident memory after every token.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from profilers.generation import GreedyGeneration, make_stepper
from profilers.latency import timed_rounds, warm_up
from profilers.nvtx import ranges
from profilers.runners import runner_args
from studio.core.engines import sessions
from studio.core.errors import engine_message
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.worker import reset_peak_rss, vm_hwm_bytes
from studio.inspect.decoder_contract import GenerationContract
from profilers.memory import rss_reader

__all__ = ["generate_job", "generate_memory_job"]


def _open(v: Mapping[str, Any], ctx: JobContext) -> Any:
    """The variant's runner, compiled for dynamic shapes (every step has other shapes); an OpenVINO IR
    variant is read as an IR, its output names taken from its source ONNX model."""
    args = runner_args(v["engine"], {})
    if v.get("openvino_ir"):        # an OpenVINO IR bound to its source ONNX model (names, output order)
        args.update(openvino_ir=True, onnx_path=v["onnx_path"])
    return sessions.open_runner(str(v["engine"]["engine"]), v["model_path"], args,
                                JobContext(scratch=ctx.scratch, out_dir=ctx.out_dir,
                                           cpu_threads=v["engine"].get("threads"),
                                           _report=ctx._report))


def _line(exc: BaseException) -> str:
    """One line naming the failure (an engine's multi-line message reduced as every job's is)."""
    return f"{type(exc).__name__}: {engine_message(str(exc).strip())[:300]}"


def _prompt(arrays: Mapping[str, np.ndarray], case: int) -> np.ndarray:
    return arrays[f"prompt{case}"]


def _hooks(gen: GreedyGeneration, nv_hooks: Any) -> tuple[Any, Any]:
    if nv_hooks is None:
        return gen.start, gen.stop
    push, pop = nv_hooks

    def start() -> None:
        gen.start()
        push()

    def stop() -> None:
        pop()
        gen.stop()
    return start, stop


@job("profile.generate")
def generate_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Warm-up and interleaved timed generations of every variant, case by case (module docs)."""
    started = time.monotonic()
    deadline = started + float(args["budget_s"])
    hard_deadline = started + float(args.get("hard_budget_s", args["budget_s"]))
    nv = ranges()
    load_before = os.getloadavg()
    errors: dict[str, str] = {}
    runners: dict[str, Any] = {}
    steppers: dict[str, Any] = {}
    details: dict[str, dict] = {}
    variants = {str(v["id"]): v for v in args["variants"]}
    out_arrays: dict[str, np.ndarray] = {}
    cases_out: list[dict] = []
    try:
        for vid, v in variants.items():
            ctx.set_stage(f"{v['label']}: session creation")
            try:
                runners[vid] = _open(v, ctx)
            except Exception as exc:  # noqa: BLE001 - one variant's failure is its own
                errors[vid] = f"session creation: {_line(exc)}"
                continue
            contract = GenerationContract.from_args(v["contract"])
            steppers[vid] = make_stepper(runners[vid], contract, io_binding=bool(args.get("io_binding", True)))
            details[vid] = {**{k: val for k, val in runners[vid].details.items() if k != "engine_version"},
                            "engine_version": runners[vid].details.get("engine_version"),
                            "io_binding": steppers[vid].io_binding}
        for ci, (length, batch) in enumerate(args["cases"]):
            prompt = _prompt(arrays, ci)
            gens: dict[str, GreedyGeneration] = {}
            case_errors: dict[str, str] = {}
            for vid in list(steppers):
                if vid in errors:
                    continue
                contract = GenerationContract.from_args(variants[vid]["contract"])
                gen = GreedyGeneration(steppers[vid], contract, prompt, int(args["new_tokens"]))
                ctx.set_stage(f"{variants[vid]['label']}: warm-up, prompt {length} x batch {batch}")
                try:
                    warm_up({vid: (gen, ())}, max(1, int(args["warmup"])))
                except Exception as exc:  # noqa: BLE001 - e.g. an engine refusing a shape: this case only
                    case_errors[vid] = _line(exc)
                    continue
                gens[vid] = gen
            case: dict[str, Any] = {"prompt_length": length, "batch": batch, "ids": list(gens),
                                    "errors": case_errors}
            if gens:
                ctx.set_stage(f"timed generations, prompt {length} x batch {batch}")
                hooks = {vid: _hooks(g, nv.iteration_hooks(f"generation {vid}")) for vid, g in gens.items()}
                run = timed_rounds({vid: (g, ()) for vid, g in gens.items()},
                                   {vid: [1] * int(args["generations"]) for vid in gens},
                                   seed=int(args.get("seed", 0)), deadline=deadline, hooks=hooks,
                                   hard_deadline=hard_deadline)
                case.update(stopped=run.stopped, order=[list(o) for o in run.order], past_lengths={})
                for vid, g in gens.items():
                    if len(g.recorded) != run.samples_ms[vid].size:    # the hooks mark exactly the timed calls
                        raise RuntimeError(f"{vid}: {len(g.recorded)} recorded generations for "
                                           f"{run.samples_ms[vid].size} timed calls")
                    key = f"c{ci}_{vid}"
                    out_arrays[f"{key}_steps"] = (np.stack(g.recorded) if g.recorded
                                                  else np.zeros((0, g.new_tokens), np.int64))
                    out_arrays[f"{key}_rounds"] = run.rounds_of[vid].astype(np.int32)
                    out_arrays[f"{key}_tokens"] = g.tokens.copy()
                    same = all(np.array_equal(t, g.recorded_tokens[0]) for t in g.recorded_tokens)
                    case["past_lengths"][vid] = list(g.past_lengths)
                    case.setdefault("deterministic", {})[vid] = bool(same)
            cases_out.append(case)
    finally:
        for r in runners.values():
            r.close()
    return JobOutput(data={"cases": cases_out, "errors": errors, "details": details,
                           "load_before": list(load_before), "load_after": list(os.getloadavg()),
                           "nvtx": nv.attached, "seconds": time.monotonic() - started}, arrays=out_arrays)


@job("profile.generate_memory")
def generate_memory_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """One variant: resident memory before and after opening, then per case (smallest first) the
    high-water mark over one generation and the resident memory after every token."""
    v = args["variant"]
    rss = rss_reader()
    baseline = rss()
    ctx.set_stage(f"{v['label']}: session creation (memory)")
    runner = _open(v, ctx)
    out_arrays: dict[str, np.ndarray] = {}
    peaks: list[dict] = []
    try:
        opened = rss()
        contract = GenerationContract.from_args(v["contract"])
        stepper = make_stepper(runner, contract, io_binding=bool(args.get("io_binding", True)))
        cases = list(enumerate(args["cases"]))
        for ci, (length, batch) in sorted(cases, key=lambda c: (c[1][0] * c[1][1], c[1][0])):
            ctx.set_stage(f"{v['label']}: memory, prompt {length} x batch {batch}")
            gen = GreedyGeneration(stepper, contract, _prompt(arrays, ci), int(args["new_tokens"]), rss=True)
            reset = reset_peak_rss()
            try:
                gen()
            except Exception as exc:  # noqa: BLE001 - the timed job reports this case's error
                peaks.append({"case": ci, "error": _line(exc)})
                continue
            peak = vm_hwm_bytes() if reset else None
            out_arrays[f"c{ci}_rss"] = gen.rss_bytes.copy()
            peaks.append({"case": ci, "peak_rss": int(peak) if peak else int(gen.rss_bytes.max()),
                          "peak_source": "VmHWM" if peak else "RSS after each token"})
    finally:
        runner.close()
    return JobOutput(data={"baseline_rss": int(baseline), "opened_rss": int(opened), "peaks": peaks},
                     arrays=out_arrays)

