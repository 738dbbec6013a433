"""What this CPU offers reduced precision: its kind for INT8 (amx | vnni | avx2 | ...) and whether it computes
bf16, read from the OS's flags less what the CPU itself denies (an emulator's /proc/cpuinfo is the host's)."""

from __future__ import annotations

import platform
from collections.abc import Mapping, Sequence

import numpy as np

from studio.core.engines.ort_int8 import cpu_flags, int8_kernel_choice

# What an int8 dot product costs on each CPU kind (studio.core.engines.ort_int8's isa), for the reason.
INT8_ON = {
    # OpenVINO's per-op counters with oneDNN capped at AVX2 (issue 35, real MiniLM): FullyConnected jit_gemm_I8
    "avx2": "AVX2 without VNNI/AMX: an int8 dot product takes vpmaddubsw + vpmaddwd, at best about twice the fp32 "
            "FMA rate, OpenVINO's INT8 layers fall back to a generic int8 GEMM (no brgemm kernel without VNNI), "
            "and quantize/dequantize steps eat that",
    "vnni": "VNNI: int8 dot products are fast here, so the time goes elsewhere (quantize/dequantize steps, float "
            "ops, per-call overhead)",
    "amx": "AMX: int8 tiles are fast here, so the time goes elsewhere (quantize/dequantize steps, float ops, "
           "per-call overhead)",
}


def cpu_kind(flags: Sequence[str] | None = None, cpuid: Mapping[str, bool] | None = None) -> str:
    """This CPU's kind for a reason (amx | vnni | avx2 | arm | unknown): the OS's ``flags``, less those the CPU
    itself denies (``cpuid``: numpy's ``__cpu_features__``): under an emulator (``make test-avx2``'s qemu-user)
    /proc/cpuinfo is the host's, while the emulated CPU has no AVX-512."""
    return int8_kernel_choice(_cpu_flags_seen(flags, cpuid), platform.machine()).isa


def _cpu_flags_seen(flags: Sequence[str] | None, cpuid: Mapping[str, bool] | None) -> set[str]:
    """The OS's CPU ``flags`` (this machine's when None) less the AVX-512 ones the CPU itself denies (``cpuid``:
    numpy's ``__cpu_features__``, this process's when None): an emulator's /proc/cpuinfo is the host's."""
    flags = set(cpu_flags() if flags is None else flags)
    feats = cpuid if cpuid is not None else \
        getattr(getattr(getattr(np, "_core", None), "_multiarray_umath", None), "__cpu_features__", {})
    if feats.get("AVX512F") is False:
        flags = {f for f in flags if not f.startswith("avx512")}
    if feats.get("AVX512VNNI") is False:
        flags.discard("avx512_vnni")
    return flags


def cpu_has_bf16(flags: Sequence[str] | None = None, cpuid: Mapping[str, bool] | None = None) -> bool:
    """Whether this CPU computes bf16 natively (AVX-512 BF16 or AMX-BF16), where OpenVINO runs bf16 layers: only
    there is an INT8 IR's float part worth running in bf16 (elsewhere OpenVINO computes it in f32 anyway)."""
    seen = _cpu_flags_seen(flags, cpuid)
    return "avx512_bf16" in seen or "amx_bf16" in seen
