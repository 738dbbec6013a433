"""fix-input-shapes, convert-opset and onnxsim (the passes that change the
interface, the opset, or come from another tool)."""

from __future__ import annotations

import onnx

from passes.pipeline import run_passes
from passes.registry import make_pass
from studio.verification.verifier import interface_problems
from tests.conftest import SAMPLES, parse_model, save
from tests.passes.pass_helpers import BATCH_RESHAPE, check_applies, check_skips, ops
from tests.requirements import require_module

H13 = '<ir_version: 8, opset_import: ["" : 13]>'


def _dims(path, kind="input"):
    m = onnx.load(str(path))
    vi = (m.graph.input if kind == "input" else m.graph.output)[0]
    return [d.dim_value or d.dim_param for d in vi.type.tensor_type.shape.dim]


def test_fix_input_shapes_then_folding_removes_the_shape_subgraph(tmp_path):
    r = check_applies(tmp_path, BATCH_RESHAPE, "fix-input-shapes", options={"dims": {"batch": 2}})
    assert _dims(r.output) == [2, 3, 4, 4] and _dims(r.output, "output") == [2, 48]
    folded = run_passes(r.output, [make_pass("fold-constants")], tmp_path / "folded" / "m.onnx")
    assert ops(folded.output) == ["Reshape"]
    # The interface changed exactly as asked, nothing else.
    original = onnx.load(str(tmp_path / "in-a" / "m.onnx"))
    assert interface_problems(original, onnx.load(str(folded.output)), {"batch": 2}) == []
    assert interface_problems(original, onnx.load(str(folded.output)))


def test_fix_input_shapes_needs_dims_and_names_unknown_ones(tmp_path):
    r = check_skips(tmp_path, BATCH_RESHAPE, "fix-input-shapes")
    assert "no dims given" in r.records[0].notes[0]
    r = check_skips(tmp_path / "unknown", BATCH_RESHAPE, "fix-input-shapes", options={"dims": {"sequence": 8}})
    assert "'sequence' is not a dim of any input" in r.records[0].notes[0]


def test_fix_input_shapes_rejects_bad_values(tmp_path):
    r = run_passes(save(parse_model(BATCH_RESHAPE), tmp_path / "m.onnx"),
                     [make_pass("fix-input-shapes", dims={"batch": 0})],
                     tmp_path / "o" / "m.onnx")
    assert r.records[0].status == "error" and "positive integer" in r.records[0].message


def test_convert_opset_up_and_missing_target(tmp_path):
    m = H13 + """
    g (float[N,8] x) => (float[N,1] y) <int64[1] ax = {-1}> {
      y = ReduceMean<axes=[-1]>(x)
    }"""
    r = check_applies(tmp_path, m, "convert-opset", options={"target": 18})
    assert onnx.load(str(r.output)).opset_import[0].version == 18
    assert "ReduceMean" in ops(r.output)
    assert "ai.onnx opset 13 -> 18" in r.records[0].changes[0].detail
    err = run_passes(tmp_path / "in-a" / "m.onnx", [make_pass("convert-opset")], tmp_path / "e" / "m.onnx")
    assert err.records[0].status == "error" and "needs a target opset" in err.records[0].message


def test_onnxsim_result_is_verified_like_any_pass(tmp_path):
    require_module("onnxsim")
    r = run_passes(SAMPLES / "cnn_unfused.onnx", [make_pass("onnxsim")], tmp_path / "o" / "m.onnx")
    rec = r.records[0]
    assert rec.status == "changed" and rec.verification.ok and rec.verification.numeric_status == "passed"
    assert "BatchNormalization" not in ops(r.output)
    assert any(c.kind == "removed" for c in rec.changes)


def test_onnxsim_result_that_grows_the_file_is_refused(tmp_path):
    """ConstantOfShape folded into a 256 KiB weight: onnxsim's result is refused, the input kept,
    unless the user raises onnxsim.max_growth."""
    require_module("onnxsim")
    m = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[256,256] x) => (float[256,256] y) {
        s = Constant <value = int64[2] {256, 256}> ()
        c = ConstantOfShape <value = float[1] {2.0}> (s)
        y = Mul(x, c)
    }"""
    src = save(parse_model(m), tmp_path / "in" / "m.onnx")
    r = run_passes(src, [make_pass("onnxsim")], tmp_path / "o" / "m.onnx")
    rec = r.records[0]
    assert r.ok and rec.status == "unchanged" and not rec.modified
    assert any("kept the input" in w for w in rec.warnings)
    assert (tmp_path / "o" / "m.onnx").stat().st_size < 2 * src.stat().st_size
    grown = run_passes(src, [make_pass("onnxsim", max_growth=1e6)], tmp_path / "g" / "m.onnx")
    assert grown.records[0].status == "changed" and "ConstantOfShape" not in ops(grown.output)


# An output dim the exporter named on its own: torch's 'AddstateN_dim_0' on Silero VAD's state output (held-out
# silero_vad_16k_op15: 'fix-input-shapes broke the model: output stateN dim AddstateN_dim_0 -> 2', the fix
# `check` recommends for it). Oracle: ONNX Runtime's own run of the original gives that output (2, 1, 3).
FREE_OUTPUT_DIM = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[batch,4] x, float[2,batch,3] s) => (float[batch,4] y, float[AddstateN_dim_0,batch,3] sn) {
  y = Relu(x)
  sn = Tanh(s)
}"""


def test_fix_input_shapes_makes_an_exporter_named_output_dim_its_real_size(tmp_path):
    import numpy as np
    import onnxruntime as ort

    src = save(parse_model(FREE_OUTPUT_DIM), tmp_path / "src.onnx")
    real = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(
        None, {"x": np.ones((1, 4), np.float32), "s": np.ones((2, 1, 3), np.float32)})[1].shape
    r = check_applies(tmp_path, FREE_OUTPUT_DIM, "fix-input-shapes", options={"dims": {"batch": 1}})
    assert _dims(r.output, "output") == [1, 4] and list(real) == [2, 1, 3]
    sn = onnx.load(str(r.output)).graph.output[1].type.tensor_type.shape.dim
    assert [d.dim_value for d in sn] == list(real)
    original = parse_model(FREE_OUTPUT_DIM)
    assert interface_problems(original, onnx.load(str(r.output))) != []     # not asked to fix: still a change
    assert any("input 's' dim" in p for p in interface_problems(
        parse_model(FREE_OUTPUT_DIM.replace("float[2,batch,3] s", "float[n,batch,3] s")),
        parse_model(FREE_OUTPUT_DIM), {"batch": 1}))        # an input's own dim stays strict


def test_fix_input_shapes_of_a_dim_named_with_dots(tmp_path):
    # paddle2onnx names free dims 'p2o.DynamicDimension.0' (corpus gutenye_ppocrv4_rec, --preset tensorrt):
    # the interface check did not read that name as a dim, so the asked-for pin failed its own pass
    # ("broke the model: input 'x' dim p2o.DynamicDimension.0 -> 1") and nothing was written.
    import numpy as np
    import onnxruntime as ort

    m = parse_model(BATCH_RESHAPE)
    name = "p2o.DynamicDimension.0"
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = name
    r = check_applies(tmp_path, m, "fix-input-shapes", options={"dims": {name: 2}})
    assert _dims(r.output) == [2, 3, 4, 4]
    x = np.random.default_rng(8).standard_normal((2, 3, 4, 4)).astype(np.float32)
    got = ort.InferenceSession(str(r.output), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.reshape(2, 48))
