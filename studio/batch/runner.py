"""``onnx-studio batch``: many models x stages, resumable, on a local pool or a Dask cluster.

Every model x stage is one task. Finished tasks are appended to
``batch-state.jsonl`` in the output folder as they end, so a second run skips
them (``force`` runs them again) and an interrupted batch loses nothing it had
finished. A model that cannot be loaded fails its own row; so does a stage that
crashes, times out or is refused. The report (HTML with a sortable table and
plots, CSV, JSON) is written at the end of every run.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path

from studio.batch.executors import Executor, LocalExecutor, model_files
from studio.batch.results import BatchModel, BatchResult, BatchRow
from studio.batch.stages import NOT_WRITTEN, ON_TARGET, STAGES, StageOutcome, StageTask, machine_facts
from studio.core.errors import StudioError
from studio.core.fmt import printable
from studio.core.outputs import check_destination, check_folder, disk_error, shown_path
from studio.core.model import load
from studio.batch.report import write_reports
from studio.core.error_codes import ErrorCode

STATE_FILE = "batch-state.jsonl"
FINISHED = ("ok", "failed", "error")          # resuming skips these; worker/scheduler lost, cancelled run again
MODEL_SUFFIXES = (".onnx",)
MAX_MODELS = 5000


@dataclass(frozen=True)
class BatchScan:
    """What a scan of the batch's paths found: the models, and what it passed over and why."""

    models: list[BatchModel]
    skipped: tuple[tuple[str, str], ...] = ()        # (name as shown, reason)


def _scan(folder: Path, out: Path | None, found: list[Path], skipped: list[tuple[str, str]]) -> None:
    """``*.onnx`` regular files under ``folder``, links never followed (a link, a FIFO, a device or a socket
    named ``.onnx`` is passed over unopened: opening a FIFO would wait forever), empty files passed over,
    and the batch's own output folder never entered (its artifacts are not inputs of the next run)."""
    stack = [folder]
    while stack:
        d = stack.pop()
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as exc:
            skipped.append((str(d), f"unreadable folder ({(exc.strerror or type(exc).__name__).lower()})"))
            continue
        subdirs = []
        for e in entries:
            path = Path(e.path)
            if e.is_symlink():
                if e.name.endswith(MODEL_SUFFIXES) or e.is_dir():
                    skipped.append((str(path), _link_reason(path, folder)))
                continue
            if e.is_dir(follow_symlinks=False):
                if out is not None and path.resolve() == out:
                    skipped.append((str(path), "the batch's own output folder"))
                else:
                    subdirs.append(path)
                continue
            if not e.name.endswith(MODEL_SUFFIXES):
                continue
            st = e.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                skipped.append((str(path), f"{_kind(st.st_mode)}, not a regular file"))
            elif st.st_size == 0:
                skipped.append((str(path), "empty file"))
            else:
                found.append(path)
            if len(found) > MAX_MODELS:
                raise StudioError(f"more than {MAX_MODELS} models; split the batch", code=ErrorCode.TOO_LARGE)
        stack.extend(reversed(subdirs))


def _link_reason(path: Path, folder: Path) -> str:
    try:
        target = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return "broken link"
    inside = target.is_relative_to(folder.resolve())
    return "link, not followed" if inside else "link out of the folder, not followed"


def _kind(mode: int) -> str:
    return ("FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else
            "device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "special file")


def discover(paths: Sequence[str | Path], out_dir: str | Path | None = None) -> BatchScan:
    """The models named by ``paths`` (files, or folders searched for *.onnx), each loaded once.
    Files named on the command line are the user's choice and always tried; in folders, what cannot be
    a model is passed over and listed in ``BatchScan.skipped``."""
    out = Path(out_dir).resolve() if out_dir is not None else None
    found: list[Path] = []
    skipped: list[tuple[str, str]] = []
    for p in map(Path, paths):
        if p.is_dir():
            _scan(p, out, found, skipped)
        else:
            found.append(p)
        if len(found) > MAX_MODELS:
            raise StudioError(f"more than {MAX_MODELS} models; split the batch", code=ErrorCode.TOO_LARGE)
    if not found:
        raise StudioError("no models to run: give .onnx files or folders that hold them"
                          + (f" ({skipped_summary(skipped)})" if skipped else ""), code=ErrorCode.NOT_FOUND)
    names = [p.name for p in found]
    models, seen = [], set()
    for p in found:
        # backend-test style folders all hold "model.onnx": name those by their folder
        name = f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name
        try:
            h = load(p)
        except StudioError as exc:
            models.append(BatchModel(name, p, None, str(exc).splitlines()[0][:300]))
            continue
        if h.sha256 in seen:
            continue
        seen.add(h.sha256)
        models.append(BatchModel(name, p, h.sha256))
    return BatchScan(models, tuple(skipped))


def skipped_summary(skipped: Sequence[tuple[str, str]], examples: int = 3) -> str:
    """One line for everything a scan passed over: a count per reason, with the first few names."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in skipped:
        by_reason.setdefault(reason, []).append(name)
    parts = []
    for reason, names in by_reason.items():
        shown = ", ".join(printable(Path(n).name, 40) for n in names[:examples])
        more = f", +{len(names) - examples} more" if len(names) > examples else ""
        parts.append(f"{reason}: {len(names)} ({shown}{more})")
    return f"skipped {len(skipped)} item(s): " + "; ".join(parts)


def _read_state(path: Path) -> dict[str, StageOutcome]:
    done: dict[str, StageOutcome] = {}
    if not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            o = StageOutcome.from_dict(json.loads(line))
        except (json.JSONDecodeError, TypeError, KeyError):
            continue              # a line cut by a crash mid-write
        done[o.key] = o
    return done


ProgressFn = Callable[[int, int, float | None, StageOutcome | None], None]


def _completed(futures: list[Future]) -> Iterator[Future]:
    """The futures as they finish, the waiting thread waking every 0.5 s. ``as_completed`` blocks without a
    limit, and a Ctrl-C that the kernel hands to a task thread only sets Python's flag: the main thread saw
    it when a task next finished (a 300 s profile kept a SIGINTed batch running to its end)."""
    left = set(futures)
    while left:
        done, left = wait(left, timeout=0.5, return_when=FIRST_COMPLETED)
        yield from done


def run_batch(paths: Sequence[str | Path], out_dir: str | Path, *, stages: Sequence[str] = ("inspect", "check"),
              executor: Executor | None = None, force: bool = False, stage_options: dict | None = None,
              target: str | None = None, on_progress: ProgressFn | None = None,
              on_outcome: Callable[[BatchModel, StageOutcome], None] | None = None) -> BatchResult:
    """Run ``stages`` of every model under ``paths``; results and artifacts land in ``out_dir``.
    ``on_progress(done, total, eta_s, outcome)`` after each task; ``on_outcome`` lets a caller
    record each result (into a project) as it arrives."""
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise StudioError(f"unknown stage {unknown[0][:20]!r}; stages: {', '.join(STAGES)}" if unknown
                          else "give at least one stage", code=ErrorCode.BAD_OPTION)
    out = Path(out_dir)
    state_path = out / STATE_FILE
    had_state, had_out = state_path.is_file(), os.path.lexists(out)
    try:
        return _run_batch(paths, out, stages=stages, executor=executor, force=force, stage_options=stage_options,
                          target=target, on_progress=on_progress, on_outcome=on_outcome)
    except Exception as exc:
        # A full or read-only disk: one line. The append-only state keeps every row finished before it.
        kept = state_path.is_file() and (had_state or state_path.stat().st_size > 0)
        err = disk_error(exc, shown_path(out_dir), note=(
            f"the rows finished so far are kept in {shown_path(state_path)} (run the same command again to "
            "resume)" if kept else "nothing was written"))
        if err is None:
            raise
        if not kept and not had_out and out.is_dir() and not out.is_symlink():
            shutil.rmtree(out, ignore_errors=True)  # scratch: the output folder this run made, nothing finished in it
        raise err from None


def _settle(executor: Executor, by_future: dict, failed: Future, state, outcomes: dict,
            lock: threading.Lock) -> None:
    """After a task's output could not be written: start nothing more, let the running tasks end (none
    writes into the folder after the run has stopped), and keep the rows that finished (best effort: the
    same disk may refuse them too); queued tasks end 'cancelled', so a resume runs them."""
    stop = getattr(executor, "stop_starting", None)
    (stop or executor.cancel)()
    for other, (m, task) in by_future.items():
        if other is failed:
            continue
        try:
            o = other.result()
        except Exception:  # noqa: BLE001 - not finished: a resume runs it
            continue
        if o.status not in FINISHED:
            continue
        try:
            with lock:
                state.write(json.dumps(o.to_dict(), default=str) + "\n")
                state.flush()
                outcomes[(m.folder_name, task.stage)] = o
        except OSError:
            return


def _run_batch(paths: Sequence[str | Path], out: Path, *, stages: Sequence[str], executor: Executor | None,
               force: bool, stage_options: dict | None, target: str | None, on_progress: ProgressFn | None,
               on_outcome: Callable[[BatchModel, StageOutcome], None] | None) -> BatchResult:
    """The body of ``run_batch`` (see there)."""
    check_folder(out, shown=shown_path(out))          # a FIFO, a file or a device there: one line
    scan = discover(paths, out)
    models = scan.models
    state_path = out / STATE_FILE
    previous = {} if force else _read_state(state_path)
    own = executor is None
    executor = executor or LocalExecutor()
    started = time.perf_counter()
    outcomes: dict[tuple[str, str], StageOutcome] = {}
    pending: list[tuple[BatchModel, StageTask, Future]] = []
    lock = threading.Lock()
    skipped = 0
    try:
        for m in models:
            if m.error:
                continue
            files = model_files(m.path)
            for stage in stages:
                task = StageTask(m.sha256, m.name, stage, dict((stage_options or {}).get(stage, {})),
                                 target if stage in ON_TARGET else None)
                old = previous.get(task.key)
                if old is not None and old.status in FINISHED:
                    outcomes[(m.folder_name, stage)] = old
                    skipped += 1
                    continue
                fut = executor.submit(task, files, out / m.folder_name / stage)
                pending.append((m, task, fut))
        total, done = len(pending), 0
        by_future = {fut: (m, task) for m, task, fut in pending}
        check_destination(state_path)
        with open(state_path, "a", encoding="utf-8") as state:  # scratch: the batch's append-only log, checked above
            for fut in _completed(list(by_future)):
                m, task = by_future[fut]
                try:
                    o = fut.result()
                except Exception as exc:  # noqa: BLE001 - the executor itself failed on this task
                    o = StageOutcome(task.key, m.name, m.sha256 or "", task.stage, "error",
                                     f"{type(exc).__name__}: {str(exc)[:200]}", target=task.target)
                if o.status == NOT_WRITTEN:     # the output folder takes no more: stop, resumable from here
                    _settle(executor, by_future, fut, state, outcomes, lock)
                    code = int(o.figures.get("errno") or errno.ENOSPC)
                    raise OSError(code, os.strerror(code))
                with lock:
                    outcomes[(m.folder_name, task.stage)] = o
                    state.write(json.dumps(o.to_dict(), default=str) + "\n")
                    state.flush()
                done += 1
                if on_outcome is not None:
                    on_outcome(m, o)
                if on_progress is not None:
                    elapsed = time.perf_counter() - started
                    on_progress(done, total, elapsed / done * (total - done) if done else None, o)
    except (KeyboardInterrupt, SystemExit):
        executor.cancel()   # Ctrl-C / a signal's exit: stop the running tasks now; close() would wait them out
        raise
    finally:
        if own:
            executor.close()
    rows = tuple(BatchRow(m, {s: outcomes[(m.folder_name, s)] for s in stages if (m.folder_name, s) in outcomes})
                 for m in models)
    result = BatchResult(out, tuple(stages), rows, executor.name, time.perf_counter() - started,
                         len(pending), skipped, machine=machine_facts(), passed_over=scan.skipped,
                         stage_options={s: dict((stage_options or {}).get(s, {})) for s in stages})

    return write_reports(result)
