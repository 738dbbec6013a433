"""`onnx-studio profile`: JSON and text output, traces, failures, --nsys without nsys,
and the UI's command line parsing back to the same options."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from profilers.profile import ProfileOptions, options_of
from profilers.variants import parse_engines
from studio.cli import build_parser, main
from studio.cli.profile_cmd import _options, request_of
from studio.core.requests import ProfileRequest
from tests.conftest import ROOT, SAMPLES, assert_user_message
from tests.engine_facts import gpu_stack_here

CNN = str(SAMPLES / "cnn_unfused.onnx")
MOBILE = str(SAMPLES / "mobilenet_like.onnx")
QUICK = ["--warmup", "1", "--iterations", "10", "--rounds", "3"]


def test_json_two_models_two_engines(capsys):
    assert main(["profile", CNN, MOBILE, "--engine", "ort,ov", *QUICK, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] and d["interleaved"] and d["rounds"] == 3
    assert [v["variant"]["id"] for v in d["variants"]] == ["t0-ort", "t0-ov", "t1-ort", "t1-ov"]
    assert all(v["latency"]["count"] == 10 and v["cold_start"]["session_ms"] > 0 for v in d["variants"])
    assert len(d["ratios"]) == 3 and all("ci_low" in r for r in d["ratios"])
    assert "samples_ms" not in d["variants"][0]
    assert d["machine"]["load_before"] and d["options"]["iterations"] == 10


def test_text_report_with_per_op_memory_and_sweep(capsys):
    assert main(["profile", CNN, "--engine", "ort", "--engine", "ov", *QUICK, "--per-op", "--per-op-runs", "2",
                 "--memory", "--memory-iterations", "20", "--threads", "1,2", "--sweep-iterations", "3"]) == 0
    out = capsys.readouterr().out
    for needle in ("p50", "p99.9", "QPS", "ratios vs t0-ort", "cold start t0-ort", "per-op t0-ort: sum",
                   "end-to-end", "mapped to ONNX nodes", "memory t0-ov: peak RSS", "leak check:",
                   "threads sweep t0-ort: 1:", "effective f32"):
        assert needle in out, needle


def test_trace_export(tmp_path, capsys):
    dest = tmp_path / "out" / "trace.json"
    assert main(["profile", CNN, "--engine", "ort,ov", *QUICK, "--trace", str(dest), "--per-op-runs", "2"]) == 0
    ort_trace = tmp_path / "out" / "trace-t0-ort.json"
    ov_trace = tmp_path / "out" / "trace-t0-ov.json"
    assert isinstance(json.loads(ort_trace.read_text()), list)
    assert json.loads(ov_trace.read_text())["traceEvents"]
    single = tmp_path / "single.json"
    assert main(["profile", CNN, *QUICK, "--trace", str(single), "--per-op-runs", "2"]) == 0
    assert any(e.get("name", "").endswith("_kernel_time") for e in json.loads(single.read_text()))
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    assert main(["profile", CNN, *QUICK, "--trace", str(link), "--per-op-runs", "2"]) == 2
    assert "symbolic link" in capsys.readouterr().err      # refused, never written through (R32)
    assert not (tmp_path / "elsewhere.json").exists()


def test_unavailable_engine_exits_1(capsys):
    if gpu_stack_here():  # pragma: no cover - a machine with TensorRT
        pytest.skip(f"{gpu_stack_here()} is installed here: this test is of a CPU-only machine")
    code = main(["profile", CNN, "--engine", "ort,trt", *QUICK])
    out = capsys.readouterr().out
    assert code == 1 and "FAILED (unavailable)" in out and "not available here" in out


@pytest.mark.parametrize("argv,needle", [
    (["profile", CNN, "--engine", "tpu"], "unknown engine"),
    (["profile", "missing.onnx"], "does not exist"),
    (["profile", CNN, "--iterations", "0"], "iterations must be a positive integer"),
    (["profile", CNN, "--batch", "0"], None),
])
def test_bad_input_is_one_line(capsys, argv, needle):
    if needle is None:
        with pytest.raises(SystemExit) as err:   # argparse rejects it before anything runs
            main(argv)
        assert err.value.code == 2
        return
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ")
    assert_user_message(err, needle)


def test_nsys_without_nsys_prints_the_commands(capsys):
    if shutil.which("nsys"):  # pragma: no cover - a machine with Nsight Systems
        pytest.skip("nsys is installed here")
    assert main(["profile", CNN, *QUICK, "--nsys"]) == 0
    captured = capsys.readouterr()
    assert "nsys is not on PATH" in captured.err and "not verified here" in captured.err
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("nsys ")]
    profile_cmd, stats_cmd = shlex.split(lines[0]), shlex.split(lines[1])
    assert profile_cmd[:3] == ["nsys", "profile", "--trace=cuda,nvtx,osrt"]
    inner = profile_cmd[profile_cmd.index("studio") + 2:]
    assert inner[0] == CNN and "--nsys" not in inner
    assert inner[inner.index("--iterations") + 1] == "10" and inner[inner.index("--rounds") + 1] == "3"
    assert "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum" in stats_cmd
    assert "p50" in captured.out   # the profile itself still ran


def test_out_dir_keeps_profile_json(tmp_path, capsys):
    out = tmp_path / "keep"
    assert main(["profile", CNN, *QUICK, "--per-op", "--per-op-runs", "2", "--out-dir", str(out)]) == 0
    saved = json.loads((out / "profile.json").read_text())
    assert len(saved["variants"][0]["samples_ms"]) == 10
    assert any(p.name.startswith("ort_profile_") for p in out.iterdir())


def test_subprocess_writes_nothing_in_the_cwd(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "studio", "profile", CNN, *QUICK, "--per-op", "--per-op-runs", "2",
                           "--json"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["ok"]
    assert list(tmp_path.iterdir()) == []


def test_ui_command_line_parses_back_to_the_same_options():
    request = ProfileRequest.of(engines=("ort", "ov:bf16"), warmup=3, iterations=250, rounds=7, per_op=True,
                             per_op_runs=4, memory=True, memory_iterations=50, sweep_iterations=9,
                             thread_counts=(1, 2), batch_sizes=(1, 4), concurrency=(2,),
                             dims=(("batch", 1), ("seq len", 16)), ov_cache=True, timeout_s=60, seed=5)
    text = request.command(["my model.onnx", "b.onnx"], full_paths=False)
    argv = shlex.split(text)
    assert argv[:2] == ["onnx-studio", "profile"]
    args = build_parser().parse_args(argv[1:])
    assert args.models == ["my model.onnx", "b.onnx"]
    assert parse_engines(args.engine) == parse_engines("ort,ov:bf16")
    assert request_of(args) == request
    assert _options(args) == options_of(request) == ProfileOptions(
        warmup=3, iterations=250, rounds=7, per_op=True, per_op_runs=4, memory=True, memory_iterations=50,
        sweep_iterations=9, thread_counts=(1, 2), batch_sizes=(1, 4), concurrency=(2,),
        dims=(("batch", 1), ("seq len", 16)), ov_cache=True, timeout_s=60, seed=5)
    duration = ProfileRequest.of(duration_s=12.5)
    assert _options(build_parser().parse_args(shlex.split(duration.command(["m.onnx"]))[1:])) == \
        ProfileOptions(duration_s=12.5)


def test_images_and_npz_inputs_with_preprocessing(tmp_path, capsys, monkeypatch):
    """`profile --images DIR` (the preprocessing options of compare/precision, from studio.core.feeds)
    and `--inputs X.npz`, both given relative to the user's folder."""
    import numpy as np
    from PIL import Image

    from studio import api
    from studio.core.feeds import save_npz

    monkeypatch.chdir(tmp_path)
    (tmp_path / "imgs").mkdir()
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (50, 60, 3), dtype=np.uint8)).save(tmp_path / "imgs" / f"{i}.png")
    assert main(["profile", CNN, "--engine", "ort", *QUICK, "--images", "imgs", "--image-size", "32x32",
                 "--layout", "NCHW", "--bgr", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] and "image" in " ".join(d["feeds"]) and d["options"]["images_dir"] == "imgs"
    assert d["options"]["preprocess"]["bgr"] is True and d["options"]["preprocess"]["size"] == [32, 32]
    save_npz(api.make_inputs(api.load(CNN)).sets, tmp_path / "x.npz")
    assert main(["profile", CNN, "--engine", "ort", *QUICK, "--inputs", "x.npz", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] and "x.npz" in " ".join(d["feeds"])
    assert main(["profile", CNN, "--images", "nope"]) == 2
    assert_user_message(capsys.readouterr().err.strip(), "image folder 'nope' does not exist")


def test_command_line_with_images_parses_back(tmp_path):
    from studio.core.feeds import ImagePreprocess

    request = ProfileRequest.of(images_dir=str(tmp_path), preprocess=ImagePreprocess(
        size=(32, 32), layout="NHWC", mean=(0.5,), std=(0.25,), bgr=True).to_dict())
    text = request.command(["m.onnx"])
    assert f"--images {tmp_path} --image-size 32x32 --layout NHWC --mean 0.5 --std 0.25 --bgr" in text
    rebuilt = _options(build_parser().parse_args(shlex.split(text)[1:]))
    assert rebuilt == ProfileOptions(images_dir=str(tmp_path), preprocess=ImagePreprocess(
        size=(32, 32), layout="NHWC", mean=(0.5,), std=(0.25,), bgr=True))


def test_inputs_line_shows_the_seeded_integer_scalars(tmp_path, capsys):
    # Corpus silero_vad_op18_ifless: the line said 'seeded random inputs (seed 0), sequence=512, batch=1' and
    # not the sr=16000 the run used. Here the integer scalar k is compared with 7, so the studio seeds k=7
    # (the value read by hand off the model's Equal); the line says it, and x's shape, as check does.
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Equal", ["k", "seven"], ["c"]), helper.make_node("Neg", ["x"], ["nx"]),
         helper.make_node("Where", ["c", "x", "nx"], ["y"])], "pick",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("k", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("seven", TensorProto.INT64, [], [7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "pick.onnx"
    onnx.save(model, path)
    assert main(["profile", str(path), "--engine", "ort", *QUICK]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("inputs")]
    assert "x float32[1, 4]" in line and "k int64=7" in line and "(N=1)" in line, line
