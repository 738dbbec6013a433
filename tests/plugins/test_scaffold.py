"""Generated packages: every file a package's README names exists, names/attributes/port counts are filled
in, the Python harnesses pass on the captured samples, CMake files are well-formed, unknown ops get honest
TODOs, and nothing is written outside the output folder."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
import io

import pytest

from studio import api
from studio.core.errors import StudioError
from studio.plugins.scaffold import TARGETS, expand_targets, zip_folder
from tests.conftest import save
from tests.plugins.plugin_models import OP, unknown_op_model


@pytest.fixture(scope="module")
def mm_scaffold(mm_handle, mm_sig, tmp_path_factory):
    out = tmp_path_factory.mktemp("plugins")
    return api.scaffold_plugin(mm_handle, OP, "all", out, signature=mm_sig)


def _readme_files(readme: str) -> list[str]:
    section = readme.split("## Files", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^- `([^`]+)`", section, re.M)


def test_every_file_a_readme_names_exists(mm_scaffold):
    assert [p.target for p in mm_scaffold.packages] == list(TARGETS)
    for package in mm_scaffold.packages:
        folder = mm_scaffold.root.parent / package.folder
        readme = (folder / "README.md").read_text()
        named = _readme_files(readme)
        assert len(named) >= 5, (package.target, named)
        for rel in named:
            assert (folder / rel).is_file(), f"{package.target}: README names {rel}, which is missing"
        # ...and every file in the package is named in the README.
        on_disk = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
        assert on_disk == set(named), (package.target, on_disk ^ set(named))
        assert "samples/sample_0.npz" in named


def test_sources_carry_the_ops_names_attributes_and_counts(mm_scaffold):
    root = mm_scaffold.root
    ort_cc = (root / "ort-cpp" / "grid_sampler_op.cc").read_text()
    assert 'CreateLiteCustomOp<GridSamplerKernel>("grid_sampler", "CPUExecutionProvider")' in ort_cc
    assert 'Ort::CustomOpDomain{ "mmdeploy" }' in ort_cc
    for attr in ("interpolation_mode", "padding_mode", "align_corners"):
        assert f'"{attr}"' in ort_cc
    assert ort_cc.count("const Ort::Custom::Tensor<float>&") == 2 and "Ort::Custom::Tensor<float>& output" in ort_cc
    ov_ext = (root / "openvino-cpp" / "extension.cpp").read_text()
    assert 'ConversionExtension>("grid_sampler", "mmdeploy", convert_grid_sampler)' in ov_ext
    assert "OPENVINO_CREATE_EXTENSIONS" in ov_ext
    ov_op = (root / "openvino-cpp" / "grid_sampler_op.cpp").read_text()
    assert "ov::Shape{x[0], x[1], g[1], g[2]}" in ov_op and "ov::Shape{x[0], x[1], g[1], g[2], g[3]}" in ov_op  # 4-D, 5-D
    trt_h = (root / "tensorrt" / "grid_sampler_plugin.h").read_text()
    for iface in ("IPluginV3", "IPluginV3OneCore", "IPluginV3OneBuild", "IPluginV3OneRuntime", "IPluginCreatorV3One"):
        assert f"public nvinfer1::{iface}" in trt_h
    assert "public nvinfer1::IPluginV2" not in trt_h
    assert 'kGridSamplerName = "grid_sampler"' in trt_h and "getNbOutputs() const noexcept override { return 1; }" in trt_h
    trt_cpp = (root / "tensorrt" / "grid_sampler_plugin.cpp").read_text()
    assert "getCreators(int32_t& nbCreators)" in trt_cpp
    assert trt_cpp.count('mFields.emplace_back("interpolation_mode"') == 2
    assert "NOT COMPILED HERE" in (root / "tensorrt" / "README.md").read_text()
    assert "--dynamicPlugins" in (root / "tensorrt" / "README.md").read_text()
    assert "pip install tensorrt numpy onnx torch" in (root / "tensorrt" / "README.md").read_text()
    qdp = (root / "tensorrt" / "grid_sampler_plugin.py").read_text()
    assert '@trtp.register(PLUGIN_ID)' in qdp and "PLUGIN_ID = 'mmdeploy::grid_sampler'" in qdp
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), str(path))     # every generated Python file parses


def _balanced(text: str) -> bool:
    depth = 0
    for ch in re.sub(r'"[^"]*"', "", re.sub(r"#.*", "", text)):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return False
    return depth == 0


def test_cmake_files_are_well_formed(mm_scaffold):
    for target in ("ort-cpp", "openvino-cpp", "tensorrt"):
        text = (mm_scaffold.root / target / "CMakeLists.txt").read_text()
        assert _balanced(text), target
        assert re.search(r"^cmake_minimum_required\(VERSION 3\.\d+\)", text, re.M)
        assert re.search(r"^add_library\(grid_sampler_\w+ SHARED ", text, re.M)
        for source in re.search(r"add_library\(\S+ SHARED ([^)]*)\)", text).group(1).split():
            assert (mm_scaffold.root / target / source).is_file(), (target, source)
    assert "LANGUAGES CXX CUDA" in (mm_scaffold.root / "tensorrt" / "CMakeLists.txt").read_text()


@pytest.mark.parametrize("target,script", [("ort-python", "test_op.py"), ("openvino-python", "test_extension.py")])
def test_python_harnesses_pass_on_the_samples(mm_scaffold, target, script):
    folder = mm_scaffold.root / target
    proc = subprocess.run([sys.executable, script], cwd=folder, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


def test_unknown_op_gets_honest_todos(tmp_path):
    model = save(unknown_op_model(), tmp_path / "unknown.onnx")
    handle = api.load(model)
    sc = api.scaffold_plugin(handle, "acme::Swizzle", "all", tmp_path / "out")
    assert not any(p.complete for p in sc.packages)
    root = sc.root
    assert 'raise NotImplementedError("TODO: implement acme::Swizzle in compute()")' in \
        (root / "ort-python" / "Swizzle_op.py").read_text()
    body = (root / "ort-python" / "Swizzle_op.py").read_text()
    assert "def compute(input0, *, alpha=0.5, axes=None, tag='x'):" in body
    cc = (root / "ort-cpp" / "Swizzle_op.cc").read_text()
    assert "TODO: shape inference" in cc and "ORT_NOT_IMPLEMENTED" in cc
    assert 'attribute_or(info, "alpha", 0.5f)' in cc and 'attribute_or(info, "tag", std::string("x"))' in cc
    assert "TODO: shape inference for acme::Swizzle" in (root / "openvino-cpp" / "Swizzle_op.cpp").read_text()
    assert "skeleton: shape inference and the kernel are marked TODO" in (root / "tensorrt" / "README.md").read_text()
    # Running the TODO body gives a clear message naming the op.
    result = api.run_python_op(handle, "acme::Swizzle", root / "ort-python" / "Swizzle_op.py")
    assert result.status == "error" and "raised NotImplementedError: TODO: implement acme::Swizzle" in result.message
    # A real body runs (list attributes reach it too); with no reference it is reported as unverified.
    code = ("import numpy as np\n"
            "def compute(input0, *, alpha=0.5, axes=None, tag='x'):\n"
            "    assert axes == [1, 2] and tag == 'x'\n"
            "    return (input0 * alpha).astype(np.float32)\n")
    result = api.run_python_op(handle, "acme::Swizzle", code)
    assert result.status == "unverified" and "no reference output" in result.message, result.message


def test_hostile_op_names_stay_inside_the_output_folder(tmp_path):
    from onnx import TensorProto, helper

    node = helper.make_node("../../x y", ["x"], ["y"], domain="../evil")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("../evil", 1)])
    handle = api.load(save(model, tmp_path / "m" / "hostile.onnx"))
    out = tmp_path / "out"
    sc = api.scaffold_plugin(handle, "../evil::../../x y", "all", out)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert all(p.is_relative_to(out) or p.is_relative_to(tmp_path / "m") for p in written)
    assert sc.root.parent == out
    for path in sc.root.rglob("*.py"):
        ast.parse(path.read_text())


def test_targets_and_zip(mm_scaffold):
    assert expand_targets("all") == TARGETS
    assert expand_targets("ort-cpp,tensorrt") == ("ort-cpp", "tensorrt")
    with pytest.raises(StudioError, match="unknown plugin target 'cuda'"):
        expand_targets("cuda")
    names = zipfile.ZipFile(io.BytesIO(zip_folder(mm_scaffold.root))).namelist()
    assert "mmdeploy_grid_sampler/tensorrt/grid_sampler_plugin.h" in names
    assert not any("/build/" in n for n in names)


def _harness(folder, script, *args):
    return subprocess.run([sys.executable, script, *map(str, args)], cwd=folder, capture_output=True, text=True,
                          timeout=120)


def test_custom_op_without_reference_keeps_its_samples(tmp_path):
    """No reference for my.dom::Foo: the captured inputs are still written, every harness runs the op on them,
    checks the outputs against the declared dtype/shape and says "ran, not compared (no reference)"."""
    from tests.plugins.plugin_models import FOO_COMPUTE, FOO_COMPUTE_F64, FOO_CONVERT, custom_op_model

    handle = api.load(save(custom_op_model(), tmp_path / "foo.onnx"))
    sig = api.plugin_signature(handle, "my.dom::Foo", dims={"N": 2})
    assert len(sig.samples) == 1 and sig.samples[0].outputs is None
    sc = api.scaffold_plugin(handle, "my.dom::Foo", "all", tmp_path / "out", signature=sig,
                             impl=FOO_COMPUTE)
    import numpy as np

    for target in TARGETS:
        folder = sc.root / target
        with np.load(folder / "samples" / "sample_0.npz") as data:
            assert data.files == ["in0"] and data["in0"].shape == (2, 3)
        readme = (folder / "README.md").read_text()
        assert "could not be captured" not in readme and "ran, not compared (no reference)" in readme
        for script in folder.glob("test_*.py"):     # C++/TensorRT harnesses are only compiled here
            ast.parse(script.read_text())
            assert "OUTPUTS = [{'dtype': 'float32', 'shapes': [['N', 3]" in script.read_text()
    proc = _harness(sc.root / "ort-python", "test_op.py")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ran, not compared (no reference)" in proc.stdout
    # The declared dtype is still checked.
    (sc.root / "ort-python" / "Foo_op.py").write_text(FOO_COMPUTE_F64)
    proc = _harness(sc.root / "ort-python", "test_op.py")
    assert proc.returncode != 0 and "float64, declared float32" in proc.stderr
    (sc.root / "openvino-python" / "Foo_extension.py").write_text(FOO_CONVERT)
    proc = _harness(sc.root / "openvino-python", "test_extension.py")
    assert proc.returncode == 0 and "ran, not compared (no reference)" in proc.stdout, proc.stderr[-2000:]
    # The studio's own runs say the same, and are not failures.
    result = api.run_python_op(handle, "my.dom::Foo", FOO_COMPUTE, signature=sig)
    assert result.status == "unverified" and result.message.startswith("ran, not compared (no reference)")
    assert result.samples[0].ok
    result = api.run_python_op(handle, "my.dom::Foo", FOO_CONVERT, target="openvino-python", signature=sig)
    assert result.status == "unverified", result.message
    result = api.run_python_op(handle, "my.dom::Foo", FOO_COMPUTE_F64, signature=sig)
    assert result.status == "error" and "declared float32" in result.message
