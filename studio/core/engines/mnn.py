"""MNN adapter: ONNX -> ``.mnn`` with MNN's converter, then MNN's Module API -- all in a
sandbox worker.

The converter is called through MNN's C extension (``_tools.mnnconvert``), never through
the ``mnnconvert`` console script: that wrapper imports a telemetry logger which runs
``pip install`` and uploads conversion statistics. The extension reports success as
``True`` even when it printed "Converted Failed!", so success is read from the log and
the written file. Unsupported ops are listed on one log line ("These Op Not Support:
ONNX::grid_sampler"); the check maps them to ONNX nodes by op type. Where a refusal's log
recommends one of MNNConvert's own flags ("you can try set --X"), that flag is tried
(``conversion.search_options``) and the advice reaches the check's finding.

Precision: ``f32`` (default); ``f16`` stores weights in fp16 (``--fp16``); ``int8``
quantizes weights to 8 bits (``--weightQuantBits 8``, weight-only). Full INT8 with calibrated
activations is :meth:`MnnEngine.quantize` (:mod:`studio.core.engines.mnn_quant`). Inputs of integer types are fed
as int32 (MNN has no int64 tensors) and outputs cast back to the ONNX output types.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (
    Availability,
    WorkerEngine,
    package_version,
    require_available,
)
from studio.core.engines.conversion import (Conversion, ConversionFailed, ConvertedRunner, OptionSet, conversion_output,
                                            converter_advice, onnx_output_types, onnx_typed, search_options)
from studio.core.engines.base import default_cpu_threads, elapsed_ms, require_feeds, require_outputs
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.engines.base import check_feeds, check_model_file
from studio.core.engines.mnn_samples import pack_samples
from studio.core.engines.capture import captured_output, read_log

__all__ = ["MnnEngine", "MnnRunner", "convert_to_mnn", "mnn_command", "mnn_convert_job", "mnn_option_sets"]

INSTALL = "pip install MNN"
_UNSUPPORTED = re.compile(r"These Op Not Support:\s*(?P<ops>[^\n]*)")
_FLAG = re.compile(r"(?<![\w-])--(?P<flag>[A-Za-z][A-Za-z0-9]+)\b")


class MnnEngine(WorkerEngine, engine="mnn"):
    def _probe_installed(self) -> Availability:
        return Availability(True, package_version("MNN", "mnn"), None, ("CPU",))

    def convert(self, model_path: Path, out_path: Path, *, precision: str = "f32", limits: Limits | None = None,
                pool_key: str = "default") -> Conversion:
        """Convert ``model_path`` to ``out_path`` (a ``.mnn`` file) in a worker."""
        require_available(self)
        path = check_model_file(model_path)
        out_path = Path(out_path).resolve()
        res = run_job("mnn.convert", {"model_path": str(path), "out_name": out_path.name, "precision": precision},
                      stage="MNN conversion", limits=limits, out_dir=out_path.parent, pool_key=pool_key + self.pool_suffix)
        return Conversion.from_data(self.name, res.data, out_path)

    def export_convert(self, model_path: Path, folder: Path, *, shapes: Mapping[str, tuple[int, ...]],
                       reference: Mapping[str, np.ndarray] | None = None, pool_key: str = "default") -> Conversion:
        """The export's fp32 conversion into ``folder`` (``model.mnn``; MNN keeps shapes dynamic)."""
        return self.convert(model_path, Path(folder) / "model.mnn", pool_key=pool_key)

    def quantize(self, model_path: Path, out_path: Path, samples: Sequence[Mapping[str, np.ndarray]], *,
                 method: str = "KL", limits: Limits | None = None, pool_key: str = "default") -> Conversion:
        """Full INT8 ``.mnn`` (weights and activations) at ``out_path``, calibrated on ``samples``
        (input name -> array each; see :mod:`studio.core.engines.mnn_quant`)."""
        require_available(self)
        path = check_model_file(model_path)
        out_path = Path(out_path).resolve()
        arrays = pack_samples([check_feeds(s) for s in samples])
        # a one-off worker: the quantizer leaves global state that crashed later conversions
        res = run_job("mnn.quantize", {"model_path": str(path), "out_name": out_path.name, "method": method},
                      arrays, stage="MNN int8 quantization", limits=limits, out_dir=out_path.parent,
                      pool_key=pool_key + self.pool_suffix, fresh=True)
        return Conversion.from_data(self.name, res.data, out_path)


# ============================================================================ worker side

def mnn_command(onnx_name: str, out_name: str, precision: str = "f32") -> list[str]:
    """The MNNConvert command line (also recorded in export manifests)."""
    cmd = ["mnnconvert", "-f", "ONNX", "--modelFile", onnx_name, "--MNNModel", out_name, "--bizCode", "studio"]
    if precision == "f16":
        cmd.append("--fp16")
    elif precision == "int8":
        cmd += ["--weightQuantBits", "8"]
    elif precision not in ("f32", "default"):
        raise ValueError(f"MNN conversion precision must be f32, f16 or int8, got {precision!r}")
    return cmd


def convert_to_mnn(onnx_path: str | Path, out_path: Path, precision: str = "f32", *,
                   search: bool = True) -> dict[str, Any]:
    """Run MNN's converter in this (worker) process; raise :class:`ConversionFailed`. A refusal whose
    log recommends MNNConvert flags is retried with them (``search=False``: never)."""

    def convert(options: OptionSet) -> dict[str, Any]:
        return _convert_once(onnx_path, out_path, precision, options.flags)

    def propose(info: dict[str, Any], refused: bool) -> list[OptionSet]:
        return mnn_option_sets(str(info.get("log") or "")) if search and refused else []

    return search_options(convert, propose)


def mnn_option_sets(log: str) -> list[OptionSet]:
    """The MNNConvert flags a refusal's log recommends ("you can try set --X"), one set each; the
    flags the studio itself sets (input, output, precision) are never proposed."""
    flags = list(dict.fromkeys(m.group("flag") for line in converter_advice(log) for m in _FLAG.finditer(line)))
    return [OptionSet((f"--{f}",), {}, "MNNConvert's log recommends it") for f in flags
            if f not in ("modelFile", "MNNModel", "bizCode", "framework", "fp16", "weightQuantBits", "prototxt")]


def _convert_where_it_can_load(onnx_path: Path, out_path: Path, precision: str) -> dict[str, Any]:
    """:func:`convert_to_mnn` in this process, unless TensorFlow is loaded here first: MNN's converter
    extension then aborts the whole process as it loads (``import tensorflow; import _tools``: SIGABRT,
    seen with TF 2.x and MNN 3.x). The studio's own workers never mix the two (``:mnn`` and ``:litert``
    pools); a process that already holds TensorFlow (a notebook, a test session) converts in the
    engine's worker pool instead, with the same result."""
    import sys

    if "tensorflow" not in sys.modules or "_tools" in sys.modules:
        return convert_to_mnn(onnx_path, out_path, precision)
    conv = MnnEngine().convert(onnx_path, out_path, precision=precision)
    info = {"command": list(conv.command), "options": list(conv.options), "attempts": list(conv.attempts),
            "advice": list(conv.advice), "seconds": conv.seconds, "log": conv.log_tail,
            "unsupported_ops": list(conv.unsupported_ops)}
    if not conv.ok:
        raise ConversionFailed(conv.error or "MNN conversion failed", info)
    return info


def _convert_once(onnx_path: str | Path, out_path: Path, precision: str, flags: Sequence[str] = ()) -> dict[str, Any]:
    import _tools  # MNN's C extension (MNNConvert and the quantizer)


    out_path = Path(out_path)
    out_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    cmd = mnn_command(str(onnx_path), str(out_path), precision) + list(flags)
    log_path = out_path.with_name(out_path.name + ".log")
    started = time.perf_counter()
    with captured_output(log_path):
        _tools.mnnconvert(cmd)
    seconds = time.perf_counter() - started
    log = read_log(log_path)
    log_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    m = _UNSUPPORTED.search(log)
    # "These Op Not Support: ONNX::ConvInteger | ONNX::DynamicQuantizeLSTM": ops separated by " | " (or commas)
    unsupported = [op.split("::")[-1] for op in re.split(r"[,|\s]+", m.group("ops")) if op] if m else []
    info = {"ok": False, "command": mnn_command(Path(onnx_path).name, out_path.name, precision) + list(flags),
            "seconds": round(seconds, 4), "converter_version": package_version("MNN", "mnn"), "log": log[-4000:],
            "unsupported_ops": unsupported}
    if "Converted Failed" in log or not out_path.is_file() or out_path.stat().st_size == 0:
        out_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
        reason = (f"MNN has no conversion for {', '.join(unsupported)}" if unsupported else
                  _last_error_line(log) or "MNN's converter wrote no model")
        info["error"] = reason
        raise ConversionFailed(reason, info)
    info["ok"] = True
    return info


def _last_error_line(log: str) -> str | None:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    bad = [ln for ln in lines if re.search(r"error|not support|fail|can't|cannot", ln, re.I)]
    line = (bad or lines or [None])[-1]
    return re.sub(r"^\[\d\d:\d\d:\d\d\] :\d+: ", "", line) if line else None


def _mnn_dtype(F, a: np.ndarray):  # noqa: N803 - MNN.expr
    if a.dtype == np.uint8:
        return np.uint8, F.uint8
    if a.dtype.kind in "iub":
        return np.int32, F.int
    return np.float32, F.float


class MnnRunner(ConvertedRunner):
    """One MNN Module (converted once), many inferences."""

    engine = "mnn"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        started = time.perf_counter()
        import MNN
        import MNN.expr as F
        import MNN.nn as nn

        self._import_ms = elapsed_ms(started)
        self._F = F
        self.details: dict[str, Any] = {"engine_version": MNN.version()}
        source = Path(path)
        self.onnx_outputs: dict[str, int] = {}
        if source.suffix == ".mnn":
            mnn_path, conv = source, None
            if args.get("onnx_path"):     # bound to the ONNX model it came from: output order and types
                self.onnx_outputs = onnx_output_types(args["onnx_path"])
        else:
            self.onnx_outputs = onnx_output_types(source)
            ctx.set_stage("MNN conversion")
            mnn_path = Path(ctx.scratch) / "model.mnn"
            conv = _convert_where_it_can_load(source, mnn_path, str(args.get("precision") or "f32"))
            self.record_conversion(conv, conv["seconds"] * 1000)
        ctx.set_stage("MNN load")
        threads = int(args.get("intra_op_threads") or ctx.cpu_threads or default_cpu_threads())
        started = time.perf_counter()
        runtime = nn.create_runtime_manager(({"backend": "CPU", "numThread": threads, "precision": "high"},))
        self.module = nn.load_module_from_file(str(mnn_path), [], [], runtime_manager=runtime)
        info = self.module.get_info()
        self.input_names = list(info.get("inputNames") or [])
        self.output_names = list(info.get("outputNames") or [])
        if self.onnx_outputs and set(self.onnx_outputs) == set(self.output_names):
            self.output_names = list(self.onnx_outputs)     # ONNX order
        load_ms = elapsed_ms(started)
        asked = args.get("intra_op_threads") or ctx.cpu_threads
        self.details.update(load_ms=round(load_ms, 3), threads=threads, outputs_mapped="by name",
                            threads_note=None if asked else "engine default (one per usable CPU, at most 4)",
                            session_ms=round(load_ms + (conv["seconds"] * 1000 if conv else 0.0), 3),
                            precision_requested=str(args.get("precision") or "f32"))
        self._order = list(info.get("outputNames") or [])
        ctx.set_stage("MNN inference")

    def _inputs(self, feeds: Mapping[str, Any]) -> list:
        """The feeds as MNN constants, in the module's input order (integers as int32)."""
        F = self._F  # noqa: N806 - MNN.expr
        require_feeds(self.input_names, feeds)
        inputs = []
        for n in self.input_names:
            a = np.asarray(feeds[n])
            np_type, mnn_type = _mnn_dtype(F, a)
            a = np.ascontiguousarray(a.astype(np_type, copy=False))
            inputs.append(F.const(a, list(a.shape), F.NCHW, mnn_type))
        return inputs

    def _forward(self, inputs: list) -> list[np.ndarray]:
        F = self._F  # noqa: N806 - MNN.expr
        out = self.module.forward(inputs)
        return [np.asarray((F.convert(v, F.NCHW) if v.data_format == F.NC4HW4 else v).read())
                for v in (out if isinstance(out, (list, tuple)) else [out])]

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        got = {name: np.array(v, copy=True) for name, v in zip(self._order, self._forward(self._inputs(feeds)))}
        wanted = names or self.output_names
        unknown = [n for n in wanted if n not in got]
        if unknown and (not got or all(n in self.output_names for n in unknown)):
            # MNN drops outputs whose shape computation failed for these input shapes
            shapes = ", ".join(f"{k}{list(np.shape(v))}" for k, v in feeds.items())[:200]
            raise ValueError(f"MNN computed no value for output(s) {', '.join(map(repr, unknown[:5]))}: its "
                             f"shape computation failed on input shape(s) {shapes}")
        require_outputs(wanted, got)
        return {n: onnx_typed(got[n], self.onnx_outputs.get(n)) for n in wanted}

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], list[np.ndarray]]:
        """A callable running one inference on ``feeds`` converted once (the profilers' loop)."""
        return functools.partial(self._forward, self._inputs(feeds))

    def close(self) -> None:
        self.module = None


def mnn_op_times(mnn_path: Path, feeds: Mapping[str, np.ndarray], *, threads: int, warmup: int,
                 runs: int) -> tuple[list[dict[str, Any]], list[int]]:
    """Per-op times from MNN's session callbacks (``runSessionWithCallBackInfo``): one record
    per MNN op (named after its output tensor) with its time in every profiled run, and the
    end-to-end ns of those runs. The callbacks cost a Python call per op, so the per-op
    times carry that overhead (the end-to-end times include it too)."""
    import MNN

    interp = MNN.Interpreter(str(mnn_path))
    session = interp.createSession({"numThread": int(threads)})
    tensors = []
    for name, a in feeds.items():
        a = np.ascontiguousarray(np.asarray(a).astype(np.float32 if np.asarray(a).dtype.kind == "f" else np.int32))
        t = interp.getSessionInput(session, name)
        interp.resizeTensor(t, tuple(a.shape))
        tensors.append((name, a))
    interp.resizeSession(session)
    for name, a in tensors:
        kind = MNN.Halide_Type_Float if a.dtype == np.float32 else MNN.Halide_Type_Int
        interp.getSessionInput(session, name).copyFrom(MNN.Tensor(tuple(a.shape), kind, a,
                                                                  MNN.Tensor_DimensionType_Caffe))
    started: dict[str, int] = {}
    records: dict[str, dict[str, Any]] = {}
    current: dict[str, int] = {}

    def begin(_tensors, op) -> bool:
        started[op.getName()] = time.perf_counter_ns()
        return True

    def end(_tensors, op) -> bool:
        name = op.getName()
        current[name] = current.get(name, 0) + time.perf_counter_ns() - started.get(name, time.perf_counter_ns())
        records.setdefault(name, {"name": name, "op_type": op.getType(), "per_run_us": []})
        return True

    e2e: list[int] = []
    for r in range(warmup + runs):
        current.clear()
        t0 = time.perf_counter_ns()
        interp.runSessionWithCallBackInfo(session, begin, end)
        if r >= warmup:
            e2e.append(time.perf_counter_ns() - t0)
            for name, rec in records.items():
                rec["per_run_us"].append(current.get(name, 0) / 1000)
    return [r for r in records.values() if len(r["per_run_us"]) == runs], e2e


@job("mnn.convert")
def mnn_convert_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("MNN conversion")
    out = Path(ctx.out_dir) / Path(str(args["out_name"])).name
    return conversion_output(lambda: convert_to_mnn(str(args["model_path"]), out, str(args.get("precision") or "f32")))
