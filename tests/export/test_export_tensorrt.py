"""TensorRT target, without TensorRT: profiles from the model's dynamic dims and --shapes,
precision flags, the trtexec command, and the generated build_engine.py run in a
subprocess (its config, its message when TensorRT is absent, and the calls it makes
against a recording stand-in of TensorRT's documented Python API)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from studio import api
from studio.core.errors import StudioError
from studio.core.types import TensorInfo
from studio.export.options import ShapeRange
from studio.export.tensorrt import derive_profiles, trtexec_args, trtexec_command
from tests.conftest import SAMPLES
from tests.export.conftest import conv_model

HERE = Path(__file__).resolve().parent


def _info(name, *shape):
    return TensorInfo(name, "float32", tuple(shape))


def test_profiles_from_dynamic_dims():
    inputs = [_info("ids", "batch", "seq"), _info("mask", "batch", "seq"), _info("static", 1, 4)]
    profiles, notes = derive_profiles(inputs, {}, {"ids": (1, 16), "mask": (1, 16), "static": (1, 4)}, max_batch=8)
    assert set(profiles) == {"ids", "mask"}                       # static inputs need no profile
    assert profiles["ids"] == ShapeRange((1, 1), (1, 16), (8, 64))  # batch to max_batch, sequence to 4 x opt
    assert profiles["mask"] == profiles["ids"]                     # a shared dim gets one range
    assert len(notes) == 2 and all("--shapes" in n for n in notes)


def test_user_shapes_win_and_bind_shared_dims():
    inputs = [_info("ids", "batch", "seq"), _info("mask", "batch", "seq")]
    user = {"ids": ShapeRange((1, 8), (4, 128), (16, 512))}
    profiles, notes = derive_profiles(inputs, user, {"ids": (4, 128), "mask": (4, 128)}, max_batch=8)
    assert profiles["ids"] == user["ids"] and profiles["mask"] == user["ids"]


def test_trtexec_flags_and_quoted_names():
    config = {"onnx": "model.onnx", "plan": "model.plan", "strongly_typed": False, "fp16": True,
              "plugins": ["plugins/libgrid.so"], "workspace_mib": 2048,
              "profiles": {"input:0": {"min": [1, 3], "opt": [4, 3], "max": [8, 3]}, "b": {"min": [1], "opt": [1],
                                                                                          "max": [2]}}}
    args = trtexec_args(config)
    assert args[:2] == ["--onnx=model.onnx", "--saveEngine=model.plan"]
    assert "--minShapes='input:0':1x3,b:1" in args and "--maxShapes='input:0':8x3,b:2" in args
    assert "--fp16" in args and "--stronglyTyped" not in args
    assert "--dynamicPlugins=plugins/libgrid.so" in args and "--memPoolSize=workspace:2048" in args
    qdq = trtexec_args({**config, "strongly_typed": True})
    assert "--stronglyTyped" in qdq and "--fp16" not in qdq       # explicit quantization: no precision flags
    with pytest.raises(StudioError, match="single quote"):
        trtexec_args({**config, "profiles": {"it's": {"min": [1], "opt": [1], "max": [1]}}})
    # The shell line quotes what the shell would otherwise split or glob.
    assert "'--minShapes='\"'\"'input:0'\"'\"':1x3,b:1'" in trtexec_command(config)


def _script(bundle: Path) -> Path:
    return bundle / "tensorrt" / "build_engine.py"


def _run(script: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=script.parent)


def test_build_script_config_matches_the_model(cnn_export):
    script = _script(cnn_export.bundle)
    shown = json.loads(_run(script, "--show-config").stdout)
    assert shown["profiles"] == {"input": {"min": [1, 3, 32, 32], "opt": [1, 3, 32, 32], "max": [8, 3, 32, 32]}}
    assert shown["fp16"] is False and shown["strongly_typed"] is False and shown["plugins"] == []
    assert Path(shown["onnx"]) == script.parent / "model.onnx" and Path(shown["plan"]) == script.parent / "model.plan"
    over = json.loads(_run(script, "--show-config", "--shapes", "input=2x3x32x32:4x3x32x32:16x3x32x32", "--fp16",
                           "--plugin", "/opt/libx.so").stdout)
    assert over["profiles"]["input"]["max"] == [16, 3, 32, 32] and over["fp16"] is True
    assert over["plugins"] == ["/opt/libx.so"]
    bad = _run(script, "--shapes", "nope=1x2")
    assert bad.returncode == 2 and "not an input" in bad.stderr
    # Same settings as trtexec's command line.
    sh = (cnn_export.bundle / "tensorrt" / "build_with_trtexec.sh").read_text()
    assert "--minShapes=input:1x3x32x32 --optShapes=input:1x3x32x32 --maxShapes=input:8x3x32x32" in sh


def test_build_script_says_what_it_needs_without_tensorrt(cnn_export):
    proc = _run(_script(cnn_export.bundle))
    assert proc.returncode == 3
    assert "TensorRT is not installed" in proc.stderr and "NVIDIA GPU" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (cnn_export.bundle / "tensorrt" / "model.plan").exists()


def _fake_env(tmp_path: Path) -> dict:
    pkg = tmp_path / "fake" / "tensorrt"
    pkg.mkdir(parents=True)
    shutil.copy(HERE / "fake_tensorrt.py", pkg / "__init__.py")
    return {"PYTHONPATH": str(tmp_path / "fake"), "FAKE_TRT_LOG": str(tmp_path / "calls.json")}


def test_build_script_calls_the_tensorrt_api_as_documented(cnn_export, tmp_path):
    """With a recording stand-in for `tensorrt`: the profile, workspace, flags and plugin loading
    the script asks for (TensorRT itself is not verified here)."""
    bundle = tmp_path / "b"
    shutil.copytree(cnn_export.bundle / "tensorrt", bundle)
    env = _fake_env(tmp_path)
    proc = _run(bundle / "build_engine.py", "--fp16", "--plugin", str(bundle / "profiles.json"), env=env)
    assert proc.returncode == 0, proc.stderr
    calls = json.loads((tmp_path / "calls.json").read_text())
    names = [c[0] for c in calls]
    assert ["load_library", str(bundle / "profiles.json")] in calls
    assert ["create_network", 0] in calls                       # weakly typed FP32 network
    assert ["set_shape", "input", [1, 3, 32, 32], [1, 3, 32, 32], [8, 3, 32, 32]] in calls
    assert ["set_memory_pool_limit", "WORKSPACE", 4096 << 20] in calls
    assert ["set_flag", "FP16"] in calls
    assert names.index("add_optimization_profile") < names.index("build_serialized_network")
    assert (bundle / "model.plan").read_bytes() == b"fake-plan"


def test_qdq_model_builds_strongly_typed(qdq_model, tmp_path):
    r = api.export(api.load(qdq_model), "tensorrt", tmp_path / "out", zip=False)
    cfg = json.loads((r.bundle / "tensorrt" / "profiles.json").read_text())
    assert cfg["strongly_typed"] is True and cfg["fp16"] is False and cfg["profiles"] == {}
    assert "--stronglyTyped" in (r.bundle / "tensorrt" / "build_with_trtexec.sh").read_text()
    assert any("explicit quantization" in n for n in r.target("tensorrt").notes)
    env = _fake_env(tmp_path)
    proc = _run(r.bundle / "tensorrt" / "build_engine.py", env=env)
    assert proc.returncode == 0, proc.stderr
    calls = json.loads((tmp_path / "calls.json").read_text())
    assert ["create_network", 1 << 5] in calls                  # NetworkDefinitionCreationFlag.STRONGLY_TYPED
    assert not any(c[0] == "set_flag" for c in calls) and not any(c[0] == "set_shape" for c in calls)


def test_target_is_labelled_not_verified_and_ships_plugins(tmp_path):
    plugin = tmp_path / "libgrid sampler.so"
    plugin.write_bytes(b"\x7fELF fake plugin")
    r = api.export(api.load(SAMPLES / "mmdeploy_grid_sampler.onnx"), "tensorrt", tmp_path / "out", plugins=[plugin],
                   zip=False)
    t = r.target("tensorrt")
    assert t.status == "not verified" and "not built or verified here" in t.message
    assert (r.bundle / "tensorrt" / "plugins" / "libgrid_sampler.so").read_bytes() == plugin.read_bytes()
    cfg = json.loads((r.bundle / "tensorrt" / "profiles.json").read_text())
    assert cfg["plugins"] == ["plugins/libgrid_sampler.so"] and cfg["custom_ops"] == ["mmdeploy::grid_sampler"]
    assert "--dynamicPlugins=plugins/libgrid_sampler.so" in (r.bundle / "tensorrt" / "build_with_trtexec.sh").read_text()
    onnx_art = next(a for a in t.artifacts if a.kind == "tensorrt-onnx")
    assert onnx_art.verification.status == "not verified" and "plugins" in onnx_art.verification.message


def test_model_strings_cannot_inject_code_into_the_script(tmp_path):
    """Input names go into build_engine.py as a JSON string literal: quotes, newlines and
    triple quotes stay data."""
    import onnx

    path = conv_model(tmp_path / "m" / "convnet.onnx")
    model = onnx.load(path)
    evil = "x'''\"\"\"\nimport os; os.system('touch PWNED') #"
    for n in model.graph.node:
        n.input[:] = [evil if i == "x" else i for i in n.input]
    model.graph.input[0].name = evil
    onnx.save(model, path)
    r = api.export(api.load(path), "tensorrt", tmp_path / "out", zip=False)
    script = r.bundle / "tensorrt" / "build_engine.py"
    ast.parse(script.read_text())
    shown = json.loads(_run(script, "--show-config").stdout)
    assert list(shown["profiles"]) == [evil]
    assert not (script.parent / "PWNED").exists()
