"""Decoder recognition and KV accounting (issue 26 item 2): facts exact on every sample decoder in every
convention and on the onnx wheel's attention-with-past cases, KV budget arithmetic by hand, one-line
errors for caches whose inputs do not match their outputs, and the ~1B model inspected without its
weights (the data file is watched with inotify: never opened)."""

from __future__ import annotations

import ctypes
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from sample_models.catalog import DECODERS, path_of
from sample_models.decoders import LLAMA_TINY, build_llama_genai, write_large_decoder
from studio import api
from studio.cli import main
from studio.core.errors import StudioError
from studio.inspect.decoder import recognize
from tests.conftest import ROOT, assert_user_message, sha256_file

GPT2 = dict(layers=2, heads=4, kv_heads=4, head_dim=8, hidden=32, vocab=288, context=64, positions="learned",
            norm="LayerNorm", attention="decomposed")
LLAMA = dict(layers=3, heads=6, kv_heads=2, head_dim=8, hidden=48, vocab=320, context=96, positions="rotary",
             norm="RMSNorm")
# KV bytes per token by hand: layers x (key + value) x KV heads x head dim x 4 bytes (float32)
GPT2_KV = 2 * 2 * 4 * 8 * 4          # 512
LLAMA_KV = 3 * 2 * 2 * 8 * 4         # 384
EXPECTED = {
    "gpt2_decoder": dict(GPT2, convention="optimum", has_past=False, kv=GPT2_KV, heads_from="output projection"),
    "gpt2_decoder_with_past": dict(GPT2, convention="optimum", has_past=True, kv=GPT2_KV,
                                   heads_from="output projection"),
    "gpt2_decoder_merged": dict(GPT2, convention="merged-if", has_past=True, kv=GPT2_KV, heads_from="output projection"),
    "llama_optimum": dict(LLAMA, convention="optimum", has_past=True, kv=LLAMA_KV, attention="decomposed",
                          heads_from="output projection"),
    "llama_genai": dict(LLAMA, convention="genai", has_past=True, kv=LLAMA_KV, attention="GroupQueryAttention",
                        heads_from="GroupQueryAttention num_heads"),
    "char_gpt2_decoder": dict(GPT2, hidden=64, head_dim=16, vocab=48, convention="optimum", has_past=True,
                              kv=2 * 2 * 4 * 16 * 4, heads_from="output projection"),
}
CONTEXT_FROM = {"gpt2": "position embedding transformer.wpe.weight [64, 32]",
                "llama_optimum": "rotary table model.rotary_emb.cos_cached [96, 8]",
                "llama_genai": "rotary cache cos_cache [96, 4]",
                "char_gpt2_decoder": "position embedding transformer.wpe.weight [64, 64]"}


def _check_facts(spec, exp: dict) -> None:
    for key in ("convention", "layers", "heads", "kv_heads", "head_dim", "hidden", "vocab", "context", "positions",
                "norm", "attention", "has_past"):
        assert getattr(spec, key) == exp[key], (key, getattr(spec, key), exp[key])
    assert spec.kv_bytes_per_token() == exp["kv"]
    assert spec.kv_bytes_per_token("float16") == exp["kv"] // 2 and spec.kv_bytes_per_token("int8") == exp["kv"] // 4
    assert spec.kv_dtype == "float32" and spec.value_head_dim == exp["head_dim"] and spec.cache_layout == "bnsh"
    assert len(spec.cache) == 2 * exp["layers"]
    expected_map = {f"present.{i}.{k}": f"past_key_values.{i}.{k}" for i in range(exp["layers"]) for k in ("key", "value")}
    assert spec.present_to_past == (expected_map if exp["has_past"] else {})
    assert {c.output for c in spec.cache} == set(expected_map)
    assert spec.attention_kind == ("MHA" if exp["heads"] == exp["kv_heads"] else "GQA")
    heads_fact = next(f for f in spec.facts if f.name == "heads")
    assert heads_fact.source.startswith(exp["heads_from"]), heads_fact


@pytest.mark.parametrize("name", list(EXPECTED))
def test_facts_of_every_sample_decoder(name):
    assert {m.name for m in DECODERS} == set(EXPECTED)
    spec = api.decoder_spec(path_of(name))
    _check_facts(spec, EXPECTED[name])
    assert (spec.input_ids, spec.attention_mask, spec.position_ids, spec.logits) == (
        "input_ids", "attention_mask", "position_ids", "logits")
    assert spec.use_cache_branch == ("use_cache_branch" if name.endswith("merged") else None)
    assert spec.past_length_dim == ("past_sequence_length" if EXPECTED[name]["has_past"] else "sequence_length")
    context = next(f for f in spec.facts if f.name == "context")
    assert context.source == CONTEXT_FROM.get(name, CONTEXT_FROM["gpt2"])
    assert spec.weights == ("int4 MatMulNBits (block 16, 22 MatMuls)" if name == "llama_genai" else "float32")


def test_same_facts_for_the_other_genai_builds(tmp_path):
    """float32 genai (MatMul + GQA) and the streamed generator at the tiny shape, in both conventions."""
    genai_fp32 = tmp_path / "fp32" / "model.onnx"
    genai_fp32.parent.mkdir()
    onnx.save(build_llama_genai(int4=False), str(genai_fp32))
    spec = api.decoder_spec(genai_fp32)
    _check_facts(spec, EXPECTED["llama_genai"])
    assert spec.weights == "float32"
    for convention in ("genai", "optimum"):
        path = write_large_decoder(tmp_path / convention, shape=LLAMA_TINY, convention=convention, fill="zeros")
        _check_facts(api.decoder_spec(path), EXPECTED[f"llama_{convention}"])


def test_recognized_without_the_weights(tmp_path):
    """The weights in an external file that is then deleted: the spec is read from shapes alone."""
    path = tmp_path / "m.onnx"
    onnx.save(onnx.load(str(path_of("llama_optimum"))), str(path), save_as_external_data=True,
              location="m.onnx.data", size_threshold=0)
    (tmp_path / "m.onnx.data").unlink()
    _check_facts(api.decoder_spec(path), EXPECTED["llama_optimum"])
    report = api.inspect_decoder(path, memory="1GiB")
    assert report.params == 3 * 20064 + 2 * 15360 + 1584
    with pytest.raises(StudioError):            # a full load needs the data file
        api.load(path)


def test_not_a_decoder():
    assert api.decoder_spec(path_of("cnn_unfused")) is None
    with pytest.raises(StudioError, match="not a KV-cache decoder") as exc:
        api.inspect_decoder(path_of("transformer_block"))
    assert exc.value.code == "NOT-A-DECODER"


# ------------------------------------------------------------------ the onnx wheel's attention-with-past cases


def _attention_past_cases() -> list:
    """The onnx backend's Attention node cases with past_key/past_value (built by the wheel's own case code)."""
    import onnx.backend.test.case.node as cases

    old = cases._TargetOpType
    cases._TargetOpType = "Attention"
    try:
        with np.errstate(all="ignore"):
            importlib.import_module("onnx.backend.test.case.node.attention")
    finally:
        cases._TargetOpType = old
    return [c for c in cases._NodeTestCases if any(i.name == "past_key" for i in c.model.graph.input)]


BACKEND = _attention_past_cases()


def test_backend_cases_found():
    assert len([c for c in BACKEND if not c.name.endswith("_expanded")]) >= 20


@pytest.mark.parametrize("case", BACKEND, ids=lambda c: c.name)
def test_backend_attention_with_past(case):
    g = case.model.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in g.input}
    elem = {v.name: v.type.tensor_type.elem_type for v in g.input}
    attrs = {a.name: a.i for a in g.node[0].attribute} if g.node[0].op_type == "Attention" else {}
    kv_heads, k_dim, v_dim = shapes["past_key"][1], shapes["past_key"][3], shapes["past_value"][3]
    itemsize = 2 if elem["past_key"] == TensorProto.FLOAT16 else 4
    spec = recognize(case.model)
    assert (spec.convention, spec.layers, spec.kv_heads, spec.head_dim, spec.value_head_dim) == (
        "onnx-attention", 1, kv_heads, k_dim, v_dim)
    assert spec.kv_bytes_per_token() == kv_heads * (k_dim + v_dim) * itemsize
    assert spec.present_to_past == {"present_key": "past_key", "present_value": "past_value"}
    assert spec.kv_dtype == ("float16" if itemsize == 2 else "float32")
    if case.name.endswith("_expanded"):
        assert spec.attention == "decomposed"
        return
    q = shapes["Q"]
    heads = attrs.get("q_num_heads") or q[1]          # 3-D queries name their heads; 4-D ones are [B, heads, S, d]
    assert spec.heads == heads and spec.attention == "Attention"
    assert spec.hidden == (q[2] if len(q) == 3 else None)


# ------------------------------------------------------------------ parameters and KV budget, by hand


def _stored_bytes(path: Path) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(path)).graph.initializer)


def test_blocks_and_budget_arithmetic():
    path = path_of("llama_optimum")
    weights = _stored_bytes(path)
    r = api.inspect_decoder(path, memory=1 << 20, batch=3, length=64)
    assert r.weights_bytes == weights
    per_layer = 48 * 48 * 2 + 48 * 16 * 2 + 3 * 48 * 96 + 2 * 48      # q, o; k, v; gate, up, down; two norms
    assert [(b.block, b.params) for b in r.blocks] == [("layer 0", per_layer), ("layer 1", per_layer),
                                                      ("layer 2", per_layer), ("embedding", 320 * 48),
                                                      ("lm head", 48 * 320), ("other", 48 + 2 * 96 * 8)]
    assert all(b.bytes == 4 * b.params for b in r.blocks)
    assert [(k.dtype, k.bytes_per_token, k.bytes) for k in r.kv] == [
        ("float32", 384, 384 * 64 * 3), ("float16", 192, 192 * 64 * 3), ("int8", 96, 96 * 64 * 3)]
    b = r.budget
    tokens = ((1 << 20) - weights) // 384
    assert (b.available_bytes, b.max_tokens) == ((1 << 20) - weights, tokens)
    assert b.max_length == min(tokens // 3, 96) and b.max_batch == tokens // 64
    assert [(row.length, row.max_batch) for row in b.rows] == [(64, tokens // 64), (96, tokens // 96)]
    assert b.preallocation is None and b.warnings == ()
    # int8 KV: four times the tokens
    b8 = api.kv_budget(r, memory=1 << 20, kv_dtype="int8", batch=3, length=64)
    assert b8.max_tokens == ((1 << 20) - weights) // 96 and b8.bytes_per_token == 96
    # too much: batch 40 x 96 tokens needs 40 * 96 * 384 bytes
    big = api.kv_budget(r, memory=1 << 20, batch=40, length=96)
    assert len(big.warnings) == 1 and f"at most batch {tokens // 96}" in big.warnings[0]
    assert api.kv_budget(r, memory=weights - 1).warnings[0].startswith("the weights alone")


def test_int4_blocks_count_logical_params_and_packed_bytes():
    r = api.inspect_decoder(path_of("llama_genai"), memory="1GiB")

    def nbits(k: int, n: int) -> int:                 # packed int4 + one float32 scale per block of 16
        return n * math.ceil(k / 16) * 8 + n * math.ceil(k / 16) * 4

    layer = (2 * nbits(48, 48) + 2 * nbits(48, 16) + 2 * nbits(48, 96) + nbits(96, 48) + 2 * 48 * 4)
    rows = {b.block: b for b in r.blocks}
    assert [rows[f"layer {i}"].bytes for i in range(3)] == [layer] * 3
    assert rows["layer 0"].params == 48 * 48 * 2 + 48 * 16 * 2 + 3 * 48 * 96 + 2 * 48
    assert (rows["lm head"].params, rows["lm head"].bytes) == (48 * 320, nbits(48, 320))
    assert rows["other"].params == 48 + 2 * 96 * 4            # final norm, cos/sin caches [96, 4]


def test_parse_memory():
    assert api.parse_memory("16GiB") == api.parse_memory("16G") == 16 * 2**30
    assert api.parse_memory("16GB") == 16 * 10**9 and api.parse_memory("512MiB") == 512 * 2**20
    assert api.parse_memory("1.5T") == int(1.5 * 2**40) and api.parse_memory("4096") == 4096
    for bad in ("lots", "-1G", "0", "16 XB"):
        with pytest.raises(StudioError) as exc:
            api.parse_memory(bad)
        assert_user_message(str(exc.value))


def _genai_copy(tmp_path: Path, config: dict | None) -> Path:
    path = tmp_path / "llama_genai.onnx"
    shutil.copyfile(path_of("llama_genai"), path)
    if config is not None:
        (tmp_path / "genai_config.json").write_text(json.dumps(config))
    return path


def test_genai_preallocation_warning(tmp_path):
    cfg = {"model": {"context_length": 96, "decoder": {"filename": "llama_genai.onnx", "num_key_value_heads": 2}},
           "search": {"max_length": 80, "past_present_share_buffer": True}}
    path = _genai_copy(tmp_path, cfg)
    weights = _stored_bytes(path)
    memory = weights + 80 * 384 * 2 - 1                # batch 2 x max_length 80 does not fit by one byte
    r = api.inspect_decoder(path, memory=memory, batch=2, length=16)
    spec, b = r.spec, r.budget
    assert spec.runtime is not None and (spec.runtime.max_length, spec.runtime.past_present_share_buffer) == (80, True)
    assert b.preallocation.max_length == 80 and b.preallocation.bytes == 2 * 80 * 384 and not b.preallocation.fits
    (warning,) = b.warnings                            # 2 x 16 tokens would fit: only the preallocation warns
    assert "preallocates" in warning and "max_length 80" in warning and "genai_config.json" in warning
    assert_user_message(warning)
    assert api.kv_budget(r, memory=memory + 1, batch=2).preallocation.fits
    # a config that does not share the buffers allocates as it goes
    cfg["search"]["past_present_share_buffer"] = False
    path = _genai_copy(tmp_path, cfg)
    assert api.inspect_decoder(path, memory=memory, batch=2, length=16).budget.preallocation is None
    # a config for another file of the folder is not this model's: the builder's default is assumed
    cfg["model"]["decoder"]["filename"] = "other.onnx"
    path = _genai_copy(tmp_path, cfg)
    r = api.inspect_decoder(path, memory=memory, batch=2, length=16)
    assert r.spec.runtime is None and r.budget.preallocation.max_length == 96
    assert "no genai_config.json" in r.budget.preallocation.source
    assert api.inspect_decoder(path_of("llama_optimum"), memory="1GiB").budget.preallocation is None


# ------------------------------------------------------------------ caches that do not fit


def _broken(tmp_path: Path, edit) -> Path:
    m = onnx.load(str(path_of("llama_optimum")))
    edit(m.graph)
    path = tmp_path / "broken.onnx"
    onnx.save(m, str(path))
    return path


def _drop_output(name):
    def edit(g):
        (o,) = [o for o in g.output if o.name == name]
        g.output.remove(o)
    return edit


def _rename_output(old, new):
    def edit(g):
        for o in g.output:
            if o.name == old:
                o.name = new
    return edit


def _set_dim(name, axis, value):
    def edit(g):
        (o,) = [o for o in g.output if o.name == name]
        o.type.tensor_type.shape.dim[axis].dim_value = value
    return edit


def _set_dtype(name, elem):
    def edit(g):
        (o,) = [o for o in g.output if o.name == name]
        o.type.tensor_type.elem_type = elem
    return edit


def _drop_presents(g):
    for o in [o for o in g.output if o.name.startswith("present.")]:
        g.output.remove(o)


MISMATCHES = {
    "count": (_drop_output("present.2.value"), ["6 cache inputs", "5 present outputs", "past_key_values.2.value"]),
    "name": (_rename_output("present.1.key", "present.7.key"), ["past_key_values.1.key", "has no matching present"]),
    "heads": (_set_dim("present.0.key", 1, 4), ["past_key_values.0.key", "present.0.key", "KV heads 2 vs 4"]),
    "head_dim": (_set_dim("present.2.value", 3, 16), ["past_key_values.2.value", "present.2.value", "head dim 8 vs 16"]),
    "dtype": (_set_dtype("present.0.value", TensorProto.FLOAT16), ["past_key_values.0.value", "float16",
                                                                    "dtype float32 vs float16"]),
    "no present": (_drop_presents, ["6 cache inputs", "no present output"]),
}


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_cache_mismatch_is_one_line_naming_both_sides(kind, tmp_path, capsys):
    edit, needles = MISMATCHES[kind]
    path = _broken(tmp_path, edit)
    before = sha256_file(path)
    with pytest.raises(StudioError) as exc:
        api.decoder_spec(path)
    message = str(exc.value)
    assert exc.value.code == "DECODER-CACHE-MISMATCH"
    assert_user_message(message)
    for needle in needles:
        assert needle in message, (needle, message)
    assert "present" in message and "past_key_values" in message        # both sides named
    assert main(["inspect", str(path), "--decoder"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needles[-1] in err
    assert sha256_file(path) == before                                   # the model is only read


def test_dynamic_kv_heads_need_a_source(tmp_path):
    """KV heads left symbolic in the cache shapes: an error, unless a config.json beside the model says."""
    def edit(g):
        for vi in (*g.input, *g.output):
            if vi.name.startswith(("past_key_values.", "present.")):
                vi.type.tensor_type.shape.dim[1].dim_param = "kv_heads"
    path = _broken(tmp_path, edit)
    with pytest.raises(StudioError) as exc:
        api.decoder_spec(path)
    assert exc.value.code == "DECODER-CACHE-SHAPE" and "past_key_values.0.key" in str(exc.value)
    assert_user_message(str(exc.value))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", "num_attention_heads": 6,
                                                      "num_key_value_heads": 2, "max_position_embeddings": 4096}))
    spec = api.decoder_spec(path)
    assert (spec.kv_heads, spec.heads, spec.context) == (2, 6, 96)      # the graph's rotary table wins for context
    assert next(f.source for f in spec.facts if f.name == "kv_heads") == "config.json"
    assert spec.kv_bytes_per_token() == LLAMA_KV and all(c.heads == 2 for c in spec.cache)


# ------------------------------------------------------------------ CLI


def test_cli_decoder_text_and_json(capsys):
    path = str(path_of("llama_genai"))
    assert main(["inspect", path, "--decoder", "--memory", "1MiB", "--batch", "30", "--kv-length", "96"]) == 0
    cap = capsys.readouterr()
    assert "decoder    genai, GroupQueryAttention, 6 heads / 2 KV heads of 8 (GQA)" in cap.out
    assert "KV/token   float32 384 B, float16 192 B, int8 96 B" in cap.out
    assert "preallocates" in cap.err and "batch 30" in cap.err
    assert main(["inspect", path, "--decoder", "--json", "--kv-dtype", "int8", "--memory", "1GiB"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert (d["spec"]["layers"], d["spec"]["heads"], d["spec"]["kv_heads"], d["spec"]["kv_bytes_per_token"]) == (3, 6, 2, 384)
    assert d["budget"]["kv_dtype"] == "int8" and d["budget"]["bytes_per_token"] == 96
    assert d["budget"]["max_tokens"] == (2**30 - d["weights_bytes"]) // 96
    assert main(["inspect", path]) == 0
    assert "decoder    genai: 3 layers, 6 heads / 2 KV heads of 8 (GQA), KV 384 B per token" in capsys.readouterr().out
    assert main(["inspect", path, "--decoder", "--memory", "lots"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "16GiB" in err
    assert main(["inspect", str(path_of("cnn_unfused")), "--decoder"]) == 2
    assert "not a KV-cache decoder" in capsys.readouterr().err


# ------------------------------------------------------------------ the ~1B model, without its weights


IN_ACCESS, IN_OPEN = 0x001, 0x020


def _watch(path: Path) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0, f"inotify_init1 failed: errno {ctypes.get_errno()}"
    assert libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN | IN_ACCESS) >= 0
    return fd


def _events(fd: int) -> int:
    try:
        return len(os.read(fd, 65536))
    except BlockingIOError:
        return 0


def test_1b_model_inspected_without_opening_its_data(tmp_path):
    model = write_large_decoder(tmp_path, fill="zeros")
    data = tmp_path / "model.onnx.data"
    assert data.stat().st_size > 2**32
    fd = _watch(data)
    try:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "studio", "inspect", str(model), "--decoder", "--json",
                                 "--memory", "16GiB"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
        out, err = proc.communicate(timeout=300)
        wall = time.perf_counter() - start
        assert proc.returncode == 0, err.decode()[-500:]
        assert _events(fd) == 0, "the data file was opened"
        with open(data, "rb") as fh:           # the watch works: an open is seen
            fh.read(1)
        assert _events(fd) > 0
    finally:
        os.close(fd)
    d = json.loads(out)
    s = d["spec"]
    assert (s["convention"], s["layers"], s["heads"], s["kv_heads"], s["head_dim"], s["hidden"], s["vocab"],
            s["context"]) == ("genai", 22, 32, 4, 64, 2048, 32000, 2048)
    assert s["kv_bytes_per_token"] == 22 * 2 * 4 * 64 * 4                     # 45056 bytes
    params = 22 * (2 * 2048 * 2048 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048) + 2 * 32000 * 2048 + 2048
    assert d["params"] == params + 2 * 2048 * 32 and d["weights_bytes"] == 4 * d["params"]   # + cos/sin caches
    pre = d["budget"]["preallocation"]
    assert pre["max_length"] == 2048 and pre["bytes"] == 2048 * 45056 and "genai_config.json" in pre["source"]
    print(f"\n1.1B decoder inspected in {wall:.2f} s (process start included)", file=sys.stderr)


def test_1b_model_inspect_memory_is_bounded(tmp_path):
    """In a fresh process: peak RSS stays far below the 4.4 GB of weights."""
    write_large_decoder(tmp_path, fill="zeros")
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak (a pytest worker that grew to 1 GB
    # over earlier tests) into an exec'd child's ru_maxrss; VmHWM belongs to the child's own address space.
    code = ("import re, sys, time; t = time.perf_counter(); from studio import api; t1 = time.perf_counter(); "
            "r = api.inspect_decoder(sys.argv[1], memory='16GiB'); t2 = time.perf_counter(); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print(r.spec.layers, hwm, t2 - t1)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "model.onnx")], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True).stdout.split()
    layers, rss_kib, seconds = int(out[0]), int(out[1]), float(out[2])
    assert layers == 22 and rss_kib * 1024 < 512 * 2**20
    print(f"\n1.1B decoder: inspect {seconds:.3f} s, peak RSS {rss_kib / 1024:.0f} MiB", file=sys.stderr)
