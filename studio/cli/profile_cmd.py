"""onnx-studio profile MODEL [MODEL2 ...] [--engine ort,ov|all] [--iterations N | --duration S] [--per-op]
[--memory] [--threads 1,2] [--batch 1,4] [--concurrency 1,2] [--json] [--trace out.json] [--nsys]
[--generate --prompt-lengths 16,64 --new-tokens 32]"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import replace
import os
import shutil
import sys
import tempfile
from pathlib import Path

from studio import api
from studio.batch import facade as batch_api
from studio.cli.project_args import add_project_argument, keep_json, with_project
from studio.cli import remote_args
from studio.cli.common import parse_dims, positive_ints, print_json
from studio.cli import recipe_args
from studio.cli.inputs_args import add_preprocess_arguments, preprocess_from
from studio.core import outputs
from studio.core.errors import PathError, StudioError
from studio.core.fmt import human_bytes, printable
from studio.core.paths import distinct_name
from studio.core.requests import ProfileOptions, ProfileRequest
from studio.cli import profile_generate
from studio.cli.project_args import kept
from studio.core.error_codes import ErrorCode

NAME = "profile"
HELP = ("Latency (cold start, p50..p99.9, interleaved ratios), per-op time, memory and sweeps of one or more "
        "models on ONNX Runtime, OpenVINO and TensorRT.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_project_argument(p)
    p.add_argument("models", nargs="+", metavar="MODEL",
                   help="one or more .onnx files (versions to compare); with --generate also an OpenVINO IR .xml, "
                        "run on OpenVINO bound to the first .onnx (its decoder)")
    p.add_argument("--engine", action="append", metavar="SPEC",
                   help="ort, ort:cuda, ort:trt, openvino/ov, ov:bf16, ov:default, ov:throughput (OpenVINO's "
                        "THROUGHPUT hint), tensorrt/trt, trt:fp16, or all; repeat or comma-separate (default: ort)")
    p.add_argument("--warmup", type=int, default=10, metavar="N", help="untimed iterations per variant (default 10)")
    amount = p.add_mutually_exclusive_group()
    amount.add_argument("--iterations", type=int, metavar="N", help="timed iterations per variant (default 100)")
    amount.add_argument("--duration", type=float, metavar="S", help="total timed seconds, shared by the variants")
    p.add_argument("--rounds", type=int, default=20, metavar="R", help="interleaved rounds (default 20)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE", help="value for a symbolic input dim")
    p.add_argument("--inputs", metavar="NPZ", help="inputs from an .npz file (keys = input names)")
    p.add_argument("--dataset", metavar="NAME", help="time on the first sample of a dataset of the --project "
                                                     "(after its preprocessing)")
    p.add_argument("--images", metavar="DIR", help="a folder of images for the model's image input (the first "
                                                   "image is used; other inputs get seeded values)")
    add_preprocess_arguments(p.add_argument_group("image preprocessing (with --images)"))
    recipe_args.add_recipe_arguments(p, basic=False, title="preprocessing of the --dataset for this run (with "
                                                           "--image-size --layout --mean --std --bgr above)")
    p.add_argument("--per-op", action="store_true", help="per-op time (ORT profiling JSON, OpenVINO counters)")
    p.add_argument("--per-op-runs", type=int, default=10, metavar="N", help="profiled runs for --per-op")
    p.add_argument("--memory", action="store_true", help="peak RSS, Python allocation sites and a leak check")
    p.add_argument("--memory-iterations", type=int, default=200, metavar="N", help="iterations of the leak check")
    p.add_argument("--threads", type=positive_ints, metavar="1,2,...", help="sweep intra-op thread counts")
    p.add_argument("--batch", type=positive_ints, metavar="1,4,...", help="sweep batch sizes (dynamic first dim); with "
                                                                        "--generate: the generation's batch sizes")
    p.add_argument("--concurrency", type=positive_ints, metavar="1,2,...", help="sweep requests in flight")
    p.add_argument("--sweep-iterations", type=int, default=30, metavar="N", help="iterations per sweep point")
    p.add_argument("--ov-cache", action="store_true", help="OpenVINO model cache (in the job folder); cold start "
                                                           "is measured again with a warm cache")
    p.add_argument("--json", action="store_true", help="print the profile as JSON")
    p.add_argument("--samples", action="store_true", help="with --json: include every timed sample")
    p.add_argument("--trace", metavar="OUT.json", help="write the per-op trace (Perfetto / chrome://tracing) here "
                                                       "(implies --per-op)")
    p.add_argument("--out-dir", metavar="DIR", help="keep the job folder (profiles, traces, profile.json) here")
    p.add_argument("--nsys", action="store_true", help="run under Nsight Systems when nsys is on PATH, else print "
                                                       "the commands to run on a GPU machine (not verified here)")
    p.add_argument("--top", type=int, default=10, metavar="N", help="rows of the per-op table (default 10)")
    remote_args.add_arguments(p)

    profile_generate.add_arguments(p)


def request_of(args: argparse.Namespace) -> ProfileRequest:
    """The one ``ProfileRequest`` these flags ask for (paths as given; ``--dataset`` is the call's)."""
    amount: dict = {}
    if args.duration is not None:
        amount = {"duration_s": args.duration}
    elif args.iterations is not None:
        amount = {"iterations": args.iterations}
    return ProfileRequest(engines=tuple(args.engine or ["ort"]), options=ProfileOptions(
        warmup=args.warmup, rounds=args.rounds, per_op=args.per_op or bool(args.trace), per_op_runs=args.per_op_runs,
        memory=args.memory, memory_iterations=args.memory_iterations, batch_sizes=tuple(args.batch or ()),
        thread_counts=tuple(args.threads or ()), concurrency=tuple(args.concurrency or ()),
        sweep_iterations=args.sweep_iterations, dims=parse_dims(args.dim), inputs_npz=args.inputs,
        images_dir=args.images, preprocess=preprocess_from(args).to_dict() if args.images else (),
        seed=args.seed, timeout_s=args.timeout, memory_gb=args.memory_gb, ov_cache=args.ov_cache, **amount))


def _options(args: argparse.Namespace):  # noqa: ANN202 - profilers.profile.ProfileOptions
    return api.profile_options(request_of(args))


def _write_trace(source: Path, dest: Path) -> None:
    outputs.copy_file(source, dest)


def _nsys(args: argparse.Namespace) -> int | None:
    """--nsys: run under nsys when present (not verified here), else print the commands."""
    import shlex

    _options(args)                                   # the request's checks before anything runs
    flags = shlex.split(request_of(args).command(["MODEL"]))[3:]
    inner = [sys.executable, "-m", "studio", "profile", *args.models, *flags]
    nsys = api.find_nsys()
    out = Path(args.out_dir) if args.out_dir else Path("NSYS_OUT")
    inner += ["--out-dir", str(out / "profile")]      # the profile itself is kept beside the report
    plan = api.nsys_plan(inner, out / "nsys", nsys=nsys or "nsys")
    if nsys is None:
        print("note: nsys is not on PATH; on a GPU machine with Nsight Systems run (not verified here):",
              file=sys.stderr)
        print(plan.shell_text(), file=sys.stderr)
        return None
    if not args.out_dir:
        raise StudioError("--nsys needs --out-dir DIR (where the .nsys-rep report is written)",
                          code=ErrorCode.BAD_OPTION)
    (out / "nsys").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(api.__file__).resolve().parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])])}
    stats = api.run_nsys(plan, cwd=out / "nsys", env=env)
    if args.json:
        print_json({"nsys": stats.to_dict()})
        return 0
    print(f"nsys (not verified here): GPU kernels {stats.kernel_ns / 1e6:.3f} ms, memcpy {stats.memcpy_ns / 1e6:.3f} ms "
          f"({stats.memcpy_share:.0%} of GPU time); report {plan.report.name} in {out.name}/nsys")
    for k in stats.kernels[:args.top]:
        print(f"  {k.share:6.1%}  {k.total_ns / 1e6:9.3f} ms  x{k.instances:<6} {printable(k.name, 100)}")
    return 0


def _run(args: argparse.Namespace) -> int:
    if args.generate:               # a decoder's generation loop (studio/cli/profile_generate.py)

        return profile_generate.run(args)
    if args.nsys:
        code = _nsys(args)
        if code is not None:
            return code
    request = request_of(args)
    api.profile_options(request)                     # its checks (engines aside) before any model loads
    handles = [api.load(m) for m in args.models]
    if args.dataset:
        if kept(args) is None:
            raise StudioError("--dataset names a dataset of a project: add --project NAME")
        if args.inputs or args.images:
            raise StudioError("give --dataset, --inputs or --images, not several")
        ds = recipe_args.dataset_for_run(args, api.dataset(kept(args).project, args.dataset))
        npz = api.dataset_inputs_file(ds, handles[0], kept(args).job.dir / "dataset-inputs.npz")
        request = replace(request, options=replace(request.options, inputs_npz=str(npz)))
    else:
        recipe_args.dataset_for_run(args, None)          # recipe flags without a dataset: an error, not ignored
    if args.trace:
        outputs.check_destination(args.trace)           # before the run: not an input, no link/FIFO/folder
    names = [h.name for h in handles]
    labels = [f"{i}:{printable(n, 40)}" if names.count(n) > 1 else printable(n, 60) for i, n in enumerate(names)]
    targets = remote_args.targets_of(args)
    if targets:
        return _run_on_targets(args, targets, list(zip(labels, handles)), request)
    keep = Path(args.out_dir) if args.out_dir else None
    folder = keep if keep is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-profile-"))
    # --out-dir on a full or read-only disk: one line, and the job folder's files written so far go again.
    guard = outputs.writing_folder(keep) if keep is not None else contextlib.nullcontext()
    try:
        with guard:
            progress = None
            if not args.json and sys.stderr.isatty():
                def progress(fraction: float, message: str) -> None:
                    sys.stderr.write(f"\r{fraction:4.0%} {printable(message, 90):<100}")
                    sys.stderr.flush()
            profile = api.profile(list(zip(labels, handles)), request, out_dir=folder, pool_key="cli",
                                  on_progress=progress)
            if progress is not None:
                sys.stderr.write("\r" + " " * 106 + "\r")
            keep_json(args, "profile.json", profile.to_dict(include_samples=True), "profile")
            traced = _export_traces(profile, Path(args.trace)) if args.trace else True
            if keep is not None:
                outputs.write_json(keep / "profile.json", profile.to_dict(include_samples=True), indent=1, default=None)
            if args.json:
                print_json(profile.to_dict(include_samples=args.samples))
            else:
                _print(profile, args.top)
    finally:
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)   # scratch: the temp folder made above
    return 0 if profile.ok and traced else 1


def _run_on_targets(args: argparse.Namespace, targets: list[str], models: list, request: ProfileRequest) -> int:
    """--target/--targets: each target measures the same request; labelled, then side by side."""
    measured = batch_api.profile_on(targets, models, request, cluster=args.cluster,
                                    tls=remote_args.tls_of(args), pool_key="cli")
    if args.json:
        print_json({"targets": [m.to_dict() for m in measured]})
    else:
        for i, m in enumerate(measured):
            print(("\n" if i else "") + remote_args.measured_line(m))
            _print(m.result, args.top)
        remote_args.print_side_by_side(measured)
    return 0 if all(m.result.ok for m in measured) else 1


def _export_traces(profile, dest: Path) -> bool:  # noqa: ANN001 - profilers.profile.Profile
    """Write each variant's per-op trace; False (and a note) when none was produced, so nothing was written."""
    traced = [(v.id, profile.trace_path(v.id)) for v in profile.variants]
    traced = [(vid, path) for vid, path in traced if path is not None]
    if not traced:
        why = next((n for v in profile.variants for n in v.notes if n.startswith("per-op")), "see the per-op notes")
        print(f"error: no per-op trace was produced, so nothing was written to {printable(str(dest), 200)} "
              f"({printable(why, 240)})", file=sys.stderr)
        return False
    for vid, path in traced:
        suffix = dest.suffix or ".json"
        target = dest if len(traced) == 1 else dest.with_name(f"{dest.stem}-{distinct_name(vid)}{suffix}")
        _write_trace(path, target)
        print(f"trace    {vid}: {target}", file=sys.stderr)
    return True


def _ms(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if x < 100 else f"{x:.1f}"


def _print(profile, top: int) -> None:  # noqa: ANN001, C901 - one report, read top to bottom
    o = profile.options
    amount = f"{o.duration_s:g} s timed" if o.duration_s else f"{o.iterations} iterations each"
    print(f"profile  {len(profile.variants)} variant(s), {amount}, warm-up {o.warmup}, "
          + (f"{profile.rounds} interleaved rounds (shuffled order)" if profile.interleaved else "not interleaved"))
    m = profile.machine
    engines = ", ".join(f"{k} {v}" for k, v in m.engines.items() if v)
    load = (f"load {m.load_before[0]:.2f} -> {m.load_after[0]:.2f}" if m.load_before and m.load_after else "load ?")
    print(f"machine  {printable(m.cpu, 60)}, {m.cpu_count} CPUs, {load}; {engines}")
    for line in profile.feeds:
        print(f"inputs   {printable(line, 300)}")
    for w in profile.warnings:
        print(f"warning  {printable(w, 300)}")
    print()
    header = f"{'variant':<44} {'p50':>8} {'p90':>8} {'p99':>8} {'p99.9':>8} {'mean':>8} {'std':>7} {'min':>8} " \
             f"{'QPS':>9} {'cold→1st':>9}"
    print(header + "   (ms)")
    for v in profile.variants:
        name = printable(f"{v.id}  {v.variant.label}", 44)
        if not v.ok:
            print(f"{name:<44} FAILED ({v.error_kind}): {printable(v.error or '', 600)}")
            continue
        s = v.latency
        cold = _ms(v.cold.time_to_first_result_ms) if v.cold else "-"
        print(f"{name:<44} {_ms(s.p50_ms):>8} {_ms(s.p90_ms):>8} {_ms(s.p99_ms):>8} {_ms(s.p999_ms):>8} "
              f"{_ms(s.mean_ms):>8} {_ms(s.std_ms):>7} {_ms(s.min_ms):>8} {s.qps:>9.1f} {cold:>9}")
    for v in profile.variants:
        precision = v.details.get("precision_effective")
        if precision:
            print(f"  {v.id}: precision requested {v.details.get('precision_requested')}, "
                  f"effective {precision}")
        for key in ("fallback", "conversion_note"):
            if v.details.get(key):
                print(f"  {v.id}: {printable(str(v.details[key]), 200)}")
    if profile.ratios:
        base = profile.baseline
        print(f"\nratios vs {base.id} (median of per-round ratios, 95 % bootstrap CI; < 1 is faster)")
        for r in profile.ratios:
            ci = f"[{r.estimate.ci_low:.3f}–{r.estimate.ci_high:.3f}]" if r.estimate.ci_low is not None else "[no CI]"
            print(f"  {r.other_id:<18} {r.estimate.ratio:7.3f} {ci:>17}  spread {r.estimate.spread:.3f}  "
                  f"{printable(r.verdict, 200)}")
    for v in profile.variants:
        if v.cold:
            c = v.cold
            print(f"\ncold start {v.id}: worker {_ms(c.worker_start_ms)} ms, import {_ms(c.import_ms)} ms, load "
                  f"{_ms(c.load_ms)} ms, session {_ms(c.session_ms)} ms, first inference {_ms(c.first_inference_ms)} "
                  f"ms (warm {_ms(c.warm_inference_ms)} ms)"
                  + (f", compile from cache {_ms(c.cached_session_ms)} ms" if c.cached_session_ms is not None else ""))
        if v.ops:
            op = v.ops
            print(f"per-op {v.id}: sum {_ms(op.per_op_sum_ms)} ms vs end-to-end {_ms(op.end_to_end_ms)} ms "
                  f"({op.overhead_text()}"
                  + (f", engine's own run {_ms(op.engine_run_ms)} ms" if op.engine_run_ms is not None else "")
                  + f"); {op.mapped_share:.0%} of kernel time mapped to ONNX nodes; trace {op.trace_file}")
            for k in op.top(top):
                print(f"  {k.share:6.1%} {k.ms:9.4f} ms  {printable(k.op_type, 24):<24} {printable(k.name, 60):<60} "
                      f"-> {printable(k.anchor or '(not mapped)', 60)}")
            print("  by op type: " + ", ".join(f"{printable(t.op_type, 30)} {t.share:.0%}" for t in op.by_op_type[:8]))
        if v.memory:
            mem = v.memory
            print(f"memory {v.id}: peak RSS {human_bytes(mem.peak_rss)} (model +{human_bytes(mem.model_rss)}); "
                  f"leak check: {mem.leak.verdict} — {printable(mem.leak.message, 200)}")
            for site in mem.sites[:3]:
                print(f"  {human_bytes(site.size_diff):>10} held since warm-up  {printable(site.site, 80)}")
        for sweep in v.sweeps:
            if sweep.error:
                print(f"{sweep.kind} sweep {v.id}: {printable(sweep.error, 200)}")
                continue
            points = "; ".join(f"{p.value}: p50 {_ms(p.stats.p50_ms)} ms, {p.throughput:.1f}/s" if p.stats else
                               f"{p.value}: {p.note}" for p in sweep.points)
            print(f"{sweep.kind} sweep {v.id}: {points}")
        for note in v.notes:
            print(f"note {v.id}: {printable(note, 300)}")


def _job_request(args: argparse.Namespace):  # noqa: ANN202 - a ProfileRequest or GenerationRequest
    """What a kept run stores in its job row (as the Profile page does): the profile's or the generation's request."""
    return profile_generate.request_of(args) if args.generate else request_of(args)


run = with_project(NAME, _run, lambda a: a.models[0] if a.models else None, _job_request)
