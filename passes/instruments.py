"""Instruments wrap passes from outside (TVM's ``run_before_pass/run_after_pass``):
timing, NVTX ranges for Nsight Systems, and per-pass dumps live here, not in passes."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import onnx_ir as ir

from studio.core.paths import safe_name
from profilers import nvtx
from studio.core.model_io import save_result

if TYPE_CHECKING:
    from passes.base import StudioPass
    from passes.records import PassRecord

log = logging.getLogger(__name__)


class Instrument(Protocol):
    def before_pass(self, p: StudioPass, model: ir.Model) -> None: ...

    def after_pass(self, p: StudioPass, model: ir.Model, record: PassRecord) -> None: ...


class LogInstrument:
    """One log line per pass."""

    def before_pass(self, p: StudioPass, model: ir.Model) -> None:
        log.info("pass %s: start", p.name)

    def after_pass(self, p: StudioPass, model: ir.Model, record: PassRecord) -> None:
        log.info("pass %s: %s in %.3f s (%d -> %d nodes)%s", p.name, record.status, record.seconds,
                 record.nodes_before, record.nodes_after, f": {record.message}" if record.message else "")


class NvtxInstrument:
    """An NVTX range per pass (a no-op unless a profiler such as nsys is attached).

    The ranges come from the one NVTX helper, :mod:`profilers.nvtx`."""

    def __init__(self, domain: str = "onnx-studio") -> None:
        self._nvtx = nvtx.ranges(domain)
        self._ranges: list = []

    def before_pass(self, p: StudioPass, model: ir.Model) -> None:
        self._ranges.append(self._nvtx.start(f"pass:{p.name}"))

    def after_pass(self, p: StudioPass, model: ir.Model, record: PassRecord) -> None:
        if self._ranges:
            self._nvtx.end(self._ranges.pop())


def with_nvtx(instruments: Sequence[Instrument]) -> tuple[Instrument, ...]:
    """``instruments`` plus an :class:`NvtxInstrument` when a profiler (nsys) is attached and
    none is there, so every pipeline pass shows up as an NVTX range under Nsight."""
    out = tuple(instruments)
    if nvtx.ranges().attached and not any(isinstance(i, NvtxInstrument) for i in out):
        out += (NvtxInstrument(),)
    return out


class DumpInstrument:
    """Save the model after every pass into ``folder`` (for debugging a pipeline)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._n = 0

    def before_pass(self, p: StudioPass, model: ir.Model) -> None:
        pass

    def after_pass(self, p: StudioPass, model: ir.Model, record: PassRecord) -> None:
        self._n += 1
        save_result(model, self.folder / f"{self._n:02d}-{safe_name(p.name)}" / "model.onnx")
