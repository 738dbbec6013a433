"""A real Dask cluster on 127.0.0.1: a scheduler and two studio workers (one is target 'edge')."""

from __future__ import annotations

import os

import pytest

from tests.requirements import require_module

require_module("distributed")

from studio.batch.loopback import LoopbackCluster  # noqa: E402

MEMBERS = {"scheduler", "plain", "edge"}


def _healthy(cluster: LoopbackCluster) -> bool:
    """Every process it started still runs and the scheduler still sees both workers."""
    if set(cluster.procs) != MEMBERS or any(p.poll() is not None for p in cluster.procs.values()):
        return False
    try:
        cluster.wait_workers(2, timeout=30)
    except Exception:  # noqa: BLE001 - a cluster that cannot answer is replaced, not debugged here
        return False
    return True


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory):
    """One cluster per test session (per xdist worker), started in the run's sandbox environment: a start
    (scheduler, two studio workers and their nannies) and close cost ~8 s of CPU and ~25 s of wall time,
    and the tests that use it mostly only submit work to it. A test that adds, kills or reconfigures a
    member leaves a cluster the next test does not get (``dask_cluster``); the tests that kill, freeze or
    restart members build their own (tests/batch/test_lost_dask_worker.py)."""
    session_env = dict(os.environ)

    def start() -> LoopbackCluster:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(session_env)          # its workers get the run's environment, not a test's
        try:
            return LoopbackCluster(tmp_path_factory.mktemp("dask") / "cluster")
        finally:
            os.environ.clear()
            os.environ.update(saved)

    holder: dict[str, LoopbackCluster] = {}
    try:
        yield holder, start
    finally:
        if "cluster" in holder:
            holder["cluster"].close()


@pytest.fixture
def dask_cluster(_shared_cluster):
    """The session's cluster, checked before each test (a new one when a member died); after a test that
    changed its members or their environment it is closed, so the next test gets a fresh one."""
    holder, start = _shared_cluster
    cluster = holder.get("cluster")
    if cluster is None or not _healthy(cluster):
        if cluster is not None:
            holder.pop("cluster").close()
        cluster = holder["cluster"] = start()
    env = dict(cluster.env)
    yield cluster
    if set(cluster.procs) != MEMBERS or cluster.env != env:
        holder.pop("cluster").close()
