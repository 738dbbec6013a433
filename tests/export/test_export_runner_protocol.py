"""Export runs its artifacts through the one runner protocol and the one latency loop (issue 34 item 1).

Every exported file is verified and timed by one job, ``export.run`` (``studio/export/artifact_run.py``): the
engine's runner from the factory (``studio.core.engines.sessions.open_runner``), one inference for the outputs,
then the runner's bound call in ``profilers.latency.timed_rounds`` -- as ``onnx-studio profile`` runs a model.

Mechanism: a real export (ONNX Runtime, OpenVINO, MNN) of a model built here; its manifest carries the loop's
figures for every artifact (MNN's were absent before: it had no timing); then each written file is run again
by the same job in this process with the factory spied on, and its outputs are compared with a plain
onnxruntime session on the original model (the independent oracle). An AST scan fails if any module of
studio/export (or profilers/) opens an engine itself.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import studio.export.artifact_run as artifact_run
from studio import api
from studio.core.jobs import JobContext
from tests.export.conftest import conv_model
from tests.requirements import require_engine

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    require_engine("mnn")
    tmp = tmp_path_factory.mktemp("runner-export")
    model = conv_model(tmp / "src" / "convnet.onnx", batch=1)
    result = api.export(api.load(model), "onnxruntime,openvino,mnn", tmp / "out", zip=False,
                        pool_key="export-runner-protocol")
    return model, result, json.loads((result.bundle / "manifest.json").read_text())


def test_every_artifact_is_verified_and_timed_by_the_one_loop(exported):
    _model, result, manifest = exported
    assert {t.target: t.status for t in result.targets} == {"onnxruntime": "passed", "openvino": "passed",
                                                            "mnn": "passed"}
    bench = manifest["benchmarks"]
    runs = manifest["options"]["bench_runs"]
    timed = {"onnxruntime": ("fast-start", "fast-inference", "ort-format"), "openvino": ("model.xml",),
             "mnn": ("model.mnn",)}
    for target, keys in timed.items():
        for key in keys:
            figures = bench[target][key]
            assert figures["runs"] == runs, (target, key, figures)
            assert figures["latency_ms_median"] > 0 and figures["first_inference_ms"] > 0, (target, key, figures)


@pytest.mark.parametrize("engine,path,runner_args", [
    ("onnxruntime", "onnxruntime/model.onnx", {"graph_optimization_level": "disable"}),
    ("onnxruntime", "onnxruntime/model.ort", {"graph_optimization_level": "disable",
                                              "extra_session_options": {"session.load_model_format": "ORT"}}),
    ("openvino", "openvino/model.xml", {"openvino_ir": True, "precision": "f32"}),
    ("mnn", "mnn/model.mnn", {"precision": "f32"}),
])
def test_exported_file_runs_in_its_engines_runner(exported, monkeypatch, tmp_path, engine, path, runner_args):
    model, result, _manifest = exported
    opened: list[tuple[str, str]] = []
    real = artifact_run.open_runner

    def spy(name, p, args, ctx):
        opened.append((name, Path(p).name))
        return real(name, p, args, ctx)

    monkeypatch.setattr(artifact_run, "open_runner", spy)
    feeds = {"x": np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)}
    args = {"engine": engine, "model_path": str(result.bundle / path), "runs": 4, "session_runs": 2,
            "runner_args": {**runner_args, "onnx_path": str(model), "output_names": ["y"]}}
    out = artifact_run.artifact_run_job(args, feeds, JobContext(tmp_path, tmp_path))
    assert opened == [(engine, Path(path).name)] * 2           # the factory, once per session asked
    timing = out.data["timing"]
    assert timing["runs"] == 4 and len(timing["session_ms_all"]) == 2
    want = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    (got,) = out.arrays.values()
    tol = 1e-3 if engine == "mnn" else 1e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


# Calls that open or run an engine: only the engines' runners (studio/core/engines/) make them.
_ENGINE_OPENERS = {"InferenceSession", "Core", "compile_model", "read_model", "create_infer_request",
                   "load_module_from_file", "create_runtime_manager", "Interpreter", "Net", "deserialize_cuda_engine"}
_SCANNED = ("studio/export", "profilers")
_ALLOWED: frozenset[str] = frozenset()     # runner modules live in studio/core/engines, outside the scan


def _engine_opens(path: Path) -> list[str]:
    label = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            fn = node.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if name in _ENGINE_OPENERS:
                found.append(f"{label}:{node.lineno} {name}()")
    return found


def test_export_and_profilers_open_no_engine_themselves():
    found = [hit for folder in _SCANNED for p in sorted((ROOT / folder).rglob("*.py"))
             if str(p.relative_to(ROOT)) not in _ALLOWED for hit in _engine_opens(p)]
    assert found == [], "open engines through studio.core.engines.sessions.open_runner: " + "; ".join(found)


def test_the_scan_sees_an_engine_open(tmp_path):
    bad = tmp_path / "probe.py"
    bad.write_text("import onnxruntime as ort\ns = ort.InferenceSession('m.onnx')\nc = ov.Core()\n")
    assert [h.split()[-1] for h in _engine_opens(bad)] == ["InferenceSession()", "Core()"]
