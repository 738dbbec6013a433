"""Reality for the agreement tests, written here against the engines' own Python APIs and
nothing of the studio's: ``onnxruntime.InferenceSession``, ``openvino.Core``, MNN's converter
(``_tools.mnnconvert``, MNNConvert's command line) and Module API, and LiteRT's converter
(``onnx2tf.convert``) with ``ai_edge_litert``'s interpreter. The inputs come from this file's own
recipe (:func:`recipes`): each graph input's dtype and shape from the model, every unknown dim 1,
seeded values: floats in [0, 1), integers 0 or 1, booleans, a few words for strings; then, for the
models that have them, 32 for the unknown non-batch dims, and integer inputs all ones. No studio
adapter, input search, feed maker or sandbox is used.

Each engine runs in its own child interpreter (``python -m tests.diag.agreement ENGINE FOLDER``),
one model after another: a model that kills the engine is recorded as failing ("crashed") and the
child restarted for the rest; one that outlives its time is "not verifiable".

What "ran" means: the engine loaded (after converting, for MNN and LiteRT) and one inference on
the recipe's inputs returned every ONNX output. Anything else is "failed", with the engine's words.
A converter that refuses a model gets one more try with what its own error message advises
(onnx2tf: its default onnxsim, ``-kat`` for 3-5-D inputs, ``-onwdt`` for NonMaxSuppression): a
model that converts that way is one LiteRT runs (the message says with which options).

Four shortcuts keep LiteRT's side affordable without changing its answer: a recipe with the input
shapes of an earlier recipe of the same model reuses that conversion (onnx2tf reads the shapes, not
the values: the same file, or the same refusal), onnx2tf stops once its float32 file is written
(reality runs that file; the float16 copy it writes next cost about as much as the float32 one),
TFLite's converter copies the SavedModel onnx2tf has just written of the same Keras model instead of
tracing it again (:func:`_save_once`), and when onnx2tf has no converter for an op that computes on the inputs'
values (``No module named 'onnx2tf.ops.MatMulNBits'``), neither its advised options nor another recipe's shapes
remove that node, so the model fails there once (:func:`_no_converter`; llama_genai: 1 onnx2tf run, was 6).
onnxsim, which onnx2tf runs as a program three times per conversion with its default onnxsim, runs in a child
forked from one interpreter that imported it once (:func:`_onnxsim_in_zygote`): the same program's main on the
same arguments in a process of its own, without the ~0.8 s import each run repeated.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENGINES = ("onnxruntime", "openvino", "mnn", "litert")
ROOT = Path(__file__).resolve().parents[2]
STUDIO_PACKAGES = ("studio", "diagnostics", "passes", "profilers")     # never imported by the reality side
# Per model, in CPU seconds of the child and its programs (onnx2tf runs onnxsim): a loaded machine stretches
# the wall clock, not the work. A child that hangs without computing (a deadlock) is stopped at WALL_FACTOR x.
TIMEOUT_S = {"onnxruntime": 60.0, "openvino": 60.0, "mnn": 60.0, "litert": 240.0}
WALL_FACTOR = 6
# glibc's words when the engine corrupted its heap: the process aborts, or hangs in the allocator
HEAP_CORRUPTION = ("double free or corruption", "free(): invalid", "corrupted size vs. prev_size", "malloc(): ")
WORDS = np.array(["monday", "Tuesday", "the", "STOP", "a", "mix of words"], dtype=object)


@dataclass(frozen=True)
class Outcome:
    """What really happened: ``ran`` True / False, or None when it could not be verified."""

    ran: bool | None
    message: str


# ============================================================================ the test's own inputs

def graph_inputs(model) -> list:
    """The graph inputs a caller feeds (an input with an initializer of its name has a default)."""
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _dims(value_info, other_dim: int) -> tuple[int, ...] | None:
    t = value_info.type.tensor_type
    if not t.HasField("shape"):
        return None
    return tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else (1 if axis == 0 else other_dim)
                 for axis, d in enumerate(t.shape.dim))


def _values(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], ones: bool = False) -> np.ndarray:
    if dtype == object or dtype.kind in "SU":
        return rng.choice(WORDS, size=shape).astype(object)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return np.ones(shape, dtype) if ones else rng.integers(0, 2, size=shape).astype(dtype)
    return rng.random(shape).astype(dtype)


def recipe_feeds(model, other_dim: int = 1, seed: int = 0, ones: bool = False) -> dict[str, np.ndarray] | str:
    """This test's inputs for ``model`` (name -> array), or why none can be made (a non-tensor
    input, a tensor of unknown rank or element type)."""
    from onnx.helper import tensor_dtype_to_np_dtype

    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for vi in graph_inputs(model):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            return f"input {vi.name!r} is a {kind}, not a tensor"
        if not vi.type.tensor_type.elem_type:
            return f"input {vi.name!r} has no element type"
        shape = _dims(vi, other_dim)
        if shape is None:
            return f"input {vi.name!r} has no shape (unknown rank)"
        feeds[vi.name] = _values(rng, np.dtype(tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)), shape, ones)
    return feeds


def recipes(model) -> list[dict[str, np.ndarray] | str]:
    """Every unknown dim 1; then, where the model has an unknown dim past axis 0, 32 there; then,
    where it has an integer input (a shape, an index), that input all ones."""
    from onnx import TensorProto

    tensors = [vi for vi in graph_inputs(model) if vi.type.HasField("tensor_type")]
    dynamic_past_batch = any(not d.HasField("dim_value") or d.dim_value <= 0
                             for vi in tensors if vi.type.tensor_type.HasField("shape")
                             for d in list(vi.type.tensor_type.shape.dim)[1:])
    integer = {TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.UINT8,
               TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64}
    has_int = any(vi.type.tensor_type.elem_type in integer for vi in tensors)
    return [recipe_feeds(model, 1)] + ([recipe_feeds(model, 32)] if dynamic_past_batch else []) + \
        ([recipe_feeds(model, 1, ones=True)] if has_int else [])


# ============================================================================ the engines, called plainly

def _last_line(text: str, *, prefer: str = r"error|fail|not support|unsupported|can't|cannot") -> str:
    import re

    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    bad = [ln for ln in lines if re.search(prefer, ln, re.I)]
    return (bad or lines or ["(no output)"])[-1][:300]


class _Redirect:
    """fd 1 and 2 into a file for the duration (converters print from C++)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _Redirect:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = (os.dup(1), os.dup(2))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)

    def text(self) -> str:
        return self.path.read_text(errors="replace") if self.path.exists() else ""


def _expect_outputs(model, got: int) -> None:
    want = len(model.graph.output)
    if got != want:
        raise RuntimeError(f"returned {got} output(s), the ONNX model has {want}")


def run_onnxruntime(path: Path, model, feeds: dict, work: Path) -> None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    _expect_outputs(model, len(session.run(None, feeds)))


def run_openvino(path: Path, model, feeds: dict, work: Path) -> None:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_NUM_THREADS": 1})
    by_name = {i: next((n for n in port.get_names() if n in feeds), None) for i, port in enumerate(compiled.inputs)}
    # OpenVINO may rename a parameter (a sequence folded away gives it its output's name): the rest by position
    rest = [n for n in feeds if n not in by_name.values()]
    if sum(name is None for name in by_name.values()) > len(rest):
        raise RuntimeError(f"OpenVINO has {len(by_name)} inputs, more than the model's {len(feeds)}")
    inputs = {i: feeds[name if name is not None else rest.pop(0)] for i, name in by_name.items()}
    result = compiled.create_infer_request().infer(inputs)
    _expect_outputs(model, len(result))


def run_mnn(path: Path, model, feeds: dict, work: Path) -> None:
    import _tools  # MNN's C extension: MNNConvert
    import MNN.expr as F
    import MNN.nn as nn

    mnn = work / "model.mnn"
    mnn.unlink(missing_ok=True)
    log = _Redirect(work / "mnnconvert.log")
    with log:
        _tools.mnnconvert(["mnnconvert", "-f", "ONNX", "--modelFile", str(path), "--MNNModel", str(mnn),
                           "--bizCode", "agreement"])
    if "Converted Failed" in log.text() or not mnn.is_file() or mnn.stat().st_size == 0:
        raise RuntimeError(f"MNNConvert: {_last_line(log.text())}")
    runtime = nn.create_runtime_manager(({"backend": "CPU", "numThread": 1},))
    module = nn.load_module_from_file(str(mnn), [], [], runtime_manager=runtime)
    info = module.get_info()
    values = []
    for name in info.get("inputNames") or []:
        if name not in feeds:
            raise RuntimeError(f"MNN's input {name!r} matches no ONNX input")
        a = feeds[name]
        if a.dtype == object:
            raise RuntimeError(f"MNN takes no string input ({name!r})")
        a, kind = (a.astype(np.int32), F.int) if a.dtype.kind in "iub" else (a.astype(np.float32), F.float)
        values.append(F.const(np.ascontiguousarray(a), list(a.shape), F.NCHW, kind))
    log = _Redirect(work / "mnnrun.log")
    with log:
        out = module.forward(values)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        arrays = []
        for v in out:
            if v.data_format == F.NC4HW4:
                v = F.convert(v, F.NCHW)
            arrays.append(np.array(v.read()))
    _expect_outputs(model, len(arrays))
    if any(a.size == 0 for a in arrays) and "error" in log.text().lower():
        raise RuntimeError(f"MNN computed an empty output: {_last_line(log.text())}")


def _offline_images() -> np.ndarray:
    """onnx2tf downloads 20 sample images for 3-channel inputs; no network here: seeded ones."""
    return np.random.default_rng(0).random((20, 128, 128, 3), dtype=np.float32)


class _Float32Written(Exception):
    """Raised at onnx2tf's float16 conversion, which comes after its float32 file is complete."""


def _stop_before_float16() -> None:
    """Make every TFLite converter's ``convert`` raise :class:`_Float32Written` when asked for float16
    weights (onnx2tf's second file): reality runs the float32 one only. Idempotent."""
    import tensorflow as tf
    from tensorflow.lite.python import lite

    def float32_only(convert):
        def wrapped(self, *args, **kwargs):
            if tf.float16 in (getattr(self.target_spec, "supported_types", None) or ()):
                raise _Float32Written
            return convert(self, *args, **kwargs)

        wrapped.agreement_float32_only = True
        return wrapped

    for cls in list(vars(lite).values()):
        if isinstance(cls, type) and issubclass(cls, lite.TFLiteConverterBase) and "convert" in vars(cls) \
                and not getattr(vars(cls)["convert"], "agreement_float32_only", False):
            cls.convert = float32_only(vars(cls)["convert"])


# id(model) -> (model, folder): the SavedModel written in the current onnx2tf.convert (see _save_once)
_SAVED: dict[int, tuple[object, Path]] = {}


def _save_once() -> None:
    """Make a SavedModel save of a model already saved in this conversion copy that folder: onnx2tf saves its
    Keras model (``tf.saved_model.save``), then TFLite's Keras converter saves the same object again to convert
    from (the same trace twice, about a third of a conversion). Every such save is written with the converter's
    options (``save_debug_info``), so the copy is what the converter would have written. Idempotent."""
    import shutil

    import tensorflow as tf
    from tensorflow.python.saved_model import save as save_module
    from tensorflow.python.saved_model.save_options import SaveOptions

    plain = SaveOptions(save_debug_info=True)

    def once(original):
        def save(obj, export_dir, signatures=None, options=None):
            if signatures is not None or (options is not None and any(
                    getattr(options, k) != getattr(plain, k) for k in type(plain).__slots__)):
                return original(obj, export_dir, signatures=signatures, options=options)
            first = _SAVED.get(id(obj))
            if first is not None and first[0] is obj and (first[1] / "saved_model.pb").is_file():
                shutil.copytree(first[1], export_dir, dirs_exist_ok=True)
                return None
            result = original(obj, export_dir, signatures=None, options=plain)
            _SAVED[id(obj)] = (obj, Path(export_dir))
            return result

        save.agreement_save_once = True
        return save

    if not getattr(tf.saved_model.save, "agreement_save_once", False):
        tf.saved_model.save = once(tf.saved_model.save)
    if not getattr(save_module.save, "agreement_save_once", False):
        save_module.save = once(save_module.save)


# onnx2tf runs onnxsim as a program (``subprocess.check_output(["onnxsim", IN, OUT, ...])``), three times in a row per
# conversion with its default onnxsim: each run a fresh interpreter whose import of onnxsim (sympy, its quantizers) costs
# ~0.8 s of CPU before any work, on a model that takes milliseconds to simplify. The zygote imports it once; each run is
# a child forked from it that runs the same program's main on the same arguments in the caller's folder: a process of
# its own (a crash or an exit code stays there and reaches onnx2tf as from the program), stdout and stderr returned.
_ZYGOTE_SRC = r"""
import base64, json, os, sys, tempfile, traceback
from onnxsim import main
for line in sys.stdin:
    req = json.loads(line)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.chdir(req["cwd"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            sys.argv = req["argv"]
            try:
                result = main()
            except SystemExit as exc:
                result = exc.code
            if result is None or isinstance(result, int):   # what sys.exit(main()) makes of it
                code = result or 0
            else:
                print(result, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    texts = []
    for f in (out, err):
        f.seek(0)
        texts.append(base64.b64encode(f.read()).decode())
        f.close()
    sys.stdout.write(json.dumps({"rc": os.waitstatus_to_exitcode(status), "out": texts[0], "err": texts[1]}) + "\n")
    sys.stdout.flush()
"""
_ZYGOTE: list = []      # the running zygote (subprocess.Popen), started at this child's first onnxsim run


def _onnxsim_run(argv: list[str]) -> tuple[int, bytes, bytes]:
    """``argv`` (``onnxsim ...``) run in a child of the zygote: (exit code, stdout, stderr)."""
    import base64

    for _ in range(2):                  # a zygote that died is started again once
        if not _ZYGOTE or _ZYGOTE[0].poll() is not None:
            _ZYGOTE[:] = [subprocess.Popen([sys.executable, "-c", _ZYGOTE_SRC], stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)]
        zygote = _ZYGOTE[0]
        try:
            zygote.stdin.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
            zygote.stdin.flush()
            line = zygote.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if line:
            reply = json.loads(line)
            return reply["rc"], base64.b64decode(reply["out"]), base64.b64decode(reply["err"])
        zygote.kill()
        zygote.wait()
    raise RuntimeError("the onnxsim zygote stopped answering")


def _onnxsim_in_zygote() -> None:
    """Make onnx2tf's ``subprocess.check_output(["onnxsim", ...], stderr=PIPE)`` run in the zygote (its return value
    and its CalledProcessError as the program's); every other call is subprocess's own. Idempotent."""
    import types

    import onnx2tf.onnx2tf as o2t

    if getattr(o2t.subprocess, "agreement_onnxsim_zygote", False):
        return

    def check_output(args, *rest, **kwargs):
        if isinstance(args, list) and args and args[0] == "onnxsim" and not rest and set(kwargs) <= {"stderr"}:
            rc, out, err = _onnxsim_run([str(a) for a in args])
            if rc != 0:
                raise subprocess.CalledProcessError(rc, args, output=out,
                                                    stderr=err if kwargs.get("stderr") == subprocess.PIPE else None)
            return out
        return subprocess.check_output(args, *rest, **kwargs)

    shim = types.ModuleType("subprocess")
    shim.__dict__.update(vars(subprocess))
    shim.check_output = check_output
    shim.agreement_onnxsim_zygote = True
    o2t.subprocess = shim


def _onnx2tf(src: Path, out: Path, shapes: list[str], log: _Redirect, **options) -> str | None:
    """One ``onnx2tf.convert``; None when it wrote the float32 .tflite, else its error."""
    import shutil

    import onnx2tf

    _stop_before_float16()
    _save_once()
    _onnxsim_in_zygote()
    _SAVED.clear()
    shutil.rmtree(out, ignore_errors=True)
    error = None
    with log:
        try:
            onnx2tf.convert(input_onnx_file_path=str(src), output_folder_path=str(out), non_verbose=True,
                            copy_onnx_input_output_names_to_tflite=True, overwrite_input_shape=shapes or None,
                            **options)
        except _Float32Written:
            pass
        except BaseException as exc:  # noqa: BLE001 - onnx2tf ends its failures with sys.exit
            if isinstance(exc, KeyboardInterrupt):
                raise
            error = f"{type(exc).__name__}: {exc}"
        finally:
            _SAVED.clear()
    if not error and (out / f"{src.stem}_float32.tflite").is_file():
        return None
    return _last_line(log.text()) if not error or "SystemExit" in error else error


def _ops(graph) -> set[str]:
    found = {n.op_type for n in graph.node}
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                found |= _ops(g)
    return found


# onnx2tf imports a module per op type of the graph it converts; none for an op it does not implement
_NO_OP_MODULE = re.compile(r"No module named 'onnx2tf\.ops\.(\w+)'")


def _ops_on_input_values(graph) -> set[str]:
    """Op types of the main graph's nodes that feed an output and compute on a graph input's values (not only its
    shape, which Shape/Size read: onnxsim folds those at fixed shapes). Neither an option (onnxsim folds constants,
    drops dead nodes; -kat changes layouts) nor other input shapes take such a node out of the graph onnx2tf
    converts. Values reached only through a subgraph's outer scope are not followed: fewer ops, never more."""
    data = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    for node in graph.node:                         # topological order
        if node.op_type not in ("Shape", "Size") and data.intersection(node.input):
            data.update(node.output)
    live, found = {o.name for o in graph.output}, set()
    for node in reversed(graph.node):
        if live.intersection(node.output):
            live.update(node.input)
            if node.op_type not in ("Shape", "Size") and data.intersection(node.input):
                found.add(node.op_type)
    return found


def _no_converter(model, error: str) -> str | None:
    """The op type onnx2tf has no module for when ``error`` says so and that op computes on the inputs' values
    (:func:`_ops_on_input_values`): every option and recipe would stop at it again."""
    m = _NO_OP_MODULE.search(error)
    return m.group(1) if m and m.group(1) in _ops_on_input_values(model.graph) else None


# (model path, input shapes) -> (tflite folder, note, refusal) of this child's current model: a recipe with
# the shapes of an earlier one converts to the same file or is refused the same way (onnx2tf reads no values)
_CONVERSIONS: dict[tuple[str, tuple[str, ...]], tuple[Path, str | None, RuntimeError | None]] = {}


def _convert_litert(path: Path, model, feeds: dict, shapes: list[str], work: Path, out: Path) -> str | None:
    """onnx2tf on a copy of ``path`` into ``out`` (see :func:`run_litert`): None, or a note naming the
    advice it took; RuntimeError when every way fails."""
    import importlib

    import onnx

    for name in ("onnx2tf.onnx2tf", "onnx2tf.utils.common_functions"):
        module = importlib.import_module(name)
        if hasattr(module, "download_test_image_data"):
            module.download_test_image_data = _offline_images
    src = work / "model.onnx"         # onnx2tf writes into the file it is given: a copy, external data inlined
    onnx.save_model(onnx.load_model(str(path), load_external_data=True), str(src))
    log = _Redirect(work / "onnx2tf.log")
    error = _onnx2tf(src, out, shapes, log, not_use_onnxsim=True)
    note = None
    if error and _no_converter(model, error):
        raise RuntimeError(f"onnx2tf: {error}")     # no advice adds a converter for an op (see _no_converter)
    if error:
        kat = [n for n, a in feeds.items() if 3 <= a.ndim <= 5]
        nms = "NonMaxSuppression" in _ops(model.graph)
        advice = [{"output_nms_with_dynamic_tensor": nms}]
        advice += [{"keep_shape_absolutely_input_names": kat, "output_nms_with_dynamic_tensor": nms}] if kat else []
        for options in advice:
            onnx.save_model(onnx.load_model(str(path), load_external_data=True), str(src))   # a fresh copy
            if _onnx2tf(src, out, shapes, log, **options) is None:
                note = "converted with onnx2tf's advice: onnxsim" + \
                    (f", -kat {' '.join(kat)}" if "keep_shape_absolutely_input_names" in options else "") + \
                    (", -onwdt" if nms else "")
                break
        else:
            raise RuntimeError(f"onnx2tf: {error}")
    return note


def run_litert(path: Path, model, feeds: dict, work: Path) -> str | None:
    """onnx2tf as the studio records its command (``-coion -nuo -ois``); when it refuses the model, with
    what its own error and help advise: its default onnxsim (its help: ``-nuo`` makes errors likely), then
    also ``-kat`` for the 3-5-D inputs ("NHWC or an irregular channel arrangement ... use the -kt or -kat
    option"); ``-onwdt`` for a graph with NonMaxSuppression."""
    shapes = [f"{n}:{','.join(str(d) for d in a.shape)}" for n, a in feeds.items() if a.ndim]
    key = (str(path), tuple(shapes))
    if key not in _CONVERSIONS:
        if all(k[0] != key[0] for k in _CONVERSIONS):
            _CONVERSIONS.clear()                 # a new model: an earlier model's conversions are not reused
        out = work / f"tflite{len(_CONVERSIONS)}"
        try:
            _CONVERSIONS[key] = (out, _convert_litert(path, model, feeds, shapes, work, out), None)
        except RuntimeError as exc:
            _CONVERSIONS[key] = (out, None, exc)
    out, note, refused = _CONVERSIONS[key]
    if refused is not None:
        raise RuntimeError(str(refused))
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(out / "model_float32.tflite"), num_threads=1).get_signature_runner()
    rng = np.random.default_rng(1)
    given = list(feeds.values())
    kwargs = {}
    for i, (name, detail) in enumerate(runner.get_input_details().items()):
        shape, dtype = tuple(int(d) for d in detail["shape"]), np.dtype(detail["dtype"])
        a = feeds.get(name, given[i] if i < len(given) else None)
        if a is not None and a.shape != shape and a.ndim >= 3 and np.moveaxis(a, 1, -1).shape == shape:
            a = np.moveaxis(a, 1, -1)                   # onnx2tf made it channels-last
        if a is None or a.shape != shape:
            a = _values(rng, dtype, shape)
        kwargs[name] = np.ascontiguousarray(a.astype(dtype))
    _expect_outputs(model, len(runner(**kwargs)))
    return note


RUNNERS = {"onnxruntime": run_onnxruntime, "openvino": run_openvino, "mnn": run_mnn, "litert": run_litert}


def reality_of(engine: str, path: Path, work: Path) -> Outcome:
    """Run ``path`` on ``engine`` with each of this test's recipes until one runs (this process)."""
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    tried = []
    for feeds in recipes(model):
        if isinstance(feeds, str):
            return Outcome(None, f"no input from the test's recipe: {feeds}")
        try:
            note = RUNNERS[engine](path, model, feeds, work)
            shapes = ", ".join(f"{n}{list(a.shape)}" for n, a in feeds.items())
            return Outcome(True, f"ran on {shapes}" + (f" (recipe {len(tried) + 1})" if tried else "") +
                           (f"; {note}" if note else ""))
        except Exception as exc:  # noqa: BLE001 - every engine error is the engine's answer
            tried.append(" ".join(f"{type(exc).__name__}: {exc}".split())[:400])
            if engine == "litert" and _no_converter(model, str(exc)):
                break       # onnx2tf lacks a converter for an op on the inputs' values: no recipe's shapes change it
    return Outcome(False, tried[0] if len(tried) == 1 else " | ".join(f"recipe {i + 1}: {t[:200]}"
                                                                      for i, t in enumerate(tried)))


# ============================================================================ one child per engine

def _child_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNX_STUDIO_")}
    env.update(HOME=str(work), XDG_CACHE_HOME=str(work / "cache"), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               ORT_DISABLE_TELEMETRY="1", ORT_TELEMETRY_DISABLED="1", TF_CPP_MIN_LOG_LEVEL="2",
               TF_NUM_INTRAOP_THREADS="1", TF_NUM_INTEROP_THREADS="1", CUDA_VISIBLE_DEVICES="",
               # onnx2tf runs onnxsim as a program: the one installed next to this interpreter
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    return env


def reality(engine: str, paths: Sequence[Path], work: Path) -> dict[Path, Outcome]:
    """Outcome per model, from a child interpreter per engine (restarted after a crash or a hang)."""
    work.mkdir(parents=True, exist_ok=True)
    results: dict[Path, Outcome] = {}
    pending = [Path(p).resolve() for p in paths]
    while pending:
        proc = subprocess.Popen([sys.executable, "-m", "tests.diag.agreement", engine, str(work)], cwd=work,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=_child_env(work), text=True)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(f"{p}\n" for p in pending))
        proc.stdin.close()
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        first = True
        while pending:
            current = pending[0]
            budget = TIMEOUT_S[engine] + (120 if first else 0)   # + the engine's imports
            first = False
            spent, wall_end = _cpu_seconds(proc.pid), time.monotonic() + WALL_FACTOR * budget
            line = ""
            while not line and _cpu_seconds(proc.pid) - spent < budget and time.monotonic() < wall_end:
                if selector.select(timeout=min(2.0, max(0.0, wall_end - time.monotonic()))):
                    line = proc.stdout.readline()
                    if not line:
                        break                                      # EOF: the child died
            if line:
                data = json.loads(line)
                assert Path(data["path"]) == current, (data, current)
                assert data["studio_modules"] == [], f"the reality side loaded the studio: {data['studio_modules']}"
                results[current] = Outcome(data["ran"], data["message"])
                pending.pop(0)
                continue
            hung = proc.poll() is None
            proc.kill()
            proc.wait()
            heap = _heap_corruption(work / f"{engine}-scratch")
            if heap is not None:       # aborted, or hung in the allocator after it: a crash either way
                results[current] = Outcome(False, f"{engine} corrupted its heap: {heap}")
            elif hung:
                results[current] = Outcome(None, f"not verifiable: {engine} took over {TIMEOUT_S[engine]:.0f} s "
                                                 f"of CPU (or {WALL_FACTOR}x that on the clock)")
            else:
                results[current] = Outcome(False, f"{engine} crashed the process (exit {proc.returncode})")
            pending.pop(0)
            break
        proc.kill()
        proc.wait()
        selector.close()
    return results


def _cpu_seconds(pid: int) -> float:
    """CPU seconds used by process ``pid`` and its descendants, running or finished (0 once it is gone)."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        return 0.0
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def _heap_corruption(scratch: Path) -> str | None:
    """glibc's heap-corruption message in the engine output of the model being run, or None."""
    for log in scratch.glob("*.log"):
        text = log.read_text(errors="replace")
        hit = next((w for w in HEAP_CORRUPTION if w in text), None)
        if hit:
            return next(ln.strip() for ln in text.splitlines() if hit in ln)
    return None


def _child(engine: str, work: Path) -> None:
    """Read model paths from stdin; one JSON line per model on the real stdout (fd 1 goes to a log)."""
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]  # no GA sender
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(work / f"{engine}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    for line in sys.stdin:
        path = Path(line.strip())
        if not line.strip():
            continue
        scratch = work / f"{engine}-scratch"
        scratch.mkdir(exist_ok=True)
        outcome = reality_of(engine, path, scratch)
        studio = sorted(m for m in sys.modules if m.split(".")[0] in STUDIO_PACKAGES)
        reply.write(json.dumps({"path": str(path), "ran": outcome.ran, "message": outcome.message,
                                "studio_modules": studio[:5]}) + "\n")


# ============================================================================ comparing with the check

SUPPORTED = ("runs", "runs with warnings")
FAILS = ("fails",)
# "not run" (compiles, but no input the studio tried ran it: "needs inputs") claims neither: unknown,
# and the tally says how reality went for those models.


def claim(verdict: str) -> str:
    """The check's verdict as a claim about reality: supported / fails / unknown."""
    return "supported" if verdict in SUPPORTED else "fails" if verdict in FAILS else "unknown"


@dataclass(frozen=True)
class Tally:
    """One engine's agreement counts."""

    engine: str
    models: int
    agree: int                       # supported & ran, or fails & failed
    supported_ran: int
    fails_failed: int
    disagree: tuple[tuple[str, str, str, str], ...]  # (model, claim, check summary, reality)
    unknown_claims: int              # the check said "unknown" or "not run"
    unknown_ran: int                 # ... of which reality ran
    not_verifiable: int              # the reality side could not decide
    unknown_models: tuple[tuple[str, str, str], ...] = ()   # (model, verdict, reality) of the unknown claims

    def line(self) -> str:
        return (f"{self.engine}: {self.agree}/{self.models - self.unknown_claims - self.not_verifiable} agree "
                f"({self.supported_ran} run, {self.fails_failed} fail), {len(self.disagree)} disagree; "
                f"{self.unknown_claims} unknown/not-run verdicts (reality ran {self.unknown_ran} of them), "
                f"{self.not_verifiable} not verifiable here")


def tally(engine: str, verdicts: dict[str, tuple[str, str]], outcomes: dict[str, Outcome]) -> Tally:
    """``verdicts``: model -> (verdict, summary) from the check; ``outcomes``: model -> reality."""
    agree = ran_ok = fail_ok = unknown = unknown_ran = unverifiable = 0
    disagree, unknown_models = [], []
    for name, (verdict, summary) in verdicts.items():
        said, real = claim(verdict), outcomes[name]
        if said == "unknown":
            unknown += 1
            unknown_ran += real.ran is True
            unknown_models.append((name, verdict, real.message[:120]))
        elif real.ran is None:
            unverifiable += 1
        elif (said == "supported") == real.ran:
            agree += 1
            ran_ok += real.ran
            fail_ok += not real.ran
        else:
            disagree.append((name, said, summary[:160], real.message[:160]))
    return Tally(engine, len(verdicts), agree, ran_ok, fail_ok, tuple(disagree), unknown, unknown_ran, unverifiable,
                 tuple(unknown_models))


def model_name(path: Path) -> str:
    return path.parent.name if path.name == "model.onnx" else path.stem


def check_verdicts(paths: Iterable[Path], engines: Sequence[str]) -> dict[str, dict[str, tuple[str, str]]]:
    """engine -> model -> (verdict, summary) from the studio's check (the side under test)."""
    from studio import api

    out: dict[str, dict[str, tuple[str, str]]] = {e: {} for e in engines}
    for path in paths:
        report = api.check(api.load(path), list(engines))
        for engine in engines:
            v = report.verdict(engine)
            out[engine][model_name(path)] = (v.verdict, v.summary)
    return out


if __name__ == "__main__":
    _child(sys.argv[1], Path(sys.argv[2]))
