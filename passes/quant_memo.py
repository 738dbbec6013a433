"""One run's shared INT8 work: ``quantize-int8-static`` builds of the same model on the same calibration data
reuse each other's calibration and measured configurations instead of repeating them.

A precision run builds ``int8``, ``int8-mixed`` and ``int8-ov`` (and ``int8-trt``) with the same pass on the same
model and calibration file; only the configurations tried and what happens after the choice (float fallback,
require_target) differ. Each used to prepare, calibrate, quantize, judge and time its configurations again (the
caffe sample: ~2.4 s of int8-ov repeating int8's work). The caller (``studio.precision.variants``) names a folder
of its own for one run (option ``memo_dir``); the first build stores there what it computed, and a later build
whose key matches reads it back. The key covers every input of the stored computation: the bytes of the model
the pass received, of the calibration file, and every option except those that act only after the
configurations are measured (``fallback``, ``require_target``) or pick among them (``config``, ``qdq_only``:
a build reuses the configurations it asks for when all of them were measured). Without ``memo_dir``, or with
calibration data that is not one file, nothing is shared.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from passes.quant_tools import Prepared, QuantCandidate, Ranges
from studio.core.outputs import copy_file, link_file, write_json

__all__ = ["Memo", "MeasuredConfigs", "open_memo"]

# options whose effect comes after the measured configurations (or that choose among them)
_AFTER = frozenset({"fallback", "require_target", "config", "qdq_only", "memo_dir"})


@dataclass(frozen=True)
class MeasuredConfigs:
    """Configurations quantized, judged and timed once: the candidates (latency not yet applied), each
    configuration's 10th-percentile latency and its per-round medians, fp32's included."""
    candidates: tuple[QuantCandidate, ...]
    latency_ms: Mapping[str, float]
    rounds: Mapping[str, Sequence[float]]


def _file_digest(h: Any, path: Path) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def _model_digest(h: Any, src: Path) -> None:
    """The model file and its external data files (the folder save_result wrote), by name and bytes."""
    for p in sorted(src.parent.iterdir()):
        if p.is_file():
            h.update(p.name.encode() + b"\0")
            _file_digest(h, p)


@dataclass(frozen=True)
class Memo:
    """One key's folder in the run's memo folder."""
    folder: Path

    # -- calibration: the prepared model and the calibrated ranges (what quantize_static reads)
    def calibrated(self) -> tuple[Prepared, Ranges] | None:
        state = self._read("calibrated.json")
        if state is None:
            return None
        prep, rng = state["prepared"], state["ranges"]
        prepared = Prepared(self.folder / "cal" / prep["file"], tuple(prep["steps"]), int(prep["opset"]),
                            bool(prep["per_channel"]))
        ranges = Ranges({k: (float(lo), float(hi)) for k, (lo, hi) in rng["values"].items()},
                        self.folder / "cal" / rng["cache"], rng["method"])
        return prepared, ranges

    def store_calibrated(self, prepared: Prepared, ranges: Ranges) -> None:
        """Keep ``prepared`` and ``ranges`` (without a cache file quantize_static recalibrates: nothing kept)."""
        if ranges.cache is None or (self.folder / "calibrated.json").exists():
            return
        files = [prepared.path, *prepared.path.parent.glob(prepared.path.name + ".data"), ranges.cache]
        state = {"prepared": {"file": prepared.path.name, "steps": list(prepared.steps), "opset": prepared.opset,
                              "per_channel": prepared.per_channel},
                 "ranges": {"values": {k: list(v) for k, v in ranges.values.items()}, "cache": ranges.cache.name,
                            "method": ranges.method}}
        self._write("cal", files, "calibrated.json", state)

    # -- measured configurations: judged on the same held-out sets, timed in one interleaved run
    def measured(self, names: Sequence[str], extra_key: str) -> MeasuredConfigs | None:
        """The stored measurement when it covers every configuration in ``names`` (measured with the same
        exclusions, ``extra_key``), reduced to those and fp32; else None."""
        state = self._read("measured.json")
        if state is None or state["extra_key"] != extra_key:
            return None
        by_name = {c["name"]: c for c in state["candidates"]}
        if not all(n in by_name for n in names):
            return None
        cands = tuple(QuantCandidate(**{**by_name[n], "path": (self.folder / "measured" / by_name[n]["path"])
                                        if by_name[n]["path"] else None,
                                        "excluded": tuple(by_name[n]["excluded"])}) for n in names)
        kept = {"fp32", *(c.name for c in cands if c.path is not None)}
        return MeasuredConfigs(cands, {k: v for k, v in state["latency_ms"].items() if k in kept},
                        {k: list(v) for k, v in state["rounds"].items() if k in kept})

    def store_measured(self, measured: MeasuredConfigs, extra_key: str) -> None:
        if (self.folder / "measured.json").exists():
            return                      # the first measurement stays the one every later build reads
        files = [f for c in measured.candidates if c.path is not None
                 for f in (c.path, *c.path.parent.glob(c.path.name + ".data"))]
        state = {"extra_key": extra_key, "latency_ms": dict(measured.latency_ms),
                 "rounds": {k: list(v) for k, v in measured.rounds.items()},
                 "candidates": [{**c.__dict__, "path": c.path.name if c.path is not None else None,
                                 "excluded": list(c.excluded)} for c in measured.candidates]}
        self._write("measured", files, "measured.json", state)

    def _read(self, name: str) -> dict | None:
        p = self.folder / name
        return json.loads(p.read_text()) if p.exists() else None

    def _write(self, sub: str, files: Sequence[Path], name: str, state: dict) -> None:
        """Files first, the state file last (written atomically): a build that died halfway leaves no state."""
        dest = self.folder / sub
        dest.mkdir(parents=True, exist_ok=True)
        for f in files:
            if not link_file(f, dest / f.name):
                copy_file(f, dest / f.name)
        # numpy scalars (a metric's float32) as floats; studio.core.outputs writes by temp name and rename
        write_json(self.folder / name, state, indent=None, default=float)


def open_memo(opts: Mapping[str, Any], src: Path, per_channel: bool) -> Memo | None:
    """The memo for this build (``src``: the model as the pass saved it, alone in its folder), or None when
    the caller named no memo folder or the calibration data is not one file (a folder is not fingerprinted)."""
    root = opts.get("memo_dir")
    if not root:
        return None
    calibration = opts.get("calibration")
    h = hashlib.sha256()
    if calibration not in (None, ""):
        if not Path(calibration).is_file():
            return None
        _file_digest(h, Path(calibration))
    _model_digest(h, src)
    task = opts.get("task") or {}
    for key in ("holdout", "golden"):          # the task metric's evaluation part and its fp32 outputs
        if task.get(key) and Path(task[key]).is_file():
            _file_digest(h, Path(task[key]))
    rest = {k: v for k, v in opts.items() if k not in _AFTER}
    h.update(json.dumps({"options": rest, "per_channel": per_channel}, sort_keys=True, default=str).encode())
    folder = Path(root) / h.hexdigest()[:32]
    folder.mkdir(parents=True, exist_ok=True)
    return Memo(folder)

