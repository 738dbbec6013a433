"""A real Dask cluster on 127.0.0.1: a scheduler and workers as subprocesses.

For tests, the benchmark and trying remote targets on one machine; a real
deployment starts ``dask scheduler`` and ``onnx-studio worker`` on its machines.
Everything is started with the stock command lines (``dask scheduler``, ``dask worker``
or ``onnx-studio worker``) and Dask's default configuration. Everything binds to
loopback; ``close()`` ends only the processes it started.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from studio.batch.executors import ClusterSecurity

DASK = [sys.executable, "-m", "dask"]          # the stock ``dask`` command of this interpreter


def _wait_for(path: Path, timeout: float = 60.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.is_file():
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"{path.name} never appeared")


class LoopbackCluster:
    """``LoopbackCluster(root, workers={"plain": None, "edge": "edge"})``: name -> target (or None);
    ``tls=(ca_file, cert, key)`` makes it a tls:// cluster (every member uses that certificate).
    ``stock=True`` starts plain ``dask worker`` processes (``nanny=False``: ``--no-nanny``)
    instead of ``onnx-studio worker``."""

    def __init__(self, root: Path, workers: dict[str, str | None] | None = None,
                 tls: tuple[str, str, str] | None = None, *, stock: bool = False, nanny: bool = True) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}   # Dask's defaults
        self.tls = tls
        self.stock, self.nanny = stock, nanny
        self._tls_flags = [] if tls is None else ["--tls-ca-file", tls[0], "--tls-cert", tls[1], "--tls-key", tls[2]]
        self.address = ""
        self._port = 0
        try:
            self.start_scheduler()
            workers = {"plain": None, "edge": "edge"} if workers is None else workers
            for name, target in workers.items():
                self.start_worker(name, target)
            if workers:
                self.wait_workers(len(workers))
        except BaseException:
            self.close()
            raise

    def start_scheduler(self) -> str:
        """``dask scheduler`` on 127.0.0.1 (the same port again after ``kill_scheduler``)."""
        sched_file = self.root / "scheduler.json"
        sched_file.unlink(missing_ok=True)  # scratch: the test cluster's own file in its own root
        self.procs["scheduler"] = subprocess.Popen(
            [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(self._port), "--no-dashboard",
             "--scheduler-file", str(sched_file), *(["--protocol", "tls", *self._tls_flags] if self.tls else [])],
            env=self.env, stdout=subprocess.DEVNULL, stderr=open(self.root / "scheduler.log", "a"),  # scratch: test-cluster logs in its own temp root
            start_new_session=True)
        self.address = _wait_for(sched_file)["address"]
        self._port = int(self.address.rsplit(":", 1)[1])
        return self.address

    def kill_scheduler(self) -> None:
        """``kill -9`` the scheduler (its workers then leave on their own, as stock workers do)."""
        self.kill("scheduler")

    def start_worker(self, name: str, target: str | None = None, *, stock: bool | None = None,
                     nanny: bool | None = None) -> None:
        stock = self.stock if stock is None else stock
        nanny = self.nanny if nanny is None else nanny
        if stock:
            cmd = [*DASK, "worker", self.address, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard",
                   *self._tls_flags, *([] if nanny else ["--no-nanny"])]
            if target:
                cmd += ["--resources", f"target-{target}=1"]
        else:
            cmd = [sys.executable, "-m", "studio", "worker", "--scheduler", self.address, "--host", "127.0.0.1",
                   *self._tls_flags]
            if target:
                cmd += ["--target", target]
        env = {**self.env, "ONNX_STUDIO_WORKER_CACHE": str(self.root / f"cache-{name}")}
        self.procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                            stderr=open(self.root / f"{name}.log", "a"), start_new_session=True)  # scratch: test-cluster logs in its own temp root

    def worker_process(self, name: str, timeout: float = 60.0) -> tuple[str, int]:
        """(Dask address, pid) of the real worker process that ``name`` started: the process itself
        (``--no-nanny``) or the nanny's worker child. Waits until the scheduler knows it."""
        import psutil
        from distributed import Client

        started = self.procs[name].pid
        end = time.monotonic() + timeout
        with Client(self.address, timeout=30, set_as_default=False, security=self._security()) as c:
            while time.monotonic() < end:
                for address, pid in c.run(os.getpid).items():
                    try:
                        if pid == started or started in {q.pid for q in psutil.Process(pid).parents()}:
                            return address, pid
                    except psutil.NoSuchProcess:
                        continue
                time.sleep(0.2)
        raise RuntimeError(f"worker {name} never joined")

    def wait_workers(self, n: int, timeout: float = 90.0) -> None:
        from distributed import Client

        with Client(self.address, timeout=30, set_as_default=False, security=self._security()) as c:
            c.wait_for_workers(n, timeout=timeout)

    def _security(self):
        return ClusterSecurity(*self.tls).to_dask() if self.tls else None

    def kill(self, name: str) -> None:
        """``kill -9`` the process group ``name`` started (a studio worker's dask worker, in its own
        session, then stops through ``PR_SET_PDEATHSIG``; ``worker_process`` names the real one)."""
        p = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(10)

    def close(self) -> None:
        for name in list(self.procs):
            p = self.procs.pop(name)
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def __enter__(self) -> LoopbackCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
