"""C++ packages compiled here and checked against the reference (slow tier: CMake + g++).

* OpenVINO: the extension is built against the openvino wheel's headers and CMake config, loaded with
  ``core.add_extension``, and every GridSample mode x padding x align_corners matches the reference, one-node
  and whole model; (d) of the worked example.
* ONNX Runtime: the custom-op library is built against ONNX Runtime's public headers (fetched from npm by
  scripts/fetch_ort_headers.sh; the pip wheel has none) and loaded into the pip runtime with
  ``register_custom_ops_library`` -- the C API is ABI-stable, so older headers load into a newer runtime.

Builds are cached per test session.
"""

from __future__ import annotations

import pytest

from studio import api
from studio.plugins import toolchain
from studio.plugins.build import build_package, check_library
from tests.plugins.plugin_models import OP, require_tool, scaffold_all_modes

pytestmark = pytest.mark.slow


def _built_and_checked(modes, target: str, samples: int):
    """Build the scaffold's ``target`` package here and check the library against the reference: every
    one of ``samples`` one-node models and the whole model match. The package folder and the build."""
    require_tool(toolchain.cmake())
    require_tool(toolchain.cxx_compiler())
    require_tool(toolchain.openvino_cmake_dir() if target == "openvino-cpp" else toolchain.ort_include_dir())
    handle, sig, scaffold = modes
    folder = scaffold.root.parent / scaffold.package(target).folder
    built = build_package(folder, target)
    assert built.built, built.message + "\n" + built.log_tail
    check = check_library(handle, sig, target, folder / built.library)
    assert check, check.message
    assert len(check.samples) == samples and all(s.ok for s in check.samples)
    assert check.model["ok"] and len(check.model["outputs"]) == samples
    return folder, built, check


@pytest.fixture(scope="module")
def modes(tmp_path_factory):
    return scaffold_all_modes(tmp_path_factory.mktemp("modes"), rank=4, samples=18, targets="ort-cpp,openvino-cpp")


@pytest.mark.parametrize("target", ["openvino-cpp", "ort-cpp"])
def test_cpp_package_builds_and_matches_every_mode(modes, target):
    _, _, check = _built_and_checked(modes, target, samples=18)
    # bilinear + zeros, align_corners 0 and 1: exact to float32 rounding.
    exact = [s for s in check.samples if "_m0_p0_" in s.node]
    assert exact, [s.node for s in check.samples]
    for s in exact:
        assert s.max_abs is not None and s.max_abs < 1e-6, (s.node, s.max_abs)


def test_worked_example_openvino_cpp_via_facade(mm_handle, mm_sig, tmp_path):
    """(d): the sample model runs in OpenVINO with the C++ extension built from the generated package."""
    require_tool(toolchain.cmake())
    require_tool(toolchain.openvino_cmake_dir())
    scaffold = api.scaffold_plugin(mm_handle, OP, "openvino-cpp,tensorrt", tmp_path, signature=mm_sig)
    result = api.build_plugin(mm_handle, scaffold, "openvino-cpp", signature=mm_sig)
    assert result, result.message
    assert result.check.model["ok"]
    trt = api.build_plugin(mm_handle, scaffold, "tensorrt", signature=mm_sig)
    assert not trt.built and "not compiled here" in trt.message


def test_build_failure_is_one_line(mm_handle, mm_sig, tmp_path):
    require_tool(toolchain.cmake())
    require_tool(toolchain.openvino_cmake_dir())
    scaffold = api.scaffold_plugin(mm_handle, OP, "openvino-cpp", tmp_path, signature=mm_sig)
    source = scaffold.root / "openvino-cpp" / "grid_sampler_op.cpp"
    source.write_text(source.read_text().replace("return true;", "return true", 1))
    result = build_package(source.parent, "openvino-cpp")
    assert not result.built and result.message.startswith("build failed:") and "\n" not in result.message
    assert "error" in result.log_tail


@pytest.fixture(scope="module")
def modes5(tmp_path_factory):
    return scaffold_all_modes(tmp_path_factory.mktemp("modes5"), rank=5, samples=12, targets="ort-cpp,openvino-cpp")


@pytest.mark.parametrize("target", ["openvino-cpp", "ort-cpp"])
def test_cpp_package_handles_5d_in_every_mode(modes5, target):
    """The shared C++ kernel samples 5-D (N,C,D,H,W) inputs: bilinear and nearest, every padding and
    align_corners, one-node and whole model; the package's own harness passes with the built library."""
    import subprocess
    import sys

    folder, built, _ = _built_and_checked(modes5, target, samples=12)
    script = "test_extension.py" if target == "openvino-cpp" else "test_op.py"
    proc = subprocess.run([sys.executable, script, str(folder / built.library)], cwd=folder, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr[-2000:]


def test_openvino_cpp_runs_the_5d_gridsample_sample_model(tmp_path):
    """OpenVINO rejects 5-D GridSample; the C++ extension generated for it makes the model run."""
    from tests.conftest import SAMPLES

    require_tool(toolchain.cmake())
    require_tool(toolchain.openvino_cmake_dir())
    handle = api.load(SAMPLES / "gridsample_5d.onnx")
    sig = api.plugin_signature(handle, "::GridSample")
    scaffold = api.scaffold_plugin(handle, "::GridSample", "openvino-cpp", tmp_path, signature=sig)
    result = api.build_plugin(handle, scaffold, "openvino-cpp", signature=sig)
    assert result, result.message + "\n" + result.log_tail
    assert result.check.model["ok"]
