"""api.profile end to end on the real engines: interleaved rounds, ratios,
cold start, sweeps, side files in the job folder (R27), hostile models that
hang or blow memory (R14/R15), unavailable engines, Stop."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from profilers.profile import ProfileOptions
from profilers.variants import EngineSpec, ProfileTarget, parse_engine, parse_engines
from studio import api
from studio.core.errors import StudioError
from studio.core.sandbox import pool_info
from studio.core.workspace import Workspace
from tests.conftest import SAMPLES, assert_user_message, save, sha256_file
from tests.seeded_input_models import wide_conv_over_samples
from tests.hostile_models import endless_loop
from tests.engine_facts import gpu_stack_here, openvino_default_precision

FAST = ProfileOptions(warmup=2, iterations=40, rounds=8)


def _targets(*names: str) -> list[ProfileTarget]:
    return [ProfileTarget(n, api.load(SAMPLES / f"{n}.onnx")) for n in names]


def test_two_versions_two_engines_interleaved(tmp_path):
    profile = api.profile(_targets("cnn_unfused", "mobilenet_like"), ["ort", "ov"], FAST, out_dir=tmp_path / "job",
                          pool_key="test-profile-run")
    assert profile.ok and profile.interleaved and profile.rounds == 8
    assert [v.id for v in profile.variants] == ["t0-ort", "t0-ov", "t1-ort", "t1-ov"]
    for v in profile.variants:
        assert v.latency.count == 40 and v.samples_ms.size == 40
        assert 0 < v.latency.min_ms <= v.latency.p50_ms <= v.latency.p99_ms <= v.latency.max_ms
        assert v.cold.session_ms > 0 and v.cold.first_inference_ms > 0 and v.cold.worker_start_ms > 0
        assert v.warmup_ms.size == 2
    ov = profile.variant("t0-ov")
    assert ov.details["precision_requested"] == "f32" and ov.details["precision_effective"] == "f32"
    assert ov.cold.load_ms is not None
    assert profile.variant("t0-ort").cold.load_ms is not None   # from ORT's own model_loading event
    # Three ratios against the baseline, each with an interval from the 8 rounds.
    assert [r.other_id for r in profile.ratios] == ["t0-ov", "t1-ort", "t1-ov"]
    for r in profile.ratios:
        assert r.estimate.rounds == 8 and r.estimate.ci_low <= r.estimate.ratio <= r.estimate.ci_high
        assert r.verdict
    assert len(profile.machine.load_before) == 3 and profile.machine.cpu_count >= 1
    text = json.dumps(profile.to_dict(include_samples=True), allow_nan=False)
    assert "t1-ov" in text and str(tmp_path) not in text


def test_rounds_are_shuffled_and_complete():
    from profilers.latency import RunPlan, interleaved_latency, variant_args
    from studio.core.feeds import input_specs, random_feeds
    from studio.core.sandbox import Limits

    handle = api.load(SAMPLES / "cnn_unfused.onnx")
    feeds = random_feeds(input_specs(handle.proto))
    arrays: dict = {}
    variants = [variant_args(f"v{i}", key, handle.path, parse_engine(key).to_args(), feeds, i, arrays)
                for i, key in enumerate(["ort", "ov", "ort"])]
    run = interleaved_latency(variants, arrays, RunPlan(warmup=1, iterations=30, rounds=10, seed=3),
                              out_dir=Path(os.environ["ONNX_STUDIO_WORKSPACE"]) / "job", limits=Limits(timeout_s=60),
                              pool_key="test-profile-run")
    assert len(run.order) == 10 and all(sorted(o) == ["v0", "v1", "v2"] for o in run.order)
    assert len({o for o in run.order}) > 1                       # the order changes between rounds
    for vid in ("v0", "v1", "v2"):
        assert run.samples_ms[vid].size == 30
        assert np.bincount(run.rounds_of[vid]).tolist() == [3] * 10
        assert not np.isnan(run.round_medians(vid, 10)).any()


def test_duration_mode_and_time_budget(tmp_path):
    profile = api.profile(_targets("cnn_unfused"), ["ort"], ProfileOptions(warmup=2, duration_s=0.5, rounds=5),
                          out_dir=tmp_path, pool_key="test-profile-run")
    assert profile.ok and profile.variants[0].latency.count >= 5
    assert profile.ratios == () and not profile.interleaved
    # Far more iterations than the time limit allows: the run is cut to fit and says so.
    started = time.monotonic()
    slow = api.profile(_targets("transformer_block"), ["ort"],
                       ProfileOptions(warmup=1, iterations=5_000_000, rounds=4, timeout_s=8), out_dir=tmp_path,
                       pool_key="test-profile-run")
    assert time.monotonic() - started < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
    v = slow.variants[0]
    assert v.ok and 0 < v.latency.count < 5_000_000, (v.error_kind, v.error)
    assert any("to fit the" in w for w in slow.warnings), slow.warnings


def test_unavailable_engines_are_reported_not_faked(tmp_path):
    profile = api.profile(_targets("cnn_unfused"), ["ort", "trt", "ort:cuda"], FAST, out_dir=tmp_path,
                          pool_key="test-profile-run")
    ort, trt, cuda = profile.variants
    assert ort.ok
    if gpu_stack_here():  # pragma: no cover - a GPU machine
        pytest.skip(f"{gpu_stack_here()} is installed here: this test is of a CPU-only machine")
    # no TensorRT and no CUDA here: a clear reason, no numbers
    assert trt.error_kind == "unavailable" and "not available here" in trt.error and trt.latency is None
    assert_user_message(trt.error, "TensorRT")
    assert cuda.error_kind == "unavailable" and "not available here" in cuda.error and cuda.latency is None
    assert not profile.ok and profile.baseline is ort and profile.ratios == ()


def test_sweeps(tmp_path):
    options = ProfileOptions(warmup=1, iterations=10, rounds=2, thread_counts=(1, 2), batch_sizes=(1, 2),
                             concurrency=(1, 2), sweep_iterations=5)
    profile = api.profile(_targets("cnn_unfused"), ["ort", "ov"], options, out_dir=tmp_path,
                          pool_key="test-profile-run")
    assert [v.id for v in profile.variants] == ["t0-ort", "t0-ov"]
    for v in profile.variants:
        kinds = {s.kind: s for s in v.sweeps}
        assert set(kinds) == {"threads", "batch", "concurrency"}
        for sweep in kinds.values():
            assert sweep.error is None and [p.value for p in sweep.points] == [1, 2]
            assert all(p.stats.count >= 5 and p.throughput > 0 for p in sweep.points)
    ov = profile.variant("t0-ov")
    assert {s.kind: s for s in ov.sweeps}["concurrency"].details["performance_hint"].endswith("THROUGHPUT")


def test_batch_sweep_on_a_fixed_batch_model_explains(tmp_path):
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = save(model, tmp_path / "fixed.onnx")
    profile = api.profile([api.load(path)], ["ort"], ProfileOptions(warmup=1, iterations=5, batch_sizes=(1, 4)),
                          out_dir=tmp_path / "job", pool_key="test-profile-run")
    sweep = profile.variants[0].sweeps[0]
    assert profile.variants[0].ok and sweep.points == ()
    assert_user_message(sweep.error, "fixed first dim 1", "dynamic batch")


def test_npz_inputs_and_mismatched_versions(tmp_path):
    npz = tmp_path / "inputs.npz"
    np.savez(npz, input=np.ones((1, 3, 32, 32), np.float32))
    profile = api.profile(_targets("cnn_unfused"), ["ort"], ProfileOptions(warmup=1, iterations=5,
                                                                          inputs_npz=str(npz)),
                          out_dir=tmp_path / "job", pool_key="test-profile-run")
    assert profile.ok and "inputs.npz" in profile.feeds[0]
    mixed = api.profile(_targets("cnn_unfused", "transformer_block"), ["ort"], ProfileOptions(warmup=1, iterations=5),
                        out_dir=tmp_path / "job2", pool_key="test-profile-run")
    assert mixed.ok and any("different inputs" in w for w in mixed.warnings)


def test_bad_options_are_one_line_errors():
    for kwargs in ({"iterations": 0}, {"batch_sizes": (0,)}, {"duration_s": -1.0}, {"warmup": -1},
                   {"timeout_s": float("nan")}):
        with pytest.raises(StudioError) as err:
            ProfileOptions(**kwargs)
        assert_user_message(str(err.value))
    for spec in ("tpu", "ov:int3", "ort:rocm", "trt:int8"):
        with pytest.raises(StudioError):
            parse_engine(spec)
    with pytest.raises(StudioError):
        api.profile([], ["ort"])
    assert [s.key for s in parse_engines("ort, ov:bf16,ort")] == ["ort", "ov:bf16"]
    for key in ("ort", "ort:cuda", "ort:trt", "ov", "ov:bf16", "ov:default", "ov:throughput", "ov:f16:throughput",
                "trt", "trt:f16"):
        assert parse_engine(key).key == key
    assert parse_engine("openvino:fp16").key == "ov:f16" and parse_engine("ov:throughput").hint == "THROUGHPUT"
    for bad in ("ov:bf16:f16", "ort:throughput"):
        with pytest.raises(StudioError):
            parse_engine(bad)
    assert parse_engine(EngineSpec("openvino", precision="default").key) == EngineSpec("openvino",
                                                                                       precision="default")


def test_side_files_stay_in_the_job_folder(tmp_path, monkeypatch):
    """R27: ORT profile JSON, OpenVINO cache, traces: inside the workspace's job folder, nothing in the cwd or
    next to the model, and gone with the workspace."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    model_dir = tmp_path / "models"
    model_dir.mkdir()
    model = model_dir / "cnn.onnx"
    model.write_bytes((SAMPLES / "cnn_unfused.onnx").read_bytes())
    digest = sha256_file(model)
    ws = Workspace.create(tmp_path / "workspaces")
    version = ws.add_file(model)
    before = set(ws.root.rglob("*"))
    options = ProfileOptions(warmup=1, iterations=5, rounds=2, per_op=True, per_op_runs=2, memory=True,
                             memory_iterations=20, ov_cache=True)
    profile = api.profile([ProfileTarget("v0", ws.handle(version.id))], ["ort", "ov"], options, workspace=ws,
                          pool_key="test-profile-r27")
    assert profile.ok, [v.error for v in profile.variants]
    assert list(cwd.iterdir()) == []
    assert sorted(p.name for p in model_dir.iterdir()) == ["cnn.onnx"] and sha256_file(model) == digest
    new = set(ws.root.rglob("*")) - before
    assert new and all(p.is_relative_to(profile.out_dir) or p == ws.root / "jobs" for p in new)
    assert profile.out_dir.is_relative_to(ws.root / "jobs")
    names = {p.name for p in new}
    assert any(n.startswith("ort_profile_") and n.endswith(".json") for n in names)
    assert "ov_cache" in names and any(n.startswith("ov_layers_") for n in names)
    assert profile.trace_path("t0-ort") is not None and profile.trace_path("t0-ov") is not None
    ov = profile.variant("t0-ov")
    assert ov.cold.cached_session_ms is not None
    ws.remove()
    assert not ws.root.exists()


def test_temporary_job_folder_is_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    profile = api.profile(_targets("cnn_unfused"), ["ort"], ProfileOptions(warmup=1, iterations=5, per_op=True,
                                                                          per_op_runs=2),
                          pool_key="test-profile-run")
    assert profile.ok and profile.out_dir is None and profile.variants[0].ops is not None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("onnx-studio-profile-")]


# ---------------------------------------------------------------------------- hostile models (R14, R15)

def _model(nodes, inputs, outputs, inits) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_memory_bomb_ends_with_a_memory_error(tmp_path):
    """R14: Expand to 8 GiB in every engine: a clear memory error per variant, the caller lives."""
    path = save(_model([helper.make_node("Expand", ["x", "shape"], ["y"])],
                       [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                       [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])],
                       [numpy_helper.from_array(np.array([2**31], np.int64), "shape")]), tmp_path / "expand.onnx")
    profile = api.profile([api.load(path)], ["ort", "ov"],
                          ProfileOptions(warmup=1, iterations=5, timeout_s=60, memory_gb=2), out_dir=tmp_path / "job",
                          pool_key="test-profile-bombs")
    assert [v.id for v in profile.variants] == ["t0-ort", "t0-ov"]
    for v in profile.variants:
        assert not v.ok and v.error_kind == "memory", (v.id, v.error)
        assert_user_message(v.error, "exceeded the worker memory limit (2.0 GiB)")
    assert not profile.ok and profile.ratios == ()


def test_endless_loop_ends_with_a_timeout(tmp_path):
    """R15: Loop with trip count 2^62: each variant stops at its time limit, the caller lives."""
    path = save(endless_loop(2**62), tmp_path / "loop.onnx")
    started = time.monotonic()
    # the loop never ends, so each variant waits out its whole limit: the shortest one that still tests it
    profile = api.profile([api.load(path)], ["ort", "ov"], ProfileOptions(warmup=1, iterations=5, timeout_s=1),
                          out_dir=tmp_path / "job", pool_key="test-profile-loops")
    assert time.monotonic() - started < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert [v.id for v in profile.variants] == ["t0-ort", "t0-ov"]
    for v in profile.variants:
        assert v.error_kind == "timeout", (v.id, v.error)
        assert_user_message(v.error, "timed out after 1 s")
    # The caller is fine and the pool still works.
    again = api.profile(_targets("cnn_unfused"), ["ort"], ProfileOptions(warmup=1, iterations=5),
                        out_dir=tmp_path / "job", pool_key="test-profile-loops")
    assert again.ok


class _Stop(Exception):
    pass


def test_stop_from_the_progress_callback_kills_the_worker(tmp_path):
    def on_progress(fraction: float, message: str) -> None:
        if "timed" in message and "·" in message:
            raise _Stop()

    started = time.monotonic()
    with pytest.raises(_Stop):
        api.profile(_targets("transformer_block"), ["ort"], ProfileOptions(warmup=1, duration_s=30),
                    out_dir=tmp_path, pool_key="test-profile-stop", on_progress=on_progress)
    assert time.monotonic() - started < 120      # a hang guard only (generous on any CPU or load), not a speed expectation
    assert not any(p["pool"] == "test-profile-stop" and p["busy"] for p in pool_info())
    assert api.profile(_targets("cnn_unfused"), ["ort"], ProfileOptions(warmup=1, iterations=3), out_dir=tmp_path,
                       pool_key="test-profile-stop").ok


def test_openvino_precision_and_hint_are_reported(tmp_path):
    profile = api.profile(_targets("cnn_unfused"), ["ov", "ov:default", "ov:throughput"],
                          ProfileOptions(warmup=1, iterations=5, rounds=2), out_dir=tmp_path,
                          pool_key="test-profile-run")
    pinned, default, throughput = profile.variants
    assert pinned.details["precision_effective"] == "f32"
    assert default.details["precision_requested"] == "default" and default.details["precision_effective"]
    # OpenVINO's own choice, as it reports it for this CPU (bf16 with AVX512-BF16/AMX, f32 on AVX2 only):
    # this is why the studio pins f32 by default.
    assert default.details["precision_effective"] == openvino_default_precision()
    assert "THROUGHPUT" in str(throughput.details["performance_hint"])
    assert "LATENCY" in str(pinned.details["performance_hint"])


def _searched_shape(profile) -> tuple[int, ...]:
    """The shape of x the profile ran at, read from its warning ('... (ran on x float32[1, 1, N]) ...')."""
    import re

    text = profile.warnings[0]
    assert "guessed input sizes do not run the original; profiled at searched sizes" in text, profile.warnings
    return tuple(int(d) for d in re.search(r"x float32\[([0-9, ]+)\]", text).group(1).split(", "))


def _plain_ort_runs(path, shape) -> bool:
    import onnxruntime as ort

    try:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": np.zeros(shape, np.float32)})
        return True
    except Exception:       # noqa: BLE001 - the oracle's own refusal
        return False


def test_a_run_that_fails_at_guessed_sizes_says_how_to_set_them(tmp_path):
    """A model that needs a real size no default knows (an STFT as a 64-wide Conv over free 'samples', guessed
    at 32) fails its first inference; the error named only the engine's 'Invalid input shape'. The profiler now
    says which sizes were guessed and how to set them, and the profile (as check, verify, optimize and precision
    do) searches sizes the original runs at and profiles there, said in a warning; a size a plain onnxruntime
    run accepts works when given."""
    from profilers.profile import run_profile

    path = save(wide_conv_over_samples(), tmp_path / "stft.onnx")
    assert not _plain_ort_runs(path, (1, 1, 32))        # the oracle: plain ORT refuses the guessed size too
    options = ProfileOptions(warmup=1, iterations=5, rounds=2)
    target = ProfileTarget("stft", api.load(path))
    v = run_profile([target], [parse_engine("ort")], options, out_dir=tmp_path / "a").variants[0]
    assert not v.ok and v.error_kind == "error"
    assert "guessed (samples=32)" in v.error and "--dim NAME=VALUE" in v.error, v.error
    searched = api.profile([target], ["ort"], options, out_dir=tmp_path / "s")
    assert searched.ok, searched.variants[0].error
    shape = _searched_shape(searched)
    assert shape[2] != 32 and _plain_ort_runs(path, shape)      # a size plain ORT runs, found, not guessed
    assert "samples" in dict(searched.options.dims)
    ok = api.profile([target], ["ort"], ProfileOptions(warmup=1, iterations=5, rounds=2, dims=(("samples", 256),)),
                     out_dir=tmp_path / "b")
    assert ok.ok and not any("searched sizes" in w for w in ok.warnings), ok.warnings


def test_the_size_search_runs_under_the_profiles_own_limits(tmp_path, monkeypatch):
    """The sizes search after a failure at guessed sizes runs the original in a sandboxed worker: under the
    limits the user gave the profile (--timeout, --memory-gb), not the sandbox's defaults. The spy wraps the
    real search (it still runs and finds the size plain ORT accepts) and records the limits it was given."""
    import studio.facade.profile as facade_profile
    from studio.core.sandbox import GiB

    seen = []
    real = facade_profile.searched_dims

    def spy(*args, **kwargs):
        seen.append(kwargs["limits"])
        return real(*args, **kwargs)

    monkeypatch.setattr(facade_profile, "searched_dims", spy)
    path = save(wide_conv_over_samples(), tmp_path / "stft.onnx")
    options = ProfileOptions(warmup=1, iterations=5, rounds=2, timeout_s=77.0, memory_gb=3.5)
    searched = api.profile([ProfileTarget("stft", api.load(path))], ["ort"], options, out_dir=tmp_path / "s")
    assert searched.ok and _plain_ort_runs(path, _searched_shape(searched))
    assert len(seen) == 1 and seen[0] is not None, seen
    assert seen[0].timeout_s == 77.0 and seen[0].memory_bytes == int(3.5 * GiB), seen[0]


def test_a_run_that_fails_at_a_guessed_unnamed_size_names_it(tmp_path):
    """The same, where the free dim has no name (Silero VAD's input [?, ?]): the default size was not counted
    as guessed, and the error was ONNX Runtime's alone (corpus silero_vad_v5: 'Pad reflect: post-pad (64)
    exceeds maximum allowed (15)'). It now names x[2]=16 and the INPUT[AXIS]=VALUE form, which then runs; the
    profile itself searches a size that runs."""
    from profilers.profile import run_profile

    model = wide_conv_over_samples()
    model.graph.input[0].type.tensor_type.shape.dim[2].Clear()         # x [1, 1, ?]
    path = save(model, tmp_path / "stft_unnamed.onnx")
    assert not _plain_ort_runs(path, (1, 1, 16))        # the oracle: plain ORT refuses the guessed 16 samples
    options = ProfileOptions(warmup=1, iterations=5, rounds=2)
    target = ProfileTarget("stft", api.load(path))
    v = run_profile([target], [parse_engine("ort")], options, out_dir=tmp_path / "a").variants[0]
    assert not v.ok and "guessed (x[2]=16)" in v.error and "INPUT[AXIS]=VALUE" in v.error, v.error
    searched = api.profile([target], ["ort"], options, out_dir=tmp_path / "s")
    assert searched.ok and _plain_ort_runs(path, _searched_shape(searched)), searched.warnings
    ok = api.profile([target], ["ort"], ProfileOptions(warmup=1, iterations=5, rounds=2, dims=(("x[2]", 256),)),
                     out_dir=tmp_path / "b").variants[0]
    assert ok.ok, ok.error
