"""A real Dask cluster on 127.0.0.1: a scheduler and studio workers as subprocesses.

For tests, the benchmark and trying remote targets on one machine; a real
deployment starts ``dask scheduler`` and ``onnx-studio worker`` on its machines.
Everything binds to loopback; ``close()`` ends only the processes it started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path


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
    ``tls=(ca_file, cert, key)`` makes it a tls:// cluster (every member uses that certificate)."""

    def __init__(self, root: Path, workers: dict[str, str | None] | None = None,
                 tls: tuple[str, str, str] | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1",
                    "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        self.tls = tls
        self._tls_flags = [] if tls is None else ["--tls-ca-file", tls[0], "--tls-cert", tls[1], "--tls-key", tls[2]]
        sched_file = self.root / "scheduler.json"
        self.procs["scheduler"] = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
             "--no-dashboard", "--scheduler-file", str(sched_file),
             *(["--protocol", "tls", *self._tls_flags] if tls else [])],
            env=self.env, stdout=subprocess.DEVNULL, stderr=open(self.root / "scheduler.log", "w"),  # scratch: test-cluster logs in its own temp root
            start_new_session=True)
        try:
            self.address = _wait_for(sched_file)["address"]
            workers = {"plain": None, "edge": "edge"} if workers is None else workers
            for name, target in workers.items():
                self.start_worker(name, target)
            self.wait_workers(len(workers))
        except BaseException:
            self.close()
            raise

    def start_worker(self, name: str, target: str | None = None) -> None:
        cmd = [sys.executable, "-m", "studio", "worker", "--scheduler", self.address, "--host", "127.0.0.1",
               *self._tls_flags]
        if target:
            cmd += ["--target", target]
        env = {**self.env, "ONNX_STUDIO_WORKER_CACHE": str(self.root / f"cache-{name}")}
        self.procs[name] = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                            stderr=open(self.root / f"{name}.log", "w"), start_new_session=True)  # scratch: test-cluster logs in its own temp root

    def wait_workers(self, n: int, timeout: float = 90.0) -> None:
        from distributed import Client

        from studio.batch.executors import ClusterSecurity

        security = ClusterSecurity(*self.tls).to_dask() if self.tls else None
        with Client(self.address, timeout=30, set_as_default=False, security=security) as c:
            c.wait_for_workers(n, timeout=timeout)

    def kill(self, name: str) -> None:
        p = self.procs.pop(name)
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
