"""R54: a signal to a command that starts a child stops the child too; nothing keeps running,
stays connected or holds a port. ``onnx-studio worker`` (its dask worker: the CLI, the nanny's
worker process, multiprocessing's helpers) and ``onnx-studio batch`` (its sandbox workers);
``serve`` is R44 (test_serve_signals_and_options.py). Every wait polls a condition under a bound that only
guards a hang."""

from __future__ import annotations

import os
import signal

import pytest

from sample_models.catalog import path_of
from tests.servers import all_gone, descendants, port_bindable, start_studio, wait_until

BOUND_S = 30


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=["TERM", "INT", "KILL"])
def test_r54_a_signal_to_worker_stops_its_dask_worker(tmp_path, sig):
    pytest.importorskip("distributed")
    from distributed import Client

    from studio.batch.loopback import LoopbackCluster

    with LoopbackCluster(tmp_path / "cluster", {}) as cluster, open(tmp_path / "worker.log", "wb") as log, \
            Client(cluster.address, timeout=30, set_as_default=False) as c:
        proc = start_studio(["worker", "--scheduler", cluster.address], log)
        try:
            c.wait_for_workers(1, timeout=90)
            ((address, info),) = c.scheduler_info(n_workers=-1)["workers"].items()
            # the worker registers before its nanny's start() returns; a signal in between is stock dask's
            # "Nanny failed to start" (exit 1), not what is tested here: wait for the nanny to be running
            assert wait_until(lambda: "running" in str(c.run(lambda dask_worker: dask_worker.status, nanny=True)),
                              BOUND_S), "the nanny did not finish starting"
            children = descendants(proc)
            pids = {p.pid for p in children}
            assert c.run(os.getpid)[address] in pids, "the connected worker process is the wrapper's descendant"
            ports = {int(a.rsplit(":", 1)[1]) for a in (address, info["nanny"])}
            assert not any(port_bindable(p) for p in ports), "the worker and its nanny listen"

            os.kill(proc.pid, sig)
            proc.wait(BOUND_S)
            assert wait_until(lambda: all_gone(children), BOUND_S), [p.cmdline()[:3] for p in children]
            assert wait_until(lambda: all(port_bindable(p) for p in ports), BOUND_S)
            assert wait_until(lambda: not c.scheduler_info(n_workers=-1)["workers"], BOUND_S), "still connected"
            # exits with its child: the dask worker closes cleanly (0) on SIGTERM
            assert proc.returncode == (-signal.SIGKILL if sig == signal.SIGKILL else 0)
        finally:
            for p in [*descendants(proc)]:
                p.kill()
            if proc.poll() is None:
                proc.kill()
                proc.wait(BOUND_S)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_r54_a_signal_to_batch_stops_its_sandbox_workers(tmp_path, sig):
    # A profile stage of 300 s keeps the batch mid-run whatever the machine's speed: a check of two small models
    # alone could finish (and write batch.json) between the worker's start and the signal on a fast CPU.
    long = tmp_path / "stages.json"
    long.write_text('{"profile": {"duration_s": 300}}')
    with open(tmp_path / "batch.log", "wb") as log:
        proc = start_studio(["batch", str(path_of("cnn_unfused")), str(path_of("mobilenet_like")), "-o",
                       str(tmp_path / "out"), "--stages", "check,profile", "--engines", "onnxruntime,openvino",
                       "--stage-requests", str(long), "--workers", "1", "--force"], log)
        try:
            # Signalled during the profile stage (the first check has finished; one task thread, tasks in order):
            # a cancelled task's next job must not start in a fresh worker (a profile's next variant ran on).
            done = tmp_path / "batch.log"
            assert wait_until(lambda: b"[1/4" in done.read_bytes(), 120), "the first check finishes"
            assert wait_until(lambda: descendants(proc), 120), "the batch starts a sandbox worker"
            os.kill(proc.pid, signal.SIGSTOP)            # frozen mid-run: it cannot finish before the signal
            children = descendants(proc)
            assert children and proc.poll() is None
            os.kill(proc.pid, sig)
            os.kill(proc.pid, signal.SIGCONT)
            proc.wait(BOUND_S)
            assert wait_until(lambda: all_gone(children), BOUND_S), [p.cmdline()[:3] for p in children]
            assert not (tmp_path / "out" / "batch.json").exists(), "the batch was stopped mid-run"
        finally:
            for p in descendants(proc):
                p.kill()
            if proc.poll() is None:
                proc.kill()
                proc.wait(BOUND_S)
