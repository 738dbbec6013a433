"""Export files generated from model text (RELIABILITY R31): Triton's config.pbtxt, TensorRT's build_engine.py
and trtexec script, and the Markdown report keep hostile tensor names as data, never as structure."""

from __future__ import annotations

import ast
import shlex

import pytest

from studio.core.types import TensorInfo
from studio.export import report, tensorrt, triton
from tests.plugins.codegen_checks import HOSTILE, markdown_structure, python_structure
from tests.requirements import require_module

NAMES = [v for k, v in sorted(HOSTILE.items()) if k not in ("nul",)] + ["in:0,x"]


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_triton_config_keeps_names_as_data(name):
    require_module("tritonclient")
    inputs = (TensorInfo(name, "float32", ("N", 3)),)
    outputs = (TensorInfo(name + "_out}\n}", "float32", ("N", 3)),)
    plan = triton.io_plan(inputs, outputs, 8)
    cfg = triton.build_config("m", "onnxruntime", plan, instances=1, kind="cpu", preferred=[4], queue_delay_us=100)
    parsed = triton.parse_config(triton.config_text(cfg))
    assert [i.name for i in parsed.input] == [name] and [o.name for o in parsed.output] == [outputs[0].name]
    assert not triton.config_problems(parsed, "m", "onnxruntime", plan)


@pytest.mark.parametrize("name", NAMES, ids=range(len(NAMES)))
def test_build_engine_script_keeps_names_as_data(name):
    config = {"onnx": "model.onnx", "plan": "model.plan", "inputs": [{"name": name, "shape": [-1, 3]}],
              "profiles": {name: {"min": [1, 3], "opt": [4, 3], "max": [8, 3]}}, "fp16": False,
              "strongly_typed": False, "plugins": [], "custom_ops": [name], "workspace_mib": 1024,
              "source_sha256": "0" * 64}
    script = tensorrt.render_build_script(config)
    benign = tensorrt.render_build_script({**config, "inputs": [{"name": "x", "shape": [-1, 3]}],
                                           "profiles": {"x": config["profiles"][name]}, "custom_ops": ["x"]})
    assert python_structure(script) == python_structure(benign)
    if "'" not in name:             # trtexec cannot express a quote; build_engine.py is the way then
        words = shlex.split(tensorrt.trtexec_command(config))
        assert words[0] == "trtexec" and len(words) == len(shlex.split(tensorrt.trtexec_command(
            {**config, "profiles": {"x": config["profiles"][name]}})))


def test_report_markdown_text_stays_one_cell():
    for name in NAMES:
        cell = report.md(name, 10_000)
        kinds, _, _ = markdown_structure(f"| {cell} | b |\n- {cell}\n")
        assert kinds == ["table:3:0", "item:0:0", "blank:0:0"], name
        assert "\u202e" not in cell and "\x00" not in cell
