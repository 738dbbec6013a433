"""What ONNX Runtime's INT8 kernels do on *this* CPU, asked of the engine itself.

ORT's uint8 x int8 GEMM on AVX2 without VNNI multiplies with ``vpmaddubsw``, whose pairwise int16
sums saturate (255 * 127 * 2 > 32767); with (AVX-)VNNI or AMX it does not. ORT documents
``reduce_range`` (7-bit weights) as the cure. Instead of reading CPU flags, the studio runs one tiny
``MatMulInteger`` whose exact answer is known and looks at what comes back: the expectation is
derived from the engine's own behaviour on the machine, whatever the CPU or ORT build.
``int8_kernel_choice`` turns the OS's CPU flags (VNNI/AMX) and that probe into the passes'
per_channel/reduce_range choice with its reason (a pure function of what it is told).

Imports ``onnxruntime``, so call it where engines run (the sandbox worker, a pass that quantizes).
"""

from __future__ import annotations

import platform
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

__all__ = ["Int8KernelChoice", "cpu_flags", "int8_kernel_choice", "machine_int8_choice", "u8s8_saturates"]

# CPU flags (as /proc/cpuinfo spells them) whose int8 dot products accumulate without int16 saturation.
AMX_FLAGS = ("amx_int8",)
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "avx_vnni_int8")
_X86 = ("x86_64", "amd64", "i386", "i686", "x86")

_K = 64   # long enough for the GEMM kernel's packed path, not only a scalar tail


@lru_cache(maxsize=1)
def u8s8_saturates() -> bool:
    """True when ORT's CPU uint8 x int8 MatMulInteger saturates (AVX2-only x86): use reduce_range."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    a = np.full((1, _K), 255, np.uint8)
    b = np.full((_K, 4), 127, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "u8s8_probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, _K])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 4])],
        [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {"a": a})[0]
    return bool((got != 255 * 127 * _K).any())


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as the OS reports them (Linux /proc/cpuinfo); empty where unreadable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@dataclass(frozen=True)
class Int8KernelChoice:
    """per_channel / reduce_range for ORT's INT8 kernels on one CPU, and why."""

    per_channel: bool
    reduce_range: bool
    isa: str                 # amx | vnni | avx2 (no VNNI) | arm | unknown
    reason: str
    flags: tuple[str, ...]   # the flags the choice read
    probe: bool | None       # the engine's own answer (u8s8_saturates), when asked

    def to_dict(self) -> dict:
        return {"per_channel": self.per_channel, "reduce_range": self.reduce_range, "isa": self.isa,
                "reason": self.reason, "flags": list(self.flags),
                "engine_probe_saturates": self.probe}


def int8_kernel_choice(flags: Iterable[str], machine: str = "x86_64",
                       saturates: bool | None = None) -> Int8KernelChoice:
    """The choice for a CPU with these flags (pure: the caller says what the OS and the engine report).

    With VNNI or AMX, uint8 x int8 products accumulate in int32: full 8-bit weights, per channel.
    AVX2 without them multiplies with ``vpmaddubsw`` whose int16 pair sums saturate: 7-bit weights
    (``reduce_range``), which ORT documents as helping "especially for per-channel mode", and per
    channel to win back the resolution the lost bit costs. ARM's dot products do not saturate.
    ``saturates``: the engine's probe; where it contradicts the flags (a VM hiding flags, an ORT
    build without the VNNI kernel), what the engine does wins and the reason says so."""
    have = frozenset(flags)
    seen = tuple(sorted(have & {"avx2", *AMX_FLAGS, *VNNI_FLAGS}))
    x86 = machine.lower() in _X86
    if not x86:
        isa, rr, why = "arm" if machine.lower().startswith(("arm", "aarch")) else "unknown", False, \
            f"{machine}: int8 dot products without int16 saturation: 8-bit weights, per channel"
    elif have & set(AMX_FLAGS):
        isa, rr, why = "amx", False, "AMX (amx_int8): int8 tiles accumulate in int32: 8-bit weights, per channel"
    elif have & set(VNNI_FLAGS):
        name = next(f for f in VNNI_FLAGS if f in have)
        isa, rr, why = "vnni", False, f"VNNI ({name}): u8 x s8 dot products accumulate in int32: 8-bit weights, " \
                                      "per channel"
    else:
        isa, rr, why = "avx2", True, ("no VNNI/AMX flag: ORT's AVX2 u8 x s8 kernel (vpmaddubsw) saturates its int16 "
                                      "pair sums: 7-bit weights (reduce_range), per channel to keep resolution")
    if saturates is not None and saturates != rr:
        why += (f"; but the engine's probe says its u8 x s8 kernel {'saturates' if saturates else 'does not saturate'}"
                f" here: reduce_range={saturates} (what the engine does wins)")
        rr = saturates
    return Int8KernelChoice(True, rr, isa, why, seen, saturates)


@lru_cache(maxsize=2)
def machine_int8_choice(probe: bool = True) -> Int8KernelChoice:
    """The choice for this machine: the OS's flags, checked by the engine's probe (``probe``: ask ORT)."""
    return int8_kernel_choice(cpu_flags(), platform.machine(), u8s8_saturates() if probe else None)
