"""A throughput model for batch runs on W workers (a model, not a measurement).

    T(W) = transfer + tasks x (stage + overhead) / W,   floored at tasks x scheduler
    throughput(W) = tasks / T(W)

* ``transfer``: moving every model to the cluster once (the client scatters each by
  content hash; it is serial at the client, so it does not shrink with W);
* ``stage``: the time inside the stage (parsing, conversion, engine runs), which
  spreads over workers; timing on one remote target does not: a target is one
  machine, so ``measurement`` seconds add up serially per target;
* ``overhead``: what a worker slot spends per task besides the stage (scheduling,
  result landing) as measured by ``benchmarks/bench_batch.py``;
* ``scheduler``: Dask's per-task cost at the scheduler (about 1 ms, Dask's docs),
  the floor no number of workers removes.
Feed it the per-task numbers the benchmark prints; ``python -m studio.batch.scaling``
prints the README's table from the recorded ones.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TaskCosts:
    """Seconds per task (``stage``, ``overhead``), per model moved (``transfer``) and of serial
    timing on one target (``measurement``, per task that times)."""

    stage: float
    overhead: float
    transfer: float
    measurement: float = 0.0
    scheduler: float = 0.001


def batch_seconds(costs: TaskCosts, tasks: int, models: int, workers: int) -> float:
    """Modelled wall time of ``tasks`` tasks over ``models`` models on ``workers`` workers."""
    w = max(1, int(workers))
    parallel = tasks * (costs.stage + costs.overhead) / w
    return max(models * costs.transfer + parallel + tasks * costs.measurement, tasks * costs.scheduler)


def throughput(costs: TaskCosts, tasks: int, models: int, workers: int) -> float:
    """Modelled tasks per second."""
    return tasks / batch_seconds(costs, tasks, models, workers)


def dominant(costs: TaskCosts, tasks: int, models: int, workers: int) -> str:
    """Which term takes the largest share of the modelled wall time."""
    w = max(1, int(workers))
    terms = {"transfer": models * costs.transfer, "stage (conversion, engine runs)": tasks * costs.stage / w,
             "per-task overhead": tasks * costs.overhead / w, "serial measurement on one target":
             tasks * costs.measurement, "scheduler": tasks * costs.scheduler}
    return max(terms, key=terms.get)


# Recorded by benchmarks/bench_batch.py (loopback Dask, 2 workers, this 2-core VM) and the
# heavier stages timed locally; see README "Batch and remote targets".
RECORDED = {
    # measured: 40 small models, stage and overhead per task, 25 KiB package per model on loopback
    "inspect+check (small models)": TaskCosts(stage=0.06, overhead=0.03, transfer=0.004),
    # transfer extrapolated: a 100 MB model over 1 Gbit/s (not measured)
    "inspect+check (100 MB models, 1 Gbit/s)": TaskCosts(stage=0.06, overhead=0.03, transfer=0.85),
    # measured: optimize 1.6 s and export 1.0 s per task (mean, 4 sample models, one local worker)
    "optimize+export": TaskCosts(stage=1.3, overhead=0.03, transfer=0.004),
    # measured: profile 1.1 s per task; on one target the timing is serial whatever W is
    "profile on one target": TaskCosts(stage=0.0, overhead=0.03, transfer=0.004, measurement=1.1),
}


def table(workers: tuple[int, ...] = (1, 2, 4, 8, 16, 32), models: int = 400, stages: int = 2) -> list[list]:
    rows = []
    for name, costs in RECORDED.items():
        tasks = models * stages
        rows.append([name] + [f"{throughput(costs, tasks, models, w):.1f}" for w in workers]
                    + [dominant(costs, tasks, models, workers[-1])])
    return rows


if __name__ == "__main__":
    ws = (1, 2, 4, 8, 16, 32)
    print("| workload (400 models x 2 stages) | " + " | ".join(f"W={w} tasks/s" for w in ws) + " | dominant at W=32 |")
    print("|" + "---|" * (len(ws) + 2))
    for r in table(ws):
        print("| " + " | ".join(map(str, r)) + " |")
