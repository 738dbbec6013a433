"""NVTX with no profiler attached is a no-op that still works; nsys commands and
CSV import (the nsys path itself is not verified here: no GPU, no nsys)."""

from __future__ import annotations

import shlex

import pytest

from passes.instruments import LogInstrument, NvtxInstrument, with_nvtx
from profilers.nvtx import (NvtxRanges, find_nsys, nsys_plan, parse_kernel_summary, parse_memory_summary, ranges,
                            read_nsys_stats, run_nsys)
from studio.core.errors import StudioError

# Recorded by hand from the documented `nsys stats --format csv` layout (Nsight Systems 2024+):
# one header row, times in ns, "Time (%)" first, the name last.
KERN_CSV = """\
Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name
62.5,"5,000,000",100,50000.0,49800.0,48000,61000,1200.5,"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x5_nn_align4>(T1::Params)"
25.0,2000000,200,10000.0,10000.0,9000,12000,500.0,"void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, std::plus<float>>>(int, T2, T3)"
12.5,1000000,50,20000.0,20000.0,19000,21000,300.0,trt_volta_scudnn_128x64_relu_interior_nn_v1
"""
MEM_CSV = """\
Time (%),Total Time (ns),Count,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Operation
80.0,800000,10,80000.0,80000.0,79000,81000,100.0,[CUDA memcpy Host-to-Device]
15.0,150000,10,15000.0,15000.0,14000,16000,100.0,[CUDA memcpy Device-to-Host]
5.0,50000,5,10000.0,10000.0,9000,11000,100.0,[CUDA memset]
"""


def test_nvtx_is_a_noop_without_a_profiler():
    nv = NvtxRanges()
    assert nv.attached is False
    assert nv.start("load") is None
    nv.end(None)
    with nv.range("session creation"):
        pass
    assert nv.iteration_hooks("iteration") is None
    assert ranges() is ranges()


def test_nvtx_instrument_runs_around_passes():
    inst = NvtxInstrument()

    class P:
        name = "fold-constants"

    for _ in range(3):
        inst.before_pass(P(), None)
        inst.after_pass(P(), None, None)
    assert inst._ranges == []


def test_nsys_plan_commands(tmp_path):
    plan = nsys_plan(["python", "-m", "studio", "profile", "model with space.onnx"], tmp_path / "nsys")
    profile = " ".join(plan.profile_cmd)
    assert plan.profile_cmd[:2] == ("nsys", "profile")
    assert "--trace=cuda,nvtx,osrt" in profile and f"--output={tmp_path / 'nsys' / 'report'}" in profile
    assert plan.profile_cmd[-1] == "model with space.onnx"
    stats = plan.stats_cmd
    assert stats[:2] == ("nsys", "stats")
    assert stats[stats.index("--report") + 1] == "cuda_gpu_kern_sum,cuda_gpu_mem_time_sum"
    assert stats[stats.index("--format") + 1] == "csv"
    assert stats[-1] == str(tmp_path / "nsys" / "report.nsys-rep")
    assert plan.csv_path("cuda_gpu_kern_sum") == tmp_path / "nsys" / "stats_cuda_gpu_kern_sum.csv"
    text = plan.shell_text()
    assert shlex.split(text.split("\n")[1]) == list(plan.stats_cmd)
    assert "'model with space.onnx'" in text
    with pytest.raises(StudioError):
        nsys_plan([], tmp_path)


def test_parse_kernel_and_memory_summaries():
    kernels = parse_kernel_summary("Processing [report.sqlite] with [cuda_gpu_kern_sum.py]...\n\n" + KERN_CSV)
    assert [k.instances for k in kernels] == [100, 200, 50]
    assert kernels[0].total_ns == 5_000_000 and kernels[0].share == pytest.approx(0.625)
    assert kernels[0].name.startswith("void cutlass::Kernel<")
    assert sum(k.share for k in kernels) == pytest.approx(1.0)
    mem = parse_memory_summary(MEM_CSV)
    assert [m.operation for m in mem][0] == "[CUDA memcpy Host-to-Device]"
    assert mem[1].count == 10 and mem[1].avg_ns == 15000.0


def test_parse_other_units_and_missing_share():
    text = "Total Time (us),Instances,Avg (us),Name\n3.0,3,1.0,k1\n1.0,1,1.0,k2\n"
    kernels = parse_kernel_summary(text)
    assert kernels[0].total_ns == 3000.0 and kernels[0].share == pytest.approx(0.75)
    assert parse_kernel_summary("") == () and parse_memory_summary("garbage\n") == ()


def test_read_stats_files_and_totals(tmp_path):
    plan = nsys_plan(["true"], tmp_path)
    plan.csv_path("cuda_gpu_kern_sum").write_text(KERN_CSV)
    plan.csv_path("cuda_gpu_mem_time_sum").write_text(MEM_CSV)
    stats = read_nsys_stats(plan)
    assert stats.kernel_ns == 8_000_000
    assert stats.memcpy_ns == 950_000                 # memset is not a copy
    assert stats.memcpy_share == pytest.approx(950_000 / 9_000_000)
    d = stats.to_dict()
    assert d["verified"] is False and "not verified here" in d["note"]
    assert d["kernels"][0]["share"] == 0.625
    # A CPU-only run writes no kernel report: empty, not an error.
    plan2 = nsys_plan(["true"], tmp_path / "empty")
    assert read_nsys_stats(plan2).kernels == ()


def test_run_nsys_missing_binary_is_a_clear_error(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert find_nsys() is None                       # not on PATH: None, not a guess
    (bin_dir / "nsys").write_text("#!/bin/sh\n")
    (bin_dir / "nsys").chmod(0o755)
    assert find_nsys() == str(bin_dir / "nsys")      # on PATH: that executable
    monkeypatch.undo()
    plan = nsys_plan(["true"], tmp_path, nsys="nsys-does-not-exist-here")
    with pytest.raises(StudioError) as err:
        run_nsys(plan, cwd=tmp_path)
    assert "nsys is not on PATH" in str(err.value)


def test_pipeline_gets_nvtx_ranges_only_when_a_profiler_listens(monkeypatch):
    log = LogInstrument()
    assert with_nvtx([log]) == (log,)                     # nothing attached: nothing added

    class Attached(NvtxRanges):
        def __init__(self) -> None:
            self.attached = True
            self._domain = None

    import profilers.nvtx

    monkeypatch.setattr(profilers.nvtx, "ranges", lambda domain="onnx-studio": Attached())
    added = with_nvtx([log])
    assert added[0] is log and isinstance(added[1], NvtxInstrument)
    assert with_nvtx(added) == added                       # never twice
