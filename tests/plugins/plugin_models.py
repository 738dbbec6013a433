"""Shared helpers of the plugin tests: the mmdeploy sample's handle and signature (captured once per
session), tiny models with custom ops, and the generated ORT Python body with a line injected."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import SAMPLES

MMDEPLOY = SAMPLES / "mmdeploy_grid_sampler.onnx"
OP = "mmdeploy::grid_sampler"


@pytest.fixture(scope="session")
def mm_handle():
    from studio import api

    return api.load(MMDEPLOY)


@pytest.fixture(scope="session")
def mm_sig(mm_handle):
    from studio import api

    return api.plugin_signature(mm_handle, OP)


@pytest.fixture(scope="session")
def ort_body(mm_sig):
    from studio.plugins.scaffold import render_python_impl

    return render_python_impl(mm_sig, "ort-python")


def inject(body: str, line: str) -> str:
    """The generated compute() with ``line`` run first (8-space lines stay inside the function)."""
    anchor = "    mode = _MODES[int(interpolation_mode)]\n"
    assert anchor in body
    return body.replace(anchor, line + anchor, 1)


def all_modes_model(rank: int = 4) -> onnx.ModelProto:
    """Relu -> 18 mmdeploy::grid_sampler nodes (every mode x padding x align_corners), one output each."""
    spatial = [5, 6] if rank == 4 else [3, 4, 5]
    grid_shape = [1, 3, 4, 2] if rank == 4 else [1, 2, 3, 4, 3]
    nodes = [helper.make_node("Relu", ["x"], ["xr"], name="relu")]
    outputs = []
    for mode in range(3 if rank == 4 else 2):
        for pad in range(3):
            for align in range(2):
                name = f"y_m{mode}_p{pad}_a{align}"
                nodes.append(helper.make_node("grid_sampler", ["xr", "grid"], [name], name=f"gs_{name}",
                                              domain="mmdeploy", interpolation_mode=mode, padding_mode=pad,
                                              align_corners=align))
                outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "all_modes", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, *spatial]),
        helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("mmdeploy", 1)])


def unknown_op_model() -> onnx.ModelProto:
    """Abs -> acme::Swizzle(alpha=0.5, tag='x') -> Neg; no reference is known for acme::Swizzle."""
    nodes = [helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("Swizzle", ["a"], ["s"], name="swz", domain="acme", alpha=0.5, tag="x", axes=[1, 2]),
             helper.make_node("Neg", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "unknown", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("acme", 1)])


def custom_op_model() -> onnx.ModelProto:
    """Abs -> my.dom::Foo(alpha=2.0) -> Neg with a symbolic batch dim N; the model declares Foo's output as
    float32[N,3]. No reference is known for my.dom::Foo: the normal case for a truly custom op."""
    nodes = [helper.make_node("Abs", ["x"], ["a"]),
             helper.make_node("Foo", ["a"], ["f"], name="foo", domain="my.dom", alpha=2.0),
             helper.make_node("Neg", ["f"], ["y"])]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              value_info=[helper.make_tensor_value_info("f", TensorProto.FLOAT, ["N", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.dom", 1)])


FOO_COMPUTE = ("import numpy as np\n"
               "def compute(input0, *, alpha=1.0):\n"
               "    return (input0 * alpha).astype(np.float32)\n")
FOO_COMPUTE_F64 = ("import numpy as np\n"
                   "def compute(input0, *, alpha=1.0):\n"
                   "    return input0.astype(np.float64) * alpha\n")
FOO_CONVERT = ("import numpy as np\n"
               "import openvino.opset13 as ops\n"
               "def convert(node):\n"
               "    alpha = float(node.get_attribute('alpha', 1.0))\n"
               "    return [ops.multiply(node.get_input(0), ops.constant(np.float32(alpha))).output(0)]\n")


def require_tool(tool) -> None:
    """Skip when a build tool is missing here; fail in CI, which must have them all (tests/requirements.py)."""
    from tests.requirements import strict

    if tool.ok:
        return
    if strict():
        pytest.fail(f"CI: required build tool missing: {tool.reason}", pytrace=False)
    pytest.skip(tool.reason)


def scaffold_all_modes(folder, *, rank: int, samples: int, targets: str):
    """(handle, signature, scaffold) for the every-mode grid sampler model of ``rank``."""
    from studio import api
    from studio.plugins.signature import collect_signature
    from tests.conftest import save

    handle = api.load(save(all_modes_model(rank=rank), folder / f"all_modes_{rank}d.onnx"))
    sig = collect_signature(handle, OP, max_nodes=samples)
    assert len(sig.samples) == samples and sig.model_outputs is not None
    return handle, sig, api.scaffold_plugin(handle, OP, targets, folder / "plugins", signature=sig)
