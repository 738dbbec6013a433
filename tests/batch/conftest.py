"""A real Dask cluster on 127.0.0.1: a scheduler and two studio workers (one is target 'edge')."""

from __future__ import annotations

import pytest

from tests.requirements import require_module

require_module("distributed")

from studio.batch.loopback import LoopbackCluster  # noqa: E402


def _healthy(cluster: LoopbackCluster) -> bool:
    """Every process it started still runs and the scheduler still sees both workers."""
    if any(p.poll() is not None for p in cluster.procs.values()):
        return False
    try:
        cluster.wait_workers(2, timeout=30)
    except Exception:  # noqa: BLE001 - a cluster that cannot answer is replaced, not debugged here
        return False
    return True


@pytest.fixture(scope="session")
def _shared_cluster(tmp_path_factory):
    """One cluster per test session (per xdist worker), started on first use in the run's sandbox
    environment: a start (scheduler, two studio workers and their nannies) and close cost ~8 s of CPU
    and ~25 s of wall time, and the five tests that use it only submit work to it. The tests that kill,
    freeze or restart members build their own (tests/batch/test_lost_dask_worker.py)."""
    def start() -> LoopbackCluster:
        return LoopbackCluster(tmp_path_factory.mktemp("dask") / "cluster")

    holder = {"cluster": start()}      # before any test's own fixtures: its workers get the run's environment
    try:
        yield holder, start
    finally:
        if "cluster" in holder:
            holder["cluster"].close()


@pytest.fixture
def dask_cluster(_shared_cluster):
    """The session's cluster, checked before each test; a new one when a member died."""
    holder, start = _shared_cluster
    cluster = holder.get("cluster")
    if cluster is None or not _healthy(cluster):
        if cluster is not None:
            cluster.close()
        cluster = holder["cluster"] = start()
    return cluster
