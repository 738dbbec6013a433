"""Dim hints that are never made up (issue 32 item 5), on real third-party models and the sample decoders.

Oracles: the corpus manifest (what a person states about each model's inputs and dims:
``benchmarks/corpus/manifest.toml``), the exporters' own naming conventions (tf2onnx ``unk__N``,
paddle2onnx ``p2o.DynamicDimension.N``, torch dynamo ``sN``, TorchScript ``<Op>output_dim_N``), and plain
onnxruntime runs of the decoders at the chosen dims. Before this change magika's ``unk__214`` was proposed as
214 "(dim name)", the GPT-2 decoders' ``past_sequence_length`` as 8 / 16 ("static width": the head size of the
same tensor), ddddocr's free width as its static height 64, and a wrong ``past_sequence_length +
sequence_length`` ended in a truncated ONNX Runtime error.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.core.dim_hints import ORIGINS, dim_hints, is_auto_name, model_derived_dims
from studio.core.errors import StudioError
from studio.core.feeds import choose_dims, input_specs, random_feeds
from tests.conftest import SAMPLES
from tests.corpus import corpus_manifest, corpus_model, corpus_params

_NEVER_HINTED = frozenset({"batch", "state", "kv_length", "derived", "channels"})


@pytest.mark.parametrize("name", corpus_params(kept_aside=None))
def test_hints_on_every_corpus_model_agree_with_the_manifest(name):
    """No hint contradicts what a person states about the model (benchmarks/corpus/manifest.toml): no
    exporter counter read as a size, no hint on a batch/state/derived dim, a size from metadata or the graph
    equal to the stated input shape."""
    m = corpus_manifest()[name]
    model = onnx.load(str(corpus_model(name)), load_external_data=False)
    for h in dim_hints(model):
        assert not is_auto_name(h.key), f"{name}: the exporter's counter {h.key} read as {h.value}"
        assert h.origin in ORIGINS and h.source, h
        meaning = m.dims.get(h.key)
        assert meaning not in _NEVER_HINTED, f"{name}: {h.key} is a {meaning} dim, hinted {h.value} ({h.source})"
        if h.origin in ("metadata", "graph"):
            assert h.value == m.inputs[h.input][h.axis], (name, h, m.inputs[h.input])


def test_tf2onnx_unk_dim_is_no_size_magika():
    model = onnx.load(str(corpus_model("magika_standard_v3_3")), load_external_data=False)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "unk__214"
    assert dim_hints(model) == ()
    dims = choose_dims(input_specs(model))
    assert dims["unk__214"] == 1          # a leading (batch) dim, not 214


@pytest.mark.parametrize("auto", ["unk__487", "p2o.DynamicDimension.12", "s77", "Addoutput_dim_12",
                                  "LSTMhn_dim_10", "DynamicDimension.64"])
def test_exporter_auto_names_are_never_sizes(auto):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, auto, 40])
    t = helper.make_tensor_value_info("t", TensorProto.INT64, [1, "seq_512"])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x, t],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, auto, 40])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    hints = {h.key: h for h in dim_hints(m)}
    assert auto not in hints
    assert hints["seq_512"].value == 512 and hints["seq_512"].origin == "name rule"


def test_paddle_unnamed_and_minus_one_dims_get_no_made_up_hint():
    for name in ("rapidocr_ppocrv4_det", "rapidocr_ppocrv4_rec", "rapidocr_ppocr_mobile_v2_cls"):
        model = onnx.load(str(corpus_model(name)), load_external_data=False)
        assert dim_hints(model) == (), name


@pytest.mark.parametrize("sample", ["gpt2_decoder_with_past", "gpt2_decoder_merged", "char_gpt2_decoder",
                                    "llama_optimum"])
def test_a_cache_head_size_is_never_the_past_length(sample):
    model = onnx.load(str(SAMPLES / f"{sample}.onnx"), load_external_data=False)
    key = next(i for i in model.graph.input if i.name == "past_key_values.0.key")
    head = key.type.tensor_type.shape.dim[3].dim_value
    assert head in (8, 16)
    assert [h for h in dim_hints(model) if h.key == "past_sequence_length"] == []
    dims = choose_dims(input_specs(model))
    assert dims["past_sequence_length"] == 16           # a sequence-like name's default, not the head size
    assert dims["past_sequence_length + sequence_length"] == dims["past_sequence_length"] + dims["sequence_length"]


def test_derived_dim_is_computed_from_its_parts_and_not_a_free_input():
    handle = api.load(SAMPLES / "llama_optimum.onnx")
    (derived,) = api.derived_dims(handle)
    assert derived.key == "past_sequence_length + sequence_length"
    assert derived.parts == ("past_sequence_length", "sequence_length")
    assert derived.key not in api.input_dim_keys(handle)
    assert {"past_sequence_length", "sequence_length", "batch_size"} <= set(api.input_dim_keys(handle))
    unset = api.inspect(handle, {})
    assert derived.key not in unset.flops.assumed_dims        # never offered as a dim to set
    assert {"past_sequence_length", "sequence_length"} <= set(unset.flops.assumed_dims)
    s = api.inspect(handle, {"batch_size": 1, "past_sequence_length": 3, "sequence_length": 4})
    assert not s.flops.assumed_dims and not s.flops.unresolved_dims
    shapes = {e.name: e.shape for e in s.edges}
    assert shapes["attention_mask"] == (1, 7)
    # the same dims feed a plain onnxruntime run: the mask is past + sequence
    specs = input_specs(handle.proto)
    feeds = random_feeds(specs, {"past_sequence_length": 3, "sequence_length": 4})
    assert feeds["attention_mask"].shape == (1, 7)
    sess = ort.InferenceSession(str(SAMPLES / "llama_optimum.onnx"), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], feeds)[0]
    assert logits.shape[:2] == (1, 4) and np.isfinite(logits).all()


@pytest.mark.parametrize("call", ["inspect", "feeds"])
def test_an_impossible_derived_value_is_one_line_naming_the_dim_and_the_relation(call):
    handle = api.load(SAMPLES / "llama_optimum.onnx")
    bad = {"batch_size": 1, "past_sequence_length": 3, "sequence_length": 4,
           "past_sequence_length + sequence_length": 5}
    with pytest.raises(StudioError) as err:
        if call == "inspect":
            api.inspect(handle, bad)
        else:
            random_feeds(input_specs(handle.proto), bad)
    text = str(err.value)
    assert err.value.code == "BAD-DIM" and "\n" not in text
    assert "'past_sequence_length + sequence_length'" in text and "is 7" in text and "not 5" in text
    assert "ONNXRuntimeError" not in text
    # the value its parts give is accepted
    good = {**bad, "past_sequence_length + sequence_length": 7}
    assert choose_dims(input_specs(handle.proto), good)["past_sequence_length + sequence_length"] == 7


def test_cli_impossible_derived_dim_is_one_line(capsys):
    from studio.cli import main

    code = main(["inspect", str(SAMPLES / "llama_optimum.onnx"), "--dim", "past_sequence_length=3",
                 "--dim", "sequence_length=4", "--dim", "past_sequence_length + sequence_length=5"])
    err = capsys.readouterr().err.strip()
    assert code != 0
    assert len(err.splitlines()) == 1 and "derived from past_sequence_length, sequence_length" in err
    assert "Non-zero status code" not in err


def test_a_formula_over_torch_dynamo_symbols_is_derived():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s0", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["2*s0", 4])
    g = helper.make_graph([helper.make_node("Concat", ["x", "y"], ["z"], axis=0)], "g", [x, y],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["3*s0", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (d,) = model_derived_dims(m)
    assert d.key == "2*s0" and d.parts == ("s0",)
    dims = choose_dims(input_specs(m), {"s0": 5})
    assert dims["2*s0"] == 10
    with pytest.raises(StudioError, match=r"dim '2\*s0' is derived from s0: it is 10 at s0=5, not 9"):
        choose_dims(input_specs(m), {"s0": 5, "2*s0": 9})


def test_every_hint_says_where_it_came_from():
    model = onnx.load(str(SAMPLES / "yolo_detector.onnx"), load_external_data=False)
    hints = dim_hints(model)
    assert {h.origin for h in hints} == {"metadata"} and all("imgsz" in h.source for h in hints)
    assert all(h.to_dict()["origin"] == "metadata" for h in hints)

def test_a_text_lines_static_height_is_never_its_width():
    """ddddocr [1, 1, 64, image_width] and PP-OCR rec [N, 3, 48, W]: the height is fixed because lines differ in
    width; the height was proposed as the width ("static height 64")."""
    for name in ("ddddocr_common_old_int8", "rapidocr_ppocrv4_rec"):
        model = onnx.load(str(corpus_model(name)), load_external_data=False)
        assert dim_hints(model) == (), name
    ddddocr = onnx.load(str(corpus_model("ddddocr_common_old_int8")), load_external_data=False)
    assert choose_dims(input_specs(ddddocr))["image_width"] == 224          # the image default, said as such


def test_cli_inspect_says_where_each_hint_came_from(capsys):
    from studio.cli import main

    assert main(["inspect", str(SAMPLES / "yolo_detector.onnx")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("dim hint")]
    assert lines == ["dim hint   height=320 (metadata: metadata imgsz=[320, 320])",
                     "dim hint   width=320 (metadata: metadata imgsz=[320, 320])"]
