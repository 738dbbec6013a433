"""Third-party internals the studio patches or relies on (docs/architecture.md, "Third-party internals").

Each test names the internal it checks, so an upgrade that moves or changes one fails here, loudly,
instead of somewhere deep in a conversion or a page. pyproject.toml bounds each package to the range
tested here (``test_installed_versions_are_in_the_tested_ranges``); widening a bound means running this
file against the new release first. onnx2tf and tf_keras install with --no-deps, pinned exactly in
scripts/install_litert_converter.sh.
"""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import inspect
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import ROOT

# distribution -> the internal(s) it is relied on for (the same list as docs/architecture.md)
RANGED = {
    "onnx": "onnx.reference.op_run.OpRun subclasses (op_domain, _run) run by ReferenceEvaluator(new_ops=)",
    "onnxruntime": "capi.onnxruntime_pybind11_state.get_all_opkernel_def, quantization.registry, "
                   "create_calibrator, calibrate.save_tensors_data, transformers.float16",
    "onnxsim": "simplify(check_n=, perform_optimization=) and the onnxsim program onnx2tf runs",
    "onnxslim": "slim(ModelProto)",
    "openvino": "openvino_telemetry stubbed out of sys.modules (openvino must import without it)",
    "openvino-telemetry": "Telemetry.send_event & co. replaced by no-ops (studio.core.telemetry)",
    "nncf": "quantize_with_accuracy_control(max_drop=, drop_type=, advanced_accuracy_restorer_parameters=)",
    "streamlit": "st.App(path, middleware=) and st.components.v2.component(html=, js=, isolate_styles=)",
    "streamlit-code-editor": "code_editor.code_editor",
    "dask": "(dask[distributed], released together) the scheduler's remove-worker event (processing-tasks, lost-scattered-tasks), "
                   "Client.subscribe_topic/log_event/scheduler_comm, Worker.get_current_task",
    "MNN": "the private C extension _tools: mnnconvert(argv) and mnnquant(argv), and their log lines",
    "ncnn": "Net.opt.use_fp16_*, Mat(array, batch_index=0) borrowing the array, Mat.numpy(fmt, batch_index=), "
            "layer_to_index; with pnnx's binary, its inputshape= CLI and the *_ncnn.py it writes (batch_index=0)",
}
PINNED_BY_SCRIPT = {"onnx2tf": "onnx2tf.convert keywords, download_test_image_data (patched), output names, "
                               "log lines", "tf_keras": "onnx2tf's Keras"}


def _requirements() -> dict[str, str]:
    """distribution (normalized) -> specifier, from pyproject's dependencies and extras."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"]) + [r for extra in project["optional-dependencies"].values() for r in extra]
    out = {}
    for r in reqs:
        m = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*([^;#]*)", r)
        out[m.group(1).lower().replace("_", "-")] = m.group(3).strip()
    return out


def _needs(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.fail(f"{module} is not installed (make test-deps installs it)")


def test_installed_versions_are_in_the_tested_ranges():
    """Every package above has an upper bound in pyproject.toml, and the installed release is inside it."""
    from packaging.specifiers import SpecifierSet

    declared = _requirements()
    problems = []
    for dist, why in RANGED.items():
        spec = declared.get(dist.lower().replace("_", "-"))
        if not spec or "<" not in spec:
            problems.append(f"{dist}: no upper bound in pyproject.toml (relied on for: {why})")
            continue
        version = importlib.metadata.version(dist)
        if version not in SpecifierSet(spec):
            problems.append(f"{dist} {version} is outside the tested range {spec}: run this file against it, "
                            f"then widen the bound (relied on for: {why})")
    script = (ROOT / "scripts/install_litert_converter.sh").read_text()
    for dist in PINNED_BY_SCRIPT:
        pin = re.search(rf'"{dist}==([^"]+)"', script)
        if pin is None:
            problems.append(f"{dist}: no exact pin in scripts/install_litert_converter.sh")
        elif importlib.metadata.version(dist) != pin.group(1):
            problems.append(f"{dist} {importlib.metadata.version(dist)} is installed, the script pins {pin.group(1)}")
    assert problems == []


# -- ncnn and pnnx ---------------------------------------------------------------------------------

def test_pnnx_cli_and_ncnn_python_api(tmp_path):
    """What studio/core/engines/ncnn.py relies on: pnnx's binary (no torch) converts at the given
    shapes and names blobs in0/out0 in ONNX order with batch_index=0 in its script; ncnn loads the
    files, and a Mat made from an array borrows it (the adapter clones)."""
    from tests.requirements import require_engine

    require_engine("ncnn")
    import ncnn

    from studio.core.engines.conversion import ConversionFailed
    from studio.core.engines.ncnn import convert_to_ncnn, pnnx_binary

    assert pnnx_binary() is not None
    model = onnx.load(str(_conv_relu(tmp_path / "m.onnx")))
    model.ir_version = 8            # pnnx's bundled ONNX Runtime (1.30) reads IR <= 13: a newer one is refused
    onnx.save(model, str(tmp_path / "m.onnx"))
    info = convert_to_ncnn(tmp_path / "m.onnx", tmp_path, {"x": (1, 3, 4, 4)})
    assert info["command"][2:] == ["inputshape=[1,3,4,4]f32", "fp16=0"]
    assert info["io"] == {"inputs": [["x", "in0", 0]], "outputs": [["y", "out0", 0]]}     # batch axis 0
    net = ncnn.Net()
    net.opt.use_fp16_storage = net.opt.use_fp16_packed = net.opt.use_fp16_arithmetic = False
    assert net.load_param(str(tmp_path / "model.ncnn.param")) == 0
    assert net.load_model(str(tmp_path / "model.ncnn.bin")) == 0
    x = np.arange(-24, 24, dtype=np.float32).reshape(1, 3, 4, 4)
    with net.create_extractor() as ex:
        ex.input("in0", ncnn.Mat(x, batch_index=0).clone())
        rc, out = ex.extract("out0")
        y = np.array(out.numpy(batch_index=0), copy=True)
    assert rc == 0 and y.shape == (1, 3, 4, 4)
    np.testing.assert_array_equal(y, np.maximum(x, 0))      # identity 1x1 conv then Relu
    assert ncnn.layer_to_index("Convolution") >= 0 and ncnn.layer_to_index("Tensor.to") == -1
    model.ir_version = 14
    onnx.save(model, str(tmp_path / "ir14.onnx"))
    with pytest.raises(ConversionFailed, match="Unsupported model IR version: 14"):
        convert_to_ncnn(tmp_path / "ir14.onnx", tmp_path / "ir14", {"x": (1, 3, 4, 4)})


# -- MNN: the private C extension ``_tools`` ------------------------------------------------------

def _conv_relu(path: Path) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3, 1, 1], np.eye(3, dtype=np.float32).ravel())
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
                          "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (MNN writes to the C streams; a crash stays there)."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=240,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(cwd)})


def test_mnn_tools_mnnconvert_takes_an_argv_list_and_says_what_it_cannot_convert(tmp_path):
    """``_tools.mnnconvert(argv)`` (engines/mnn.py) converts, and its log has the lines the adapter reads:
    "Converted Failed" and "These Op Not Support: ONNX::OP" (``mnn._UNSUPPORTED``)."""
    _needs("_tools")
    from studio.core.engines.mnn import _UNSUPPORTED, mnn_command

    _conv_relu(tmp_path / "ok.onnx")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])
    g = helper.make_graph([helper.make_node("Frobnicate", ["x"], ["y"], domain="acme")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("acme", 1)]),
              tmp_path / "bad.onnx")
    runs = {}
    for name in ("ok", "bad"):
        r = _python(f"import _tools; _tools.mnnconvert({mnn_command(name + '.onnx', name + '.mnn', 'f32')!r})",
                    tmp_path)
        runs[name] = r.stdout + r.stderr
        assert r.returncode == 0, f"_tools.mnnconvert(argv list) crashed: {runs[name][-500:]}"
    assert (tmp_path / "ok.mnn").stat().st_size > 0, f"_tools.mnnconvert wrote no model: {runs['ok'][-500:]}"
    assert "Converted Failed" not in runs["ok"]
    assert "Converted Failed" in runs["bad"], "MNNConvert no longer logs 'Converted Failed' on a refusal"
    m = _UNSUPPORTED.search(runs["bad"])
    assert m and "Frobnicate" in m.group("ops"), f"MNNConvert's 'These Op Not Support:' line changed: {runs['bad']}"


def test_mnn_tools_mnnquant_takes_an_argv_list(tmp_path):
    """``_tools.mnnquant(["quantized.out", fp32, out, config])`` (engines/mnn_quant.py; MNN 3.6's console
    script passes its arguments the old way) quantizes and logs "Quantize model done"."""
    _needs("_tools")
    _conv_relu(tmp_path / "m.onnx")
    code = ("import json, numpy as np; from pathlib import Path\n"
            "from studio.core.engines.mnn_quant import quantize_mnn\n"
            "rng = np.random.default_rng(0)\n"
            "samples = [{'x': rng.random((1, 3, 4, 4), dtype=np.float32)} for _ in range(3)]\n"
            "w = Path('work'); w.mkdir()\n"
            "from studio.core.engines.conversion import ConversionFailed\n"
            "try:\n"
            "    info = quantize_mnn('m.onnx', Path('q.mnn'), samples, w)\n"
            "except ConversionFailed as exc:\n"
            "    info = {'ok': False, 'log': exc.info.get('log', '')}\n"
            "print('INFO' + json.dumps({'ok': info['ok'], 'log': info['log'][-1500:]}))\n")
    r = _python(code, tmp_path)
    assert r.returncode == 0 and "INFO" in r.stdout, \
        f"_tools.mnnquant(argv list) no longer quantizes (MNN {importlib.metadata.version('MNN')}): {r.stderr[-800:]}"
    info = json.loads(r.stdout.split("INFO", 1)[1].splitlines()[0])
    assert info["ok"], f"_tools.mnnquant(argv list) wrote no model or no 'Quantize model done': {info['log']}"
    assert (tmp_path / "q.mnn").stat().st_size > 0


# -- onnx2tf (read from its source: importing it loads TensorFlow) ---------------------------------

def _onnx2tf_root() -> Path:
    _needs("onnx2tf")
    return Path(importlib.util.find_spec("onnx2tf").origin).parent


def test_onnx2tf_convert_takes_the_keywords_the_litert_adapter_passes():
    """engines/litert_convert.py calls ``onnx2tf.convert`` with these keywords (its own and the option sets')."""
    from studio.core.engines import litert_convert as litert

    tree = ast.parse((_onnx2tf_root() / "onnx2tf.py").read_text())
    convert = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "convert")
    params = {a.arg for a in convert.args.args + convert.args.kwonlyargs}
    passed = {"input_onnx_file_path", "output_folder_path", "non_verbose", "copy_onnx_input_output_names_to_tflite",
              "overwrite_input_shape", "not_use_onnxsim", "output_integer_quantized_tflite",
              "custom_input_op_name_np_data_path"}
    adapter = ast.parse(Path(litert.__file__).read_text())
    option_keywords = {k.value for n in ast.walk(adapter) if isinstance(n, ast.Call)
                       and getattr(n.func, "id", None) == "OptionSet" and len(n.args) > 1
                       and isinstance(n.args[1], ast.Dict) for k in n.args[1].keys if isinstance(k, ast.Constant)}
    assert {"keep_nwc_or_nhwc_or_ndhwc_input_names", "output_nms_with_dynamic_tensor"} <= option_keywords
    missing = sorted((passed | option_keywords) - params)
    assert missing == [], f"onnx2tf.convert no longer takes {missing} (onnx2tf {importlib.metadata.version('onnx2tf')})"


def test_litert_interpreter_lists_its_ops_with_their_input_tensors():
    """engines/litert.py reads ``Interpreter._get_ops_details()`` (op_name, inputs) to find inputs read only by a
    RESHAPE; without it every input falls back to the shape rule."""
    _needs("ai_edge_litert")
    from ai_edge_litert.interpreter import Interpreter

    assert callable(getattr(Interpreter, "_get_ops_details", None)), \
        f"ai_edge_litert {importlib.metadata.version('ai-edge-litert')} no longer has Interpreter._get_ops_details"
    # litert_convert.flex_ops reads a .tflite's operator codes with the flatbuffer schema LiteRT ships
    from ai_edge_litert import schema_py_generated as schema

    assert all(callable(getattr(c, m, None)) for c, m in ((schema.Model, "GetRootAsModel"),
               (schema.Model, "OperatorCodes"), (schema.Model, "OperatorCodesLength"), (schema.OperatorCode, "CustomCode"))), \
        f"ai_edge_litert {importlib.metadata.version('ai-edge-litert')} changed schema_py_generated's Model/OperatorCode"


def test_onnx2tf_pseudo_operators_are_the_studios_and_tested_lower_case():
    """engines/litert_convert.py passes ``replace_to_pseudo_operators`` to onnx2tf.convert lower-cased (its command line
    lower-cases them; its op modules test ``"erf" in kwargs['replace_to_pseudo_operators']``), for the names its help
    lists. A rename or a case change there would silently leave Flex ops in the file."""
    _needs("onnx2tf")
    import onnx2tf

    from studio.core.engines.litert_convert import PSEUDO_OPERATORS

    ops = Path(onnx2tf.__file__).parent / "ops"
    tested = " ".join(f.read_text() for f in ops.glob("*.py") if "replace_to_pseudo_operators" in f.read_text())
    missing = [n for n in PSEUDO_OPERATORS
               if f"'{n.lower()}' in kwargs['replace_to_pseudo_operators']" not in tested.replace('"', "'")]
    assert missing == [], f"onnx2tf {importlib.metadata.version('onnx2tf')} no longer tests -rtpo names {missing}"


def test_onnx2tf_sample_download_is_where_the_studio_replaces_it():
    """``litert_convert._offline`` replaces ``download_test_image_data`` in onnx2tf.onnx2tf and
    onnx2tf.utils.common_functions (a conversion must never reach the network); no other module calls it,
    and it still stands for 20 128x128 RGB images (what the replacement returns)."""
    from studio.core.engines.litert_convert import _offline_sample_images

    root = _onnx2tf_root()
    users = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "download_test_image_data" in p.read_text())
    assert users == ["onnx2tf.py", "utils/common_functions.py"], f"download_test_image_data is now used in {users}"
    main = ast.parse((root / "onnx2tf.py").read_text())
    imported = {a.name for n in main.body if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "download_test_image_data" in imported, "onnx2tf.onnx2tf no longer imports download_test_image_data by name"
    source = (root / "utils/common_functions.py").read_text()
    body = source[source.index("def download_test_image_data("):][:600]
    assert "DATA_COUNT = 20" in body and "x128x128x3_float32" in body, "onnx2tf's sample data changed shape"
    assert _offline_sample_images().shape == (20, 128, 128, 3)


def test_onnx2tf_output_names_and_log_lines():
    """The adapter finds ``<stem>_float32.tflite`` / ``_float16`` / ``_integer_quant`` and reads the failing
    node (``ERROR: onnx_op_name: NODE``) and missing ops (``ERROR: OP OP is not yet implemented``) from the log."""
    from studio.core.engines.litert_convert import _NODE, _NOT_IMPLEMENTED

    text = "\n".join(p.read_text(errors="ignore") for p in _onnx2tf_root().rglob("*.py"))
    for suffix in ("_float32.tflite", "_float16.tflite", "_integer_quant.tflite"):
        assert suffix in text, f"onnx2tf no longer writes *{suffix}"
    assert "onnx_op_name:" in text and "OP is not yet implemented" in text, "onnx2tf's error lines changed"
    assert _NODE.search("ERROR: onnx_op_name: /conv1/Conv").group("node") == "/conv1/Conv"
    assert _NOT_IMPLEMENTED.search("ERROR: Frobnicate OP is not yet implemented").group("op") == "Frobnicate"


# -- OpenVINO telemetry -------------------------------------------------------------------------------

def test_openvino_telemetry_methods_the_studio_silences_exist(tmp_path):
    """studio.core.telemetry replaces these methods of ``openvino_telemetry.Telemetry`` by no-ops when the
    module was imported first: each must still exist, or telemetry would go out."""
    methods = ("send_event", "start_session", "end_session", "send_error", "send_stack_trace",
               "send_opt_in_event", "force_shutdown")
    assert all(f'"{m}"' in (ROOT / "studio/core/telemetry.py").read_text() for m in methods)
    # in a fresh interpreter: this one has the module stubbed out already (the studio's default)
    code = ("from openvino_telemetry import Telemetry\n"
            f"print('MISSING', [m for m in {methods!r} if not callable(getattr(Telemetry, m, None))])")
    r = _python(code, tmp_path)
    assert r.returncode == 0, f"openvino_telemetry.Telemetry cannot be imported: {r.stderr[-500:]}"
    assert "MISSING []" in r.stdout, f"openvino_telemetry.Telemetry lost methods the studio silences: {r.stdout}"


def test_openvino_and_nncf_import_without_telemetry(tmp_path):
    """With ``openvino_telemetry`` set to None in sys.modules (the studio's default), openvino and nncf
    still import and compile a model: both must treat the telemetry module as optional."""
    _conv_relu(tmp_path / "m.onnx")
    code = ("import sys; sys.modules['openvino_telemetry'] = None\n"
            "import openvino as ov, nncf\n"
            "c = ov.Core().compile_model(ov.Core().read_model('m.onnx'), 'CPU'); print('OK', len(c.outputs))")
    r = _python(code, tmp_path)
    assert r.returncode == 0 and "OK 1" in r.stdout, f"openvino/nncf need openvino_telemetry now: {r.stderr[-800:]}"


# -- ONNX Runtime internals ---------------------------------------------------------------------------

def test_ort_kernel_registry_binding():
    """diagnostics/ort_check.py reads ``onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()``."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    defs = C.get_all_opkernel_def()
    conv = [k for k in defs if k.op_name == "Conv" and k.domain == "" and k.provider == "CPUExecutionProvider"]
    assert conv, "get_all_opkernel_def() has no CPU Conv kernel"
    k = conv[0]
    assert len(k.version_range) == 2 and int(k.version_range[0]) >= 1
    assert "T" in dict(k.type_constraints) and "tensor(float)" in list(dict(k.type_constraints)["T"])


def test_ort_quantization_internals(tmp_path):
    """passes/quant_tools.py: ``quantization.registry.QDQRegistry``/``QLinearOpsRegistry`` (the op lists),
    ``create_calibrator(...).collect_data/compute_data`` with ``range_value`` per tensor, and
    ``calibrate.save_tensors_data``; passes/convert_fp16.py: ``transformers.float16``."""
    from onnxruntime.quantization import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.registry import QDQRegistry, QLinearOpsRegistry

    assert {"Conv", "MatMul"} <= set(QDQRegistry) and {"Conv", "MatMul"} <= set(QLinearOpsRegistry)
    params = inspect.signature(create_calibrator).parameters
    assert {"augmented_model_path", "calibrate_method", "use_external_data_format"} <= set(params)

    model = _conv_relu(tmp_path / "m.onnx")
    calibrator = create_calibrator(model, list(set(QLinearOpsRegistry) | set(QDQRegistry)),
                                   augmented_model_path=str(tmp_path / "augmented.onnx"),
                                   calibrate_method=CalibrationMethod.MinMax)

    class Reader:
        def __init__(self):
            self.items = [{"x": np.full((1, 3, 4, 4), v, np.float32)} for v in (-1.0, 2.0)]

        def get_next(self):
            return self.items.pop() if self.items else None

    calibrator.collect_data(Reader())
    data = calibrator.compute_data()
    lo, hi = data["x"].range_value
    assert float(np.min(lo)) == -1.0 and float(np.max(hi)) == 2.0
    from onnxruntime.quantization.calibrate import save_tensors_data

    save_tensors_data(data, tmp_path / "calibration.json")
    assert (tmp_path / "calibration.json").stat().st_size > 0

    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    assert "Resize" in DEFAULT_OP_BLOCK_LIST or len(DEFAULT_OP_BLOCK_LIST) > 5
    assert {"keep_io_types", "op_block_list", "node_block_list", "disable_shape_infer"} <= \
        set(inspect.signature(convert_float_to_float16).parameters)


# -- onnx, onnxsim, onnxslim, NNCF ------------------------------------------------------------------

def test_onnx_reference_evaluator_runs_an_oprun_subclass_by_domain():
    """diagnostics/reference_ops.py: ``OpRun`` subclasses named after the op type, with ``op_domain`` and
    ``_run``, passed as ``ReferenceEvaluator(model, new_ops=[...])``."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    class Twice(OpRun):
        op_domain = "acme"

        def _run(self, x):
            return (x * 2,)

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="acme")], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])
    (out,) = ReferenceEvaluator(m, new_ops=[Twice]).run(None, {"x": np.array([1.0, 3.0], np.float32)})
    assert out.tolist() == [2.0, 6.0]


def test_onnxsim_and_onnxslim_calls(tmp_path):
    """passes/onnxsim_pass.py and studio/peers/compare.py: ``onnxsim.simplify(m, check_n=0, perform_optimization=True)``
    -> (model, ok); ``onnxslim.slim(ModelProto)`` -> ModelProto; onnx2tf runs the ``onnxsim`` program."""
    import onnxsim
    import onnxslim

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])],
                          "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    simplified, ok = onnxsim.simplify(m, check_n=0, perform_optimization=True)
    assert ok is True and [n.op_type for n in simplified.graph.node] == ["Relu"]
    slim = onnxslim.slim(m)
    assert isinstance(slim, onnx.ModelProto) and [n.op_type for n in slim.graph.node] == ["Relu"]
    # passes/onnxsim_pass.run_tool: the fold-size limits of the second, size-capped try, and onnxslim
    # without shape inference for a model with no default-domain opset (T8).
    assert [n.op_type for n in onnxslim.slim(m, size_threshold=1024, no_shape_infer=True).graph.node] == ["Relu"]
    assert [n.op_type for n in onnxsim.simplify(m, check_n=0, tensor_size_threshold="1024B")[0].graph.node] == ["Relu"]
    from studio.core.engines.litert_convert import _onnxsim_cli

    assert _onnxsim_cli() is not None, "the onnxsim program is not next to this interpreter nor on PATH"


def test_nncf_accuracy_control_keywords():
    """studio/precision/nncf_int8.py calls these NNCF names with these keywords."""
    import nncf

    params = set(inspect.signature(nncf.quantize_with_accuracy_control).parameters)
    assert {"max_drop", "drop_type", "subset_size", "advanced_accuracy_restorer_parameters"} <= params
    assert "ranking_subset_size" in {f for f in getattr(nncf.AdvancedAccuracyRestorerParameters,
                                                        "__dataclass_fields__", {})}
    assert nncf.DropType.ABSOLUTE is not None and "subset_size" in inspect.signature(nncf.quantize).parameters


def test_weight_only_quantizer_keywords():
    """passes/quantize_weight_only.py calls ORT's MatMulNBitsQuantizer / DefaultWeightOnlyQuantConfig with these
    keywords (bits=8 included) and ``model.save_model_to_file``; studio/precision/nncf_weights.py calls
    ``nncf.compress_weights`` with mode/group_size/ratio and the INT4/INT8 modes by these names."""
    import nncf
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    want = {"bits", "block_size", "is_symmetric", "accuracy_level", "nodes_to_exclude", "algo_config"}
    assert want <= set(inspect.signature(MatMulNBitsQuantizer.__init__).parameters)
    assert {"bits", "block_size", "is_symmetric", "accuracy_level"} <= set(
        inspect.signature(DefaultWeightOnlyQuantConfig.__init__).parameters)
    assert {"mode", "group_size", "ratio"} <= set(inspect.signature(nncf.compress_weights).parameters)
    assert {"INT4_SYM", "INT4_ASYM", "INT8_SYM", "INT8_ASYM"} <= set(nncf.CompressWeightsMode.__members__)


# -- Streamlit ---------------------------------------------------------------------------------------

def test_streamlit_app_and_components_v2():
    """studio/ui/onnx_studio_server.py serves ``st.App(path, middleware=[...])``; widgets.py declares the
    graph frame with ``st.components.v2.component(name, html=, js=, isolate_styles=)``; the code editor is
    ``code_editor.code_editor``."""
    import streamlit as st

    assert "middleware" in inspect.signature(st.App).parameters, "st.App no longer takes middleware="
    assert {"html", "js", "isolate_styles"} <= set(inspect.signature(st.components.v2.component).parameters)
    from code_editor import code_editor

    assert callable(code_editor)


# -- dask.distributed ----------------------------------------------------------------------------------

def test_distributed_remove_worker_event_and_client_calls():
    """studio/batch/retrying.py watches the scheduler's ``remove-worker`` event on the "all" topic (its keys
    ``processing-tasks`` and ``lost-scattered-tasks`` name what ran on the dead worker), subscribes with
    ``Client.subscribe_topic``, announces starts with ``Client.log_event`` and ``Worker.get_current_task``,
    and notices a reconnect by ``Client.scheduler_comm``."""
    from distributed import Client, Worker
    from distributed.scheduler import Scheduler

    source = inspect.getsource(Scheduler.remove_worker)
    for needle in ('"remove-worker"', '"processing-tasks"', '"lost-scattered-tasks"', '"all"'):
        assert needle in source, f"Scheduler.remove_worker no longer logs {needle}"
    assert all(callable(getattr(Client, n, None)) for n in ("subscribe_topic", "log_event", "scheduler_info"))
    assert "scheduler_comm" in {n for n, _ in inspect.getmembers(Client)} or \
        "scheduler_comm" in inspect.getsource(Client.__init__)
    assert callable(getattr(Worker, "get_current_task", None))
