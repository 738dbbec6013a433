"""What ONNX Runtime's INT8 kernels do on *this* CPU, asked of the engine itself.

ORT's uint8 x int8 GEMM on AVX2 without VNNI multiplies with ``vpmaddubsw``, whose pairwise int16
sums saturate (255 * 127 * 2 > 32767); with (AVX-)VNNI or AMX it does not. ORT documents
``reduce_range`` (7-bit weights) as the cure. Instead of reading CPU flags, the studio runs one tiny
``MatMulInteger`` whose exact answer is known and looks at what comes back: the expectation is
derived from the engine's own behaviour on the machine, whatever the CPU or ORT build.

Imports ``onnxruntime``, so call it where engines run (the sandbox worker, a pass that quantizes).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["u8s8_saturates"]

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
