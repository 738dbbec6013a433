"""Run a Python implementation of a custom op (ORT Python op or OpenVINO conversion extension) against the
reference, from the studio side: the code goes to a file in a private temporary folder, a one-off confined
worker runs it (:mod:`studio.plugins.ort_python`, :mod:`studio.plugins.ov_python`), and the outputs are
compared with the reference outputs captured in the op's signature. Whatever the code does -- raise, return
the wrong thing, loop, exit, crash -- the result is an :class:`OpRunResult` with one clear message.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.compare import Comparison, compare_outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.model import ModelHandle
from studio.core.paths import check_regular_file
from studio.core.sandbox import Limits, default_limits, run_job
from studio.plugins.signature import OpSignature, collect_signature
from studio.plugins.reference import get_reference
import studio.plugins.ort_python
import studio.plugins.ov_python
from studio.plugins.usercode import shape_ok, describe_array

__all__ = ["NOT_COMPARED", "PYTHON_TARGETS", "OpRunResult", "SampleResult", "read_code", "run_python_op"]

PYTHON_TARGETS = ("ort-python", "openvino-python")
MAX_CODE_BYTES = 1 * 2**20
_JOBS = {"ort-python": ("plugins.ort_python", "compute", "ONNX Runtime Python op"),
         "openvino-python": ("plugins.ov_python", "convert", "OpenVINO conversion extension")}


@dataclass(frozen=True)
class SampleResult:
    node: str
    ok: bool
    summary: str
    max_abs: float | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OpRunResult:
    op: str
    target: str
    status: str                     # ok | mismatch | error | unverified
    message: str                    # one line
    samples: tuple[SampleResult, ...] = ()
    model: dict | None = None       # whole-model comparison (to_dict of a Comparison) or None
    seconds: float = 0.0
    calls: int = 0
    confinement: dict = field(default_factory=dict)
    reference: str | None = None
    outputs: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return {"op": self.op, "target": self.target, "status": self.status, "ok": bool(self),
                "message": self.message, "samples": [s.to_dict() for s in self.samples], "model": self.model,
                "seconds": round(self.seconds, 3), "calls": self.calls, "confinement": self.confinement,
                "reference": self.reference}


def read_code(code_or_path: str | Path) -> str:
    """The code itself: a ``Path`` (or a one-line string naming an existing ``.py`` file) is read, capped at 1 MiB."""
    if isinstance(code_or_path, Path) or ("\n" not in str(code_or_path) and str(code_or_path).endswith(".py")
                                         and Path(str(code_or_path)).exists()):
        path = Path(code_or_path)
        check_regular_file(path, max_bytes=MAX_CODE_BYTES, label="implementation file")
        try:
            return path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise StudioError(f"implementation file '{path.name}' is not UTF-8 text", code=ErrorCode.BAD_IMPL) from None
    text = str(code_or_path)
    if len(text.encode()) > MAX_CODE_BYTES:
        raise StudioError("implementation code is over 1 MiB", code=ErrorCode.BAD_IMPL)
    if not text.strip():
        raise StudioError("the implementation is empty", code=ErrorCode.BAD_IMPL)
    return text


def op_job_args(sig: OpSignature, handle: ModelHandle) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    ref = get_reference(sig.domain, sig.op_type)
    # Nodes pass their own attributes; a reference's defaults fill the ones a node leaves out (for other ops
    # the function's own keyword defaults apply).
    defaults = dict(ref.attr_defaults) if ref else {}
    arrays: dict[str, np.ndarray] = {}
    samples = []
    for i, s in enumerate(sig.samples):
        samples.append({"node": s.node})
        for j, a in enumerate(s.inputs):
            if a is not None:
                arrays[f"s{i}.in{j}"] = a
    for k, v in sig.model_feeds.items():
        arrays[f"feed:{k}"] = v
    args = {"model_path": str(handle.path.resolve()), "domain": sig.domain, "op_type": sig.op_type,
            "inputs": [{"dtype": p.dtype} for p in sig.inputs],
            "outputs": [{"dtype": p.dtype, "shapes": [list(s) if s is not None else None for s in p.shapes]}
                        for p in sig.outputs],
            "attr_defaults": defaults, "samples": samples}
    return args, arrays


def worker_message(exc: WorkerError, label: str, limits: Limits) -> str:
    if exc.kind == "timeout":
        return (f"{label} did not finish within {limits.timeout_s:g} s (an endless loop?); its worker was stopped "
                "and the studio is fine")
    if exc.kind == "memory":
        return f"{label} exceeded the worker memory limit ({limits.memory_gib:.1f} GiB); its worker was stopped"
    if exc.kind == "cancelled":
        return f"{label} was stopped"
    if exc.kind == "crashed":
        detail = str(exc).split("the worker process ", 1)[-1]
        hint = " (does the code call os._exit or sys.exit?)" if "exited with code" in detail else ""
        return f"{label} ended its worker process: it {detail}{hint}; the studio is fine"
    return f"{label} failed: {exc}"


def run_python_op(handle: ModelHandle, op: str, impl_code_or_path: str | Path, *, target: str = "ort-python",
                  signature: OpSignature | None = None, run_model: bool = True, timeout_s: float | None = None,
                  pool_key: str = "default", on_tick: Callable[[float], None] | None = None,
                  limits: Limits | None = None) -> OpRunResult:
    """Run the user's implementation of ``op`` (code text or a ``.py`` file) in a fresh, confined worker and
    compare it with the reference on the model's captured inputs (and the whole model when ``run_model``)."""
    if target not in _JOBS:
        raise StudioError(f"Python implementations run for {', '.join(PYTHON_TARGETS)}, not '{target[:40]}'",
                          code=ErrorCode.BAD_TARGET)
    code = read_code(impl_code_or_path)
    sig = signature or collect_signature(handle, op, pool_key=pool_key)
    job_name, function, what = _JOBS[target]
    label = (f"custom op `{sig.op_type}`" if target == "ort-python"
             else f"conversion extension for `{sig.op_type}`")
    base = limits or default_limits()
    limits = Limits(timeout_s=float(timeout_s or base.timeout_s), memory_bytes=base.memory_bytes,
                    cpu_threads=base.cpu_threads, minimal_env=True)
    args, arrays = op_job_args(sig, handle)
    args.update(run_model=bool(run_model and sig.model_outputs is not None), function=function)

    folder = Path(tempfile.mkdtemp(prefix="studio-op-"))
    started = time.perf_counter()
    try:
        code_path = folder / f"{sig.ident}_{'op' if target == 'ort-python' else 'extension'}.py"
        code_path.write_text(code, encoding="utf-8")  # scratch: the confined worker's temp folder
        args["code_path"] = str(code_path)
        try:
            res = run_job(job_name, args, arrays, stage=f"{what} for {sig.qualified}", limits=limits, fresh=True,
                          pool_key=pool_key, on_tick=on_tick, out_dir=folder / "out")
        except WorkerError as exc:
            return OpRunResult(sig.qualified, target, "error", worker_message(exc, label, limits),
                               seconds=time.perf_counter() - started, reference=sig.reference)
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # scratch: the temp folder made for this run
    return op_run_result(sig, target, res.data, res.arrays, time.perf_counter() - started)


NOT_COMPARED = "ran, not compared (no reference)"


def _declared_mismatch(sig: OpSignature, got: dict[str, np.ndarray]) -> str | None:
    """Without a reference output, the outputs must still have the signature's dtype and one of its shapes."""
    if len(got) != len(sig.outputs):
        return f"{len(got)} output(s), declared {len(sig.outputs)}"
    for j, port in enumerate(sig.outputs):
        value = got[f"output {j}"]
        name = value.dtype.name if value.dtype.kind not in "OUS" else "string"
        if (port.dtype and name != port.dtype) or not shape_ok(value.shape, list(port.shapes)):
            known = [s for s in port.shapes if s is not None]
            return (f"output {j} is {describe_array(name, value.shape)}, declared "
                    f"{describe_array(port.dtype or '?', known[0] if len(known) == 1 else None)}")
    return None


def op_run_result(sig: OpSignature, target: str, data: dict, arrays: dict[str, np.ndarray],
                  seconds: float) -> OpRunResult:
    common = dict(seconds=seconds, calls=int(data.get("calls", 0)), confinement=data.get("confinement") or {},
                  reference=sig.reference)
    if data.get("load_error"):
        return OpRunResult(sig.qualified, target, "error", data["load_error"], **common)
    samples: list[SampleResult] = []
    error = None
    compared = 0
    for i, entry in enumerate(data.get("samples", [])):
        if entry.get("error"):
            error = error or entry["error"]
            samples.append(SampleResult(entry["node"], False, entry["error"], error=entry["error"]))
            continue
        ref = sig.samples[i].outputs if i < len(sig.samples) else None
        got = {f"output {j}": arrays[f"s{i}.out{j}"] for j in range(len(sig.outputs)) if f"s{i}.out{j}" in arrays}
        if ref is None:
            problem = _declared_mismatch(sig, got)
            samples.append(SampleResult(entry["node"], problem is None, problem or NOT_COMPARED))
            continue
        comparison: Comparison = compare_outputs({f"output {j}": r for j, r in enumerate(ref)}, got)
        compared += 1
        worst = max((d.max_abs or 0.0 for d in comparison.outputs.values()), default=None)
        samples.append(SampleResult(entry["node"], bool(comparison), comparison.summary(), worst))
    model = None
    outputs = {k[6:]: v for k, v in arrays.items() if k.startswith("model:")}
    entry = data.get("model")
    if entry:
        if entry.get("error"):
            error = error or entry["error"]
            model = {"ok": False, "summary": entry["error"]}
        elif sig.model_outputs is not None:
            comparison = compare_outputs(sig.model_outputs, outputs)
            compared += 1
            model = comparison.to_dict()
    if error:
        return OpRunResult(sig.qualified, target, "error", error, tuple(samples), model, outputs=outputs, **common)
    bad = next((s for s in samples if not s.ok), None)
    if bad is not None or (model is not None and not model["ok"]):
        what = f"node {bad.node}: {bad.summary}" if bad else f"whole model: {model['summary']}"
        return OpRunResult(sig.qualified, target, "mismatch", f"differs from the reference -- {what}",
                           tuple(samples), model, outputs=outputs, **common)
    if compared == 0:
        ran = len(samples)
        detail = (f"{ran} sample(s) ran without errors and their outputs have the declared dtype/shape, but there "
                  "is no reference output to compare with (no reference implementation for this op)" if ran else
                  "ran without errors, but there is no reference output to compare with (no captured inputs)")
        return OpRunResult(sig.qualified, target, "unverified", f"{NOT_COMPARED}: {detail}", tuple(samples), model,
                           outputs=outputs, **common)
    parts = [f"{sum(s.ok for s in samples)} sample(s) match the reference"]
    if model is not None:
        parts.append(f"whole model matches ({model['summary']})")
    return OpRunResult(sig.qualified, target, "ok", "; ".join(parts), tuple(samples), model, outputs=outputs,
                       **common)
