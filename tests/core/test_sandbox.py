"""The sandbox worker: real child processes, real crashes, no mocks.

Every failure must come back as a one-line WorkerError of the right kind, the
parent must survive, and the next job on the same pool must work.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from studio.core import sandbox
from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import BUILTIN_JOBS, JobContext, job, load_job, resolve_job
from studio.core.sandbox import Limits, cancel_all, default_limits, pool_info, run_job, scrub_message
from tests.conftest import assert_user_message
from tests.servers import assert_group_gone

LIMITS = Limits(timeout_s=20, memory_bytes=2 * 2**30)
SELFTEST = "sandbox.selftest"


def selftest(action: str, *, pool: str, limits: Limits = LIMITS, stage: str = "Self-test", **kw):
    return run_job(SELFTEST, {"action": action, **kw.pop("args", {})}, kw.pop("arrays", None), stage=stage,
                   limits=limits, pool_key=pool, **kw)


def worker_pid(pool: str) -> int:
    return selftest("info", pool=pool).data["pid"]


def assert_next_job_works(pool: str, old_pid: int | None = None) -> None:
    result = selftest("echo", pool=pool, args={"data": 7})
    assert result.data == {"data": 7}
    if old_pid is not None:
        assert result.worker_pid != old_pid
        assert result.worker_reused is False


# ---------------------------------------------------------------------------- transport

def test_round_trip_of_data_and_arrays_with_hostile_names():
    arrays = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i64": np.array([-(2**62), 0, 2**62], dtype=np.int64),
        "bool": np.array([True, False]),
        "f16": np.array([1.5, -2.25], dtype=np.float16),
        "zero-d": np.array(3.25),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "strings": np.array(["a", "ünïcode", ""]),
        "big-endian": np.arange(3, dtype=">f4"),
        "transposed": np.arange(12, dtype=np.int32).reshape(3, 4).T,
        "a/b/c": np.ones(2), "..": np.ones(1), "../../etc/passwd": np.zeros(1), "with space": np.ones(3),
        "": np.array([1]), "new\nline": np.array([2]), "/abs/name": np.array([3]),
    }
    data = {"nested": {"list": [1, 2.5, None, "x"], "nan": float("nan")}, "unicode": "日本"}
    result = selftest("echo", pool="transport", args={"data": data}, arrays=arrays)
    assert set(result.arrays) == set(arrays)
    for name, value in arrays.items():
        got = result.arrays[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        np.testing.assert_array_equal(got, value)
    assert result.data["data"]["unicode"] == "日本"
    assert np.isnan(result.data["data"]["nested"]["nan"])
    assert result.peak_rss_bytes and result.peak_rss_bytes > 10 * 2**20


def test_object_arrays_are_refused_both_ways():
    with pytest.raises(WorkerError) as err:
        selftest("echo", pool="transport", arrays={"x": np.array([{"a": 1}], dtype=object)})
    assert err.value.kind == "error" and "dtype object" in str(err.value)
    with pytest.raises(WorkerError) as err:
        selftest("object_array", pool="transport")
    assert err.value.kind == "error" and "dtype object" in str(err.value)
    with pytest.raises(WorkerError) as err:
        selftest("bad_data", pool="transport")
    assert err.value.kind == "error" and "not JSON" in str(err.value)
    assert_next_job_works("transport")


def test_unknown_job_and_non_json_args():
    with pytest.raises(WorkerError) as err:
        run_job("no.such.job", stage="Lookup", limits=LIMITS)
    assert "unknown job" in str(err.value)
    with pytest.raises(WorkerError) as err:
        run_job(SELFTEST, {"action": "echo", "x": object()}, stage="Args", limits=LIMITS)
    assert "JSON" in str(err.value)


# ---------------------------------------------------------------------------- failures

def test_job_exception_is_kind_error_without_paths():
    secret = f"{Path.home()}/projects/secret/model.onnx and /srv/data/x/y.bin"
    with pytest.raises(WorkerError) as err:
        selftest("raise", pool="errors", args={"message": f"cannot open {secret}\nsecond line"})
    e = err.value
    assert e.kind == "error" and e.stage == "Self-test"
    assert_user_message(str(e), "ValueError", "cannot open", "model.onnx")
    assert "/srv/" not in str(e) and "second line" not in str(e)
    # a plain exception keeps the warm worker
    assert selftest("echo", pool="errors").worker_reused is True


def test_exit_code_is_crashed():
    pid = worker_pid("crash-exit")
    with pytest.raises(WorkerError) as err:
        selftest("exit", pool="crash-exit", args={"code": 3})
    assert err.value.kind == "crashed"
    assert_user_message(str(err.value), "crashed", "exited with code 3")
    assert_group_gone(pid)
    assert_next_job_works("crash-exit", pid)


@pytest.mark.parametrize("sig", ["SIGSEGV", "SIGFPE", "SIGABRT"])
def test_fatal_signal_is_crashed_and_named(sig):
    pool = f"crash-{sig}"
    pid = worker_pid(pool)
    with pytest.raises(WorkerError) as err:
        selftest("signal", pool=pool, args={"signal": sig, "stage": "OpenVINO compile"})
    assert err.value.kind == "crashed"
    assert err.value.stage == "OpenVINO compile"  # the stage the job announced
    assert_user_message(str(err.value), "OpenVINO compile crashed", sig)
    assert_group_gone(pid)
    assert_next_job_works(pool, pid)


def test_infinite_loop_times_out_and_is_killed():
    pid = worker_pid("timeout")
    started = time.monotonic()
    with pytest.raises(WorkerError) as err:
        selftest("spin", pool="timeout", limits=Limits(timeout_s=1.5, memory_bytes=LIMITS.memory_bytes))
    elapsed = time.monotonic() - started
    assert err.value.kind == "timeout"
    assert 1.4 < elapsed < 1.5 + 60      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert_user_message(str(err.value), "timed out after 1.5 s", "--timeout")
    assert_group_gone(pid)
    assert_next_job_works("timeout", pid)


def test_allocation_bomb_is_memory():
    started = time.monotonic()
    with pytest.raises(WorkerError) as err:
        selftest("alloc", pool="memory", args={"bytes": 8 * 2**30})
    assert err.value.kind == "memory"
    assert time.monotonic() - started < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert_user_message(str(err.value), "exceeded the worker memory limit (2.0 GiB)", "--memory-gb")
    # a memory failure retires the worker: it may be fragmented or half-initialised
    result = selftest("echo", pool="memory")
    assert result.worker_reused is False


def test_segfault_at_the_address_space_limit_is_memory():
    # Corpus chython_rxnmap, optimize --compare-peers: onnxslim (5.5 GB resident outside the sandbox) died in
    # the 3 GiB worker with SIGSEGV, reported as 'crashed: ... SIGSEGV (segmentation fault)'. Native code
    # segfaults when RLIMIT_AS refuses an allocation; its address space was at the limit, its RSS was not.
    with pytest.raises(WorkerError) as err:
        selftest("signal", pool="memory-segv", args={"signal": "SIGSEGV", "reserve_to_limit": 64 * 2**20})
    assert err.value.kind == "memory", str(err.value)
    assert_user_message(str(err.value), "exceeded the worker memory limit (2.0 GiB)", "--memory-gb")


def test_engine_style_allocation_message_is_memory():
    with pytest.raises(WorkerError) as err:
        selftest("memory_message", pool="memory",
                 args={"message": "Failed to allocate memory for requested buffer of size 8589934592"})
    assert err.value.kind == "memory"


def test_parent_survives_everything():
    # All of the above ran in worker children; this process is still here and
    # its working directory has not moved.
    assert psutil.Process().status() != psutil.STATUS_ZOMBIE
    assert Path.cwd().exists()


# ---------------------------------------------------------------------------- stop / cancel

def test_on_tick_raising_kills_the_worker_and_propagates():
    class Stop(Exception):
        pass

    pid = worker_pid("tick")
    ticks: list[float] = []

    def on_tick(elapsed: float) -> None:
        ticks.append(elapsed)
        if elapsed > 0.3:
            raise Stop("user pressed Stop")

    with pytest.raises(Stop):
        selftest("sleep", pool="tick", args={"seconds": 30}, on_tick=on_tick)
    assert ticks and ticks[-1] < 25       # stopped well before the 30 s sleep ends (no speed expectation)
    assert_group_gone(pid)
    assert_next_job_works("tick", pid)


def test_cancel_all_from_another_thread():
    pid = worker_pid("cancel")
    threading.Timer(0.4, cancel_all, args=("cancel",)).start()
    started = time.monotonic()
    with pytest.raises(WorkerError) as err:
        selftest("sleep", pool="cancel", args={"seconds": 30})
    assert err.value.kind == "cancelled"
    assert time.monotonic() - started < 25     # well before the 30 s sleep ends (no speed expectation)
    assert_group_gone(pid)
    assert_next_job_works("cancel", pid)


# ---------------------------------------------------------------------------- warm workers

def test_warm_reuse_is_fast_and_fresh_is_separate():
    first = selftest("echo", pool="warm")
    second = selftest("echo", pool="warm")
    assert second.worker_reused is True and second.worker_pid == first.worker_pid
    # Reuse is what makes it fast; asserted by count (every call reused the warm worker), not by time.
    reused = [selftest("echo", pool="warm") for _ in range(5)]
    assert all(r.worker_reused and r.worker_pid == first.worker_pid for r in reused)
    fresh = selftest("echo", pool="warm", fresh=True)
    assert fresh.worker_pid != first.worker_pid and fresh.worker_reused is False
    assert_group_gone(fresh.worker_pid)  # one-off workers are not kept
    again = selftest("echo", pool="warm")
    assert again.worker_pid == first.worker_pid and again.worker_reused is True


def test_changed_limits_start_a_new_worker():
    first = selftest("echo", pool="limits")
    other = selftest("echo", pool="limits", limits=Limits(timeout_s=20, memory_bytes=int(1.5 * 2**30)))
    assert other.worker_pid != first.worker_pid and not other.worker_reused
    info = selftest("info", pool="limits", limits=Limits(timeout_s=20, memory_bytes=int(1.5 * 2**30))).data
    assert info["rlimit_as"] == Limits(memory_bytes=int(1.5 * 2**30)).address_space_bytes
    assert info["rlimit_core"] == 0


def test_worker_outlives_the_thread_that_started_it():
    """Streamlit runs each script run on a short-lived thread; the warm worker
    must survive it (PR_SET_PDEATHSIG is tied to the forking *thread*)."""
    box: dict[str, int] = {}
    t = threading.Thread(target=lambda: box.update(pid=worker_pid("thread")))
    t.start()
    t.join()
    time.sleep(0.2)
    again = selftest("echo", pool="thread")
    assert again.worker_pid == box["pid"] and again.worker_reused


def test_cpu_threads_limit_reaches_the_child_env():
    limits = Limits(timeout_s=20, memory_bytes=LIMITS.memory_bytes, cpu_threads=2)
    info = selftest("info", pool="threads", limits=limits, args={"env": ["OMP_NUM_THREADS", "MALLOC_ARENA_MAX"]})
    assert info.data["env"] == {"OMP_NUM_THREADS": "2", "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")}


def test_builtin_job_runs_without_importing_its_module_in_the_parent(tmp_path):
    import subprocess
    import sys

    code = ("import sys; from studio.core.sandbox import run_job, Limits\n"
            "r = run_job('ort.info', stage='probe', limits=Limits(timeout_s=30))\n"
            "print(r.data['version'], 'studio.core.engines.onnxruntime' in sys.modules, 'onnxruntime' in sys.modules)")
    env = {**os.environ, "ONNX_STUDIO_JOB_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    version, engine_module, ort_module = out.split()
    assert version and engine_module == "False" and ort_module == "False"


def test_two_pools_run_concurrently():
    """A job of another pool finishes while pool A's job is still running: shown by order of
    events (A busy before and after B's job), not by timing, so it holds on any CPU or load."""
    results: dict[str, object] = {}

    def work() -> None:
        try:
            results["a"] = selftest("sleep", pool="session-a", args={"seconds": 30})
        except BaseException as exc:  # noqa: BLE001
            results["a"] = exc

    def a_busy() -> bool:
        return any(p["pool"] == "session-a" and p["busy"] for p in pool_info())

    for pool in ("session-a", "session-b"):
        worker_pid(pool)
    thread = threading.Thread(target=work)
    thread.start()
    try:
        for _ in range(600):             # wait (by polls) until A's job is running
            if a_busy():
                break
            time.sleep(0.05)
        assert a_busy()
        assert selftest("echo", pool="session-b", args={"data": 1}).data is not None
        assert a_busy() and "a" not in results          # B finished while A still runs
    finally:
        cancel_all("session-a")
        thread.join()


def test_jobs_on_one_pool_are_serialized():
    worker_pid("serial")
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        selftest("sleep", pool="serial", args={"seconds": 0.4}))) for _ in range(2)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - started >= 0.8
    assert len(results) == 2 and len({r.worker_pid for r in results}) == 1


def test_crash_in_one_pool_does_not_touch_another():
    other_pid = worker_pid("bystander")
    with pytest.raises(WorkerError):
        selftest("signal", pool="victim", args={"signal": "SIGSEGV"})
    result = selftest("echo", pool="bystander")
    assert result.worker_pid == other_pid and result.worker_reused


# ---------------------------------------------------------------------------- process hygiene

def test_scratch_is_cwd_and_removed(tmp_path):
    parent_cwd = os.getcwd()
    out_dir = tmp_path / "out"
    info = selftest("info", pool="scratch", out_dir=out_dir).data
    assert info["cwd"] == os.path.realpath(info["scratch"]) or info["cwd"] == info["scratch"]
    assert info["scratch_entries"] == []
    assert info["tmpdir"] == info["scratch"]
    assert not Path(info["scratch"]).exists()

    written = selftest("write", pool="scratch", args={"name": "relative.txt"}, out_dir=out_dir).data
    assert Path(written["written"]).parent == Path(written["cwd"])
    assert not Path(written["written"]).exists()          # scratch removed with the job
    assert not (Path(parent_cwd) / "relative.txt").exists()
    assert os.getcwd() == parent_cwd
    assert (out_dir / "kept.txt").read_text() == "kept"   # out_dir is kept


def test_child_gets_no_inherited_fds_and_its_own_session(tmp_path):
    marker = tmp_path / "marker.txt"
    fd = os.open(marker, os.O_CREAT | os.O_RDWR)
    os.set_inheritable(fd, True)
    try:
        info = selftest("info", pool="fds", fresh=True).data
    finally:
        os.close(fd)
    assert not any(str(marker) in target for target in info["fds"].values()), info["fds"]
    extra = {fd: target for fd, target in info["fds"].items() if fd not in ("0", "1", "2")}
    assert len(extra) == 1 and next(iter(extra.values())).startswith("pipe:"), info["fds"]  # the reply pipe
    assert info["pgid"] == info["pid"] == info["sid"]  # own session and process group
    assert info["ppid"] == os.getpid()


def test_worker_dies_with_its_parent(tmp_path):
    """A studio killed with SIGKILL leaves no worker behind."""
    import subprocess
    import sys

    script = (
        "import sys; from studio.core.sandbox import run_job, Limits\n"
        "r = run_job('sandbox.selftest', {'action': 'info'}, stage='t', limits=Limits(timeout_s=20))\n"
        "print(r.data['pid'], flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    env = {**os.environ, "ONNX_STUDIO_JOB_DIR": str(tmp_path / "jobs")}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=tmp_path, env=env)
    assert proc.stdout is not None
    child_pid = int(proc.stdout.readline())
    assert psutil.pid_exists(child_pid)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    else:
        os.kill(child_pid, signal.SIGKILL)
        raise AssertionError("the worker outlived its parent")


# ---------------------------------------------------------------------------- registry, limits, messages

def test_registry_allowlist():
    for name, target in BUILTIN_JOBS.items():
        assert callable(load_job(name, target)), name
    assert resolve_job(SELFTEST) == BUILTIN_JOBS[SELFTEST]
    with pytest.raises(PermissionError):
        load_job("evil", "os:system")
    with pytest.raises(PermissionError):
        load_job("evil", "studio.core.jobs:resolve_job")          # not decorated
    with pytest.raises(PermissionError):
        load_job("ort.run", "studio.core.jobs:selftest_job")      # decorated under another name
    with pytest.raises(ValueError):
        job("x")(lambda a, b, c: None)                            # defined outside the studio packages
    assert isinstance(JobContext(scratch=Path("."), out_dir=Path(".")).stage, str)


def test_default_limits_from_file_and_env(tmp_path, monkeypatch):
    for var in ("ONNX_STUDIO_TIMEOUT_S", "ONNX_STUDIO_MEMORY_GB", "ONNX_STUDIO_CPU_THREADS", "ONNX_STUDIO_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert default_limits() == Limits()
    (tmp_path / "onnx-studio.toml").write_text("[worker]\ntimeout_s = 30\nmemory_gb = 1.5\ncpu_threads = 2\n")
    assert default_limits() == Limits(timeout_s=30, memory_bytes=int(1.5 * 2**30), cpu_threads=2)
    monkeypatch.setenv("ONNX_STUDIO_TIMEOUT_S", "7.5")
    monkeypatch.setenv("ONNX_STUDIO_MEMORY_GB", "4")
    assert default_limits() == Limits(timeout_s=7.5, memory_bytes=4 * 2**30, cpu_threads=2)
    monkeypatch.setenv("ONNX_STUDIO_MEMORY_GB", "lots")
    with pytest.raises(StudioError, match="ONNX_STUDIO_MEMORY_GB"):
        default_limits()
    monkeypatch.setenv("ONNX_STUDIO_MEMORY_GB", "0.1")
    with pytest.raises(StudioError, match="at least 0.5"):
        default_limits()
    with pytest.raises(ValueError):
        Limits(timeout_s=0)


def test_scrub_message():
    home = str(Path.home())
    text = (f"failed at /onnxruntime_src/core/framework/bfc_arena.cc:360 reading {home}/m/model.onnx "
            "and /tmp/onnx-studio-1/w/job/scratch/x.bin\n next line; N/A, 1/2, https://example.org/a/b")
    out = scrub_message(text, ("/tmp/onnx-studio-1/w/job/scratch",))
    assert "\n" not in out
    assert "bfc_arena.cc:360" in out and "/onnxruntime_src" not in out
    assert home not in out and "model.onnx" in out
    assert "x.bin" in out and "/tmp/" not in out
    assert "N/A" in out and "1/2" in out and "https://example.org/a/b" in out


def test_pool_info_lists_warm_workers():
    selftest("echo", pool="listed")
    entries = {e["pool"]: e for e in sandbox.pool_info()}
    assert entries["listed"]["pid"] and entries["listed"]["jobs_served"] >= 1
    sandbox.shutdown_pool("listed")
    assert "listed" not in {e["pool"] for e in sandbox.pool_info()}
