"""Where batch tasks run: a local pool of the studio's sandbox workers, or a Dask cluster.

Both take the same plain ``StageTask`` and give back the same ``StageOutcome``.

* ``LocalExecutor``: threads in this process, each with its own pool of sandbox
  workers (``pool_key``), so N tasks run side by side and a crash stays in its worker.
* ``DaskExecutor``: one Dask task per model x stage on ``tcp://HOST:PORT`` (or TLS).
  Model files travel by content hash: each is scattered to the cluster once and sent
  again from the client when the worker holding it dies; the worker re-hashes what
  arrived, keeps it in a local cache and runs the stage in the studio's sandbox worker
  there. Artifacts come back as bytes with their sha256, checked on arrival. The client
  owns the retry policy (``studio.batch.retrying``, on a stock scheduler): a task whose
  worker died runs again up to ``retries`` times, then the row says "worker lost" with
  the worker's address; a restarted scheduler gets the unfinished tasks again. A task
  with a ``target`` needs the worker resource ``target-NAME`` (a deployment machine).
The scheduler address is configuration only (a flag or ONNX_STUDIO_CLUSTER), never
taken from a model or an upload.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import shutil
import tarfile
import tempfile
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from studio.batch.retrying import LOST_WAIT_S, ClusterJobs, ClusterLost, Input, announce_start
from studio.batch.stages import NOT_WRITTEN, StageOutcome, StageTask, run_stage, worker_facts
from studio.core import outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.sandbox import close_pool, forget_closed, shutdown_pool
from studio.core.model import sha256_files
from studio.core.model import load
from studio.core.paths import safe_child

MAX_ARTIFACT_BYTES = 512 * 2**20       # what one remote task may send back


class Executor(Protocol):
    name: str

    def submit(self, task: StageTask, files: Mapping[str, Path], out_dir: Path) -> Future: ...
    def cancel(self) -> None: ...
    def close(self) -> None: ...


def default_workers() -> int:
    """Local pool size from cores and memory: one task per 2 cores, one per 3 GiB (a worker's limit)."""
    import psutil

    cores = os.cpu_count() or 1
    mem = psutil.virtual_memory().total // (3 * 2**30)
    return max(1, min(cores // 2 or 1, int(mem) or 1, 8))


_EXECUTOR_IDS = itertools.count(1)


class LocalExecutor:
    """Tasks on this machine, each thread with its own sandbox-worker pool."""

    name = "local"

    def __init__(self, workers: int | None = None, pool_prefix: str = "batch") -> None:
        self.workers = workers or default_workers()
        self.pool_prefix = pool_prefix          # a browser session's id: its pools are its own
        self._keys: list[str] = []
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="batch")
        self._local = threading.local()
        self._n = 0
        self._lock = threading.Lock()
        self._cancelled = threading.Event()
        self._uid = next(_EXECUTOR_IDS)         # its pool keys are its own: cancel() closes them for good

    def _pool_key(self) -> str:
        if not hasattr(self._local, "key"):
            with self._lock:
                self._n += 1
                self._local.key = f"{self.pool_prefix}:batch{self._uid}-{self._n}"
                self._keys.append(self._local.key)
        return self._local.key

    def submit(self, task: StageTask, files: Mapping[str, Path], out_dir: Path) -> Future:
        model_path = files["model"]

        def work() -> StageOutcome:
            if self._cancelled.is_set():
                return StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, "cancelled",
                                    "cancelled before it started", target=task.target)
            return run_stage(task, model_path, out_dir, pool_key=self._pool_key())

        return self._pool.submit(work)

    def _stop_workers(self, close: bool = False) -> None:
        with self._lock:
            keys = list(self._keys)
        for key in keys:                # only this executor's sandbox workers, never another session's
            (close_pool if close else shutdown_pool)(key)

    def cancel(self) -> None:
        self._cancelled.set()
        # Running workers are killed and their tasks end as failed; a task's next job (a profile's next variant)
        # is refused at once instead of starting in a fresh pool of the same key.
        self._stop_workers(close=True)

    def stop_starting(self) -> None:
        """Queued tasks end 'cancelled' (a resume runs them); running ones finish as they would."""
        self._cancelled.set()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._stop_workers()
        with self._lock:
            keys = list(self._keys)
        for key in keys:                # every task thread has ended: no job can use these keys again
            forget_closed(key)


# ---------------------------------------------------------------------------- Dask

def pack_model(files: Mapping[str, Path]) -> bytes:
    """The model file and its external-data files as one tar (names relative to the model)."""
    model = Path(files["model"])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in files.items():
            arc = "model.onnx" if name == "model" else data_arcname(model, Path(path))
            tar.add(str(path), arcname=arc, recursive=False)
    return buf.getvalue()


def data_arcname(model: Path, data: Path) -> str:
    """An external-data file under the name the model gives it (relative to the model's folder)."""
    try:
        return str(Path(data).absolute().relative_to(model.absolute().parent))
    except ValueError:
        return Path(data).name


def content_hash(model: Path) -> str:
    """The loader's content hash (``ModelHandle.sha256``) of an unpacked package, without parsing
    it: the model file, then every other file of its folder in sorted order."""
    others = sorted(f for f in model.parent.rglob("*") if f.is_file() and f != model)
    return sha256_files([model, *others])


def model_files(model_path: Path) -> dict[str, Path]:
    """The model and every external-data file it names (validated by the loader first)."""
    handle = load(model_path)
    files = {"model": handle.path}
    for i, f in enumerate(sorted(set(handle.external_files))):
        files[f"data{i}"] = Path(f)
    return files


def _unpack_checked(blob: bytes, sha256: str, into: Path) -> Path:
    """Worker side: the package's model hashes to ``sha256`` (else refuse); unpacked once."""
    model_dir = into / sha256[:32]
    model = model_dir / "model.onnx"
    if model.is_file() and content_hash(model) == sha256:
        return model
    tmp = Path(tempfile.mkdtemp(prefix=".incoming-", dir=into))
    try:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
            tar.extractall(tmp, filter="data")
        got = tmp / "model.onnx"
        if not got.is_file() or content_hash(got) != sha256:
            raise StudioError("the model that arrived does not match its content hash; refusing it",
                              code=ErrorCode.HASH_MISMATCH)
        if model_dir.exists():
            shutil.rmtree(model_dir)  # scratch: the worker's own model cache entry, re-made below
        tmp.rename(model_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # scratch: a temp folder of the worker's cache
    return model


def _collect_artifacts(out_dir: Path, outcome: StageOutcome) -> list[tuple[str, bytes, str]]:
    """(relative path, bytes, sha256) of the outcome's artifacts, files of folders included."""
    items, total = [], 0
    for rel in outcome.artifacts:
        p = out_dir.parent / rel
        paths = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else []
        for f in paths:
            if f.is_symlink():
                continue
            data = f.read_bytes()
            total += len(data)
            if total > MAX_ARTIFACT_BYTES:
                break
            items.append((str(f.relative_to(out_dir.parent)), data, hashlib.sha256(data).hexdigest()))
    return items


def remote_stage(task_dict: dict, blob: bytes) -> dict:
    """Runs on a Dask worker: check the model's hash, run the stage in the sandbox, return the
    outcome and the artifacts' bytes."""
    announce_start()                    # from here on, this worker's death costs the task an attempt
    task = StageTask(**task_dict)
    cache = Path(os.environ.get("ONNX_STUDIO_WORKER_CACHE") or Path(tempfile.gettempdir()) / "onnx-studio-worker")
    (cache / "models").mkdir(parents=True, exist_ok=True)
    try:
        model = _unpack_checked(blob, task.model_sha256, cache / "models")
    except StudioError as exc:
        return {"outcome": StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, "failed", str(exc),
                                        worker=worker_facts(), target=task.target).to_dict(), "artifacts": []}
    work = Path(tempfile.mkdtemp(prefix="task-", dir=cache))
    try:
        out = work / task.key
        outcome = run_stage(task, model, out, pool_key=f"dask-{threading.get_ident()}")
        return {"outcome": outcome.to_dict(), "artifacts": _collect_artifacts(out, outcome)}
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: the task's temp folder on the worker


@dataclass(frozen=True)
class ClusterSecurity:
    """TLS settings passed to Dask (``distributed.security.Security``) when configured."""

    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None

    @classmethod
    def from_env(cls, ca_file: str | None = None, cert: str | None = None, key: str | None = None) -> ClusterSecurity:
        """Given values, else ONNX_STUDIO_TLS_CA_FILE / _CERT / _KEY (configuration, like the address)."""
        env = os.environ.get
        return cls(ca_file or env("ONNX_STUDIO_TLS_CA_FILE") or None, cert or env("ONNX_STUDIO_TLS_CERT") or None,
                   key or env("ONNX_STUDIO_TLS_KEY") or None)

    def to_dask(self):
        if not (self.ca_file or self.cert):
            return None
        from distributed.security import Security

        return Security(tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key,
                        require_encryption=True)


def cluster_address(explicit: str | None) -> str | None:
    """The scheduler address from the flag, else ONNX_STUDIO_CLUSTER; validated as tcp:// or tls://
    with a host and a port in range (``tcp://[::1`` is refused here, before any connection)."""
    address = explicit or os.environ.get("ONNX_STUDIO_CLUSTER") or None
    if address is None:
        return None
    shape = f"cluster address must look like tcp://HOST:PORT or tls://HOST:PORT, got {address[:60]!r}"
    if not address.startswith(("tcp://", "tls://")) or len(address) > 200 or any(c in address for c in " \n\"'"):
        raise StudioError(shape, code=ErrorCode.BAD_OPTION)
    try:
        from distributed.comm.addressing import parse_address, parse_host_port

        host, port = parse_host_port(parse_address(address)[1])
    except ImportError:
        return address              # DaskExecutor says that dask.distributed is missing
    except (ValueError, TypeError):
        raise StudioError(shape, code=ErrorCode.BAD_OPTION) from None
    if not host or not 0 < int(port) < 65536:
        raise StudioError(shape, code=ErrorCode.BAD_OPTION)
    return address


CLUSTER_TIMEOUT_S = 20.0
MAX_CLUSTER_TIMEOUT_S = 3600.0


def cluster_timeout_s() -> float:
    """Seconds a scheduler has to accept a connection and answer Dask's handshake: env
    ONNX_STUDIO_CLUSTER_TIMEOUT_S (configuration, like the address), else 20."""
    raw = os.environ.get("ONNX_STUDIO_CLUSTER_TIMEOUT_S")
    if not raw:
        return CLUSTER_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_CLUSTER_TIMEOUT_S:
        raise StudioError(f"ONNX_STUDIO_CLUSTER_TIMEOUT_S must be seconds in (0, {MAX_CLUSTER_TIMEOUT_S:.0f}], "
                          f"got {raw[:20]!r}", code=ErrorCode.BAD_OPTION)
    return value


def probe_scheduler(address: str, security=None, timeout_s: float | None = None) -> None:  # noqa: ANN001
    """Connect to ``address``, read the peer's Dask handshake and ask who it is (``identity``), each step
    within ``timeout_s``; else one line naming the address. Dask's own connect waits without a limit for
    that handshake (a port that accepts and never answers hung a batch past 300 s) and reads another
    protocol's bytes as a frame length (an HTTP reply became a 3 EiB allocation); a worker's port given
    for the scheduler's failed in Client with a TypeError and a 10 s wait in its ``__del__``. This probe
    runs first, in its own thread and event loop, so nothing of Dask's client is made for an address
    that is not a scheduler."""
    import asyncio
    import queue

    timeout = cluster_timeout_s() if timeout_s is None else float(timeout_s)
    args = security.get_connection_args("client") if security is not None else {}
    silent = f"no Dask scheduler answered at {address} within {timeout:g} s"
    answers: queue.Queue = queue.Queue()

    async def hello() -> object:
        from distributed.comm import connect

        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        try:            # who answers: a scheduler, or a Dask worker's port given by mistake
            await asyncio.wait_for(comm.write({"op": "identity", "reply": True}), timeout)
            info = await asyncio.wait_for(comm.read(), timeout)
        finally:
            comm.abort()
        return info.get("type") if isinstance(info, dict) else None

    def run() -> None:
        try:
            answers.put(("type", asyncio.run(hello())))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which words it
            answers.put(("error", exc))

    threading.Thread(target=run, name="scheduler-probe", daemon=True).start()
    try:
        kind, got = answers.get(timeout=timeout * 3 + 10)    # the thread's own limits end it first
    except queue.Empty:
        raise StudioError(silent, code=ErrorCode.NO_CLUSTER) from None
    if kind == "type":
        if got == "Scheduler":
            return
        what = "a Dask worker" if got == "Worker" else f"a Dask {str(got)[:30]}" if got else "not a Dask scheduler"
        raise StudioError(f"no Dask scheduler answered at {address}: that port is {what}; give the scheduler's "
                          "address (dask scheduler prints it, default port 8786)", code=ErrorCode.NO_CLUSTER)
    exc = got
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        raise StudioError(silent, code=ErrorCode.NO_CLUSTER) from None
    if isinstance(exc, OSError) and "Timed out trying to connect" in str(exc):
        cause = exc.__cause__ or exc.__context__
        why = f" ({(cause.strerror or type(cause).__name__).lower()})" if isinstance(cause, OSError) and \
            getattr(cause, "strerror", None) else ""
        raise StudioError(f"{silent}{why}", code=ErrorCode.NO_CLUSTER) from None
    if isinstance(exc, (MemoryError, ValueError, TypeError, KeyError, IndexError, UnicodeError)) or \
            type(exc).__name__ in ("CommClosedError", "ExtraData", "UnpackValueError", "FormatError", "StackError"):
        raise StudioError(f"no Dask scheduler answered at {address}: something else answers there (not Dask's "
                          "protocol); check the address and port", code=ErrorCode.NO_CLUSTER) from None
    if isinstance(exc, OSError):
        raise StudioError(f"no Dask scheduler answered at {address}: {(exc.strerror or str(exc) or type(exc).__name__)[:120]}",
                          code=ErrorCode.NO_CLUSTER) from None
    raise StudioError(f"no Dask scheduler answered at {address}: {type(exc).__name__}",
                      code=ErrorCode.NO_CLUSTER) from None


class DaskExecutor:
    """Tasks on a Dask cluster; each stage still runs in the studio's sandbox on the worker."""

    name = "dask"

    def __init__(self, address: str, *, retries: int = 1, security: ClusterSecurity | None = None,
                 timeout_s: float | None = None, lost_wait_s: float = LOST_WAIT_S,
                 reconnect_s: float | None = None) -> None:
        """``timeout_s``: how long to wait for the scheduler to answer, first and after it is lost
        (``reconnect_s``, when given, bounds the wait after a loss alone)."""
        try:
            from distributed import Client
        except ImportError:
            raise StudioError("the cluster executor needs dask.distributed (pip install 'dask[distributed]')") from None
        self.address = cluster_address(address)
        self.retries = max(0, int(retries))
        dask_security = (security or ClusterSecurity()).to_dask()
        if self.address.startswith("tls://") and dask_security is None:
            raise StudioError(f"cannot reach the Dask scheduler at {self.address}: a tls:// scheduler needs TLS "
                              "settings (--tls-ca-file/--tls-cert/--tls-key or ONNX_STUDIO_TLS_*)",
                              code=ErrorCode.NO_CLUSTER)
        timeout_s = cluster_timeout_s() if timeout_s is None else timeout_s
        probe_scheduler(self.address, dask_security, timeout_s)      # bounded: a silent or foreign port is one line
        try:
            self.client = Client(self.address, security=dask_security, timeout=timeout_s, set_as_default=False)
        except (OSError, TimeoutError, TypeError, ValueError, MemoryError) as exc:
            raise StudioError(f"no Dask scheduler answered at {self.address} within {timeout_s:g} s "
                              f"({type(exc).__name__})", code=ErrorCode.NO_CLUSTER) from None
        self.jobs = ClusterJobs(self.client, retries=self.retries, reconnect_s=timeout_s if reconnect_s is None else reconnect_s,
                                lost_wait_s=lost_wait_s)

    def workers(self) -> dict[str, dict]:
        """Worker address -> its resources (``target-NAME``) as the scheduler knows them."""
        info = self.client.scheduler_info(n_workers=-1) if _takes_n_workers(self.client) else self.client.scheduler_info()
        return {addr: dict(w.get("resources") or {}) for addr, w in info.get("workers", {}).items()}

    def targets(self) -> list[str]:
        return sorted({r.removeprefix("target-") for res in self.workers().values() for r in res
                       if r.startswith("target-")})

    def submit(self, task: StageTask, files: Mapping[str, Path], out_dir: Path) -> Future:
        if task.target and task.target not in self.targets():
            raise StudioError(f"no worker of the cluster offers target '{task.target[:40]}' (resource "
                              f"target-{task.target[:40]}); known targets: {', '.join(self.targets()) or 'none'}",
                              code=ErrorCode.NO_TARGET)
        paths = dict(files)
        self.jobs.add_input(task.model_sha256, lambda: pack_model(paths))     # packed again if it must be re-sent
        resources = {f"target-{task.target}": 1} if task.target else None
        ran = self.jobs.submit(remote_stage, task.to_dict(), Input(task.model_sha256), resources=resources,
                               label=f"{task.stage}-{task.key}")
        result: Future = Future()

        def done(f: Future) -> None:
            try:
                got = f.result()
            except Exception as exc:  # noqa: BLE001 - ClusterLost, CancelledError, worker-side errors
                result.set_result(_lost(task, exc))
                return
            try:
                outcome = _land(got.payload, out_dir)
                result.set_result(replace(outcome, attempts=got.attempts, lost_workers=got.lost_on))
            except Exception as exc:  # noqa: BLE001
                disk = outputs.disk_error(exc)     # the output folder took no more: the batch stops there
                result.set_result(StageOutcome(task.key, task.model_name, task.model_sha256, task.stage,
                                               NOT_WRITTEN if disk else "error",
                                               str(disk)[:300] if disk else f"{type(exc).__name__}: {str(exc)[:200]}",
                                               {"errno": disk.errno} if disk else {}, target=task.target))

        ran.add_done_callback(done)
        return result

    def cancel(self) -> None:
        self.jobs.cancel()

    def close(self) -> None:
        self.jobs.close()
        self.client.close()


def _takes_n_workers(client) -> bool:
    import inspect

    return "n_workers" in inspect.signature(client.scheduler_info).parameters


def _lost(task: StageTask, exc: BaseException) -> StageOutcome:
    """The row of a task that did not finish on the cluster: worker or scheduler lost (run again
    on resume), cancelled, or the error it raised."""
    if isinstance(exc, ClusterLost):
        status = "scheduler lost" if exc.kind == "scheduler" else "worker lost"
        return StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, status, str(exc),
                            worker={"address": exc.address}, attempts=max(1, len(exc.lost_on)),
                            target=task.target, lost_workers=exc.lost_on)
    if isinstance(exc, CancelledError):
        return StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, "cancelled", "cancelled",
                            target=task.target)
    return StageOutcome(task.key, task.model_name, task.model_sha256, task.stage, "error",
                        f"{type(exc).__name__}: {str(exc)[:200]}", target=task.target)


def _land(payload: dict, out_dir: Path) -> StageOutcome:
    """Client side: write the returned artifacts under ``out_dir``'s parent, checking each hash."""
    outcome = StageOutcome.from_dict(payload["outcome"])
    base = out_dir.parent
    for rel, data, sha in payload.get("artifacts", []):
        if hashlib.sha256(data).hexdigest() != sha:
            raise StudioError(f"artifact {rel[:60]} was damaged in transfer", code=ErrorCode.HASH_MISMATCH)
        target = safe_child(base, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        outputs.write_bytes(target, data)
    return outcome


ProgressFn = Callable[[int, int, float | None, StageOutcome], None]
