"""Edit scripts (studio.edit): each result against a plain onnxruntime oracle (tests.conftest.ort_reference), and
every bad input refused in one line with the model untouched and nothing written."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import onnx
import pytest

from studio import api
from studio.core.errors import StudioError
from tests.conftest import ort_reference

DETECTOR = """<ir_version: 8, opset_import: ["" : 17]>
det (float[1,3,8,8] image) => (float[1,4,8,8] boxes, float[1,4,8,8] scores)
<float[4,3,3,3] w1 = {%s}, float[4,4,1,1] w2 = {%s}, float[4] b1 = {0.1, -0.2, 0.3, 0.0}> {
  c1 = Conv <pads = [1,1,1,1]> (image, w1, b1)
  feat = Relu(c1)
  same = Identity(feat)
  head = Conv(same, w2)
  boxes = Mul(head, head)
  scores = Sigmoid(head)
}"""


def _floats(n: int, seed: int) -> str:
    return ", ".join(f"{x:.4f}" for x in np.random.default_rng(seed).normal(size=n))


def _named(model: onnx.ModelProto) -> onnx.ModelProto:
    for i, n in enumerate(model.graph.node):
        n.name = n.name or f"{n.op_type.lower()}{i}"
    return model


@pytest.fixture()
def detector(tmp_path):
    m = _named(onnx.parser.parse_model(DETECTOR % (_floats(108, 1), _floats(16, 2))))
    path = tmp_path / "det.onnx"
    onnx.save(m, path)
    return path


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _exposed(path, *names) -> onnx.ModelProto:
    """The original with inner tensors made outputs by hand (the oracle: onnx.helper, not studio.edit)."""
    m = onnx.load(path)
    for n in names:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    return m


FEEDS = {"image": np.random.default_rng(7).normal(size=(1, 3, 8, 8)).astype(np.float32)}


def test_add_output_at_inner_tensor_equals_the_original_intermediate(detector, tmp_path):
    out = tmp_path / "o" / "debug.onnx"
    res = api.edit(api.load(detector), [{"op": "add_output", "tensor": "feat"}], out)
    got = ort_reference(out, FEEDS)
    want = ort_reference(_exposed(detector, "feat"), FEEDS)
    np.testing.assert_allclose(got["feat"], want["feat"], rtol=0, atol=0)
    assert res.after[0]["outputs"][-1] == "feat: float[1,4,8,8]"       # typed by inference
    assert res.verification.method == "reproduce" and res.verification.status == "passed"
    onnx.checker.check_model(onnx.load(out), full_check=True)


def test_extract_backbone_and_cut_before_post_processing(detector, tmp_path):
    h = api.load(detector)
    backbone = tmp_path / "o" / "backbone.onnx"
    api.edit(h, [{"op": "extract", "inputs": ["image"], "outputs": ["feat"]}], backbone)
    cut = tmp_path / "o" / "raw_head.onnx"
    res = api.edit(h, [{"op": "extract", "inputs": ["image"], "outputs": ["head"]}], cut)
    want = ort_reference(_exposed(detector, "feat", "head"), FEEDS)
    np.testing.assert_array_equal(ort_reference(backbone, FEEDS)["feat"], want["feat"])
    np.testing.assert_array_equal(ort_reference(cut, FEEDS)["head"], want["head"])
    ops = [n.op_type for n in onnx.load(cut).graph.node]
    assert "Sigmoid" not in ops and "Mul" not in ops, ops
    assert res.verification.status == "passed" and res.verification.method == "reproduce"
    assert "sigmoid5 (Sigmoid)" in res.nodes_removed


def test_split_parts_run_in_sequence_equal_the_original(detector, tmp_path):
    out = tmp_path / "o" / "part.onnx"
    res = api.edit(api.load(detector), [{"op": "split", "cut": ["feat"]}], out)
    first, second = res.outputs
    assert second.name == "part.part2.onnx"
    mid = ort_reference(first, FEEDS)
    got = ort_reference(second, {"feat": mid["feat"]})
    want = ort_reference(detector, FEEDS)
    for k in ("boxes", "scores"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-6)


def test_bypass_identity_is_numerically_verified_and_rename_follows_into_subgraphs(tmp_path):
    m = _named(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x, bool c) => (float[2,3] y) {
  a = Relu(x)
  b = Identity(a)
  y = If(c) <then_branch = t () => (float[2,3] o) { o = Neg(b) }, else_branch = e () => (float[2,3] o2) { o2 = Abs(b) }>
}"""))
    src = tmp_path / "if.onnx"
    onnx.save(m, src)
    out = tmp_path / "o" / "if2.onnx"
    res = api.edit(api.load(src), [{"op": "bypass", "node": "identity1"},
                                   {"op": "rename", "tensors": {"a": "act", "y": "result"}}], out)
    assert res.verification.method == "numeric" and res.verification.status == "passed", res.verification
    edited = onnx.load(out)
    assert [n.op_type for n in edited.graph.node] == ["Relu", "If"]
    assert edited.graph.output[0].name == "result"
    branch_inputs = [i for a in edited.graph.node[1].attribute for n in a.g.node for i in n.input]
    assert branch_inputs == ["act", "act"]
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    for c in (True, False):
        feeds = {"x": x, "c": np.array(c)}
        np.testing.assert_array_equal(ort_reference(out, feeds)["result"], ort_reference(src, feeds)["y"])


def test_merge_preprocessing_in_front_of_a_classifier_equals_running_both(tmp_path):
    pre = _named(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
pre (uint8[1,4] raw) => (float[1,4] norm) <float[1] s = {0.5}> {
  f = Cast <to = 1> (raw)
  norm = Mul(f, s)
}"""))
    cls = _named(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
cls (float[1,4] input) => (float[1,2] logits) <float[4,2] w = {1.0, -1.0, 0.5, 2.0, -0.5, 1.5, 0.25, 0.0}> {
  logits = MatMul(input, w)
}"""))
    onnx.save(pre, tmp_path / "pre.onnx")
    onnx.save(cls, tmp_path / "cls.onnx")
    script = tmp_path / "merge.json"
    script.write_text(json.dumps([{"op": "merge", "model": "pre.onnx", "io_map": [["norm", "input"]]}]))
    out = tmp_path / "o" / "merged.onnx"
    res = api.edit(api.load(tmp_path / "cls.onnx"), api.edit_script(script), out)
    raw = np.array([[3, 250, 7, 0]], dtype=np.uint8)
    norm = ort_reference(tmp_path / "pre.onnx", {"raw": raw})["norm"]
    want = ort_reference(tmp_path / "cls.onnx", {"input": norm})["logits"]
    np.testing.assert_allclose(ort_reference(out, {"raw": raw})["logits"], want, rtol=1e-6)
    assert res.after[0]["inputs"] == ["raw: uint8[1,4]"] and res.before["inputs"] == ["input: float[1,4]"]


@pytest.mark.parametrize("script, words", [
    ([{"op": "bypass", "node": "no_such_node"}], "node 'no_such_node' does not exist"),
    ([{"op": "add_output", "tensor": "nope"}], "tensor 'nope' does not exist"),
    ([{"op": "extract", "inputs": ["feat"], "outputs": ["boxes", "c1"]}], "leaves input 'image' undefined"),
    ([{"op": "rewire", "node": "conv0", "input": 0, "tensor": "head"}], "creates a cycle"),
    ([{"op": "insert", "tensor": "feat", "op_type": "Cast", "attrs": {"to": "int64"}, "name": "to_int"},
      {"op": "bypass", "node": "to_int"}], "a bypass needs the same type and shape"),
    ([{"op": "set_input", "input": "image", "dtype": "float16"}], "strict shape inference"),
    ([{"op": "merge", "model": "bad_pre.onnx", "io_map": [["norm", "image"]]}], "types or shapes do not match"),
    ([{"op": "frobnicate"}], "unknown operation 'frobnicate'"),
    ([{"op": "rename", "tensors": {"feet": "x"}}], "tensor 'feet' does not exist in the model; did you mean 'feat'"),
    ([{"op": "rename", "tensors": {"feat": "head"}}], "'head' is already a tensor"),
    ([{"op": "set_attr", "node": "conv9", "name": "group", "value": 2}], "node 'conv9' does not exist"),
    ([{"op": "remove_attr", "node": "conv0", "name": "padz"}], "has no attribute 'padz'"),
    ([{"op": "insert", "tensor": "feat", "op_type": "Identity", "consumers": ["sigmoid5"]}],
     "does not read tensor 'feat'"),
    ([{"op": "remove_outputs", "outputs": ["logits"]}], "'logits' is not a graph output"),
    ([{"op": "replace_initializer", "name": "w2", "npy": "w_bad.npy"}], "give the same dtype and shape"),
    ([{"op": "split", "cut": ["nope"]}], "tensor 'nope' does not exist"),
    ([{"op": "add_opset", "domain": "", "version": 13}], "already imports ai.onnx at version 17"),
    ([{"op": "merge", "model": "bad_pre.onnx", "io_map": [["norm", "imag"]]}], "'imag' is not an input"),
    ([{"op": "split", "cut": ["feat"]}, {"op": "rename", "nodes": {"conv0": "c"}}], "must be the script's last"),
])
def test_bad_edits_are_one_line_errors_and_touch_nothing(detector, tmp_path, script, words):
    onnx.save(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
bad (float[1,3,8,8] raw) => (int64[1,3,8,8] norm) { norm = Cast <to = 7> (raw) }"""), tmp_path / "bad_pre.onnx")
    np.save(tmp_path / "w_bad.npy", np.zeros((4, 4), dtype=np.float32))
    (tmp_path / "s.json").write_text(json.dumps(script))
    before = _sha(detector)
    out = tmp_path / "o" / "x.onnx"
    with pytest.raises(StudioError) as err:
        api.edit(api.load(detector), api.edit_script(tmp_path / "s.json"), out)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert _sha(detector) == before
    assert not out.exists() and not out.parent.exists()


def test_cli_round_trip_with_project_records_the_script(detector, tmp_path, monkeypatch, capsys):
    from studio.cli import main

    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(tmp_path / "projects"))
    script = [{"op": "rename", "tensors": {"feat": "features"}}, {"op": "add_output", "tensor": "features"}]
    (tmp_path / "edits.json").write_text(json.dumps(script))
    out = tmp_path / "o" / "cli.onnx"
    code = main(["edit", str(detector), "--script", str(tmp_path / "edits.json"), "-o", str(out), "--json",
                 "--project", "p1"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["ok"] and report["script"] == script
    assert [o.name for o in onnx.load(out).graph.output] == ["boxes", "scores", "features"]
    project = api.open_project("p1")
    pm = api.project_models(project)[0]
    versions = api.project_model(project, pm.id).versions
    edited = [v for v in versions if v.id == report["version"]["id"]][0]
    assert edited.parent == report["version"]["parent"] and edited.provenance["edit"]["script"] == script
    # the recorded script replays to the same model
    replay = tmp_path / "o" / "replay.onnx"
    api.edit(api.load(detector), edited.provenance["edit"]["script"], replay)
    assert onnx.load(replay).graph == onnx.load(out).graph
    bad = main(["edit", str(detector), "--script", str(tmp_path / "missing.json"), "-o", str(tmp_path / "y.onnx")])
    assert bad == 2 and not (tmp_path / "y.onnx").exists()


def test_weights_input_shape_and_delete(detector, tmp_path):
    h = api.load(detector)
    w2 = np.full((4, 4, 1, 1), 0.25, dtype=np.float32)
    np.save(tmp_path / "w2.npy", w2)
    (tmp_path / "s.json").write_text(json.dumps([
        {"op": "replace_initializer", "name": "w2", "npy": "w2.npy"},
        {"op": "set_input", "input": "image", "dims": {"0": "N"}},
        {"op": "delete", "node": "mul4"}]))
    out = tmp_path / "o" / "w.onnx"
    res = api.edit(h, api.edit_script(tmp_path / "s.json"), out)
    assert res.verification.method == "none"              # values change on purpose: said, not compared
    by_hand = onnx.load(detector)
    by_hand.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(w2, "w2"))
    batch = {"image": np.concatenate([FEEDS["image"], FEEDS["image"] * 2])}
    got = ort_reference(out, batch)
    assert list(got) == ["scores"] and got["scores"].shape == (2, 4, 8, 8)
    np.testing.assert_allclose(got["scores"][1:], ort_reference(by_hand, {"image": batch["image"][1:]})["scores"],
                               rtol=1e-6)
    assert res.after[0]["inputs"] == ["image: float[N,3,8,8]"] and "mul4 (Mul)" in res.nodes_removed


def test_external_weights_stay_lazy_and_are_not_touched(detector, tmp_path):
    from studio.core.model_io import load_for_passes
    import onnx_ir as ir
    from studio.edit import parse_ops
    from studio.edit.apply import apply_script

    folder = tmp_path / "ext"
    folder.mkdir()
    m = onnx.load(detector)
    for t in m.graph.initializer:           # raw bytes, which external data needs
        t.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(t), t.name))
    onnx.save(m, folder / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    data_sha = _sha(folder / "m.data")
    script = parse_ops([{"op": "rename", "tensors": {"feat": "f"}}, {"op": "add_output", "tensor": "f"}])
    applied = apply_script(load_for_passes(folder / "m.onnx"), script)
    lazy = [v.name for v in applied.models[0].graph.initializers.values()
            if isinstance(v.const_value, ir.ExternalTensor)]
    assert sorted(lazy) == ["b1", "w1", "w2"]                     # never read into memory by the edit
    out = tmp_path / "o" / "ext.onnx"
    api.edit(api.load(folder / "m.onnx"), script, out)
    np.testing.assert_array_equal(ort_reference(out, FEEDS)["f"],
                                  ort_reference(_exposed(detector, "feat"), FEEDS)["feat"])
    assert _sha(folder / "m.data") == data_sha


def test_validate_writes_nothing_and_previews(detector, tmp_path):
    res = api.validate_edit_script(api.load(detector), [{"op": "remove_outputs", "outputs": ["boxes"]}])
    assert res.outputs == () and res.nodes_removed == ("mul4 (Mul)",)
    assert res.before["outputs"] == ["boxes: float[1,4,8,8]", "scores: float[1,4,8,8]"]
    assert res.after[0]["outputs"] == ["scores: float[1,4,8,8]"]


def test_uploaded_npy_replaces_a_weight(detector, tmp_path):
    """The UI's weight upload (api.save_npy_upload) gives the path the script names; a non-.npy is refused."""
    import io

    with pytest.raises(StudioError, match="not an .npy"):
        api.save_npy_upload(b"PK\x03\x04 a zip", tmp_path)
    w2 = np.random.default_rng(5).normal(size=(4, 4, 1, 1)).astype(np.float32)
    buf = io.BytesIO()
    np.save(buf, w2)
    saved = api.save_npy_upload(buf.getvalue(), tmp_path / "up", "../w2 new.npy")
    assert saved.parent == tmp_path / "up" and saved.suffix == ".npy"
    out = tmp_path / "o" / "w.onnx"
    api.edit(api.load(detector), [{"op": "replace_initializer", "name": "w2", "npy": str(saved)}], out)
    by_hand = onnx.load(detector)
    by_hand.graph.initializer[1].CopyFrom(onnx.numpy_helper.from_array(w2, "w2"))
    np.testing.assert_array_equal(ort_reference(out, FEEDS)["scores"], ort_reference(by_hand, FEEDS)["scores"])


@pytest.fixture(scope="module")
def genai_decoder(tmp_path_factory):
    """A tiny onnxruntime-genai LLaMA with external weights: com.microsoft ops (GroupQueryAttention,
    SkipSimplifiedLayerNormalization, RotaryEmbedding) that ONNX inference does not type."""
    from sample_models.decoders import LLAMA_TINY, write_large_decoder

    return write_large_decoder(tmp_path_factory.mktemp("genai"), shape=LLAMA_TINY, convention="genai")


def _decoder_feeds(shape, batch: int = 1, seq: int = 3, past: int = 2) -> dict:
    rng = np.random.default_rng(4)
    feeds = {"input_ids": rng.integers(0, shape.vocab, (batch, seq), dtype=np.int64),
             "attention_mask": np.ones((batch, past + seq), dtype=np.int64),
             "position_ids": np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))}
    for i in range(shape.layers):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.normal(
                size=(batch, shape.kv_heads, past, shape.head_dim)).astype(np.float32)
    return feeds


def test_contrib_op_decoder_with_external_data_renames_adds_outputs_and_fixes_dims(genai_decoder, tmp_path,
                                                                                     monkeypatch):
    """Run from another folder: a value-keeping edit is verified against weights read from the model's own
    folder (the verification's copy once looked for model.onnx.data in the working directory); an output
    behind com.microsoft ops gets its type (ONNX Runtime's symbolic inference) and the original's values
    (oracle: the tensor exposed by hand, plain ORT); an input dim fixed keeps the outputs' ranks."""
    from sample_models.decoders import LLAMA_TINY

    monkeypatch.chdir(tmp_path)
    h = api.load(genai_decoder)
    feeds = _decoder_feeds(LLAMA_TINY)
    want = ort_reference(genai_decoder, feeds)
    res = api.edit(h, [{"op": "rename", "tensors": {"logits": "scores"}}], tmp_path / "o" / "r.onnx")
    assert (res.verification.method, res.verification.status) == ("numeric", "passed"), res.verification
    np.testing.assert_array_equal(ort_reference(tmp_path / "o" / "r.onnx", feeds)["scores"], want["logits"])
    inner = "/model/layers.1/attn/o_proj/MatMul/output_0"
    res = api.edit(h, [{"op": "add_output", "tensor": inner}], tmp_path / "o" / "a.onnx")
    assert res.verification.status == "passed"
    assert res.after[0]["outputs"][-1] == f"{inner}: float[batch_size,sequence_length,{LLAMA_TINY.hidden}]"
    np.testing.assert_array_equal(ort_reference(tmp_path / "o" / "a.onnx", feeds)[inner],
                                  ort_reference(_exposed(genai_decoder, inner), feeds)[inner])
    res = api.edit(h, [{"op": "set_input", "input": "input_ids", "dims": {"sequence_length": 3}}],
                   tmp_path / "o" / "s.onnx")
    outs = {o.name: o for o in onnx.load(tmp_path / "o" / "s.onnx", load_external_data=False).graph.output}
    assert len(outs["logits"].type.tensor_type.shape.dim) == 3
    np.testing.assert_array_equal(ort_reference(tmp_path / "o" / "s.onnx", feeds)["logits"], want["logits"])


def test_pinning_a_free_dim_keeps_the_outputs_declared_dims(tmp_path):
    # Corpus romanizer_ar_decoder, memory's src_len pinned to 16: inference run again named logprobs' batch
    # 'unk__47' (the verification reported the interface changed). Here a view(b, -1) output: inference
    # leaves its second dim unnamed, although the pin changes no size of it. Oracle: plain ORT's shapes.
    m = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[batch,4] x, float[batch,src_len,4] mem) => (float[batch,4] y)
        <int64 i0 = {0}, int64[1] ax = {0}, int64[1] rest = {-1}> {
      s = Shape(x)
      b = Gather(s, i0)
      bu = Unsqueeze(b, ax)
      shp = Concat<axis=0>(bu, rest)
      mm = ReduceMean<axes = [1], keepdims = 0>(mem)
      a = Add(x, mm)
      y = Reshape(a, shp)
    }"""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(m), src)
    out = tmp_path / "o" / "s.onnx"
    res = api.edit(api.load(src), [{"op": "set_input", "input": "mem", "dims": {"src_len": 3}}], out)
    assert res.verification.status == "passed", res.verification
    dims = [d.dim_param or d.dim_value for d in onnx.load(out).graph.output[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 4]
    rng = np.random.default_rng(5)
    feeds = {"x": rng.normal(size=(2, 4)).astype(np.float32), "mem": rng.normal(size=(2, 3, 4)).astype(np.float32)}
    got = ort_reference(out, feeds)["y"]
    assert got.shape == (2, dims[1])
    np.testing.assert_array_equal(got, ort_reference(src, feeds)["y"])


def test_a_pin_beside_a_rename_and_an_added_output_is_reproduced_at_the_pinned_sizes(tmp_path):
    # A script that renames, exposes an inner tensor and pins a free dim was "numbers not compared" (a pin
    # was verified only alone). Now the original runs at the pinned sizes with the tensor exposed and the edit
    # must reproduce it. Oracle: plain ORT on the original with the tensor exposed by hand.
    m = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[batch,src_len,4] mem) => (float[batch,4] y) {
      inner = ReduceMean<axes = [1], keepdims = 0>(mem)
      y = Relu(inner)
    }"""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(m), src)
    exposed = onnx.parser.parse_model(m)
    exposed.graph.output.append(onnx.helper.make_tensor_value_info("inner", onnx.TensorProto.FLOAT, None))
    onnx.save(exposed, tmp_path / "exposed.onnx")
    out = tmp_path / "o" / "e.onnx"
    script = [{"op": "rename", "tensors": {"y": "act"}}, {"op": "add_output", "tensor": "inner"},
              {"op": "set_input", "input": "mem", "dims": {"src_len": 3}}]
    res = api.edit(api.load(src), script, out)
    assert (res.verification.method, res.verification.status) == ("reproduce", "passed"), res.verification
    assert "src_len=3" in res.verification.message and "2 outputs" in res.verification.message
    shape = [d.dim_param or d.dim_value for d in onnx.load(out).graph.input[0].type.tensor_type.shape.dim]
    assert shape == ["batch", 3, 4]
    feeds = {"mem": np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)}
    got, want = ort_reference(out, feeds), ort_reference(tmp_path / "exposed.onnx", feeds)
    np.testing.assert_array_equal(got["act"], want["y"])
    np.testing.assert_array_equal(got["inner"], want["inner"])


def test_a_renamed_node_is_reported_renamed_not_removed_and_added(detector, tmp_path):
    # A node rename read "removed 1 nodes: conv1 (Conv) / added 1 nodes: first (Conv)". Renamed twice in one
    # script, it is one rename from its original name to its last; the file's node names are the oracle.
    out = tmp_path / "o" / "r.onnx"
    first = onnx.load(detector).graph.node[0].name
    script = [{"op": "rename", "nodes": {first: "stem"}}, {"op": "rename", "nodes": {"stem": "stem2"}},
              {"op": "remove_outputs", "outputs": ["boxes"]}]
    res = api.edit(api.load(detector), script, out)
    op = onnx.load(detector).graph.node[0].op_type
    assert res.nodes_renamed == (f"{first} -> stem2 ({op})",)
    assert not any(n.startswith((f"{first} ", "stem2 ")) for n in (*res.nodes_removed, *res.nodes_added))
    assert "stem2" in [n.name for n in onnx.load(out).graph.node]
    assert res.nodes_removed == ("mul4 (Mul)",)          # the dead Mul behind the removed output


def test_a_named_dim_pinned_on_one_input_is_pinned_where_the_model_names_it(tmp_path):
    """Corpus romanizer_ar_encoder: src[batch,src_len] and src_mask[batch,src_len]; 'src_len' pinned to 16 on
    src left src_mask[batch,src_len] free, and plain ORT refused a mask of another length (Mul: 'Attempting to
    broadcast an axis by a dimension other than 1. 16 by 20'). The name is one size: every input naming it is
    pinned, the note says so. Oracle: plain ORT runs the edited model on feeds made from its own declared
    input shapes (batch 2) and gives the original's outputs; a dim named otherwise stays free."""
    m = """<ir_version: 8, opset_import: ["" : 17]>
    g (float[batch,L] x, float[batch,L] mask, float[batch,K] other) => (float[batch,L] y, float[batch,K] z) {
      y = Mul(x, mask)
      z = Relu(other)
    }"""
    src = tmp_path / "m.onnx"
    onnx.save(onnx.parser.parse_model(m), src)
    out = tmp_path / "o" / "pinned.onnx"
    res = api.edit(api.load(src), [{"op": "set_input", "input": "x", "dims": {"L": 5}}], out)
    assert res.verification.status == "passed", res.verification
    assert any("the same dim pinned in input 'mask' too: float[batch,L] -> float[batch,5]" in n for n in res.notes), \
        res.notes
    edited = onnx.load(out)
    declared = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in edited.graph.input}
    assert declared == {"x": ["batch", 5], "mask": ["batch", 5], "other": ["batch", "K"]}
    rng = np.random.default_rng(0)
    feeds = {name: rng.normal(size=[2 if d == "batch" else 3 if d == "K" else d for d in dims]).astype(np.float32)
             for name, dims in declared.items()}
    got, want = ort_reference(out, feeds), ort_reference(src, feeds)
    for k in ("y", "z"):
        np.testing.assert_array_equal(got[k], want[k])


def test_bypass_accepts_an_unnamed_dynamic_dim_on_the_graph_output(tmp_path):
    # Exporters often leave a graph output's batch dim unnamed while shape inference names the same dim
    # inside the graph (corpus silero_vad: 'If_0_outputs_0' float[unk__54,1] -> Identity -> 'output' float[?,1]);
    # both are the one dynamic dim, so bypassing the Identity is allowed. A fixed dim is never a dynamic one.
    from onnx import TensorProto, helper
    unnamed = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Identity", ["a"], ["y"], name="id")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])], [unnamed])
    src = tmp_path / "unnamed.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), src)
    out = tmp_path / "o" / "bypassed.onnx"
    res = api.edit(api.load(src), [{"op": "bypass", "node": "id"}], out)
    assert res.verification.status == "passed", res.verification
    edited = onnx.load(out)
    assert [n.op_type for n in edited.graph.node] == ["Relu"] and edited.graph.output[0].name == "y"
    dims = edited.graph.output[0].type.tensor_type.shape.dim      # the declared interface is kept
    assert [(d.dim_param, d.dim_value) for d in dims] == [("", 0), ("", 4)]
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_array_equal(ort_reference(out, {"x": x})["y"], np.maximum(x, 0))
    # a fixed dim against a dynamic one stays refused: Expand [1,4] -> [N,4] changes the shape
    expand = helper.make_graph(
        [helper.make_node("Expand", ["x", "s"], ["y"], name="ex")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor("s", TensorProto.INT64, [2], [3, 4])])
    onnx.save(helper.make_model(expand, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "ex.onnx")
    with pytest.raises(StudioError, match="a bypass needs the same type and shape"):
        api.edit(api.load(tmp_path / "ex.onnx"), [{"op": "bypass", "node": "ex"}], tmp_path / "o" / "ex2.onnx")


def test_interface_edit_is_verified_at_searched_sizes_when_the_seeded_ones_do_not_run(tmp_path):
    # A reflect Pad of 64 needs more than 64 samples: the seeded size of the free dim is refused by the
    # original (corpus silero_vad: 'Pad reflect: post-pad (64) exceeds maximum allowed (15)'). An edit that
    # changes the interface (add_output) was then 'skipped: ONNX Runtime cannot run the original'; the input
    # search finds sizes that run, as for value-keeping edits.
    model = onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
g (float[1,n] x) => (float[1,m] y) <int64[4] pads = {0, 64, 0, 64}> {
  p = Pad <mode = "reflect"> (x, pads)
  y = Relu(p)
}""")
    src = tmp_path / "pad.onnx"
    onnx.save(model, src)
    out = tmp_path / "o" / "pad2.onnx"
    res = api.edit(api.load(src), [{"op": "add_output", "tensor": "p"}], out)
    assert res.verification.status == "passed" and res.verification.method == "reproduce", res.verification
    assert "searched inputs" in res.verification.message
    x = np.random.default_rng(0).normal(size=(1, 200)).astype(np.float32)
    got = ort_reference(out, {"x": x})
    want = np.pad(x, ((0, 0), (64, 64)), mode="reflect")
    np.testing.assert_array_equal(got["p"], want)
    np.testing.assert_array_equal(got["y"], np.maximum(want, 0))



def _bypass_the_identity(m: onnx.ModelProto, tmp_path) -> tuple:
    """Bypass ``m``'s Identity with ``api.edit``: verification must pass; (the written path, its model)."""
    src = tmp_path / "model.onnx"
    onnx.save(m, src)
    ident = next(n.name for n in m.graph.node if n.op_type == "Identity")
    out = tmp_path / "o" / "bypassed.onnx"
    res = api.edit(api.load(src), [{"op": "bypass", "node": ident}], out)
    assert res.verification.status == "passed", res.verification
    return out, onnx.load(out)

def test_bypass_onto_a_graph_output_keeps_its_declared_shape_when_the_inner_tensor_has_none(tmp_path):
    # If branches of two ranks leave the If's output unshaped after inference; bypassing the Identity that
    # feeds the graph output made that unshaped tensor the output, which the full check refuses ('Field
    # shape of type is required but missing'; seen on a Paddle classifier whose output Identity follows a
    # Softmax inference could not shape).
    m = _named(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[6] y) <int64[1] s = {6}> {
  c = Constant <value = bool {1}> ()
  a = If(c) <then_branch = t () => (float[6] o) { o = Reshape(x, s) }, else_branch = e () => (float[2,3] o2) { o2 = Relu(x) }>
  y = Identity(a)
}"""))
    out, edited = _bypass_the_identity(m, tmp_path)
    onnx.checker.check_model(edited, full_check=True)
    assert [d.dim_value for d in edited.graph.output[0].type.tensor_type.shape.dim] == [6]
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    np.testing.assert_array_equal(ort_reference(out, {"x": x})["y"], x.reshape(6))


def test_bypass_an_identity_of_a_weight(tmp_path):
    # PyTorch exports share a weight through Identity (corpus chython_rxnmap: Identity_455 reads initializer
    # 'onnx::MatMul_1675'); its one input is a constant, which the bypass counted as no data input and refused
    # ('use delete instead', which would remove everything after it).
    m = _named(onnx.parser.parse_model("""<ir_version: 8, opset_import: ["" : 17]>
g (float[2,3] x) => (float[2,4] y) <float[3,4] w = {1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0}> {
  wt = Identity(w)
  y = MatMul(x, wt)
}"""))
    out, edited = _bypass_the_identity(m, tmp_path)
    assert [n.op_type for n in edited.graph.node] == ["MatMul"] and list(edited.graph.node[0].input) == ["x", "w"]
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    w = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(ort_reference(out, {"x": x})["y"], x @ w, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("source,what", [("w", "a weight ('w')"), ("x", "a graph input ('x')")])
def test_bypass_onto_an_output_names_what_it_would_connect(tmp_path, source, what):
    m = _named(onnx.parser.parse_model(f"""<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x) => (float[2] y, float[2] z) <float[2] w = {{1.0, 2.0}}> {{
  y = Identity({source})
  z = Relu(x)
}}"""))
    src = tmp_path / "io.onnx"
    onnx.save(m, src)
    with pytest.raises(StudioError, match=re.escape(f"connects {what} straight to the output 'y'")):
        api.edit(api.load(src), [{"op": "bypass", "node": "identity0"}], tmp_path / "o" / "x.onnx")
    assert not (tmp_path / "o" / "x.onnx").exists()
