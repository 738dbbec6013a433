"""What OpenVINO CPU allocates for intermediate tensors (the allocation shim's reading of the
workspace re-allocated after ``release_memory()``), checked against hand-computed bounds on element-wise
chains and against OpenVINO's own compiled graph, read here with openvino directly."""

from __future__ import annotations

import numpy as np
import onnx
import openvino as ov
from onnx import TensorProto as T
from onnx import helper as oh
from onnx import numpy_helper

from studio import api
from studio.inspect.memory_measure import measure_openvino_activations, measure_ort_activations
from studio.inspect.memory_report import OV_MEASURE_WHAT
from tests.conftest import SAMPLES

N = 64 * 1024                       # elements of each chain tensor (256 KiB in float32, a multiple of 32 B)
_CONFIG = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}


def _chain(path, ops: list[str], n: int = N, batch: int | str = 1):
    """x[batch, n] -> ops ... -> y; a binary op takes a constant vector as its second input."""
    nodes, inits, prev = [], [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        if op in ("Add", "Mul", "Sub"):
            inits.append(numpy_helper.from_array(np.full([n], 1.5, np.float32), f"c{i}"))
            nodes.append(oh.make_node(op, [prev, f"c{i}"], [out], name=f"n{i}"))
        else:
            nodes.append(oh.make_node(op, [prev], [out], name=f"n{i}", **({"axis": 1} if op == "Softmax" else {})))
        prev = out
    g = oh.make_graph(nodes, "chain", [oh.make_tensor_value_info("x", T.FLOAT, [batch, n])],
                      [oh.make_tensor_value_info("y", T.FLOAT, [batch, n])], inits)
    onnx.save(oh.make_model(g, opset_imports=[oh.make_opsetid("", 17)]), str(path))
    return path


def _runtime_intermediate_bytes(path) -> int:
    """Bytes of every tensor of OpenVINO's compiled graph that is neither an input, an output nor a
    weight, each counted once (no reuse): an upper bound of any workspace that holds them."""
    compiled = ov.Core().compile_model(str(path), "CPU", _CONFIG)
    kind = lambda node: node.get_rt_info()["layerType"].astype(str)  # noqa: E731
    total = 0
    for op in compiled.get_runtime_model().get_ops():
        if kind(op) in ("Input", "Output", "Const"):
            continue
        for out in op.outputs():
            if any(kind(t.get_node()) == "Output" for t in out.get_target_inputs()):
                continue
            total += int(np.prod(list(out.get_partial_shape().to_shape()))) * out.get_element_type().size
    return total


# Add and Mul/Sub are element-wise snippets, each Softmax reads one tensor and writes another: the four
# intermediates t0..t3 are 4 N bytes each and at most two of them are live at once.
_UNFUSABLE = ["Add", "Softmax", "Mul", "Softmax", "Sub"]


def test_chain_workspace_holds_two_intermediates_and_grows_with_them(tmp_path):
    small = measure_openvino_activations(_chain(tmp_path / "s.onnx", _UNFUSABLE))
    big = measure_openvino_activations(_chain(tmp_path / "b.onnx", _UNFUSABLE, n=2 * N))
    assert small.static_shapes and small.runtime_nodes >= 5
    # by hand: at least one intermediate, at most the two live around a node; not all four (reuse)
    assert 4 * N <= small.workspace_bytes <= 2 * 4 * N
    assert small.workspace_bytes <= _runtime_intermediate_bytes(tmp_path / "s.onnx")   # OpenVINO's own graph
    # the mechanism: the intermediates double, so does the workspace
    assert big.workspace_bytes == 2 * small.workspace_bytes
    # a longer chain of the same tensors reuses the same two buffers
    longer = measure_openvino_activations(_chain(tmp_path / "l.onnx", _UNFUSABLE + ["Softmax", "Add", "Softmax"]))
    assert longer.workspace_bytes == small.workspace_bytes


def test_fused_chain_has_no_intermediates_where_ort_keeps_them(tmp_path):
    path = _chain(tmp_path / "f.onnx", ["Relu", "Sigmoid", "Tanh", "Exp", "Relu"])
    m = measure_openvino_activations(path)
    # OpenVINO fuses the element-wise chain into one node writing the output: nothing in between
    assert _runtime_intermediate_bytes(path) == 0 == m.workspace_bytes and m.runtime_nodes == 1
    assert measure_ort_activations(path).pattern_bytes >= 4 * N           # ORT runs five kernels


def test_report_measures_both_engines_at_the_plan_dims(tmp_path):
    path = _chain(tmp_path / "d.onnx", _UNFUSABLE, batch="B")
    h = api.load(path)
    one, two = (api.memory_plan(h, {"B": b}, measure=True, engine_graph=False) for b in (1, 2))
    for r, b in ((one, 1), (two, 2)):
        ort_m, ov_m = r.measured
        assert (ort_m.engine, ov_m.engine) == ("onnxruntime", "openvino")
        assert ort_m.error is None and ov_m.error is None and ov_m.what == OV_MEASURE_WHAT
        assert ov_m.predicted_bytes == r.plan.arena_bytes == 2 * 4 * N * b     # the plan: two buffers
        direct = measure_openvino_activations(path, feeds={"x": np.zeros([b, N], np.float32)})
        assert ov_m.measured_bytes == direct.workspace_bytes and direct.static_shapes
        assert ov_m.relative_error == (ov_m.predicted_bytes - ov_m.measured_bytes) / ov_m.measured_bytes
    assert two.measured[1].measured_bytes == 2 * one.measured[1].measured_bytes   # compiled at B=2, not B=1


def test_an_engine_that_cannot_run_the_model_is_its_own_error_line():
    r = api.memory_plan(api.load(SAMPLES / "com_microsoft_gridsample.onnx"), measure=True, engine_graph=False)
    ort_m, ov_m = r.measured
    assert ort_m.error is None and ort_m.measured_bytes is not None        # ORT runs its own contrib op
    assert ov_m.measured_bytes is None and ov_m.relative_error is None
    assert "\n" not in ov_m.error and "com.microsoft.GridSample" in ov_m.error
    assert "OpenVINO could not run the model" in ov_m.error and "Exception from src/" not in ov_m.error
