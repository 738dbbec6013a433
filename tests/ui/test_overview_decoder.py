"""The Overview page's Decoder section (AppTest): architecture card, convention, KV budget calculator."""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from sample_models.catalog import path_of
from tests.conftest import metrics


def _texts(items) -> list[str]:
    """Element texts without Markdown escapes."""
    return [x.value.replace("\\", "") for x in items]


def _weights(name: str) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(path_of(name))).graph.initializer)


def test_decoder_card_and_budget_calculator(app):
    at = app(str(path_of("llama_genai"))).run()
    assert not at.exception
    m = metrics(at)
    assert (m["Layers"], m["Heads / KV heads"], m["Head dim"], m["Hidden"], m["Vocabulary"], m["Context"]) == (
        "3", "6 / 2", "8", "48", "320", "96")
    assert any("onnxruntime-genai" in c for c in _texts(at.caption))
    assert any("GQA attention (GroupQueryAttention), rotary positions, RMSNorm, weights int4 MatMulNBits" in c
               for c in _texts(at.caption))
    kv = next(df.value for df in at.dataframe if "KV dtype" in df.value.columns)
    assert list(kv["per token"]) == ["384 B", "192 B", "96 B"]
    # the calculator: 0.001 GiB, batch 30 x 96 tokens: by hand from the weights' bytes and 384 B per token
    at.number_input(key="kv_memory_gib").set_value(0.001).run()
    at.number_input(key="kv_batch").set_value(30).run()
    memory = int(0.001 * 2**30)
    tokens = (memory - _weights("llama_genai")) // 384
    m = metrics(at)
    assert m["Max batch at 96 tokens"] == str(tokens // 96)
    assert m["Max length at batch 30"] == str(min(tokens // 30, 96))
    assert m["KV cache"] == "1.1 MiB"                            # 30 x 96 x 384 B
    warnings = _texts(at.warning)
    assert any("preallocates the KV cache for max_length 96" in w for w in warnings)
    assert any("at most batch" in w for w in warnings)
    at.selectbox(key="kv_dtype").set_value("int8").run()
    assert metrics(at)["Max batch at 96 tokens"] == str((memory - _weights("llama_genai")) // 96 // 96)
    assert not at.exception


def test_merged_decoder_convention_and_no_section_for_other_models(app):
    at = app(str(path_of("gpt2_decoder_merged"))).run()
    assert not at.exception
    assert metrics(at)["Heads / KV heads"] == "4 / 4"
    assert any("optimum merged" in c for c in _texts(at.caption))
    assert any("branch input" in c and "use_cache_branch" in c for c in _texts(at.caption))
    at = app(str(path_of("cnn_unfused"))).run()
    assert not at.exception and "Layers" not in metrics(at) and "Nodes" in metrics(at)


def test_broken_cache_is_shown_as_one_error(app, tmp_path):
    m = onnx.load(str(path_of("llama_optimum")))
    (o,) = [o for o in m.graph.output if o.name == "present.0.key"]
    o.type.tensor_type.shape.dim[1].dim_value = 4
    path = tmp_path / "broken.onnx"
    onnx.save(m, str(path))
    at = app(str(path)).run()
    assert not at.exception
    errors = _texts(at.error)
    assert any("past_key_values.0.key" in e and "present.0.key" in e and "KV heads 2 vs 4" in e for e in errors)
    assert "Nodes" in metrics(at)                               # the rest of the page still renders
