"""Large models in bounded memory (issue 35 item 3): a 3B-wide LLaMA-shaped decoder with external data
(random float32 weights, >= 6 GiB on disk, built here layer by layer, never committed) through every
studio stage, each a separate process measured for wall time and the peak RSS of every process it starts,
beside onnxsim and onnxslim on the same file.

Goal: no studio process above 1.3x the weight bytes, every stage finishes on this machine. Memory is
shared: before each stage the benchmark checks what is available and skips a stage whose expected peak
would leave less than 4 GiB; the peers (which load every weight) run under an address-space cap
(``prlimit``-style ``RLIMIT_AS``) and are recorded as "exceeded N GiB cap" when they hit it.

    python -m benchmarks.bench_large --out DIR [--work DIR] [--keep] [--stages inspect,check,...]

The model lives under ``benchmarks/.cache/large-decoder`` (or ``--work``) and is deleted at the end unless
``--keep``. RSS counts resident pages, mmapped weight pages included (file-backed, reclaimable).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.harness import ROOT, cpu_banner, print_table
from benchmarks.models import CACHE

GiB = 2**30
GOAL_RATIO = 1.3            # no studio process above 1.3x the weight bytes
HEADROOM = 4 * GiB          # never start a stage that would leave less than this available
PEER_CAP_MAX = 14 * GiB     # the peers' address-space cap, lowered to what is available minus the headroom

# 3072 wide like a 3B LLaMA (heads 24, GQA 8, MLP 8192), 15 layers: 1.71 G float32 parameters, 6.36 GiB.
# float32, as sample_models.decoders writes its weights (a float16 3B-parameter variant was not built).
SHAPE_KW = dict(layers=15, hidden=3072, heads=24, kv_heads=8, intermediate=8192, vocab=32000, context=4096)
DIMS = ["--dim", "batch_size=1", "--dim", "sequence_length=8", "--dim", "past_sequence_length=8"]


@dataclass(frozen=True)
class StageRun:
    """One stage: its outcome, wall time and the peak RSS of each process it started (sampled)."""

    stage: str
    status: str                              # ok | failed | skipped | cap
    wall_s: float
    peak_rss: dict[str, int] = field(default_factory=dict)   # process label -> bytes (sampled, psutil)
    max_rss_exact: int = 0                   # wait4's ru_maxrss over the child and the children it reaped
    note: str = ""

    @property
    def top_rss(self) -> int:
        return max([self.max_rss_exact, *self.peak_rss.values()], default=0)


def available_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def _label(proc) -> str:
    try:
        cmd = proc.cmdline()
    except Exception:  # noqa: BLE001 - the process is gone
        return f"pid {proc.pid}"
    if not cmd:
        return f"pid {proc.pid}"
    exe = Path(cmd[0]).name
    rest = [c for c in cmd[1:4] if not c.startswith("/")] if exe.startswith("python") else cmd[1:2]
    return f"{exe} {' '.join(rest)}"[:60] + f" [{proc.pid}]"


def run_measured(cmd: list[str], *, cap_bytes: int | None = None, timeout: float = 3600,
                 env: dict | None = None) -> tuple[int, float, dict[str, int], int, str]:
    """Run ``cmd``; sample the RSS of it and every descendant every 0.2 s. Returns (exit code, wall s,
    {process: peak RSS}, wait4 ru_maxrss bytes, the last non-empty output line)."""
    import psutil

    def limit() -> None:
        if cap_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=limit, env=env)
    peaks: dict[int, tuple[str, int]] = {}
    done = threading.Event()

    def sample() -> None:
        root = psutil.Process(proc.pid)
        while not done.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
            for p in procs:
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                label, best = peaks.get(p.pid, (None, 0))
                if label is None:
                    label = _label(p)
                peaks[p.pid] = (label, max(best, rss))
            done.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
        lines[:] = lines[-200:]
    try:
        _, status, usage = os.wait4(proc.pid, 0)
        code = os.waitstatus_to_exitcode(status)
    except ChildProcessError:
        code, usage = proc.wait(), None
    proc.returncode = code
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    exact = int(usage.ru_maxrss * 1024) if usage is not None else 0
    last = next((ln for ln in reversed(lines) if ln.strip()), "")
    if RUN_LOG is not None:             # the stage's last output lines, for the reader of the table
        with RUN_LOG.open("a", encoding="utf-8") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n" + "\n".join(lines[-60:]) + "\n")
    return code, wall, {label: rss for label, rss in peaks.values()}, exact, last


RUN_LOG: Path | None = None


def build_model(work: Path) -> Path:
    """The decoder, written tensor by tensor (never all weights in memory); reused when present."""
    from sample_models.decoders import DecoderShape, write_large_decoder

    path = work / "model.onnx"
    if path.exists() and (work / "model.onnx.data").exists():
        return path
    need = 7 * GiB
    free = shutil.disk_usage(work.parent if work.parent.exists() else ROOT).free
    if free < 2 * need:
        raise SystemExit(f"bench_large: needs ~{2 * need / GiB:.0f} GiB of disk (model + outputs), "
                         f"{free / GiB:.0f} GiB free")
    return write_large_decoder(work, shape=DecoderShape(**SHAPE_KW), convention="optimum", fill="random")


def stage_commands(model: Path, work: Path) -> dict[str, tuple[list[str], float, int | None]]:
    """stage -> (argv, expected peak as a multiple of the weight bytes, address-space cap or None)."""
    cli = [sys.executable, "-m", "studio"]
    out = work / "out"
    script = out / "edit.json"
    return {
        "inspect": ([*cli, "inspect", str(model)], 0.1, None),
        "inspect --decoder": ([*cli, "inspect", str(model), "--decoder"], 0.1, None),
        "check (ORT)": ([*cli, "check", str(model), "--engines", "ort", *DIMS], GOAL_RATIO, None),
        "optimize (safe, verified)": ([*cli, "optimize", str(model), "-o", str(out / "opt" / "model.onnx"), *DIMS],
                                      GOAL_RATIO, None),
        "int4 weight-only (verified)": ([*cli, "optimize", str(model), "--passes", "quantize-weight-only",
                                         "-o", str(out / "int4" / "model.onnx"), *DIMS], GOAL_RATIO, None),
        "edit (rename output, verified)": ([*cli, "edit", str(model), "--script", str(script),
                                            "-o", str(out / "edit" / "model.onnx")], GOAL_RATIO, None),
        # each engine child compiles 6.36 GiB: OpenVINO's took > 120 s (the default) beside ORT's at load ~10
        "memory plan": ([*cli, "memory", str(model), *DIMS, "--measure-timeout", "600"], GOAL_RATIO, None),
        "generation profile (4 tokens)": ([*cli, "profile", str(model), "--generate", "--engine", "ort",
                                           "--prompt-lengths", "8", "--new-tokens", "4", "--generations", "1"],
                                          GOAL_RATIO, None),
        "onnxsim (peer)": ([str(Path(sys.executable).parent / "onnxsim"), str(model), str(out / "sim.onnx"),
                            "--save-as-external-data"], 99.0, PEER_CAP_MAX),
        "onnxslim (peer)": ([str(Path(sys.executable).parent / "onnxslim"), str(model), str(out / "slim.onnx"),
                             "--save-as-external-data"], 99.0, PEER_CAP_MAX),
    }


def weight_bytes(model: Path) -> int:
    return sum(p.stat().st_size for p in model.parent.glob(model.name + ".data"))


def run_stage(name: str, argv: list[str], ratio: float, cap: int | None, weights: int) -> StageRun:
    avail = available_bytes()
    if cap is not None:
        cap = min(cap, avail - HEADROOM)
        if cap < 2 * GiB:
            return StageRun(name, "skipped", 0.0, note=f"only {avail / GiB:.1f} GiB available")
    elif avail - ratio * weights < HEADROOM:
        return StageRun(name, "skipped", 0.0,
                        note=f"expected ~{ratio * weights / GiB:.1f} GiB, {avail / GiB:.1f} GiB available")
    print(f"  {name}: {' '.join(argv[2:] if argv[1] == '-m' else argv)[:150]} "
          f"({avail / GiB:.1f} GiB available{f', cap {cap / GiB:.1f} GiB' if cap else ''})", flush=True)
    code, wall, peaks, exact, last = run_measured(argv, cap_bytes=cap)
    status = "ok" if code == 0 else "failed"
    if code != 0 and cap and any(s in last for s in ("MemoryError", "bad_alloc", "Cannot allocate", "std::")):
        status, last = "cap", f"exceeded {cap / GiB:.1f} GiB cap: {last}"
    elif code != 0 and cap and code < 0:
        status, last = "cap", f"exceeded {cap / GiB:.1f} GiB cap (signal {-code}): {last}"
    return StageRun(name, status, wall, peaks, exact, last[:200])


def main(argv: list[str] | None = None) -> list[StageRun]:
    global RUN_LOG
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_large")
    ap.add_argument("--out", type=Path, default=CACHE / "bench-large")
    ap.add_argument("--work", type=Path, default=CACHE / "large-decoder")
    ap.add_argument("--keep", action="store_true", help="keep the model and outputs (default: deleted)")
    ap.add_argument("--stages", default="", help="comma-separated stage-name prefixes (default: all)")
    args = ap.parse_args([] if argv is None else argv)
    args.out.mkdir(parents=True, exist_ok=True)
    RUN_LOG = args.out / "bench_large.log"
    print(cpu_banner(), flush=True)
    args.work.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    model = build_model(args.work)
    weights = weight_bytes(model)
    print(f"  model: {model} ({weights / GiB:.2f} GiB of external data, built/reused in "
          f"{time.perf_counter() - t:.0f} s)", flush=True)
    out = args.work / "out"
    out.mkdir(exist_ok=True)
    (out / "edit.json").write_text(json.dumps([{"op": "rename", "tensors": {"logits": "next_token_logits"}}]))
    wanted = [s for s in args.stages.split(",") if s]
    runs: list[StageRun] = []
    try:
        for name, (cmd, ratio, cap) in stage_commands(model, args.work).items():
            if wanted and not any(name.startswith(w) for w in wanted):
                continue
            runs.append(run_stage(name, cmd, ratio, cap, weights))
            for sub in ("opt", "int4", "edit"):
                shutil.rmtree(out / sub, ignore_errors=True)
            for f in out.glob("s*.onnx*"):
                f.unlink()
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    rows = []
    for r in runs:
        procs = "; ".join(f"{k}: {v / GiB:.2f}" for k, v in sorted(r.peak_rss.items(), key=lambda kv: -kv[1])[:3])
        peer = r.stage.endswith("(peer)")
        goal = "-" if peer or r.status == "skipped" else ("yes" if r.top_rss <= GOAL_RATIO * weights else "NO")
        rows.append([r.stage, r.status, f"{r.wall_s:.0f}", f"{r.top_rss / GiB:.2f}", f"{r.top_rss / weights:.2f}x",
                     goal, procs, r.note[:90]])
    print_table(f"Large decoder (code-built, random weights): {weights / GiB:.2f} GiB float32 external data; "
                f"goal: every studio process <= {GOAL_RATIO}x the weights",
                ["stage", "status", "wall s", "peak RSS GiB (one process)", "vs weights", f"<= {GOAL_RATIO}x",
                 "per process GiB (sampled)", "note"], rows)
    (args.out / "bench_large.json").write_text(json.dumps({"cpu": cpu_banner(), "weight_bytes": weights,
                                                           "runs": [asdict(r) for r in runs]}, indent=1))
    return runs


if __name__ == "__main__":
    main(sys.argv[1:])
