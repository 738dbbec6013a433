"""Export of a model with a custom op: the ONNX Runtime custom-op library (``--ort-custom-ops``) and the
OpenVINO extension (``--ov-extension``) built by ``onnx-studio plugin --build`` are loaded wherever an artifact
is optimized, converted, reloaded and verified, recorded in the manifest and shipped next to the artifacts
(Triton's ORT model loads its library through ``model_operations``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from studio import api
from studio.core.errors import StudioError
from studio.plugins import toolchain
from tests.conftest import ROOT, SAMPLES
from tests.plugins.plugin_models import require_tool

MODEL = SAMPLES / "mmdeploy_grid_sampler.onnx"
OP = "mmdeploy::grid_sampler"


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    for tool in (toolchain.cmake(), toolchain.cxx_compiler(), toolchain.ort_include_dir(),
                 toolchain.openvino_cmake_dir()):
        require_tool(tool)
    handle = api.load(MODEL)
    sig = api.plugin_signature(handle, OP)
    scaffold = api.scaffold_plugin(handle, OP, "ort-cpp,openvino-cpp", tmp_path_factory.mktemp("plugins"),
                                   signature=sig)
    from studio.plugins.build import build_package

    out = {}
    for target in ("ort-cpp", "openvino-cpp"):
        folder = scaffold.root / target
        built = build_package(folder, target)
        assert built.built, built.message + "\n" + built.log_tail
        out[target] = folder / built.library
    return out


def test_missing_library_is_a_usage_error(tmp_path):
    with pytest.raises(StudioError, match="does not exist"):
        api.export(api.load(MODEL), "ort", tmp_path, ort_custom_ops=[tmp_path / "nope.so"])


@pytest.mark.slow
def test_custom_op_model_exports_with_its_libraries(libs, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "studio", "export", str(MODEL), "--target", "ort,openvino,triton",
                           "-o", str(tmp_path / "out"), "--no-zip", "--json",
                           "--ort-custom-ops", str(libs["ort-cpp"]), "--ov-extension", str(libs["openvino-cpp"])],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    targets = {t["target"]: t for t in result["targets"]}
    for name in ("onnxruntime", "openvino", "triton"):
        assert targets[name]["status"] == "passed", targets[name]
    arts = {a["path"]: a for t in result["targets"] for a in t["artifacts"]}
    ort_lib, ov_lib = libs["ort-cpp"].name, libs["openvino-cpp"].name
    assert f"onnxruntime/custom_ops/{ort_lib}" in arts and f"openvino/extensions/{ov_lib}" in arts
    assert arts["onnxruntime/model.onnx"]["verification"]["status"] == "passed"
    assert arts["openvino/model.xml"]["verification"]["status"] == "passed"
    bundle = tmp_path / "out" / next(p.name for p in (tmp_path / "out").iterdir() if p.is_dir())
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["options"]["ort_custom_ops"] == [ort_lib] and manifest["options"]["ov_extensions"] == [ov_lib]
    doc = json.loads((bundle / "onnxruntime" / "session_options.json").read_text())
    assert doc["custom_ops_libraries"] == [f"custom_ops/{ort_lib}"]
    repo = bundle / "triton" / "model_repository"
    ort_model = next(repo.glob("*_onnxruntime"))
    assert (ort_model / "custom_ops" / ort_lib).is_file()
    assert f'op_library_filename: "/models/{ort_model.name}/custom_ops/{ort_lib}"' in \
        (ort_model / "config.pbtxt").read_text()
    assert (next(repo.glob("*_openvino")) / "extensions" / ov_lib).is_file()
    assert "cannot load it" in (repo.parent / "README.md").read_text()
