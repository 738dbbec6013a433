"""The Overview page's Decoder section: architecture card, export convention and a KV budget
calculator for a KV-cache decoder (nothing for other models). Read from the graph only."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from studio import api
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.requests import InspectRequest
from studio.ui import widgets

_CONVENTIONS = {
    "optimum": "optimum (Hugging Face export): past_key_values.N.key/value in, present.N.key/value out, plain ONNX ops",
    "genai": "onnxruntime-genai (model builder): GroupQueryAttention fed by the attention mask, com.microsoft ops",
    "merged-if": "optimum merged: an If on the cache-branch input over the with-past and no-past graphs",
    "onnx-attention": "one ONNX Attention layer with past_key/past_value in and present_key/present_value out",
}
_DTYPES = ("float32", "float16", "bfloat16", "int8", "int4")


def render(handle) -> None:
    try:
        report = api.inspect_decoder(handle)
    except StudioError as exc:
        if exc.code == ErrorCode.NOT_A_DECODER:
            return
        st.markdown("#### Decoder")
        st.error(widgets.md_escape(str(exc), 500), icon="🚫")
        return
    s = report.spec
    st.markdown("#### Decoder")
    st.caption("Convention: " + widgets.md_escape(_CONVENTIONS.get(s.convention, s.convention), 200))
    widgets.metric_row([
        ("Layers", str(s.layers)),
        ("Heads / KV heads", f"{s.heads if s.heads is not None else '?'} / {s.kv_heads}"),
        ("Head dim", str(s.head_dim) if s.value_head_dim == s.head_dim else f"{s.head_dim} / v {s.value_head_dim}"),
        ("Hidden", str(s.hidden or "?")),
        ("Vocabulary", str(s.vocab or "?")),
        ("Context", str(s.context or "?")),
    ])
    st.caption(f"{s.attention_kind} attention ({widgets.md_escape(s.attention, 40)}), {s.positions} positions, "
               f"{s.norm}, weights {widgets.md_escape(s.weights, 80)}; KV cache {s.kv_dtype} "
               f"[batch, KV heads, length, head dim], {len(s.cache)} tensors"
               + (f"; branch input {widgets.md_code(s.use_cache_branch, 60)}" if s.use_cache_branch else "")
               + ("" if s.has_past else "; no past inputs (the first step of a decoder pair)"))
    for note in s.notes:
        st.warning(widgets.md_escape(note, 300))
    left, right = st.columns(2)
    widgets.dataframe(where=left, data=pd.DataFrame([{"block": b.block, "params": b.params, "bytes": widgets.fmt_bytes(b.bytes),
                                  "tensors": b.tensors} for b in report.blocks]),
                   hide_index=True, width="stretch", key="decoder_blocks")
    widgets.dataframe(where=right, data=pd.DataFrame([{"KV dtype": k.dtype, "per token": widgets.fmt_bytes(k.bytes_per_token),
                                   f"at {report.length} tokens": widgets.fmt_bytes(k.bytes)} for k in report.kv]),
                    hide_index=True, width="stretch", key="decoder_kv")
    _calculator(handle, report)
    with st.expander("Where each fact comes from"):
        widgets.dataframe(pd.DataFrame([{"fact": f.name, "value": f.value, "source": f.source} for f in s.facts]),
                     hide_index=True, width="stretch", key="decoder_facts")


def _calculator(handle, report) -> None:
    s = report.spec
    st.markdown("##### KV budget")
    c1, c2, c3, c4 = st.columns(4)
    default_gib = round(report.budget.memory_bytes / 2**30, 1)
    gib = c1.number_input("Memory (GiB)", min_value=0.001, value=float(default_gib), step=1.0, format="%.3f",
                          key="kv_memory_gib", help="for the weights and the KV cache; default: this machine's RAM")
    dtypes = list(dict.fromkeys((s.kv_dtype, *_DTYPES)))
    dtype = c2.selectbox("KV dtype", dtypes, key="kv_dtype")
    batch = int(c3.number_input("Batch", min_value=1, value=1, step=1, key="kv_batch"))
    length = int(c4.number_input("Length (tokens)", min_value=1, value=int(report.length), step=128, key="kv_length"))
    memory = int(gib * 2**30)
    budget = widgets.guarded(lambda: api.kv_budget(report, memory=memory, kv_dtype=dtype, batch=batch, length=length))
    if budget is None:
        return
    widgets.metric_row([
        ("KV cache", widgets.fmt_bytes(batch * length * budget.bytes_per_token)),
        ("Fits (batch × length)", widgets.fmt_count(budget.max_tokens)),
        (f"Max length at batch {batch}", str(budget.max_length)),
        (f"Max batch at {length} tokens", str(budget.max_batch)),
    ])
    st.caption(f"{widgets.fmt_bytes(budget.memory_bytes)} − weights {widgets.fmt_bytes(budget.weights_bytes)} = "
               f"{widgets.fmt_bytes(budget.available_bytes)} for the cache at {budget.bytes_per_token} B per token "
               "(activations not counted).")
    if budget.preallocation is not None:
        p = budget.preallocation
        st.caption(f"{widgets.md_escape(p.runtime, 40)} preallocates {p.max_length} tokens: "
                   f"{widgets.fmt_bytes(p.bytes)} at batch {batch} ({widgets.md_escape(p.source, 200)}).")
    for w in budget.warnings:
        st.warning(widgets.md_escape(w, 400))
    dtype_flag = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "int8": "int8", "int4": "int4"}.get(dtype)
    widgets.cli_hint(InspectRequest(decoder=True, kv_length=length, batch=batch, memory_gib=float(gib),
                                    kv_dtype=dtype_flag if dtype_flag and dtype != s.kv_dtype else None)
                     .command(handle.path.name))
