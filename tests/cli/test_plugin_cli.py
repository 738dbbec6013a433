"""onnx-studio plugin: packages written, Python targets run against the reference, exit codes (0 ok,
1 an implementation failed or differs, 2 usage), --json, --impl, the original file untouched."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT, SAMPLES, assert_user_message, sha256_file
from tests.forked_cli import run_forked

MODEL = SAMPLES / "mmdeploy_grid_sampler.onnx"


def _cli(*args, cwd=ROOT):
    """``onnx-studio plugin ARGS`` in a process of its own (user code runs in it and its workers),
    forked from a preloaded server (tests/forked_cli.py)."""
    return run_forked(["plugin", *map(str, args)], cwd=cwd, timeout=300)


def test_json_runs_python_targets_and_writes_every_package(tmp_path):
    before = sha256_file(MODEL)
    proc = _cli(MODEL, "--op", "mmdeploy::grid_sampler", "--target", "all", "-o", tmp_path / "out", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True
    assert data["signature"]["qualified"] == "mmdeploy::grid_sampler"
    assert [p["target"] for p in data["scaffold"]["packages"]] == ["ort-python", "ort-cpp", "openvino-python",
                                                                   "openvino-cpp", "tensorrt"]
    assert {r["target"]: r["status"] for r in data["runs"]} == {"ort-python": "ok", "openvino-python": "ok"}
    assert (tmp_path / "out" / "mmdeploy_grid_sampler" / "tensorrt" / "grid_sampler_plugin.cpp").is_file()
    assert sha256_file(MODEL) == before
    # Only inside the output folder.
    assert {p.name for p in tmp_path.iterdir()} == {"out"}


def test_text_output_and_user_impl_that_raises(tmp_path):
    impl = tmp_path / "my_op.py"
    impl.write_text("def compute(x, grid, **attrs):\n    raise ValueError('not yet')\n")
    proc = _cli(MODEL, "--op", "mmdeploy::grid_sampler", "--target", "ort-python", "-o", tmp_path / "out",
                "--impl", impl)
    assert proc.returncode == 1, proc.stderr
    assert "FAIL    ort-python" in proc.stdout
    assert "custom op `grid_sampler` raised ValueError: not yet (line 2)" in proc.stdout
    written = tmp_path / "out" / "mmdeploy_grid_sampler" / "ort-python" / "grid_sampler_op.py"
    assert written.read_text() == impl.read_text()    # the user's body is what the package carries


def test_usage_errors_are_one_line(tmp_path):
    proc = _cli(MODEL, "--op", "acme::nope", "-o", tmp_path / "out")
    assert proc.returncode == 2
    assert_user_message(proc.stderr.strip(), "not in the model", "mmdeploy::grid_sampler")
    proc = _cli(MODEL, "--op", "mmdeploy::grid_sampler", "--target", "cuda", "-o", tmp_path / "out")
    assert proc.returncode == 2 and "unknown plugin target 'cuda'" in proc.stderr
    proc = _cli(MODEL, "--op", "mmdeploy::grid_sampler", "-o", tmp_path / "out", "--impl", tmp_path / "missing.py")
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_tensorrt_build_is_reported_not_compiled(tmp_path):
    proc = _cli(MODEL, "--op", "mmdeploy::grid_sampler", "--target", "tensorrt", "-o", tmp_path / "out", "--build")
    assert proc.returncode == 0, proc.stderr
    assert "not compiled here: TensorRT is not installable" in proc.stdout


def _foo_model(tmp_path):
    from tests.conftest import save
    from tests.plugins.plugin_models import custom_op_model

    return save(custom_op_model(), tmp_path / "foo.onnx")


def test_custom_op_without_reference_writes_samples_and_is_not_a_failure(tmp_path):
    from tests.plugins.plugin_models import FOO_COMPUTE, FOO_COMPUTE_F64

    model = _foo_model(tmp_path)
    impl = tmp_path / "foo_impl.py"
    impl.write_text(FOO_COMPUTE)
    proc = _cli(model, "--op", "my.dom::Foo", "--dim", "N=2", "--target", "all", "-o", tmp_path / "out",
                "--impl", impl)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "samples 1 captured" in proc.stdout
    assert "--      ort-python         ran, not compared (no reference)" in proc.stdout
    folder = next((tmp_path / "out").glob("my_dom_Foo*")) / "ort-python"     # + a hash of "my.dom_Foo" (R38)
    assert (folder / "samples" / "sample_0.npz").is_file()
    harness = subprocess.run([sys.executable, "test_op.py"], cwd=folder, capture_output=True, text=True, timeout=120)
    assert harness.returncode == 0 and "ran, not compared (no reference)" in harness.stdout, harness.stderr
    # A body that breaks the declared dtype still fails.
    impl.write_text(FOO_COMPUTE_F64)
    proc = _cli(model, "--op", "my.dom::Foo", "--dim", "N=2", "--target", "ort-python", "-o", tmp_path / "out2",
                "--impl", impl, "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["runs"][0]["status"] == "error"


def test_endless_loop_follows_the_global_timeout(tmp_path):
    impl = tmp_path / "loop.py"
    impl.write_text("def compute(input0, *, alpha=1.0):\n    while True:\n        pass\n")
    proc = run_forked(["--timeout", "2", "plugin", str(_foo_model(tmp_path)), "--op", "my.dom::Foo", "--dim", "N=2",
                       "--target", "ort-python", "-o", str(tmp_path / "out"), "--impl", str(impl)], cwd=ROOT,
                      timeout=100)
    assert proc.returncode == 1, proc.stderr
    assert "did not finish within 2 s (an endless loop?)" in proc.stdout
