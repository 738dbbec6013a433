"""The safe preset never grows a file. onnx-ir writes a value_info for every initializer (a copy of the dtype and
dims its TensorProto holds), so a PyTorch export with many weights and none of those entries grew although the
passes removed nodes (corpus brainmaze_spindle_eeg: 2,817,943 -> 2,824,386 bytes). Oracle: plain onnxruntime,
optimizer off and on, at two batch sizes; the file sizes read from disk."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from passes.pipeline import resolve_passes, run_passes
from tests.conftest import save


def _conv_stack(layers: int = 24) -> onnx.ModelProto:
    """x -> Identity -> ``layers`` x (Conv 1x1 with bias, Relu) -> y: small weights, many initializers, no
    value_info for them (as torch.onnx writes), one Identity for the preset to remove."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [helper.make_node("Identity", ["x"], ["x0"])], [], "x0"
    for i in range(layers):
        inits += [numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), f"layer{i}.weight"),
                  numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), f"layer{i}.bias")]
        nodes += [helper.make_node("Conv", [prev, f"layer{i}.weight", f"layer{i}.bias"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        prev = f"r{i}"
    nodes[-1].output[0] = "y"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_the_safe_preset_does_not_grow_a_file_of_many_initializers(tmp_path):
    src = save(_conv_stack(), tmp_path / "in" / "m.onnx")
    r = run_passes(src, resolve_passes("safe"), tmp_path / "out" / "m.onnx")
    assert r.ok, [rec.message for rec in r.records]
    out = onnx.load(str(r.output))
    assert len(out.graph.node) == 48                     # the Identity removed
    initializers = {t.name for t in out.graph.initializer}
    assert not [v.name for v in out.graph.value_info if v.name in initializers]   # old code: all 48
    assert r.output.stat().st_size <= src.stat().st_size, (src.stat().st_size, r.output.stat().st_size)
    onnx.checker.check_model(out, full_check=True)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 4, 8, 8)).astype(np.float32)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        ref = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            got = ort.InferenceSession(str(r.output), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_the_written_model_keeps_its_initializer_types_in_memory(tmp_path):
    """The entries are left out of the file only: the in-memory model a pass goes on with keeps them."""
    import onnx_ir as ir

    from studio.core.save import save_model

    model = ir.from_proto(_conv_stack(2))
    save_model(model, tmp_path / "out" / "m.onnx")
    w = model.graph.initializers["layer0.weight"]
    assert w.dtype == ir.DataType.FLOAT and list(w.shape) == [4, 4, 1, 1]
    assert not onnx.load(str(tmp_path / "out" / "m.onnx")).graph.value_info
