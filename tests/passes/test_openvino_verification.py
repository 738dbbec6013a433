"""The openvino preset's results are checked on OpenVINO too (the engine the preset is made for).

Oracle: plain ``openvino.Core()`` (read_model + compile_model on CPU) on the input and on what a pass or a
peer candidate makes of it, and plain onnxruntime. OpenVINO 2026 refuses two real things ONNX Runtime runs:
LayerNormalization with ``stash_type=0`` (its CPU plugin: "cpu_convert can't convert from: f32 precision to:
dynamic") and the ``Det`` op (its ONNX frontend: "No conversion rule found for operations: Det-17").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.parser
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from passes.pipeline import run_passes, run_pipeline
from passes.registry import make_pass
from studio.core.requests import OptimizeRequest
from tests.conftest import save


def _ov_compile_error(path: Path) -> str | None:
    """Oracle: why plain OpenVINO cannot read + compile the model on CPU, or None when it can."""
    import openvino as ov

    core = ov.Core()
    try:
        core.compile_model(core.read_model(str(path)), "CPU")
    except Exception as exc:  # noqa: BLE001 - what OpenVINO raises is the answer
        return str(exc)
    return None


def _ort(path: Path, feeds: dict) -> list:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)


def _layernorm_identity() -> onnx.ModelProto:
    """LayerNormalization (stash_type 1, the default) then an Identity: 2 nodes OpenVINO compiles."""
    text = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[2,8,16] x) => (float[2,8,16] y) {
  n = LayerNormalization<axis = -1>(x, gm, bt)
  y = Identity(n)
}"""
    model = onnx.parser.parse_model(text)
    model.graph.initializer.extend(helper.make_tensor(n, TensorProto.FLOAT, [16], np.linspace(0.5, 1.5, 16))
                                   for n in ("gm", "bt"))
    return model


def _register(monkeypatch) -> None:
    """test-stash-float: LayerNormalization's stash_type 1 -> 0 (the same values on ORT for float32 inputs) and
    the Identity after it dropped (one node fewer); test-choose-stash: it as a peer candidate. Registered for
    one test (the registry is restored after it)."""
    from passes import registry
    from passes.base import Change, StudioPass, result
    from passes.ir_helpers import forward, is_onnx_op
    from passes.registry import register

    registry.known_passes()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register
    class StashFloat(StudioPass):
        name = "test-stash-float"

        def call(self, model):
            for node in list(model.graph):
                if is_onnx_op(node, "LayerNormalization"):
                    node.attributes["stash_type"] = ir.AttrInt64("stash_type", 0)
                elif is_onnx_op(node, "Identity"):
                    forward(node, node.inputs[0], node.outputs[0])
            return result(model, [Change("changed", ("LayerNormalization",), "stash_type 0")])

    @register
    class Choose(StudioPass):
        name = "test-choose-stash"
        candidates = ("test-stash-float",)


def test_openvino_preset_refuses_a_pass_openvino_cannot_compile(tmp_path, monkeypatch):
    """The pass's result runs on ORT with the same numbers (safe preset: kept) but OpenVINO no longer compiles
    it, though it compiles the input: in the openvino preset the run stops naming the pass and OpenVINO's
    reason, and nothing is written; with --on-failure revert the pass is reverted and the result compiles."""
    _register(monkeypatch)
    src = save(_layernorm_identity(), tmp_path / "in" / "m.onnx")
    alone = run_pipeline(src, OptimizeRequest(preset="safe"), tmp_path / "alone" / "m.onnx",
                         passes=[make_pass("test-stash-float")])
    assert alone.ok and alone.records[0].status == "changed", alone.records[0].message
    x = np.random.default_rng(0).random((2, 8, 16), dtype=np.float32)
    np.testing.assert_allclose(_ort(alone.output, {"x": x})[0], _ort(src, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert _ov_compile_error(src) is None                          # the oracle: OpenVINO compiles the input
    assert "f32 precision to: dynamic" in (_ov_compile_error(alone.output) or "")   # and refuses the result

    out = tmp_path / "ov" / "m.onnx"
    r = run_pipeline(src, OptimizeRequest(preset="openvino"), out, passes=[make_pass("test-stash-float")],
                     partial="none")
    rec = r.records[0]
    assert not r.ok and r.stopped_at == "test-stash-float" and rec.status == "failed", rec.message
    assert r.output is None and not out.exists()
    assert rec.message.startswith("pass 'test-stash-float' broke the model: OpenVINO cannot compile the result, "
                                  "though it compiles the original"), rec.message
    assert "f32 precision to: dynamic" in rec.message
    assert "OpenVINO cannot compile the result" in r.to_dict()["summary"]

    reverted = run_pipeline(src, OptimizeRequest(preset="openvino", on_failure="revert"),
                            tmp_path / "rev" / "m.onnx", passes=[make_pass("test-stash-float")])
    assert reverted.records[0].status == "reverted", reverted.records[0].message    # reverted: ok is False
    kept = onnx.load(str(reverted.output)).graph.node             # the input as it was: 2 nodes, no stash_type
    assert len(kept) == 2 and not [a for a in kept[0].attribute if a.name == "stash_type"]
    assert _ov_compile_error(reverted.output) is None
    assert "OpenVINO CPU runs the original" in reverted.reference


def test_openvino_preset_says_when_openvino_cannot_load_the_original(tmp_path):
    """Det is an op ORT runs and OpenVINO's frontend has no rule for: the preset's passes are verified on ORT as
    always, and the run's reference line says OpenVINO cannot load the original either (not a silent pass)."""
    text = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[3,2,2] x) => (float[3] y) {
  i = Identity(x)
  y = Det(i)
}"""
    src = save(onnx.parser.parse_model(text), tmp_path / "in" / "m.onnx")
    assert "Det" in (_ov_compile_error(src) or "")               # the oracle: OpenVINO refuses the original
    r = run_pipeline(src, OptimizeRequest(preset="openvino"), tmp_path / "out" / "m.onnx",
                     passes=[make_pass("eliminate-identity")])
    assert r.ok and r.records[0].status == "changed", r.records[0].message
    assert "; OpenVINO cannot load the original either, so results are not checked on it: " in r.reference
    assert r.reference.endswith("No conversion rule found for operations: Det-17"), r.reference
    assert r.to_dict()["reference"] == r.reference
    plain = run_pipeline(src, OptimizeRequest(preset="safe"), tmp_path / "safe" / "m.onnx",
                         passes=[make_pass("eliminate-identity")])
    assert "OpenVINO" not in plain.reference                      # only the openvino preset asks OpenVINO


@pytest.mark.parametrize("preset", [None, "openvino"])
def test_a_peer_candidate_openvino_cannot_compile_is_refused(preset, tmp_path, monkeypatch):
    """best-of-peers judged by OpenVINO: a verified candidate (smaller, the same values on ORT) that OpenVINO
    cannot compile is refused with OpenVINO's reason, never taken 'not compared'; the input stays."""
    _register(monkeypatch)
    src = save(_layernorm_identity(), tmp_path / "in" / "m.onnx")
    alone = run_passes(src, [make_pass("test-stash-float")], tmp_path / "alone" / "m.onnx")
    assert alone.ok and alone.records[0].status == "changed"          # ORT's verification passes it
    assert _ov_compile_error(alone.output) is not None and _ov_compile_error(src) is None
    chooser = make_pass("test-choose-stash", engine="openvino")
    r = run_pipeline(src, OptimizeRequest(preset=preset, passes=None if preset else ("test-choose-stash",)),
                     tmp_path / "out" / "m.onnx", passes=[chooser])
    rec = r.records[0]
    assert r.ok and not r.modified, rec.notes
    refusal = ("test-stash-float: refused, OpenVINO cannot compile it: " if preset is None else
               "test-stash-float: refused, OpenVINO cannot compile the result, though it compiles the original")
    assert any(n.startswith(refusal) for n in rec.notes), rec.notes
    assert not any("not compared" in n for n in rec.notes), rec.notes
    assert len(onnx.load(str(r.output)).graph.node) == 2 and _ov_compile_error(r.output) is None


def test_openvino_preset_checks_a_model_with_external_data(tmp_path):
    """OpenVINO reads external data only beside the file (no data folder option, no link out of its folder):
    the preset's checkpoints carry their data, so a model with external weights is checked there, not refused.
    Oracle: plain OpenVINO compiles the saved result; plain ORT gives the original's values."""
    text = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[2,64] x) => (float[2,64] y) {
  i = Identity(x)
  y = MatMul(i, w)
}"""
    model = onnx.parser.parse_model(text)
    model.graph.initializer.append(helper.make_tensor("w", TensorProto.FLOAT, [64, 64],
                                                      np.linspace(-1, 1, 64 * 64, dtype=np.float32)))
    src = tmp_path / "in" / "m.onnx"
    src.parent.mkdir(parents=True)
    onnx.save_model(model, str(src), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    r = run_pipeline(src, OptimizeRequest(preset="openvino"), tmp_path / "out" / "m.onnx",
                     passes=[make_pass("eliminate-identity")])
    assert r.ok and r.records[0].status == "changed", r.records[0].message
    assert "OpenVINO CPU runs the original; each changed result was compiled and compared" in r.reference
    assert _ov_compile_error(r.output) is None
    x = np.random.default_rng(1).random((2, 64), dtype=np.float32)
    np.testing.assert_allclose(_ort(r.output, {"x": x})[0], _ort(src, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_openvino_preset_refuses_a_pass_openvino_computes_differently(tmp_path, monkeypatch):
    """Resize to sizes [2, 3] with keep_aspect_ratio_policy=not_larger on a 4x4 image is a 2x2 output (the
    smaller scale, 0.5, on both axes): ORT gives exactly the original's Resize to [2, 2]; OpenVINO compiles it
    but ignores the policy and returns 2x3. The safe preset keeps the pass; the openvino preset compares the
    result with the original on OpenVINO and refuses it, naming the output and both shapes."""
    from passes import registry
    from passes.base import Change, StudioPass, result
    from passes.registry import register

    registry.known_passes()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register
    class KeepAspect(StudioPass):
        name = "test-keep-aspect"

        def call(self, model):
            for node in model.graph:
                if node.op_type == "Resize":
                    sizes = ir.Value(name="sz2", const_value=ir.tensor(np.array([2, 3], np.int64), name="sz2"))
                    model.graph.register_initializer(sizes)
                    node.replace_input_with(3, sizes)
                    node.attributes["axes"] = ir.AttrInt64s("axes", [2, 3])
                    node.attributes["keep_aspect_ratio_policy"] = ir.AttrString("keep_aspect_ratio_policy",
                                                                                "not_larger")
            return result(model, [Change("changed", ("Resize",), "sizes with a policy")])

    text = '<ir_version: 8, opset_import: ["" : 18]>' + """
g (float[1,2,4,4] x) => (float[1,2,2,2] y) <int64[4] sz = {1, 2, 2, 2}> {
  y = Resize<mode = "nearest">(x, , , sz)
}"""
    src = save(onnx.parser.parse_model(text), tmp_path / "in" / "m.onnx")
    alone = run_pipeline(src, OptimizeRequest(preset="safe"), tmp_path / "alone" / "m.onnx",
                         passes=[make_pass("test-keep-aspect")])
    assert alone.ok and alone.records[0].status == "changed", alone.records[0].message
    x = np.random.default_rng(3).random((1, 2, 4, 4), dtype=np.float32)
    np.testing.assert_array_equal(_ort(alone.output, {"x": x})[0], _ort(src, {"x": x})[0])
    import openvino as ov                               # the oracle: plain OpenVINO on both files

    core = ov.Core()
    shapes = [tuple(core.compile_model(core.read_model(str(p)), "CPU")({"x": x})[0].shape)
              for p in (src, alone.output)]
    assert shapes == [(1, 2, 2, 2), (1, 2, 2, 3)]
    r = run_pipeline(src, OptimizeRequest(preset="openvino"), tmp_path / "ov" / "m.onnx",
                     passes=[make_pass("test-keep-aspect")], partial="none")
    rec = r.records[0]
    assert not r.ok and rec.status == "failed" and r.output is None, rec.message
    assert rec.message == ("pass 'test-keep-aspect' broke the model: OpenVINO computes the result differently "
                           "from the original: output 'y' differs: shape [1, 2, 2, 3] != reference [1, 2, 2, 2]")


def test_a_candidate_openvino_runs_only_at_the_input_shapes_is_counted_out_not_refused(tmp_path, monkeypatch):
    """A Reshape to a fed shape of dynamic length before a Conv: OpenVINO's frontend cannot read the file as it is
    (a tensor of unknown rank), so its compiled ops cannot be counted, but the runner converts it at the run's
    input shapes (silero_vad_half's onnxslim result). In the openvino preset the candidate's verification
    compiled and ran it there, so it is kept, its ops said uncounted, not refused as uncompilable."""
    from passes import registry
    from passes.base import Change, StudioPass, result
    from passes.ir_helpers import forward, is_onnx_op
    from passes.registry import register

    registry.known_passes()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register
    class DropIdentity(StudioPass):
        name = "test-drop-identity"

        def call(self, model):
            for node in list(model.graph):
                if is_onnx_op(node, "Identity"):
                    forward(node, node.inputs[0], node.outputs[0])
            return result(model, [Change("removed", ("Identity",), "dropped")])

    @register
    class Choose(StudioPass):
        name = "test-choose-dropped"
        candidates = ("test-drop-identity",)

    V = helper.make_tensor_value_info
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 1, 5], np.linspace(-1, 1, 40, dtype=np.float32))
    g = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["r"]),
                           helper.make_node("Conv", ["r", "w"], ["c"]), helper.make_node("Identity", ["c"], ["y"])],
                          "g", [V("x", TensorProto.FLOAT, [1, "m"]), V("shape", TensorProto.INT64, ["n"])],
                          [V("y", TensorProto.FLOAT, [1, 8, "l"])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = save(model, tmp_path / "in" / "m.onnx")
    assert "Conv" in (_ov_compile_error(src) or "")          # the oracle: plain OpenVINO cannot read it as it is
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 16)).astype(np.float32),
             "shape": np.array([1, 1, 16], np.int64)}
    r = run_pipeline(src, OptimizeRequest(preset="openvino"), tmp_path / "out" / "m.onnx",
                     passes=[make_pass("test-choose-dropped", engine="openvino")], feeds=[feeds])
    rec = r.records[0]
    assert r.ok and rec.status == "changed", rec.notes
    assert "OpenVINO CPU runs the original" in r.reference, r.reference
    assert any(n.startswith("test-drop-identity: OpenVINO compiled and ran it at the input shapes (its "
                            "verification); its compiled ops not counted") for n in rec.notes), rec.notes
    assert not any("cannot compile" in n or "not compared" in n for n in rec.notes), rec.notes
    assert len(onnx.load(str(r.output)).graph.node) == 2
    np.testing.assert_allclose(_ort(r.output, feeds)[0], _ort(src, feeds)[0], rtol=1e-6, atol=1e-6)
