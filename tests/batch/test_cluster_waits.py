"""Issue 31 item 4: every cluster and remote-target call has a bounded wait and ends in one line that
names the address. Real sockets on 127.0.0.1: a port that accepts and never answers, one that answers
HTTP junk, one that refuses; and a malformed address. Each command of the list (``batch --cluster``,
``profile --target``, ``precision --target``, ``profile --generate --target``) meets each of them.

They hung past 300 s (silent port), or ended after 40 s in a raw ``TimeoutError`` / a 3 EiB allocation
(junk, ``tcp://[::1``). The wait is ONNX_STUDIO_CLUSTER_TIMEOUT_S (here 0.5 s, 2 s for junk); the bounds below only catch
a hang (a run that outlives them has hung), they time nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from sample_models.catalog import path_of
from studio.batch.executors import cluster_address, probe_scheduler
from studio.cli import main
from studio.core.errors import StudioError
from tests.conftest import ROOT, assert_user_message
from tests.requirements import require_module

require_module("distributed")

HANG_GUARD_S = 60.0          # for a 2-5 s limit: generous; a run past it has hung


class _Server:
    """A TCP server on 127.0.0.1 in a thread: ``silent`` accepts and never writes, ``junk`` answers every
    connection with HTTP bytes, ``refused`` is a port nobody listens on."""

    def __init__(self, kind: str) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.kind, self.conns = kind, []
        if kind == "refused":
            self.sock.close()
            return
        self.sock.listen(64)
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)                 # kept open: a silent peer, never a closed one
            if self.kind == "junk":
                try:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/html\r\n\r\n<html>no</html>" * 20)
                except OSError:
                    pass

    @property
    def address(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def close(self) -> None:
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.fixture(params=["silent", "junk", "refused"])
def server(request):
    s = _Server(request.param)
    yield s
    s.close()


def _commands(address: str) -> dict[str, list[str]]:
    model = str(path_of("cnn_unfused"))
    return {
        "batch --cluster": ["batch", model, "-o", "out", "--cluster", address],
        "profile --target": ["profile", model, "--target", "edge", "--cluster", address],
        "precision --target": ["precision", model, "--variants", "fp32,fp16", "--target", "edge", "--cluster", address],
        "profile --generate --target": ["profile", str(path_of("gpt2_decoder_merged")), "--generate", "--target",
                                        "edge", "--cluster", address],
    }


def _run_bounded(argv: list[str]) -> tuple[int | None, float]:
    """``main(argv)`` in a thread; (exit code, seconds), exit code None when it did not end in HANG_GUARD_S."""
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(main(argv)), daemon=True)
    start = time.monotonic()
    t.start()
    t.join(HANG_GUARD_S)
    return (got[0] if got else None), time.monotonic() - start


@pytest.mark.parametrize("command", ["batch --cluster", "profile --target", "precision --target",
                                     "profile --generate --target"])
def test_every_cluster_call_ends_in_one_line_naming_the_address(server, command, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    # A silent or refused port waits out the whole limit, so it is short; junk answers at once, so its
    # limit costs nothing and is kept roomy (a loaded machine must not turn junk into a timeout).
    limit = "2" if server.kind == "junk" else "0.5"
    monkeypatch.setenv("ONNX_STUDIO_CLUSTER_TIMEOUT_S", limit)
    rc, seconds = _run_bounded(_commands(server.address)[command])
    err = capsys.readouterr().err
    assert rc is not None, f"{command} against a {server.kind} port still waits after {HANG_GUARD_S:.0f} s"
    assert rc != 0 and "Traceback" not in err, err[-1500:]
    line = err.strip().splitlines()[-1]
    assert_user_message(line)
    assert line.startswith("error: no Dask scheduler answered at " + server.address), line
    if server.kind == "junk":
        assert "not Dask's protocol" in line, line
    else:
        assert f"within {limit} s" in line, line


def test_a_silent_port_ends_the_process_too(tmp_path):
    """As a user runs it: a new process, 0.5 s limit; the process ends (nothing of Dask's client is left to
    wait on at exit: its __del__ used to wait 40 s more) with one line naming the address."""
    silent = _Server("silent")
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ONNX_STUDIO_CLUSTER_TIMEOUT_S": "0.5"}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "studio", "batch", str(path_of("cnn_unfused")), "-o", "out",
                               "--cluster", silent.address], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=120)
        seconds = time.monotonic() - start
    finally:
        silent.close()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, \
        proc.stderr[-1500:]
    assert proc.stderr.strip().splitlines()[-1] == f"error: no Dask scheduler answered at {silent.address} within 0.5 s"
    assert seconds < HANG_GUARD_S, seconds


@pytest.mark.parametrize("address", ["tcp://[::1", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", "tcp://host:abc",
                                     "tcp://:8786"])
def test_malformed_addresses_are_refused_before_any_connection(address, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StudioError) as refused:
        cluster_address(address)
    assert "tcp://HOST:PORT" in str(refused.value)
    rc, _ = _run_bounded(["batch", str(path_of("cnn_unfused")), "-o", "out", "--cluster", address])
    assert rc == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert_user_message(line, "cluster address must look like tcp://HOST:PORT")


def test_the_probe_passes_a_real_scheduler_and_bad_timeouts_are_refused(tmp_path, monkeypatch, capsys):
    """The stock ``dask scheduler`` answers the probe (the check cannot refuse the real thing); a stock
    ``dask worker``'s port given as the cluster is one line saying so (it was a TypeError, then a 10 s
    wait and an 'Exception ignored in Client.__del__' traceback at exit)."""
    from studio.batch.loopback import LoopbackCluster

    with LoopbackCluster(tmp_path / "cluster", workers={"w": None}, stock=True) as cluster:
        probe_scheduler(cluster.address, None, 10)
        worker, _pid = cluster.worker_process("w")
        with pytest.raises(StudioError) as refused:
            probe_scheduler(worker, None, 10)
        assert_user_message(str(refused.value), f"no Dask scheduler answered at {worker}", "a Dask worker")
        monkeypatch.chdir(tmp_path)
        rc, _ = _run_bounded(["batch", str(path_of("cnn_unfused")), "-o", "out", "--cluster", worker])
        assert rc == 2 and "that port is a Dask worker" in capsys.readouterr().err
    for bad in ("0", "-1", "nan", "1e400", "soon"):
        monkeypatch.setenv("ONNX_STUDIO_CLUSTER_TIMEOUT_S", bad)
        with pytest.raises(StudioError, match="ONNX_STUDIO_CLUSTER_TIMEOUT_S"):
            probe_scheduler("tcp://127.0.0.1:1")
