"""NVTX ranges for Nsight Systems, and the ``nsys`` round trip.

One helper (:class:`NvtxRanges`, :func:`ranges`) marks load, session
creation, warm-up, every timed iteration and every pipeline pass
(``passes.instruments.NvtxInstrument`` uses it). Without a profiler attached
the ``nvtx`` package hands out a dummy domain and every call here is a no-op;
the timing loop then skips the per-iteration calls altogether
(:attr:`NvtxRanges.attached`), so NVTX costs nothing when nobody listens.

``nsys`` (NOT VERIFIED HERE: no GPU or Nsight Systems where this was written):
:func:`nsys_plan` builds the two documented commands::

    nsys profile --trace=cuda,nvtx,osrt --force-overwrite=true --output DIR/report <command>
    nsys stats --report cuda_gpu_kern_sum,cuda_gpu_mem_time_sum --format csv \
        --force-export=true --output DIR/stats DIR/report.nsys-rep

``nsys stats`` writes one CSV per report, ``DIR/stats_<report>.csv``;
:func:`parse_kernel_summary` and :func:`parse_memory_summary` read them by
header meaning (column order and time unit may vary between nsys versions).
"""

from __future__ import annotations

import csv
import io
import logging
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.sandbox import scrub_message

log = logging.getLogger(__name__)

__all__ = ["DOMAIN", "KernelRow", "MemoryOpRow", "NsysPlan", "NsysStats", "NvtxRanges", "find_nsys", "nsys_plan",
           "parse_kernel_summary", "parse_memory_summary", "ranges", "read_nsys_stats", "run_nsys"]

DOMAIN = "onnx-studio"
NSYS_REPORTS = ("cuda_gpu_kern_sum", "cuda_gpu_mem_time_sum")
NOT_VERIFIED = "not verified here (no GPU / Nsight Systems on the machine this was written on)"


class NvtxRanges:
    """NVTX ranges in one domain; every method is a no-op when no profiler is attached."""

    def __init__(self, domain: str = DOMAIN) -> None:
        self._domain = None
        self.attached = False
        try:
            import nvtx

            domain_obj = nvtx.get_domain(domain)
            self.attached = isinstance(domain_obj, nvtx.Domain)   # a DummyDomain when nothing listens
            self._domain = domain_obj if self.attached else None
        except Exception as exc:   # nvtx missing or broken: ranges are optional
            log.debug("NVTX unavailable: %s", exc)

    def start(self, message: str) -> object | None:
        """Open a range that may end on another thread; pass the handle to :meth:`end`."""
        if self._domain is None:
            return None
        return self._domain.start_range(message=message)

    def end(self, handle: object | None) -> None:
        if self._domain is not None and handle is not None:
            self._domain.end_range(handle)

    @contextmanager
    def range(self, message: str) -> Iterator[None]:
        handle = self.start(message)
        try:
            yield
        finally:
            self.end(handle)

    def iteration_hooks(self, message: str) -> tuple[Callable[[], None], Callable[[], None]] | None:
        """(push, pop) for a hot loop, with the event attributes built once; None when detached."""
        if self._domain is None:
            return None
        attributes = self._domain.get_event_attributes(message=message)
        domain = self._domain
        return (lambda: domain.push_range(attributes)), domain.pop_range


@lru_cache(maxsize=4)
def ranges(domain: str = DOMAIN) -> NvtxRanges:
    """The process-wide helper for ``domain`` (the worker builds it once)."""
    return NvtxRanges(domain)


# ============================================================================ nsys

@dataclass(frozen=True)
class NsysPlan:
    """The two nsys commands of one profile and where their files land."""

    profile_cmd: tuple[str, ...]
    stats_cmd: tuple[str, ...]
    report: Path            # DIR/report.nsys-rep
    stats_prefix: Path      # DIR/stats -> DIR/stats_<report>.csv

    def csv_path(self, report: str) -> Path:
        return self.stats_prefix.parent / f"{self.stats_prefix.name}_{report}.csv"

    def shell_text(self) -> str:
        """Both commands as a user would paste them on a GPU machine."""
        return shlex.join(self.profile_cmd) + "\n" + shlex.join(self.stats_cmd)


def find_nsys() -> str | None:
    """The ``nsys`` executable on PATH, or None."""
    return shutil.which("nsys")


def nsys_plan(command: Sequence[str], out_dir: Path, *, nsys: str = "nsys") -> NsysPlan:
    """Commands that profile ``command`` under nsys with NVTX and CUDA tracing into ``out_dir``."""
    if not command:
        raise StudioError("nsys needs a command to profile", code=ErrorCode.BAD_OPTION)
    out_dir = Path(out_dir)
    report_base = out_dir / "report"
    stats_prefix = out_dir / "stats"
    profile_cmd = (nsys, "profile", "--trace=cuda,nvtx,osrt", "--force-overwrite=true",
                   f"--output={report_base}", *command)
    stats_cmd = (nsys, "stats", "--report", ",".join(NSYS_REPORTS), "--format", "csv", "--force-export=true",
                 f"--output={stats_prefix}", f"{report_base}.nsys-rep")
    return NsysPlan(profile_cmd, stats_cmd, Path(f"{report_base}.nsys-rep"), stats_prefix)


@dataclass(frozen=True)
class KernelRow:
    name: str
    total_ns: float
    instances: int
    avg_ns: float
    share: float            # of all GPU kernel time, 0..1 (nsys "Time (%)" / 100)


@dataclass(frozen=True)
class MemoryOpRow:
    operation: str          # "[CUDA memcpy Host-to-Device]", "[CUDA memset]"...
    total_ns: float
    count: int
    avg_ns: float


@dataclass(frozen=True)
class NsysStats:
    """Kernel and memory-operation summaries imported from ``nsys stats``."""

    kernels: tuple[KernelRow, ...]
    memory_ops: tuple[MemoryOpRow, ...]
    verified: bool = False   # this code path was never run against a real nsys here

    @property
    def kernel_ns(self) -> float:
        return sum(k.total_ns for k in self.kernels)

    @property
    def memcpy_ns(self) -> float:
        return sum(m.total_ns for m in self.memory_ops if "memcpy" in m.operation.lower())

    @property
    def memcpy_share(self) -> float:
        """Share of GPU time (kernels + memory operations) spent copying."""
        total = self.kernel_ns + sum(m.total_ns for m in self.memory_ops)
        return self.memcpy_ns / total if total else 0.0

    def to_dict(self) -> dict:
        return {"verified": self.verified, "note": None if self.verified else NOT_VERIFIED,
                "kernel_ms": round(self.kernel_ns / 1e6, 4), "memcpy_ms": round(self.memcpy_ns / 1e6, 4),
                "memcpy_share": round(self.memcpy_share, 4),
                "kernels": [{"name": k.name, "total_ms": round(k.total_ns / 1e6, 4), "instances": k.instances,
                             "avg_us": round(k.avg_ns / 1e3, 3), "share": round(k.share, 4)}
                            for k in self.kernels],
                "memory_ops": [{"operation": m.operation, "total_ms": round(m.total_ns / 1e6, 4), "count": m.count,
                                "avg_us": round(m.avg_ns / 1e3, 3)} for m in self.memory_ops]}


_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def _rows(text: str) -> list[dict[str, str]]:
    """CSV rows keyed by lower-case header; nsys may print a banner line before the header."""
    lines = [ln for ln in text.lstrip("\ufeff").splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "Time" in ln and "," in ln), None)
    if start is None:
        return []
    reader = csv.DictReader(io.StringIO("\n".join(lines[start:])))
    return [{(k or "").strip().lower(): (v or "").strip() for k, v in row.items()} for row in reader]


def _column(row: dict[str, str], prefix: str) -> tuple[str, float] | None:
    """(value, unit factor to ns) of the first column starting with ``prefix`` ("total time")."""
    for key, value in row.items():
        if key.startswith(prefix):
            unit = key[key.rfind("(") + 1:key.rfind(")")] if "(" in key else "ns"
            return value, _UNIT_NS.get(unit.strip(), 1.0)
    return None


def _number(text: str) -> float:
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def _time_ns(row: dict[str, str], prefix: str) -> float:
    found = _column(row, prefix)
    return _number(found[0]) * found[1] if found else 0.0


def parse_kernel_summary(text: str) -> tuple[KernelRow, ...]:
    """Rows of ``cuda_gpu_kern_sum`` CSV ("Time (%)", "Total Time (ns)", "Instances", "Avg (ns)", ..., "Name")."""
    out = []
    for row in _rows(text):
        name = row.get("name")
        if not name:
            continue
        share = _number(row.get("time (%)", "")) / 100.0
        out.append(KernelRow(name, _time_ns(row, "total time"), int(_number(row.get("instances", ""))),
                             _time_ns(row, "avg"), share))
    total = sum(k.total_ns for k in out)
    if total and not any(k.share for k in out):   # older versions without "Time (%)"
        out = [KernelRow(k.name, k.total_ns, k.instances, k.avg_ns, k.total_ns / total) for k in out]
    return tuple(sorted(out, key=lambda k: -k.total_ns))


def parse_memory_summary(text: str) -> tuple[MemoryOpRow, ...]:
    """Rows of ``cuda_gpu_mem_time_sum`` CSV ("Time (%)", "Total Time (ns)", "Count", ..., "Operation")."""
    out = []
    for row in _rows(text):
        operation = row.get("operation")
        if not operation:
            continue
        out.append(MemoryOpRow(operation, _time_ns(row, "total time"), int(_number(row.get("count", ""))),
                               _time_ns(row, "avg")))
    return tuple(sorted(out, key=lambda m: -m.total_ns))


def read_nsys_stats(plan: NsysPlan) -> NsysStats:
    """Read the CSV files ``nsys stats`` wrote for ``plan`` (a missing report reads as empty:
    a CPU-only run has no kernels)."""
    def text(report: str) -> str:
        path = plan.csv_path(report)
        return path.read_text(errors="replace") if path.is_file() else ""

    return NsysStats(parse_kernel_summary(text("cuda_gpu_kern_sum")),
                     parse_memory_summary(text("cuda_gpu_mem_time_sum")))


def run_nsys(plan: NsysPlan, *, cwd: Path, timeout_s: float = 3600, env: dict[str, str] | None = None
             ) -> NsysStats:
    """Run both commands (cwd: the job folder, so nothing lands elsewhere) and import the stats.

    Not verified here. A failing command raises :class:`StudioError` naming it.
    """
    for label, cmd in (("nsys profile", plan.profile_cmd), ("nsys stats", plan.stats_cmd)):
        try:
            proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        except FileNotFoundError:
            raise StudioError("nsys is not on PATH; install Nsight Systems or run the printed commands on a "
                              "GPU machine", code=ErrorCode.NSYS_MISSING) from None
        except subprocess.TimeoutExpired:
            raise StudioError(f"{label} timed out after {timeout_s:.0f} s", code=ErrorCode.NSYS_FAILED) from None
        if proc.returncode != 0:
            tail = scrub_message((proc.stderr or proc.stdout or "")[-2000:], (cwd,))[-300:]
            raise StudioError(f"{label} failed (exit {proc.returncode}): {tail}", code=ErrorCode.NSYS_FAILED)
    return read_nsys_stats(plan)
