"""The safe preset never grows a file. onnx-ir writes a value_info for every initializer (a copy of the dtype and
dims its TensorProto holds), so a PyTorch export with many weights and none of those entries grew although the
passes removed nodes (corpus brainmaze_spindle_eeg: 2,817,943 -> 2,824,386 bytes). Oracle: plain onnxruntime,
optimizer off and on, at two batch sizes; the file sizes read from disk."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from passes.pipeline import resolve_passes, run_passes
from tests.conftest import save
from tests.passes.pass_helpers import assert_plain_ort_equal


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
    assert_plain_ort_equal(src, r.output, [{"x": np.random.default_rng(b).standard_normal((b, 4, 8, 8)).astype(np.float32)}
                                           for b in (1, 3)])


def test_the_written_model_keeps_its_initializer_types_in_memory(tmp_path):
    """The entries are left out of the file only: the in-memory model a pass goes on with keeps them."""
    import onnx_ir as ir

    from studio.core.save import save_model

    model = ir.from_proto(_conv_stack(2))
    save_model(model, tmp_path / "out" / "m.onnx")
    w = model.graph.initializers["layer0.weight"]
    assert w.dtype == ir.DataType.FLOAT and list(w.shape) == [4, 4, 1, 1]
    assert not onnx.load(str(tmp_path / "out" / "m.onnx")).graph.value_info


def _focus() -> onnx.ModelProto:
    """YOLOX's Focus: x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2], x[..., 1::2, 1::2] as a Slice on H
    then one on W each, concatenated; every Slice reads shared starts/ends/axes/steps initializers; numbered
    names, as torch.onnx 1.x wrote them (ddddocr_common_det)."""
    big = np.iinfo(np.int64).max
    zero, one, end, h_axis, w_axis, step = "461", "462", "463", "464", "465", "466"
    inits = [numpy_helper.from_array(np.array([v], np.int64), n) for n, v in
             ((zero, 0), (one, 1), (end, big), (h_axis, 2), (w_axis, 3), (step, 2))]
    nodes, outs = [], []
    for h in (0, 1):
        nodes.append(helper.make_node("Slice", ["x", (zero, one)[h], end, h_axis, step], [f"47{h}"]))
        for w in (0, 1):
            outs.append(f"48{2 * h + w}")
            nodes.append(helper.make_node("Slice", [f"47{h}", (zero, one)[w], end, w_axis, step], [outs[-1]]))
    nodes.append(helper.make_node("Concat", outs, ["y"], axis=1))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12, 4, 4])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def test_the_safe_preset_shares_the_constants_a_fusion_writes(tmp_path):
    """merge-reshapes gives each merged Slice its own starts/ends/axes/steps: the four Slices' equal ends, axes and
    steps must end up one initializer each (old code: four copies each; corpus ddddocr_common_det grew
    20,127,694 -> 20,127,836 bytes, now 20,127,527). No size check here: on a file holding only the Focus, the
    merged Slices' two-value starts outweigh the two Slices removed (476 -> 607 bytes, 916 on the old code)."""
    src = save(_focus(), tmp_path / "in" / "m.onnx")
    r = run_passes(src, resolve_passes("safe"), tmp_path / "out" / "m.onnx")
    assert r.ok, [rec.message for rec in r.records]
    out = onnx.load(str(r.output))
    assert [n.op_type for n in out.graph.node] == ["Slice"] * 4 + ["Concat"]          # the H Slices merged away
    assert len({n.input[3] for n in out.graph.node[:4]}) == 1                          # one axes initializer
    assert len(out.graph.initializer) == 7, [t.name for t in out.graph.initializer]   # 4 starts, ends, axes, steps
    assert_plain_ort_equal(src, r.output, [{"x": np.random.default_rng(b).standard_normal((b, 3, 8, 8)).astype(np.float32)}
                                           for b in (1, 2)], exact=True)
