"""What an engine's converter did: the artifact, the command line, the time and the log.

MNN and LiteRT do not read ONNX themselves: a converter (MNNConvert, onnx2tf) writes
their format first. Both run inside a sandbox worker (they can crash or hang on hostile
models) and both print their unsupported-op messages rather than raising them; the log is
kept so the check can attribute a failure to ONNX nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Conversion", "ConversionFailed", "first_run_output"]


class ConversionFailed(RuntimeError):
    """Worker side: the converter refused the model (the message is its log's gist)."""

    def __init__(self, message: str, info: dict[str, Any]) -> None:
        super().__init__(message)
        self.info = info


@dataclass(frozen=True)
class Conversion:
    """One conversion ONNX -> engine format (parent side)."""

    engine: str
    ok: bool
    artifact: Path | None
    command: tuple[str, ...]
    seconds: float
    converter_version: str | None
    error: str | None = None
    unsupported_ops: tuple[str, ...] = ()
    failed_nodes: tuple[str, ...] = ()
    layout: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""

    @property
    def command_line(self) -> str:
        import shlex

        # "&&" joins two steps (MNN int8: convert, then quantize); every other word is quoted
        return " ".join(c if c == "&&" else shlex.quote(c) for c in self.command)

    @classmethod
    def from_data(cls, engine: str, data: dict[str, Any], artifact: Path | None) -> Conversion:
        return cls(engine, bool(data.get("ok")), artifact if data.get("ok") else None,
                   tuple(data.get("command") or ()), float(data.get("seconds") or 0.0),
                   data.get("converter_version"), data.get("error"), tuple(data.get("unsupported_ops") or ()),
                   tuple(data.get("failed_nodes") or ()), dict(data.get("layout") or {}),
                   str(data.get("log") or "")[-2000:])


def first_run_output(runner: Any, args: dict[str, Any], arrays: dict[str, Any], *, setup_in_first_run: bool = False):
    """Worker side: one inference of an MNN/LiteRT runner as a run job's reply (outputs, version,
    details). ``setup_in_first_run``: the runner converts and loads on its first inference
    (LiteRT): that time is taken out of ``first_inference_ms``."""
    import time

    from studio.core.engines.base import encode_outputs
    from studio.core.jobs import JobOutput

    wanted = args.get("output_names")
    started = time.perf_counter()
    outputs = runner.infer(arrays, list(wanted) if wanted else None)
    first_ms = (time.perf_counter() - started) * 1000
    if setup_in_first_run:
        first_ms -= float(runner.details.get("convert_ms") or 0) + float(runner.details.get("load_ms") or 0)
    encoded, out_arrays = encode_outputs(list(outputs), list(outputs.values()))
    details = {**{k: v for k, v in runner.details.items() if k != "engine_version"},
               "first_inference_ms": round(max(first_ms, 0.0), 3), "input_names": runner.input_names,
               "output_names": runner.output_names}
    return JobOutput(data={"version": runner.details["engine_version"], "outputs": encoded, "details": details},
                     arrays=out_arrays)

