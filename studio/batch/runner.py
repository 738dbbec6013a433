"""``onnx-studio batch``: many models x stages, resumable, on a local pool or a Dask cluster.

Every model x stage is one task. Finished tasks are appended to
``batch-state.jsonl`` in the output folder as they end, so a second run skips
them (``force`` runs them again) and an interrupted batch loses nothing it had
finished. A model that cannot be loaded fails its own row; so does a stage that
crashes, times out or is refused. The report (HTML with a sortable table and
plots, CSV, JSON) is written at the end of every run.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, as_completed
from pathlib import Path

from studio.batch.executors import Executor, LocalExecutor, _model_files
from studio.batch.results import BatchModel, BatchResult, BatchRow
from studio.batch.stages import STAGES, StageOutcome, StageTask, machine_facts
from studio.core.errors import StudioError
from studio.core.outputs import check_destination, disk_error, shown_path, translated

STATE_FILE = "batch-state.jsonl"
FINISHED = ("ok", "failed", "error")          # resuming skips these; worker/scheduler lost, cancelled run again
MODEL_SUFFIXES = (".onnx",)
MAX_MODELS = 5000


def discover(paths: Sequence[str | Path]) -> list[BatchModel]:
    """The models named by ``paths`` (files, or folders searched for *.onnx), each loaded once."""
    from studio.core.model import load

    found: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found.extend(sorted(x for x in p.rglob("*.onnx") if x.is_file() and not x.is_symlink()))
        else:
            found.append(p)
        if len(found) > MAX_MODELS:
            raise StudioError(f"more than {MAX_MODELS} models; split the batch", code="TOO-LARGE")
    if not found:
        raise StudioError("no models to run: give .onnx files or folders that hold them", code="NOT-FOUND")
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
    return models


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
                          else "give at least one stage", code="BAD-OPTION")
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


def _run_batch(paths: Sequence[str | Path], out: Path, *, stages: Sequence[str], executor: Executor | None,
               force: bool, stage_options: dict | None, target: str | None, on_progress: ProgressFn | None,
               on_outcome: Callable[[BatchModel, StageOutcome], None] | None) -> BatchResult:
    """The body of ``run_batch`` (see there)."""
    with translated(shown_path(out)):
        out.mkdir(parents=True, exist_ok=True)
    models = discover(paths)
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
            files = _model_files(m.path)
            for stage in stages:
                task = StageTask(m.sha256, m.name, stage, dict((stage_options or {}).get(stage, {})),
                                 target if stage in ("profile", "precision") else None)
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
            for fut in as_completed(list(by_future)):
                m, task = by_future[fut]
                try:
                    o = fut.result()
                except Exception as exc:  # noqa: BLE001 - the executor itself failed on this task
                    o = StageOutcome(task.key, m.name, m.sha256 or "", task.stage, "error",
                                     f"{type(exc).__name__}: {str(exc)[:200]}", target=task.target)
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
    finally:
        if own:
            executor.close()
    rows = tuple(BatchRow(m, {s: outcomes[(m.folder_name, s)] for s in stages if (m.folder_name, s) in outcomes})
                 for m in models)
    result = BatchResult(out, tuple(stages), rows, executor.name, time.perf_counter() - started,
                         len(pending), skipped, machine=machine_facts())
    from studio.batch.report import write_reports

    return write_reports(result)
