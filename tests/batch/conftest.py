"""A real Dask cluster on 127.0.0.1: a scheduler and two studio workers (one is target 'edge')."""

from __future__ import annotations

import pytest

from tests.requirements import require_module

require_module("distributed")

from studio.batch.loopback import LoopbackCluster  # noqa: E402


@pytest.fixture
def dask_cluster(tmp_path):
    cluster = LoopbackCluster(tmp_path / "cluster")
    try:
        yield cluster
    finally:
        cluster.close()
