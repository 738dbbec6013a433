"""Data-loader scripts (Polygraphy's convention): a Python file whose ``load_data()``
yields feed dicts ``{input name: array}``.

It is the user's code, so it runs only in a one-off worker with an allowlisted
environment, writes fenced in to the job's folders (Landlock / audit hook, as for
custom ops), a timeout and a memory limit. The samples it yields are saved once as
``.npz`` files in the dataset, so later runs never execute the script again.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

import numpy as np

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.paths import check_regular_file
from studio.core.sandbox import Limits, default_limits, run_job
from studio.plugins.confine import confine_writes
from studio.plugins.usercode import UserCodeError, load_user_function, short_error

MAX_SCRIPT_BYTES = 1 * 2**20
MAX_YIELD_BYTES = 2**30
DEFAULT_TIMEOUT_S = 120.0


@job("data.loader_script")
def loader_script_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    confine_writes([ctx.scratch.parent, ctx.out_dir])
    limit, total = int(args["limit"]), 0
    try:
        load = load_user_function(Path(args["code_path"]), "load_data", "data-loader script")
    except UserCodeError as exc:
        return JobOutput(data={"error": str(exc)})
    count = 0
    try:
        for i, feeds in enumerate(itertools.islice(load(), limit)):
            if not isinstance(feeds, dict) or not feeds:
                return JobOutput(data={"error": f"data-loader script: load_data() yielded a "
                                                f"{type(feeds).__name__} at sample {i}; yield dicts of "
                                                "{input name: numpy array}"})
            arrays_i = {}
            for name, value in feeds.items():
                arr = np.asarray(value)
                if arr.dtype == object:
                    return JobOutput(data={"error": f"data-loader script: sample {i}, input "
                                                    f"'{str(name)[:40]}' is not a numeric array"})
                arrays_i[str(name)] = arr
                total += arr.nbytes
            if total > MAX_YIELD_BYTES:
                return JobOutput(data={"error": "data-loader script: the samples exceed 1 GiB; yield fewer"})
            with open(ctx.out_dir / f"{i:05d}.npz", "wb") as fh:  # scratch: the worker's job folder
                np.savez(fh, **arrays_i)  # scratch: the file opened above
            count += 1
    except TypeError as exc:
        if "not iterable" in str(exc) or "not an iterator" in str(exc):
            return JobOutput(data={"error": "data-loader script: load_data() must return or yield feed dicts"})
        return JobOutput(data={"error": f"data-loader script: load_data() raised {short_error(exc)}"})
    except BaseException as exc:  # noqa: BLE001 - the user's code: SystemExit too
        return JobOutput(data={"error": f"data-loader script: load_data() raised {short_error(exc)}"})
    return JobOutput(data={"count": count})


def run_loader_script(script: Path, into: Path, *, limit: int, timeout_s: float | None = None,
                      pool_key: str = "default") -> int:
    """Run ``script``'s ``load_data()`` in a confined one-off worker; its samples land in
    ``into`` as ``NNNNN.npz``. Returns how many; a one-line StudioError otherwise."""
    check_regular_file(script, max_bytes=MAX_SCRIPT_BYTES, label="data-loader script")
    base = default_limits()
    limits = Limits(timeout_s=float(timeout_s or min(base.timeout_s, DEFAULT_TIMEOUT_S)),
                    memory_bytes=base.memory_bytes, cpu_threads=base.cpu_threads, minimal_env=True)
    work = Path(tempfile.mkdtemp(prefix="studio-loader-"))
    try:
        code = work / "loader.py"
        shutil.copyfile(script, code, follow_symlinks=False)  # scratch: our temp folder
        out = work / "out"
        try:
            res = run_job("data.loader_script", {"code_path": str(code), "limit": int(limit)},
                          stage="data-loader script", limits=limits, fresh=True, pool_key=pool_key, out_dir=out)
        except WorkerError as exc:
            if exc.kind == "timeout":
                raise StudioError(f"data-loader script did not finish within {limits.timeout_s:g} s "
                                  "(an endless loop?); its worker was stopped", code=ErrorCode.TIMEOUT) from None
            if exc.kind == "memory":
                raise StudioError(f"data-loader script exceeded the worker memory limit "
                                  f"({limits.memory_gib:.1f} GiB)", code=ErrorCode.MEMORY) from None
            raise StudioError(f"data-loader script failed: {exc}") from None
        if res.data.get("error"):
            raise StudioError(str(res.data["error"])[:400], code=ErrorCode.USER_CODE)
        into.mkdir(parents=True, exist_ok=True)
        count = 0
        for f in sorted(out.glob("*.npz")):
            if f.is_file() and not f.is_symlink():
                shutil.move(str(f), into / f.name)  # scratch: into the dataset's staging folder
                count += 1
        return count
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: our temp folder
