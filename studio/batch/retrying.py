"""Dask tasks whose retry policy the client owns, on a stock scheduler (RELIABILITY R53).

Dask's ``retries=`` re-runs only a task that raises (a stage never does), and the
scheduler silently re-runs a task whose worker died until its allowed-failures; data
that was scattered to a worker dies with it and every task waiting on it comes back
"cancelled". So the client watches the cluster itself: the scheduler's ``remove-worker``
event (topic "all") names the keys that were running on the dead worker and the
scattered data it took along, before any of those futures changes state.

* A task that was running on the dead worker has used one attempt. "Running" means it had
  started there: the scheduler's list also holds tasks merely queued on that worker, so each
  task announces its start (``announce_start``, a synchronous event through the scheduler,
  so it is published before any later death of that worker). A queued task never ran and
  costs nothing. While attempts are left (``retries``), the scheduler's own re-run is the
  retry; when none are left its future is cancelled and the task ends ``ClusterLost``
  naming the worker's address.
* An input (a model's bytes) is kept as a recipe on the client (``add_input``): when its
  holder dies it is scattered again and the task submitted again under a new key. That
  costs no attempt (the task never ran there); ``MAX_RESENDS`` caps it.
* A task the scheduler gives up on (``KilledWorker``) is submitted again while attempts remain.
* A lost scheduler cancels every future. Once the client has reconnected (a scheduler
  restarted at the same address) every unfinished task is submitted again; when it does not
  come back within ``reconnect_s`` each ends ``ClusterLost(kind="scheduler")``.
* A task that no live worker can run (none left, none with its target resource) waits
  ``lost_wait_s`` for one to join, then ends ``ClusterLost``. A worker that joins late just
  gets work from the scheduler.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

log = logging.getLogger(__name__)

TOPIC = "all"                 # the scheduler's own cluster events (add-worker, remove-worker)
STARTED = "onnx-studio-task-started"     # a task's announcement that it has started on a worker
MAX_RESENDS = 5               # re-sends of one task after lost inputs or a lost scheduler
LOST_WAIT_S = 60.0            # how long a task no live worker can run waits for one to join
SCATTER_WAIT_S = 2.0          # one try at placing an input while no worker may be up


@dataclass(frozen=True)
class Input:
    """Placeholder in a task's arguments for the current cluster copy of input ``name``."""

    name: str


@dataclass(frozen=True)
class Ran:
    """A task's payload and the workers that died while running its earlier attempts."""

    payload: Any
    lost_on: tuple[str, ...] = ()
    resends: int = 0

    @property
    def attempts(self) -> int:
        return len(self.lost_on) + 1


class ClusterLost(StudioError):
    """The task could not finish on the cluster: its workers died (``kind`` "worker") after every
    attempt, no worker is left that can run it ("no worker"), or the scheduler went away ("scheduler")."""

    def __init__(self, message: str, *, kind: str, address: str, lost_on: tuple[str, ...] = ()) -> None:
        super().__init__(message, code=ErrorCode.SCHEDULER_LOST if kind == "scheduler" else ErrorCode.WORKER_LOST)
        self.kind, self.address, self.lost_on = kind, address, lost_on


@dataclass(eq=False)
class _Input:
    pack: Callable[[], Any]
    future: Any = None
    users: int = 0


@dataclass(eq=False)
class _TrackedJob:
    fn: Callable
    args: tuple
    resources: dict | None
    label: str
    result: Future
    inputs: tuple[str, ...]
    key: str | None = None
    future: Any = None
    lost_on: list[str] = field(default_factory=list)
    started_on: str | None = None     # the worker the current attempt announced its start on
    resends: int = 0
    finished: bool = False
    unplaced: bool = False            # waiting for a worker to place its inputs on
    stranded_since: float | None = None


class ClusterJobs:
    """Submits tasks through ``client`` and sees each through worker and scheduler losses."""

    def __init__(self, client, *, retries: int, reconnect_s: float, lost_wait_s: float = LOST_WAIT_S) -> None:
        self.client = client
        self.retries = max(0, int(retries))
        self.reconnect_s = float(reconnect_s)
        self.lost_wait_s = float(lost_wait_s)
        self.removed: list[dict] = []         # the remove-worker events seen (worker, processing, lost data)
        self._token = uuid.uuid4().hex[:8]
        self._n = itertools.count(1)
        self._lock = threading.RLock()
        self._jobs: dict[str, _TrackedJob] = {}      # current Dask key -> its job
        self._all: list[_TrackedJob] = []
        self._inputs: dict[str, _Input] = {}
        self._ready: list[tuple[_TrackedJob, Any, BaseException | None]] = []
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._watch_workers = False
        self._closed = threading.Event()
        self._comm = None
        self._subscribe()
        self._thread = threading.Thread(target=self._run, name="onnx-studio-cluster-jobs", daemon=True)
        self._thread.start()

    # -- public --------------------------------------------------------------------------

    def add_input(self, name: str, pack: Callable[[], Any]) -> None:
        """Register input ``name`` (its bytes made by ``pack`` whenever a copy must be sent)."""
        with self._lock:
            self._inputs.setdefault(name, _Input(pack))

    def submit(self, fn: Callable, *args: Any, resources: dict | None = None, label: str = "task") -> Future:
        """Run ``fn(*args)`` on the cluster (``Input`` arguments become the input's cluster copy).
        The future gives ``Ran`` or raises ``ClusterLost`` or the task's own exception."""
        inputs = tuple(a.name for a in args if isinstance(a, Input))
        job = _TrackedJob(fn, args, dict(resources) if resources else None, label, Future(), inputs)
        with self._lock:
            for name in inputs:
                self._inputs[name].users += 1
            self._all.append(job)
            self._relaunch(job)                          # a refusal ends this task, never the caller's batch
        self._deliver()
        return job.result

    def cancel(self) -> None:
        """Cancel every unfinished task (its future gives ``CancelledError``)."""
        with self._lock:
            running = [j.future for j in self._all if not j.finished and j.future is not None]
            for job in self._all:
                self._finish(job, exc=CancelledError())
        if running:
            try:
                self.client.cancel(running, force=True)
            except Exception:  # noqa: BLE001 - a closed client: nothing left to cancel
                pass
        self._deliver()

    def close(self) -> None:
        self._closed.set()
        self.cancel()
        self._thread.join(5)

    # -- the supervisor ------------------------------------------------------------------

    def _subscribe(self) -> None:
        self._comm = self.client.scheduler_comm
        self.client.subscribe_topic(TOPIC, self._on_event)
        self.client.subscribe_topic(STARTED, self._on_started)

    def _on_event(self, event) -> None:
        """On the client's event loop: only hand the event over (the scheduler sends it before
        the futures it affects change state, so the supervisor sees it first)."""
        msg = _message(event)
        if isinstance(msg, dict) and msg.get("action") in ("remove-worker", "add-worker"):
            self._events.put(("event", msg))

    def _on_started(self, event) -> None:
        msg = _message(event)
        if isinstance(msg, dict) and isinstance(msg.get("key"), str) and isinstance(msg.get("worker"), str):
            self._events.put(("started", msg))

    def _on_done(self, key: str) -> None:
        self._events.put(("done", key))

    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                kind, item = self._events.get(timeout=1.0)
            except queue.Empty:
                kind, item = "tick", None
            try:
                with self._lock:
                    if kind == "event":
                        self._cluster_changed(item)
                    elif kind == "started":
                        job = self._jobs.get(item["key"])
                        if job is not None and not job.finished:
                            job.started_on = item["worker"]
                    elif kind == "done":
                        self._done(item)
                    self._tick()
            except Exception:  # noqa: BLE001 - the supervisor must outlive any one surprise
                log.exception("cluster supervisor: %s", kind)
            self._deliver()

    def _cluster_changed(self, msg: dict) -> None:
        if msg.get("action") != "remove-worker":
            return
        worker = str(msg.get("worker") or "unknown worker")
        running = {str(k) for k in msg.get("processing-tasks") or ()}
        lost_data = {str(k) for k in msg.get("lost-scattered-tasks") or ()}
        self.removed.append({"worker": worker, "processing": sorted(running), "lost_data": sorted(lost_data)})
        self._watch_workers = True
        for item in self._inputs.values():
            if item.future is not None and str(item.future.key) in lost_data:
                item.future = None                       # sent again at the next launch
        for key in running:
            job = self._jobs.get(key)
            if job is None or job.finished or job.started_on != worker:
                continue                                 # only queued there: it never ran, the scheduler re-runs it
            job.started_on = None
            job.lost_on.append(worker)
            if len(job.lost_on) > self.retries:
                self._finish(job, exc=self._lost(job, worker))
                self._cancel_future(job)
            # else: the scheduler runs it again elsewhere; that run is the retry

    def _done(self, key: str) -> None:
        job = self._jobs.pop(key, None)
        if job is None or job.finished or job.key != key:
            return                                       # an attempt we have already replaced or ended
        fut = job.future
        try:
            payload = fut.result()
        except CancelledError as exc:
            reason = str(getattr(exc, "reason", "") or "")
            self._resend(job, scheduler_lost="connection" in reason)
            return
        except Exception as exc:  # noqa: BLE001 - KilledWorker, or the task's own exception
            if type(exc).__name__ == "KilledWorker":
                address = _address_of(exc)
                if not job.lost_on or job.lost_on[-1] != address:
                    job.lost_on.append(address)
                if len(job.lost_on) > self.retries:
                    self._finish(job, exc=self._lost(job, address))
                else:
                    self._relaunch(job)
                return
            if fut.status == "finished" or type(exc).__name__ in ("CommClosedError", "OSError"):
                self._resend(job, scheduler_lost=self.client.status != "running")   # its result's holder died
                return
            self._finish(job, exc=exc)
            return
        self._finish(job, value=Ran(payload, tuple(job.lost_on), job.resends))

    def _resend(self, job: _TrackedJob, *, scheduler_lost: bool) -> None:
        """Its inputs or the scheduler were lost before it could finish: submit it again."""
        if job.resends >= MAX_RESENDS:
            self._finish(job, exc=ClusterLost(f"worker lost: the task's data was lost {job.resends + 1} times "
                                              f"({', '.join(job.lost_on) or 'no worker died running it'})",
                                              kind="worker", address=(job.lost_on or ["unknown"])[-1],
                                              lost_on=tuple(job.lost_on)))
            return
        job.resends += 1
        if scheduler_lost or self.client.status != "running":
            if not self._reconnected():
                return
            for item in self._inputs.values():
                if item.future is not None and item.future.status != "finished":
                    item.future = None
        self._relaunch(job)

    def _reconnected(self) -> bool:
        """Wait for the client to reconnect; False (and every task ended) when it does not."""
        deadline = time.monotonic() + self.reconnect_s + 5.0
        while self.client.status in ("connecting", "newly-created") and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.client.status != "running":
            address = str(getattr(self.client.scheduler, "address", None) or "the scheduler")
            lost = ClusterLost(f"scheduler lost: {address} did not come back within {self.reconnect_s:.0f} s; "
                               "run the batch again to resume", kind="scheduler", address=address)
            for job in self._all:
                if not job.finished:
                    self._finish(job, exc=lost)
            return False
        if self.client.scheduler_comm is not self._comm:   # a new connection: events are subscribed per connection
            self._subscribe()
        return True

    def _relaunch(self, job: _TrackedJob) -> None:
        try:
            self._launch(job)
        except Exception as exc:  # noqa: BLE001 - a closed client, a refused submission
            self._finish(job, exc=exc)

    def _launch(self, job: _TrackedJob) -> None:
        """Submit the job's next attempt under a fresh key (its inputs placed first)."""
        if self.client.status != "running" and not self._reconnected():
            return
        key = f"{job.label}-{self._token}-{next(self._n)}"
        try:
            args = tuple(self._input_future(a.name) if isinstance(a, Input) else a for a in job.args)
            fut = self.client.submit(job.fn, *args, key=key, resources=job.resources, pure=False, retries=0)
        except Exception as exc:  # noqa: BLE001 - sorted below: no worker yet, or the scheduler going away
            if not isinstance(exc, TimeoutError) and self.client.status == "running":
                raise                                    # a real refusal: the task's own row says so
            job.unplaced = True                          # placed again by _tick once a worker / the scheduler is back
            job.stranded_since = job.stranded_since or time.monotonic()
            self._watch_workers = True
            return
        job.unplaced = False
        job.key, job.future = key, fut
        self._jobs[key] = job
        fut.add_done_callback(lambda _f, key=key: self._on_done(key))

    def _input_future(self, name: str):
        item = self._inputs[name]
        if item.future is None or item.future.status != "finished":
            item.future = self.client.scatter(item.pack(), hash=False, timeout=SCATTER_WAIT_S)
        return item.future

    def _tick(self) -> None:
        """After a loss: relaunch what could not be placed, end what no worker can run in time."""
        if not self._watch_workers:
            return
        waiting = [j for j in self._all if not j.finished]
        if not waiting:
            self._watch_workers = False
            return
        if self.client.status != "running" and not self._reconnected():
            return                                       # every task has ended "scheduler lost"
        try:
            workers = self.client.scheduler_info(n_workers=-1).get("workers", {})
        except Exception:  # noqa: BLE001 - a scheduler going away: the next tick waits for it
            return
        offered = [set((w.get("resources") or {})) for w in workers.values()]
        now, stranded = time.monotonic(), False
        for job in waiting:
            runnable = any(set(job.resources or ()) <= res for res in offered)
            if runnable and job.unplaced:
                self._relaunch(job)
            if runnable and not job.unplaced:
                job.stranded_since = None
                continue
            stranded = True
            job.stranded_since = job.stranded_since or now
            if now - job.stranded_since > self.lost_wait_s:
                need = f" with {', '.join(job.resources)}" if job.resources else ""
                last = (job.lost_on or [r["worker"] for r in self.removed] or ["unknown"])[-1]
                self._finish(job, exc=ClusterLost(f"worker lost: {last}; no worker{need} joined within "
                                                  f"{self.lost_wait_s:.0f} s", kind="no worker", address=last,
                                                  lost_on=tuple(job.lost_on)))
                self._cancel_future(job)
        self._watch_workers = stranded or any(j.unplaced for j in waiting)

    # -- endings -------------------------------------------------------------------------

    def _lost(self, job: _TrackedJob, worker: str) -> ClusterLost:
        runs = len(job.lost_on)
        return ClusterLost(f"worker lost: {worker} died while running it ({runs} run(s); --retries {self.retries})",
                           kind="worker", address=worker, lost_on=tuple(job.lost_on))

    def _cancel_future(self, job: _TrackedJob) -> None:
        if job.future is not None and not job.future.done():
            try:
                job.future.cancel(force=True)
            except Exception:  # noqa: BLE001 - a closed client: nothing left to cancel
                pass

    def _finish(self, job: _TrackedJob, value: Any = None, exc: BaseException | None = None) -> None:
        if job.finished:
            return
        job.finished = True
        if job.key is not None:
            self._jobs.pop(job.key, None)
        for name in job.inputs:
            item = self._inputs.get(name)
            if item is not None:
                item.users -= 1
                if item.users <= 0:
                    item.future = None               # released on the cluster once no task needs it
        self._ready.append((job, value, exc))

    def _deliver(self) -> None:
        """Set the finished tasks' results outside the lock (their callbacks land artifacts)."""
        with self._lock:
            ready, self._ready = self._ready, []
        for job, value, exc in ready:
            if job.result.done():
                continue
            if exc is not None:
                job.result.set_exception(exc)
            else:
                job.result.set_result(value)


def announce_start() -> None:
    """On a Dask worker, first thing in a task: tell the client, through the scheduler and
    synchronously, that this attempt runs here, so this worker's death counts as one attempt.
    Best effort: an attempt that could not announce itself is re-run without counting."""
    try:
        from distributed import get_client, get_worker

        worker = get_worker()
        get_client().log_event(STARTED, {"key": str(worker.get_current_task()), "worker": worker.address})
    except Exception:  # noqa: BLE001 - not on a worker, or the scheduler is going away
        pass


def _message(event):
    return event[1] if isinstance(event, tuple) and len(event) == 2 else event


def _address_of(exc: BaseException) -> str:
    worker = getattr(exc, "last_worker", None)
    return str(getattr(worker, "address", None) or worker or "unknown worker")
