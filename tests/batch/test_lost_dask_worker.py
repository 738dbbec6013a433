"""R53: a stock Dask cluster (``dask scheduler`` + plain ``dask worker``s, default configuration)
loses no batch row when the real worker process of one worker is ``kill -9``ed mid-batch: tasks
that were running there run again elsewhere (``--retries``), models that lived only on the dead
worker are sent again, and with ``--retries 0`` those rows say "worker lost ADDRESS". A worker that
joins late takes the work; a restarted scheduler gets the unfinished tasks again, and one that
stays away ends the run cleanly with the rest resumable.

The kill is deterministic: once the first result is in, the victim is frozen (SIGSTOP), so the
tasks the scheduler shows running on it cannot finish or move; only then is it killed."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sample_models.catalog import path_of
from studio.batch import facade as batch_api
from studio.batch.executors import DaskExecutor
from studio.batch.loopback import LoopbackCluster
from studio.batch.runner import run_batch
from tests.servers import wait_until

pytestmark = pytest.mark.slow

MODELS = ["cnn_unfused", "mobilenet_like", "gridsample_4d", "if_loop", "constant_weights", "image_classifier"]
STAGES = ["inspect", "check"]
OPTS = {"check": {"engines": ["onnxruntime"]}}
POLL_S = 60.0              # a bound that only guards a hang: every wait below polls a condition


def _models():
    return [path_of(n) for n in MODELS]


def _wait(condition, what: str, timeout: float = POLL_S):
    got = wait_until(condition, timeout)
    if not got:
        raise AssertionError(f"never happened: {what}")
    return got


def _run_on(cluster, tmp_path, on_progress, **executor_options):
    """The batch through a DaskExecutor on ``cluster``; its result and the worker removals it saw."""
    ex = DaskExecutor(cluster.address, **executor_options)
    try:
        result = run_batch(_models(), tmp_path / "out", stages=STAGES, executor=ex, stage_options=OPTS,
                           on_progress=on_progress)
        return result, list(ex.jobs.removed)
    finally:
        ex.close()


def _client(cluster):
    from distributed import Client

    return Client(cluster.address, timeout=30, set_as_default=False)


def _task_key(dask_key: str) -> str:
    """The batch task key inside a Dask key ``STAGE-TASKKEY-TOKEN-N``."""
    return str(dask_key).split("-")[1]


def _freeze_running(pid: int, cache: Path) -> set[str]:
    """SIGSTOP the worker process while it runs a batch task; the keys of the tasks it runs.
    The evidence is the worker's own scratch folder: a task's ``task-*/KEY`` folder exists from
    its start until it returns (kill -9 leaves it behind). A frozen worker can neither finish a
    task nor hand one over (stealing needs its reply)."""
    def frozen_running():
        os.kill(pid, signal.SIGSTOP)
        keys = {d.name for d in cache.glob("task-*/*") if d.is_dir()}
        if not keys:
            os.kill(pid, signal.SIGCONT)
        return keys
    return _wait(frozen_running, f"worker process {pid} running a batch task")


def _outcomes(result):
    return {o.key: o for r in result.rows for o in r.outcomes.values()}


def _holder(client, names: dict[str, tuple[str, int]]) -> str:
    """The worker holding the most scattered models (Dask places each on one worker)."""
    held = client.has_what()
    return max(names, key=lambda n: sum(not str(k).startswith(tuple(STAGES)) for k in held.get(names[n][0], ())))


def _kill_mid_batch(cluster, tmp_path, retries: int):
    """Run the batch; at the first result freeze the worker holding the models with work, note it,
    kill -9 its real worker process."""
    seen: dict = {}
    procs = {name: cluster.worker_process(name) for name in ("a", "b")}
    with _client(cluster) as c:
        # Dask's default configuration: the scheduler itself would re-run a task 3 times
        assert c.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 3
        def on_progress(done, total, eta, outcome):
            if seen:
                return
            seen["name"] = _holder(c, procs)
            address, pid = procs[seen["name"]]
            seen["running"] = _freeze_running(pid, cluster.root / f"cache-{seen['name']}")
            seen["done_before"] = done
            os.kill(pid, signal.SIGKILL)
            seen["killed"] = True
        result, removed = _run_on(cluster, tmp_path, on_progress, retries=retries)
    assert seen.get("killed") and seen["running"], "the victim was killed while it ran batch tasks"
    return result, *procs[seen["name"]], seen, removed


@pytest.mark.parametrize("nanny", [True, False], ids=["nanny", "no-nanny"])
def test_r53_a_killed_worker_process_loses_no_row(tmp_path, nanny):
    with LoopbackCluster(tmp_path / "cluster", {"a": None, "b": None}, stock=True, nanny=nanny) as cluster:
        result, victim, pid, seen, removed = _kill_mid_batch(cluster, tmp_path, retries=1)
        if nanny:                                            # the nanny started a new worker process
            assert cluster.worker_process(seen["name"])[1] != pid
    rows = _outcomes(result)
    assert len(rows) == len(MODELS) * len(STAGES)
    assert {o.status for o in rows.values()} == {"ok"}, {o.model: (o.stage, o.status, o.verdict) for o in rows.values()}
    # the mechanism: the task the victim was running when it died ran again elsewhere; the tasks only
    # queued on it (in the scheduler's list too) never ran there and cost no attempt
    (event,) = [e for e in removed if e["worker"] == victim]
    queued = {_task_key(k) for k in event["processing"]} - seen["running"]
    assert seen["running"] <= {_task_key(k) for k in event["processing"]} and queued
    retried = {k for k, o in rows.items() if o.attempts == 2}
    assert retried == seen["running"]
    for k, o in rows.items():
        if k in retried:
            assert o.lost_workers == (victim,) and o.worker["worker"] != victim and o.worker["pid"] != pid
        else:
            assert o.attempts == 1 and o.lost_workers == ()


def test_r53_retries_zero_names_the_lost_worker_and_other_rows_finish(tmp_path):
    with LoopbackCluster(tmp_path / "cluster", {"a": None, "b": None}, stock=True) as cluster:
        result, victim, _, seen, removed = _kill_mid_batch(cluster, tmp_path, retries=0)
    rows = _outcomes(result)
    (event,) = [e for e in removed if e["worker"] == victim]
    lost = seen["running"]
    assert lost <= {_task_key(k) for k in event["processing"]}
    assert {k for k, o in rows.items() if o.status == "worker lost"} == lost
    for k in lost:
        assert rows[k].verdict.startswith(f"worker lost: {victim} died while running it")
        assert rows[k].worker == {"address": victim}
    others = {o.status for k, o in rows.items() if k not in lost}
    assert others == {"ok"} and "cancelled" not in {o.status for o in rows.values()}
    assert event["lost_data"], "the victim held models no other worker had: they were sent again"
    # resuming (here on the local pool) runs exactly the lost rows
    again = batch_api.batch(_models(), tmp_path / "out", stages=STAGES, cluster=None, stage_options=OPTS)
    assert again.ran == len(lost) and again.skipped == len(rows) - len(lost)
    assert {o.status for r in again.rows for o in r.outcomes.values()} == {"ok"}


def test_r53_a_late_worker_takes_the_rest_after_the_only_worker_dies(tmp_path):
    with LoopbackCluster(tmp_path / "cluster", {"first": None}, stock=True, nanny=False) as cluster:
        first, pid = cluster.worker_process("first")
        seen: dict = {}
        with _client(cluster) as c:
            def on_progress(done, total, eta, outcome):
                if seen:
                    return
                seen["running"] = _freeze_running(pid, cluster.root / "cache-first")
                os.kill(pid, signal.SIGKILL)
                _wait(lambda: not c.scheduler_info(n_workers=-1)["workers"], "the scheduler seeing no worker")
                cluster.start_worker("late")                 # joins an empty cluster mid-batch
                seen["late"] = cluster.worker_process("late")[0]
                seen["done_before"] = done
            result, _ = _run_on(cluster, tmp_path, on_progress, retries=1)
    rows = _outcomes(result)
    assert {o.status for o in rows.values()} == {"ok"}
    by_late = {k for k, o in rows.items() if o.worker["worker"] == seen["late"]}
    assert len(by_late) == len(rows) - seen["done_before"] >= len(seen["running"])
    assert {k for k, o in rows.items() if o.lost_workers == (first,)} == seen["running"]


def test_r53_a_restarted_scheduler_gets_the_unfinished_tasks(tmp_path):
    with LoopbackCluster(tmp_path / "cluster", {"a": None, "b": None}, stock=True, nanny=False) as cluster:
        seen: dict = {}
        before = set()
        with _client(cluster) as c:
            before = set(c.scheduler_info(n_workers=-1)["workers"])

        def on_progress(done, total, eta, outcome):
            if seen:
                return
            seen["done_before"] = done
            cluster.kill_scheduler()                         # kill -9; stock workers then leave
            for name in ("a", "b"):
                _wait(lambda name=name: cluster.procs[name].poll() is not None, f"worker {name} leaving")
            cluster.start_scheduler()                        # the same address
            cluster.start_worker("c")
            seen["after"] = cluster.worker_process("c")[0]
        result, _ = _run_on(cluster, tmp_path, on_progress, retries=1, timeout_s=30)
    rows = _outcomes(result)
    assert {o.status for o in rows.values()} == {"ok"}, {o.model: (o.stage, o.status, o.verdict) for o in rows.values()}
    on_new = {k for k, o in rows.items() if o.worker["worker"] == seen["after"]}
    assert len(on_new) == len(rows) - seen["done_before"] > 0
    assert not {o.worker["worker"] for k, o in rows.items() if k in on_new} & before


def test_r53_a_scheduler_that_stays_away_ends_the_run_cleanly_and_resume_finishes(tmp_path):
    with LoopbackCluster(tmp_path / "cluster", {"a": None}, stock=True, nanny=False) as cluster:
        seen: dict = {}

        def on_progress(done, total, eta, outcome):
            if not seen:
                seen["done_before"] = done
                cluster.kill_scheduler()
        # the first connect may take its time on a loaded machine; the wait for a lost scheduler is short
        result, _ = _run_on(cluster, tmp_path, on_progress, retries=1, timeout_s=30, reconnect_s=3)
    rows = _outcomes(result)
    lost = {k for k, o in rows.items() if o.status == "scheduler lost"}
    assert len(lost) == len(rows) - seen["done_before"] > 0
    assert {o.status for k, o in rows.items() if k not in lost} == {"ok"}
    assert all("did not come back" in rows[k].verdict and "resume" in rows[k].verdict for k in lost)
    with LoopbackCluster(tmp_path / "cluster2", {"a": None}, stock=True, nanny=False) as cluster:
        again = batch_api.batch(_models(), tmp_path / "out", stages=STAGES, cluster=cluster.address, stage_options=OPTS)
    assert again.ran == len(lost) and {o.status for r in again.rows for o in r.outcomes.values()} == {"ok"}
