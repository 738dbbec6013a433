"""The resource limits of a sandbox job and where they come from.

Owns :class:`Limits` (wall clock, memory, CPU threads, address-space limit, minimal environment;
checked when made) and :func:`default_limits`, which reads them from the defaults, a config
file and the environment. The limits are applied elsewhere: to the child by
:mod:`studio.core.sandbox.process` (``RLIMIT_AS``, thread variables) and while a job runs by
:mod:`studio.core.sandbox.protocol` (timeout, resident-memory watchdog).

Configuration (:func:`default_limits`), later sources win:

    1. defaults: ``timeout_s = 120``, ``memory_gb = 3``, ``cpu_threads`` unset;
    2. the first config file found of: ``$ONNX_STUDIO_CONFIG``,
       ``./onnx-studio.toml``, ``$XDG_CONFIG_HOME/onnx-studio/config.toml``
       (``~/.config/onnx-studio/config.toml``)::

           [worker]
           timeout_s = 300
           memory_gb = 4
           cpu_threads = 4

    3. environment: ``ONNX_STUDIO_TIMEOUT_S``, ``ONNX_STUDIO_MEMORY_GB``,
       ``ONNX_STUDIO_CPU_THREADS``.

    Other knobs (environment only, read where they are used): ``ONNX_STUDIO_MAX_WARM``,
    ``ONNX_STUDIO_WORKER_IDLE_S`` (:mod:`studio.core.sandbox.pool`), ``ONNX_STUDIO_JOB_DIR`` (parent
    folder of the per-process job folders; default the system temp dir).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import model_weight_bytes

GiB = 2**30
_MIN_MEMORY_BYTES = 512 * 2**20
_STACK_ALLOWANCE_PER_THREAD = 16 * 2**20
_SCALE_FROM_BYTES = 512 * 2**20
# Job time per GiB of weights, above 1 GiB: a 6.4 GiB decoder's int4 quantization (load, quantize 105
# MatMuls, save) ran past the 120 s default on 2 loaded cores.
_SECONDS_PER_GIB = 180.0


@dataclass(frozen=True)
class Limits:
    """Resource limits of one job (and of the worker that runs it)."""

    timeout_s: float = 120.0            # wall clock per job, from request to reply
    memory_bytes: int = 3 * GiB         # the worker's memory limit (see the package docs)
    cpu_threads: int | None = None      # None: engines' defaults; else OMP/MKL/OpenBLAS env + engine threads
    address_space_limit: bool = True    # RLIMIT_AS on; False for CUDA jobs (CUDA reserves huge address ranges)
    minimal_env: bool = False           # user code (custom ops): start the worker with an allowlisted environment

    def __post_init__(self) -> None:
        if not (isinstance(self.timeout_s, (int, float)) and math.isfinite(self.timeout_s)
                and self.timeout_s > 0):
            raise ValueError(f"timeout_s must be a positive number of seconds, got {self.timeout_s!r}")
        if not isinstance(self.memory_bytes, int) or self.memory_bytes < _MIN_MEMORY_BYTES:
            raise ValueError(f"memory_bytes must be an int of at least {_MIN_MEMORY_BYTES} (512 MiB), "
                             f"got {self.memory_bytes!r}")
        if self.cpu_threads is not None and (not isinstance(self.cpu_threads, int) or self.cpu_threads < 1):
            raise ValueError(f"cpu_threads must be a positive int or None, got {self.cpu_threads!r}")

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GiB

    @property
    def address_space_bytes(self) -> int:
        """The child's ``RLIMIT_AS``: memory plus thread-stack reservations."""
        threads = self.cpu_threads or os.cpu_count() or 1
        return self.memory_bytes + _STACK_ALLOWANCE_PER_THREAD * max(threads, 4)

    def worker_key(self) -> tuple[Any, ...]:
        """What the warm worker was started with; a job with another key needs a new one."""
        return (self.memory_bytes, self.cpu_threads, self.address_space_limit, self.minimal_env)


def _config_files() -> list[Path]:
    files = []
    explicit = os.environ.get("ONNX_STUDIO_CONFIG")
    if explicit:
        files.append(Path(explicit))
    files.append(Path.cwd() / "onnx-studio.toml")
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    files.append(Path(xdg) / "onnx-studio" / "config.toml")
    return files


def _number(value: Any, source: str, *, integer: bool = False) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(value) if integer else float(value)
        if integer and isinstance(value, float) and not value.is_integer():
            raise ValueError
    except (TypeError, ValueError):
        raise StudioError(f"{source} must be a{'n integer' if integer else ' number'}, got {str(value)[:40]!r}",
                          code=ErrorCode.BAD_CONFIG) from None
    if not math.isfinite(number) or number <= 0:
        raise StudioError(f"{source} must be positive, got {str(value)[:40]!r}", code=ErrorCode.BAD_CONFIG)
    return number


def default_limits() -> Limits:
    """Limits from defaults, the first config file found, then the environment.

    See the module docstring for the sources. Invalid values raise
    :class:`StudioError` (code ``BAD-CONFIG``) naming the setting.
    """
    import tomllib

    values: dict[str, tuple[Any, str]] = {}
    for path in _config_files():
        try:
            if not path.is_file():
                continue
            with open(path, "rb") as fh:
                table = tomllib.load(fh).get("worker", {})
        except OSError:
            continue
        except tomllib.TOMLDecodeError as exc:
            raise StudioError(f"config file {path.name} is not valid TOML: {exc}", code=ErrorCode.BAD_CONFIG) from None
        if not isinstance(table, dict):
            raise StudioError(f"config file {path.name}: [worker] must be a table", code=ErrorCode.BAD_CONFIG)
        for key in ("timeout_s", "memory_gb", "cpu_threads"):
            if key in table:
                values[key] = (table[key], f"{path.name} [worker] {key}")
        break
    for key, env in (("timeout_s", "ONNX_STUDIO_TIMEOUT_S"), ("memory_gb", "ONNX_STUDIO_MEMORY_GB"),
                     ("cpu_threads", "ONNX_STUDIO_CPU_THREADS")):
        raw = os.environ.get(env)
        if raw not in (None, ""):
            values[key] = (raw, env)
    kwargs: dict[str, Any] = {}
    if "timeout_s" in values:
        kwargs["timeout_s"] = _number(*values["timeout_s"])
    if "memory_gb" in values:
        gib = _number(*values["memory_gb"])
        if gib * GiB < _MIN_MEMORY_BYTES:
            raise StudioError(f"{values['memory_gb'][1]} must be at least 0.5 (GiB)", code=ErrorCode.BAD_CONFIG)
        kwargs["memory_bytes"] = int(gib * GiB)
    if "cpu_threads" in values:
        kwargs["cpu_threads"] = int(_number(*values["cpu_threads"], integer=True))
    return Limits(**kwargs)


def scaled_to_model(limits: Limits | None, model_bytes: int, *, copies: int = 6,
                    min_timeout_s: float | None = None) -> Limits:
    """Limits for a job that holds a few copies of a model's weights at once (a quantizer's input and
    output, ORT's transformer optimizer, sessions with prepacked weights): ``limits`` when the caller set
    them; else the defaults raised to 3 GiB plus ``copies`` times the model (whole GiB, so that models of
    about one size share warm workers), up to half of this machine's memory, so that a 440 MB BERT is
    not killed at the 3 GiB default. Never lowers a configured limit; below 512 MiB of copies the
    defaults stand. Above 1 GiB of weights the timeout is at least 180 s per GiB."""
    if limits is not None:
        return limits
    from dataclasses import replace

    base = default_limits()
    try:
        import psutil

        ceiling = int(psutil.virtual_memory().total * 0.5)
    except Exception:  # noqa: BLE001 - no psutil or no /proc: a fixed ceiling
        ceiling = 8 * GiB
    extra = copies * max(0, int(model_bytes))
    memory = base.memory_bytes
    if extra > _SCALE_FROM_BYTES:      # small models keep the default (and its warm workers)
        memory = max(memory, min(ceiling, math.ceil((3 * GiB + extra) / GiB) * GiB))
    timeout = base.timeout_s if min_timeout_s is None else max(base.timeout_s, float(min_timeout_s))
    if model_bytes > GiB:               # reading, transforming and writing the weights takes time too
        timeout = max(timeout, _SECONDS_PER_GIB * model_bytes / GiB)
    return replace(base, timeout_s=timeout, memory_bytes=memory)


def session_limits(limits: Limits | None, model_path: str | Path, data_dir: str | Path | None = None) -> Limits:
    """Limits for a job that holds one engine session of the model at ``model_path`` (a check's session,
    verification's reference or candidate run): its weights once, as ONNX Runtime holds them (prepacking
    frees each original), on top of the defaults. ``data_dir``: where a pipeline checkpoint's unchanged
    weights live when not beside it. Without this the 3 GiB default refuses every model over ~2.5 GiB of
    weights ("exceeded the worker memory limit") and verification falls back to structure only."""
    held = model_weight_bytes(model_path, data_dir)
    return scaled_to_model(limits, held, copies=1)


def worker_limit_refusal(model_path: str | Path, stage: str, limits: Limits | None = None) -> str | None:
    """The one line that refuses ``stage`` before any work when the model's weights alone exceed the memory
    limit of the worker that would hold them, else None. Known from the file sizes alone (no weight read):
    every job that holds a session or a weight copy (check's session, verification, a pass's worker, the
    int4 quantizer, the generation worker, the memory plan's ORT and OpenVINO graphs) runs under at least
    :func:`session_limits`, which is capped at half this machine's memory unless the configured limit is
    higher. Without it a model above that cap loaded for minutes and then "exceeded the worker memory
    limit"; the memory plan's "ORT as users run it" did the same under the unscaled 3 GiB default."""
    return limit_refusal(stage, model_weight_bytes(model_path), session_limits(limits, model_path).memory_bytes)


def room_for_weights(limits: Limits, held: int) -> Limits:
    """``limits`` with memory for sessions that hold ``held`` bytes of weights once (as :func:`session_limits`
    raises the defaults, up to half this machine), never lowered: for jobs whose caller set limits (the
    profiles' --memory-gb) that still hold whole models. Under 512 MiB of weights the caller's stand."""
    from dataclasses import replace

    if held < _SCALE_FROM_BYTES:
        return limits
    return replace(limits, memory_bytes=max(limits.memory_bytes, scaled_to_model(None, held, copies=1).memory_bytes))


def limit_refusal(stage: str, held: int, limit: int, *, whose: str = "this model's") -> str | None:
    """The one line of :func:`worker_limit_refusal` for ``held`` bytes of weights in one worker limited to
    ``limit`` bytes; None when they fit, or under 512 MiB (the sandbox's own limits speak for those)."""
    if held < _SCALE_FROM_BYTES or held <= limit:
        return None
    return (f"{stage} needs one worker holding {whose} {held / GiB:.1f} GiB of weights, above the worker "
            f"memory limit of {limit / GiB:.1f} GiB (the configured limit, raised for large models up to half "
            f"this machine's memory): set ONNX_STUDIO_MEMORY_GB={math.ceil(held / GiB) + 1} (or [worker] memory_gb "
            "in onnx-studio.toml) to allow it")


def require_memory(model_path: str | Path, stage: str, *, copies: float = 1.1, overhead: int = GiB // 2,
                   limits: Limits | None = None, in_worker: bool = True) -> None:
    """Refuse a stage in one line before it does any work when its worker's memory limit cannot hold the
    model's weights (:func:`worker_limit_refusal`, when ``in_worker``: a sandbox worker holds them;
    ``limits``: the caller's own) or this machine cannot
    hold what it needs: ``copies`` times the model's weights (one engine session holds them once; 1.1
    leaves room for its arena) plus ``overhead``, against the memory available now. Models under 512 MiB
    are never refused here (the sandbox's own limits speak for them). Without it a 6 GiB model on a busy
    machine got minutes of work and then "exceeded the worker memory limit" or an out-of-memory kill."""
    refusal = worker_limit_refusal(model_path, stage, limits) if in_worker else None
    if refusal is not None:
        raise StudioError(refusal, code=ErrorCode.TOO_LARGE)
    held = model_weight_bytes(model_path)
    if held < _SCALE_FROM_BYTES:
        return
    try:
        import psutil

        available = int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil or no /proc: nothing to compare with
        return
    need = int(copies * held) + overhead
    if need > available:
        raise StudioError(f"{stage} needs ~{need / GiB:.1f} GiB of memory for this model's {held / GiB:.1f} GiB of "
                          f"weights, {available / GiB:.1f} GiB available: free memory or run it on a larger machine",
                          code=ErrorCode.TOO_LARGE)
