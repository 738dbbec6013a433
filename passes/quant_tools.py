"""What the INT8 passes share, all run inside a sandbox worker: preparing a model
for ``onnxruntime.quantization``, calibration over the studio's feeds, the
degenerate-range guard, quantizing one configuration, and measuring candidates.

Why each preparation step:

* initializers listed as graph inputs (IR < 4 exports) are not constants to the
  quantizer, so their weights would stay float: they are removed from the inputs;
* per-channel QDQ needs opset >= 13 (per-axis QuantizeLinear): older models are
  converted with ``onnx.version_converter`` (per-channel is dropped, with a note,
  when conversion fails);
* ``quant_pre_process`` (symbolic shape inference, ORT basic optimizations that
  fold BatchNormalization into Conv, ONNX shape inference) gives the quantizer
  the types it needs; a model where symbolic inference fails is retried without
  it, then without optimization;
* a Gemm bias ``C`` of shape ``[1, N]`` (Keras/JAX exports through tf2onnx, and ORT's own MatMulAddFusion in
  that pre-processing keeps the Add's ``[1, N]``) makes the per-channel quantizer index it per output channel
  and fail ("truth value of an array ... is ambiguous"): it is reshaped to ``[N]``, the same by broadcasting.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core import jsonsafe
from studio.core.compare import compare_outputs
from studio.core.engines.ort_int8 import machine_int8_choice
from studio.core.errors import StudioError
from studio.core.feeds import Feeds, load_npz, make_feeds
from studio.core.feeds import input_specs
from studio.core.quantized import quantization_ops, quantized_text
from studio.core.save import save_scratch
from studio.core.engines import sessions
from profilers.latency import budgeted_rounds
from profilers.stats import paired_ratio
from studio.data.metrics import bound_metric

log = logging.getLogger(__name__)

# A calibration range narrower than this (after including 0, as ORT does) quantizes every
# value to the zero point: the tensor reads as all zeros.
DEGENERATE_WIDTH = 1e-8
# A range wider than this is a sentinel, not an activation: an attention mask's bias of float32's
# lowest value (-3.4e38, what HF/torch exports add to padded positions) widens the scores' range so far
# that one uint8 step is ~1e36 and every real score reads as one value (softmax turns uniform). Real
# MiniLM-L6, 32 padded sentences, QDQ u8s8: cosine 0.32 quantized as ORT would, 0.84 with them in float.
SATURATED_WIDTH = 1e8


def already_quantized_note(op_types: Iterable[str]) -> str:
    """The "not applied" note of an INT8 pass on a model that is quantized already (``op_types``: its nodes'),
    else "": ORT's quantizer run over ConvInteger/DynamicQuantizeLSTM or Q/DQ pairs fails on its internals
    (corpus ddddocr_common_old_int8: "KeyError: '140_scale'") or stacks a second quantization on the first."""
    found = quantization_ops(op_types)
    if not found:
        return ""
    return (f"not applied: the model is already quantized ({quantized_text(found)}); it is not quantized "
            "again, the model is left as it is")


# ---------------------------------------------------------------------------- preparation

@dataclass(frozen=True)
class Prepared:
    path: Path
    steps: tuple[str, ...]
    opset: int
    per_channel: bool


def _default_opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def prepare(src: Path, workdir: Path, *, per_channel: bool, min_opset: int = 13,
            pre_process: bool = True) -> Prepared:
    """Make ``src`` quantizable; returns the prepared model (in ``workdir``) and what was done."""
    steps: list[str] = []
    model = onnx.load_model(str(src))
    inits = {t.name for t in model.graph.initializer}
    as_inputs = [i for i in model.graph.input if i.name in inits]
    if as_inputs:
        for vi in as_inputs:
            model.graph.input.remove(vi)
        steps.append(f"removed {len(as_inputs)} initializers from the graph inputs")
    opset = _default_opset(model)
    if opset < min_opset:
        try:
            model = onnx.version_converter.convert_version(model, min_opset)
            steps.append(f"opset {opset} -> {min_opset} (per-channel QuantizeLinear needs >= 13)")
            opset = min_opset
        except Exception as exc:  # noqa: BLE001 - report and carry on per-tensor
            if per_channel:
                per_channel = False
                steps.append(f"opset {opset} could not be converted to {min_opset} "
                             f"({type(exc).__name__}); weights quantized per tensor")
    staged = workdir / "staged.onnx"
    save_scratch(model, staged)
    del model
    release_memory()
    if not pre_process:
        return Prepared(staged, tuple(steps), opset, per_channel)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    out = workdir / "prepared.onnx"
    attempts = (({}, "quant_pre_process (symbolic shapes, ORT basic optimizations, ONNX shapes)"),
                ({"skip_symbolic_shape": True}, "quant_pre_process without symbolic shape inference"),
                ({"skip_symbolic_shape": True, "skip_optimization": True}, "ONNX shape inference only"))
    last = ""
    for kwargs, label in attempts:
        try:
            quant_pre_process(str(staged), str(out), save_as_external_data=uses_external_data(staged),
                              all_tensors_to_one_file=True, external_data_location="prepared.onnx.data",
                              **kwargs)
            steps.append(label)
            release_memory()
            steps += _flatten_gemm_bias(out)
            return Prepared(out, tuple(steps), opset, per_channel)
        except Exception as exc:  # noqa: BLE001 - try a lighter preparation
            last = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]}"
            log.info("pre-processing attempt failed (%s): %s", label, last)
    steps.append(f"pre-processing failed ({last}); quantizing the model as it is")
    steps += _flatten_gemm_bias(staged)
    return Prepared(staged, tuple(steps), opset, per_channel)


def _flatten_gemm_bias(path: Path) -> list[str]:
    """Reshape each Gemm's constant bias ``[1, N]`` to ``[N]`` (the per-channel quantizer indexes the bias by
    output channel); rewrites ``path`` and returns the step's note, or nothing when no Gemm has one."""
    def targets(graph: onnx.GraphProto) -> list[int]:
        inits = {t.name: t for t in graph.initializer}
        return [k for k, n in enumerate(graph.node)
                if n.op_type == "Gemm" and n.domain in ("", "ai.onnx") and len(n.input) > 2 and n.input[2] in inits
                and len(inits[n.input[2]].dims) == 2 and inits[n.input[2]].dims[0] == 1]

    if not targets(onnx.load_model(str(path), load_external_data=False).graph):
        return []
    model = onnx.load_model(str(path))
    graph = model.graph
    found = targets(graph)
    inits = {t.name: t for t in graph.initializer}
    users: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    taken = set(inits) | {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
    for k in found:
        node = graph.node[k]
        old = inits[node.input[2]]
        flat = onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(old).reshape(-1), old.name)
        if users.get(old.name, 0) > 1 or old.name in outputs:      # shared: the other users keep [1, N]
            base, i = f"{old.name}_flat", 0
            while f"{base}{i or ''}" in taken:
                i += 1
            flat.name = f"{base}{i or ''}"
            taken.add(flat.name)
            graph.initializer.append(flat)
            node.input[2] = flat.name
        else:
            old.CopyFrom(flat)
            stale = [v for v in graph.value_info if v.name == old.name]
            for v in stale:
                graph.value_info.remove(v)
    save_scratch(model, path)
    del model
    release_memory()
    return [f"Gemm bias [1, N] reshaped to [N] in {len(found)} Gemm(s) (the per-channel quantizer needs it 1-D)"]


def uses_external_data(path: Path) -> bool:
    """Whether a model file ORT's quantizer rewrites is saved with external data: it has a ``.data`` beside
    it or is over 1.5 GB."""
    return path.stat().st_size > 1_500_000_000 or any(path.parent.glob(path.name + ".data"))


# ---------------------------------------------------------------------------- feeds

def calibration_feeds(model_path: Path, source: str | None, samples: int, seed: int = 0,
                      dims: Mapping[str, int] | None = None) -> tuple[list[Feeds], str]:
    """Calibration sets: a user .npz, an image folder, or ``samples`` seeded random sets."""
    header = onnx.load_model(str(model_path), load_external_data=False)
    if source:
        path = Path(source)
        if path.is_dir():
            fs = make_feeds(header, images=path, count=max(samples, 1))
        else:
            sets = load_npz(path, input_specs(header))
            return sets, f"{path.name[:60]}, {len(sets)} sample(s)"
        return list(fs.sets), fs.source
    fs = make_feeds(header, count=max(samples, 1), seed=seed, dims=dims)
    return list(fs.sets), fs.source


def holdout(sets: list[Feeds], model_path: Path, random_source: bool,
            dims: Mapping[str, int] | None = None) -> tuple[list[Feeds], str]:
    """Sets to judge accuracy on: fresh seeds for random calibration; the last quarter of
    user data when there are at least 8 samples, else the calibration data itself."""
    if random_source:
        header = onnx.load_model(str(model_path), load_external_data=False)
        return list(make_feeds(header, count=4, seed=1000, dims=dims).sets), "4 fresh random sets (seed 1000)"
    if len(sets) >= 8:
        k = max(2, len(sets) // 4)
        return sets[-k:], f"last {k} of the calibration samples"
    return sets[:4], "the calibration samples (too few to hold any out)"


class FeedReader:
    """``onnxruntime.quantization.CalibrationDataReader`` over feed sets."""

    def __init__(self, sets: Sequence[Feeds], input_names: Sequence[str]) -> None:
        self.sets = list(sets)
        self.names = list(input_names)
        self.i = 0

    def get_next(self) -> dict | None:
        if self.i >= len(self.sets):
            return None
        feeds = self.sets[self.i]
        self.i += 1
        return {n: feeds[n] for n in self.names if n in feeds}

    def rewind(self) -> None:
        self.i = 0

    def __len__(self) -> int:
        return len(self.sets)


def model_input_names(path: Path) -> list[str]:
    m = onnx.load_model(str(path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    return [i.name for i in m.graph.input if i.name not in inits]


# ---------------------------------------------------------------------------- calibration

METHODS = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


@dataclass(frozen=True)
class Ranges:
    """Calibrated (min, max) per tensor, and the cache file the quantizer reads them from."""

    values: Mapping[str, tuple[float, float]]
    cache: Path | None
    method: str
    data: Any = field(default=None, repr=False, compare=False)   # onnxruntime TensorsData


def calibrate(prepared: Path, sets: Sequence[Feeds], method: str, workdir: Path) -> Ranges:
    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    if method not in METHODS:
        raise StudioError(f"calibration method must be one of {', '.join(METHODS)}, got {method[:20]!r}")
    cm = getattr(CalibrationMethod, METHODS[method])
    calibrator = create_calibrator(prepared, list(set(QLinearOpsRegistry) | set(QDQRegistry)),
                                   augmented_model_path=str(workdir / "augmented.onnx"), calibrate_method=cm,
                                   use_external_data_format=uses_external_data(prepared))
    names = model_input_names(prepared)
    # One sample per call: the calibrator marks every tensor as an output and would otherwise hold
    # all of them for every sample at once; per call it folds the sample into its ranges/histograms.
    for feeds in sets:
        calibrator.collect_data(FeedReader([feeds], names))
    data = calibrator.compute_data()
    del calibrator
    for f in workdir.glob("augmented.onnx*"):
        f.unlink(missing_ok=True)  # scratch: the calibrator's file in the workdir
    values = {}
    for name in data:
        lo, hi = data[name].range_value
        values[name] = (float(np.min(lo)), float(np.max(hi)))
    cache: Path | None = None
    try:
        from onnxruntime.quantization.calibrate import save_tensors_data

        cache = workdir / "calibration.json"
        save_tensors_data(data, cache)
    except ImportError:            # older ORT: each quantize_static call recalibrates
        cache = None
    return Ranges(values, cache, method, data)


# ---------------------------------------------------------------------------- degenerate ranges

@dataclass(frozen=True)
class DegenerateRange:
    tensor: str
    low: float
    high: float
    graph_output: bool
    producer: str | None
    consumers: tuple[str, ...]

    def saturated(self) -> bool:
        """Too wide (a mask's -3.4e38 bias) rather than too narrow."""
        width = max(self.high, 0.0) - min(self.low, 0.0)
        return math.isfinite(width) and width > SATURATED_WIDTH

    def message(self) -> str:
        where = "graph output" if self.graph_output else "tensor"
        if self.saturated():
            return (f"calibration range of {where} '{self.tensor[:80]}' is too wide ([{self.low:.3g}, {self.high:.3g}]"
                    ", e.g. an attention mask's bias): quantized, every other value in it would read as one value; "
                    "kept in float")
        return (f"calibration range of {where} '{self.tensor[:80]}' is degenerate ([{self.low:.3g}, {self.high:.3g}]): "
                "quantized, it would read as all zeros; kept in float (use calibration data that exercises it)")

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "low": self.low, "high": self.high, "graph_output": self.graph_output,
                "producer": self.producer, "consumers": list(self.consumers)}


def degenerate_ranges(model: onnx.ModelProto, ranges: Ranges) -> list[DegenerateRange]:
    """Tensors whose calibrated range (widened to include 0, as ORT does) has ~0 width, or a width
    beyond :data:`SATURATED_WIDTH` (a sentinel such as a mask's -3.4e38 bias)."""
    outputs = {o.name for o in model.graph.output}
    producer = {o: n.name for n in model.graph.node for o in n.output}
    consumers: dict[str, list[str]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n.name)
    found = []
    for name, (lo, hi) in ranges.values.items():
        width = max(hi, 0.0) - min(lo, 0.0)
        if not (math.isfinite(width) and DEGENERATE_WIDTH < width <= SATURATED_WIDTH):
            found.append(DegenerateRange(name, lo, hi, name in outputs, producer.get(name),
                                         tuple(consumers.get(name, ()))))
    return found


# ---------------------------------------------------------------------------- quantizing

@dataclass(frozen=True)
class StaticConfig:
    """One static-quantization configuration, named for reports."""

    name: str
    quant_format: str = "QDQ"           # QDQ | QOperator
    activation: str = "uint8"           # uint8 | int8
    weight: str = "int8"
    per_channel: bool = True
    dedicated_qdq: bool = False

    def describe(self) -> str:
        return (f"{self.quant_format}, {self.activation} activations, {self.weight} weights "
                f"{'per channel' if self.per_channel else 'per tensor'}"
                + (", a Q/DQ pair per consumer" if self.dedicated_qdq else "")
                + (", 7-bit weights (reduce_range: this CPU's u8s8 kernel saturates)" if self.reduce_range() else ""))

    def reduce_range(self) -> bool:
        """uint8 x int8 on a CPU whose ORT kernel saturates (AVX2 without VNNI) needs 7-bit weights."""
        return self.activation == "uint8" and self.weight == "int8" and machine_int8_choice().reduce_range

    def to_dict(self) -> dict:
        return {**self.__dict__, "reduce_range": self.reduce_range(), "description": self.describe()}


# Candidates measured by "auto" (ORT CPU). ORT's own default (QDQ, int8 activations) is
# among them so its cost is shown, not hidden.
STATIC_CONFIGS: dict[str, StaticConfig] = {c.name: c for c in (
    StaticConfig("qdq-u8s8"),
    StaticConfig("qdq-u8s8-dedicated", dedicated_qdq=True),
    StaticConfig("qop-u8s8", quant_format="QOperator"),
    StaticConfig("qdq-s8s8", activation="int8"),
    StaticConfig("qop-s8s8", quant_format="QOperator", activation="int8"),
)}
AUTO_CANDIDATES = ("qdq-u8s8", "qdq-u8s8-dedicated", "qop-u8s8", "qdq-s8s8")


def _qtype(name: str) -> Any:
    from onnxruntime.quantization import QuantType

    return {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}[name]


def quantize_static_config(prepared: Prepared, out: Path, config: StaticConfig, ranges: Ranges,
                           sets: Sequence[Feeds], exclude: Sequence[str] = ()) -> Path:
    import inspect

    from onnxruntime.quantization import QuantFormat, quantize_static

    extra: dict[str, Any] = {}
    if config.dedicated_qdq:
        extra["DedicatedQDQPair"] = True
    kwargs: dict[str, Any] = dict(
        quant_format=getattr(QuantFormat, config.quant_format), activation_type=_qtype(config.activation),
        weight_type=_qtype(config.weight), per_channel=config.per_channel and prepared.per_channel,
        nodes_to_exclude=list(exclude), extra_options=extra,
        use_external_data_format=uses_external_data(prepared.path),
        reduce_range=config.reduce_range())
    from onnxruntime.quantization import CalibrationMethod

    kwargs["calibrate_method"] = getattr(CalibrationMethod, METHODS[ranges.method])
    reader = FeedReader(sets, model_input_names(prepared.path))
    if ranges.cache is not None and "calibration_cache_path" in inspect.signature(quantize_static).parameters:
        kwargs["calibration_cache_path"] = str(ranges.cache)
        reader = None
    quantize_static(str(prepared.path), str(out), reader, **kwargs)
    return out


# ---------------------------------------------------------------------------- measuring candidates

@dataclass(frozen=True)
class QuantCandidate:
    name: str
    description: str
    path: Path | None
    latency_ms: float | None
    ratio: float | None            # latency / fp32 latency (ORT, default optimizations)
    cosine: float | None           # min over outputs and sets vs fp32
    top1: float | None
    error: str | None = None
    excluded: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description,
                "latency_ms": _round(self.latency_ms), "ratio": _round(self.ratio, 4),
                "cosine": _round(self.cosine, 6), "top1": self.top1, "error": self.error,
                "excluded": list(self.excluded)}


def _round(x: float | None, n: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, n)


def ort_outputs(path: Path, sets: Sequence[Feeds], ctx: Any, level: str = "all") -> list[dict]:
    runner = sessions.open_runner("onnxruntime", path, {"graph_optimization_level": level}, ctx)
    try:
        return [runner.infer(f) for f in sets]
    finally:
        runner.close()
        del runner
        release_memory()


def accuracy(reference: list[dict], got: list[dict]) -> tuple[float, float | None]:
    """(min cosine, mean top-1 agreement) of ``got``'s float outputs against ``reference`` over
    every set. Integer and boolean outputs (token ids passed through, masks, class ids) are
    not approximations: :func:`integer_differences` judges them exactly. A missing output
    counts as cosine 0; a model with no float output has nothing approximated (1.0).
    A set where an output's reference is numerically zero (a text detector's mask on noise) has no direction to
    keep: its cosine counts only when no other set gives that output one (a synthetic picture that lifts it)."""
    cosines, tops = [], []
    by_output: dict[str, tuple[list[float], list[float]]] = {}      # name -> (cosines above, at the noise floor)
    for r, g in zip(reference, got):
        c = compare_outputs(r, g, quantized=True)
        if c.missing:
            cosines.append(0.0)
        for d in c.outputs.values():
            if d.cosine is not None:
                by_output.setdefault(d.name, ([], []))[1 if d.noise_floor else 0].append(d.cosine)
            if d.top1_agreement is not None:
                tops.append(d.top1_agreement)
    for above, at_floor in by_output.values():
        cosines += above or at_floor
    return (min(cosines) if cosines else 1.0), (float(np.mean(tops)) if tops else None)


def integer_differences(reference: list[dict], got: list[dict]) -> str | None:
    """One line naming the first integer/boolean output that differs from fp32 in more than
    ``studio.core.compare.QUANTIZED_INT_MISMATCH`` of its values (count and rate), or None."""
    for i, (r, g) in enumerate(zip(reference, got)):
        c = compare_outputs(r, g, quantized=True)
        bad = next((d for d in c.outputs.values() if d.mode == "exact" and not d.match), None)   # > 1 % differ
        if bad is not None:
            return (f"integer output '{bad.name[:60]}' differs from fp32 on input set {i + 1}: {bad.note}"
                    if len(reference) > 1 else f"integer output '{bad.name[:60]}' differs from fp32: {bad.note}")
    return None


def measure_latencies(paths: Mapping[str, Path], feeds: Feeds, ctx: Any, *, budget_s: float = 60.0,
                      engine: str = "onnxruntime", options: Mapping[str, Mapping] | None = None,
                      feeds_for: Mapping[str, Feeds] | None = None,
                      rounds_out: dict[str, list[float]] | None = None) -> dict[str, float]:
    """Milliseconds per model (10th percentile), measured in interleaved rounds in this worker
    (the studio's one latency loop, :func:`profilers.latency.budgeted_rounds`).
    ``feeds_for``: other feeds for some models (float16 inputs...). ``rounds_out`` receives
    each model's per-round medians (ms), for ratios with their spread (:func:`speed_vs_fp32`)."""
    runners = {k: sessions.open_runner(engine, p, dict((options or {}).get(k, {})), ctx) for k, p in paths.items()}
    try:
        own = dict(feeds_for or {})
        run = budgeted_rounds({k: (r.infer, (own.get(k, feeds),)) for k, r in runners.items()}, budget_s)
    finally:
        for r in runners.values():
            r.close()
        runners.clear()
        release_memory()
    if rounds_out is not None:
        rounds_out.update({k: [float(x) for x in run.round_medians(k)] for k in paths})
    # The 10th percentile: on a shared machine other processes only ever add time.
    return {k: run.stats(k).p10_ms for k in paths}


def speed_vs_fp32(rounds: Mapping[str, Sequence[float]], name: str, label: str) -> str | None:
    """A warning when ``name`` is not significantly faster than fp32, with the ratio's spread
    over the interleaved rounds; None when its whole 95 % interval is below 1.0."""
    base, other = list(rounds.get("fp32") or []), list(rounds.get(name) or [])
    n = min(len(base), len(other))
    if n == 0:
        return None
    est = paired_ratio(base[:n], other[:n])
    if est.faster:
        return None
    if est.ci_low is not None and est.ci_low > 1.0:
        return f"{label} is slower than fp32 on this machine ({est.ratio:.2f}x, {est.interval_text()}): keep fp32 here"
    return (f"{label}: no significant difference from fp32 ({est.ratio:.2f}x, {est.interval_text()}): "
            "no speed reason to use it here")


def cosine_text(value: float, target: float | None = None) -> str:
    """A cosine with enough digits to tell it from the target (0.99986 is not "0.9999" when the
    target is 0.9999): at least 4, up to 8 decimals."""
    for digits in range(4, 9):
        text = f"{value:.{digits}f}"
        if target is None or value == target or text != f"{target:.{digits}f}":
            if target is None or value == target or (float(text) >= target) == (value >= target):
                return text
    return f"{value:.8f}"


def task_judge(task: Mapping[str, Any]) -> Callable[[list[dict], list[dict]], tuple[float, float | None]]:
    """An :func:`accuracy` replacement scoring by a task metric (``studio.data.metrics``) on one
    output, as "higher is better" (1 - value for error metrics such as mismatch-rate or cer): the
    INT8 configuration choice and the float-fallback search then stop at the task's target."""
    metric, output = bound_metric(task["metric"], **dict(task.get("metric_options") or {})), task["output"]
    labels = task.get("labels")      # holdout item i's true class id (top1-accuracy, accuracy-drop), or None

    def judge(reference: list[dict], got: list[dict]) -> tuple[float, float | None]:
        # item i of ``got`` ran on holdout item i and is scored against golden item i, never a neighbour
        if len(got) != len(reference) or not reference or any(output not in r or output not in g
                                                              for r, g in zip(reference, got)):
            return 0.0, None                   # an item without the output: this trial misses
        gold = [np.asarray(r[output]) for r in reference]
        cand = [np.asarray(g[output]) for g in got]
        value = metric.score(output, gold, cand, labels).value
        if value is None or value != value:
            return 0.0, None
        return (float(value) if metric.higher_is_better else 1.0 - float(value)), None

    return judge


def load_sets(path: str | Path) -> list[dict]:
    """Sets saved by ``studio.core.feeds.save_npz`` (``name/i`` keys), in order."""
    sets: dict[int, dict] = {}
    with np.load(str(path), allow_pickle=False) as data:
        for key in data.files:
            name, _, idx = key.rpartition("/")
            sets.setdefault(int(idx), {})[name] = data[key]
    return [sets[i] for i in sorted(sets)]


def pick(measured: Sequence[QuantCandidate], target: float) -> QuantCandidate | None:
    """The fastest candidate that meets the accuracy target."""
    ok = [m for m in measured if m.error is None and m.cosine is not None and m.cosine >= target
          and m.latency_ms is not None]
    return min(ok, key=lambda m: m.latency_ms) if ok else None


def nodes_of(path: Path) -> list[onnx.NodeProto]:
    return list(onnx.load_model(str(path), load_external_data=False).graph.node)


def write_json(path: Path, obj: Any) -> None:
    path.write_text(jsonsafe.dumps(obj, indent=1))  # scratch: worker: its scratch folder


def release_memory() -> None:
    """Collect garbage and hand freed heap pages back to the OS between heavy steps (copies
    of the weights come and go; without a trim the worker's resident size keeps their peak)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class _LogContext:
    """Stands in for a worker's JobContext when a pass runs in process (tests): stages are logged."""

    cpu_threads = None
    out_dir = Path(".")

    def set_stage(self, stage: str) -> None:
        log.info("%s", stage)


def job_context(p: Any) -> Any:
    """The JobContext the worker handed this pass (``passes.worker_pass``), or a logging stand-in."""
    return getattr(p, "job_context", None) or _LogContext()


def load_result(path: Path) -> Any:
    """The pass's result as an onnx-ir model with every weight in memory: the files live in the
    pass's temporary folder, which is gone before the worker saves the result."""
    import onnx_ir as ir

    from studio.core.model_io import load_ir  # heavy: model_io imports onnx_ir (~0.3 s); quant_tools stays light

    model = load_ir(path)                      # map types (ZipMap outputs) hidden from onnx-ir
    ir.external_data.load_to_model(model)
    return model
