"""Batch throughput: the same 40-model batch on the local pool and on a 2-worker loopback Dask cluster.

Run with ``python -m benchmarks.bench_batch`` (prints tables; not a test). Stages
inspect and check (ONNX Runtime only) keep it to a few minutes. Reported:

* wall time of each executor, and the sum of the stage times (measured inside
  ``run_stage``, in the process that ran it);
* per-task overhead: (wall x workers - stage time) / tasks, the time a worker slot
  spent on something other than the stage (scheduling, transfer, landing results);
* transfer: packing the models and scattering them to the cluster once (bytes, s);
* the cluster's extra wall time per task over the local pool.
The figures feed ``studio.batch.scaling`` (the README's throughput model).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import print_table

ROOT = Path(__file__).resolve().parents[1]
N_MODELS = 40
WORKERS = 2
STAGES = ("inspect", "check")
OPTIONS = {"check": {"engines": ["onnxruntime"]}}


def _models() -> list[Path]:
    sys.path.insert(0, str(ROOT))
    from tests.conftest import SAMPLES, backend_models

    samples = sorted(p for p in SAMPLES.glob("*.onnx"))
    backend = backend_models()
    step = max(1, len(backend) // (N_MODELS - len(samples)))
    return (samples + backend[::step])[:N_MODELS]


def _cpu_line() -> str:
    from studio.batch.stages import machine_facts

    facts = machine_facts()
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            have = next((ln.split(":", 1)[1].split() for ln in fh if ln.startswith("flags")), [])
        flags = " ".join(f for f in ("avx2", "avx512f", "avx512_vnni", "amx_tile") if f in have)
    except OSError:
        pass
    return f"{facts['cpu']}, {facts['cores']} cores, flags: {flags or '-'}"


def _stage_seconds(result) -> float:
    return sum(o.seconds for r in result.rows for o in r.outcomes.values())


def _transfer(models: list[Path], address: str) -> tuple[int, float]:
    """Pack and scatter every model once (what the executor does before the first task)."""
    from distributed import Client

    from studio.batch.executors import model_files, pack_model

    t0 = time.perf_counter()
    blobs = [pack_model(model_files(p)) for p in models]
    with Client(address, timeout=30, set_as_default=False) as c:
        futures = c.scatter(blobs, hash=False)
        c.gather(c.map(len, futures))
    return sum(map(len, blobs)), time.perf_counter() - t0


def main() -> dict:
    from studio.batch import facade as batch_api
    from studio.batch.loopback import LoopbackCluster

    models = _models()
    print(f"\nmachine: {_cpu_line()}; {len(models)} models x {len(STAGES)} stages ({', '.join(STAGES)}; check on ORT)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    rows, figures = [], {}
    t0 = time.perf_counter()
    local = batch_api.batch(models, tmp / "local", stages=STAGES, workers=WORKERS, stage_options=OPTIONS)
    local_wall = time.perf_counter() - t0
    with LoopbackCluster(tmp / "cluster", {"w1": None, "w2": None}) as cluster:
        nbytes, transfer_s = _transfer(models, cluster.address)
        t0 = time.perf_counter()
        remote = batch_api.batch(models, tmp / "remote", stages=STAGES, cluster=cluster.address,
                                 stage_options=OPTIONS)
        remote_wall = time.perf_counter() - t0
    for name, result, wall in (("local pool", local, local_wall), ("loopback Dask", remote, remote_wall)):
        tasks = result.ran
        stage_s = _stage_seconds(result)
        overhead = (wall * WORKERS - stage_s) / max(tasks, 1)
        ok = sum(o.status == "ok" for r in result.rows for o in r.outcomes.values())
        rows.append([name, WORKERS, tasks, ok, f"{wall:.1f}", f"{stage_s:.1f}", f"{stage_s / max(tasks, 1):.3f}",
                     f"{overhead:.3f}", f"{tasks / wall:.2f}"])
        figures[name] = {"wall_s": wall, "tasks": tasks, "stage_s": stage_s, "overhead_per_task_s": overhead}
    same = {(r.model.name, s): o.status for r in local.rows for s, o in r.outcomes.items()} == \
           {(r.model.name, s): o.status for r in remote.rows for s, o in r.outcomes.items()}
    print_table(f"Batch of {len(models)} models ({', '.join(STAGES)}), {WORKERS} workers each",
                ["executor", "workers", "tasks", "ok", "wall s", "stage s (sum)", "stage s/task",
                 "overhead s/task-slot", "tasks/s"], rows)
    extra = (remote_wall - local_wall) / max(remote.ran, 1)
    print_table("Cluster cost", ["models moved", "bytes", "pack + scatter s", "s/model", "extra wall s/task vs local",
                                 "same verdicts"],
                [[len(models), nbytes, f"{transfer_s:.2f}", f"{transfer_s / len(models):.4f}", f"{extra:+.3f}",
                  "yes" if same else "NO"]])
    figures["transfer"] = {"bytes": nbytes, "seconds": transfer_s, "models": len(models)}
    figures["extra_wall_per_task_s"] = extra
    print("@@BATCH@@" + json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
