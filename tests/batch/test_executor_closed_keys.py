"""A cancelled local batch closes its sandbox pool keys (a stage's next job is refused 'cancelled' instead of
starting a fresh worker), and forgets them once the executor has closed: a long-running serve does not keep
every cancelled batch's keys."""

from __future__ import annotations

import pytest

from studio.batch.executors import LocalExecutor
from studio.core.errors import WorkerError
from studio.core.sandbox import run_job
from studio.core.sandbox import pool as sandbox_pool
from studio.core.sandbox.pool import pool_closed


def test_cancel_closes_the_keys_and_close_forgets_them():
    ex = LocalExecutor(workers=1, pool_prefix="t-closed-keys")
    key = ex._pool_key()
    ex.cancel()
    assert pool_closed(key)
    with pytest.raises(WorkerError) as err:
        run_job("sandbox.selftest", {}, stage="a stage after the cancel", pool_key=key)
    assert err.value.kind == "cancelled"
    ex.close()
    assert not pool_closed(key) and key not in sandbox_pool._closed
