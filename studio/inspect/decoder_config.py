"""Config files exporters write beside a decoder: onnxruntime-genai's ``genai_config.json`` (context
length, ``search.max_length``, ``past_present_share_buffer``) and Hugging Face's ``config.json`` (heads,
KV heads, hidden size, vocabulary, max positions). Read only when small regular files; facts the graph
does not give are taken from them, with the file named as the source."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from studio.core.errors import StudioError
from studio.core.paths import check_regular_file

CONFIG_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class RuntimeConfig:
    """What a runtime config beside the model says (onnxruntime-genai's ``genai_config.json``)."""

    file: str
    context_length: int | None
    max_length: int | None
    past_present_share_buffer: bool | None


def _read_json(path: Path) -> dict | None:
    try:
        check_regular_file(path, max_bytes=CONFIG_MAX_BYTES, label="config file")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (StudioError, OSError, ValueError, UnicodeDecodeError, RecursionError):   # nested thousands deep too
        return None
    return data if isinstance(data, dict) else None


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _dict(d: dict, key: str) -> dict:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def genai_config(folder: Path | None, filename: str | None) -> tuple[RuntimeConfig | None, dict]:
    """The ``genai_config.json`` beside the model when it names this file (or names none), and its sizes."""
    data = _read_json(folder / "genai_config.json") if folder is not None else None
    if not data:
        return None, {}
    model = _dict(data, "model")
    decoder = _dict(model, "decoder")
    if filename and isinstance(decoder.get("filename"), str) and decoder["filename"] != filename:
        return None, {}                      # describes another model of the folder
    search = _dict(data, "search")
    share = search.get("past_present_share_buffer")
    rc = RuntimeConfig("genai_config.json", _int(model.get("context_length")), _int(search.get("max_length")),
                       share if isinstance(share, bool) else None)
    if rc.context_length is None and rc.max_length is None and rc.past_present_share_buffer is None:
        rc = None                            # says nothing the studio reads (e.g. 'model' is not an object)
    return rc, {"heads": _int(decoder.get("num_attention_heads")), "kv_heads": _int(decoder.get("num_key_value_heads")),
                "hidden": _int(decoder.get("hidden_size")), "context": _int(model.get("context_length")),
                "vocab": _int(model.get("vocab_size"))}


def hf_config(folder: Path | None) -> dict:
    """Sizes from a Hugging Face ``config.json`` beside the model (optimum exports write one)."""
    data = _read_json(folder / "config.json") if folder is not None else None
    if not data or "model_type" not in data:
        return {}
    text = _dict(data, "text_config") or data

    def first(*keys: str) -> int | None:
        return next((_int(text.get(k)) for k in keys if _int(text.get(k))), None)

    return {"heads": first("num_attention_heads", "n_head"), "kv_heads": first("num_key_value_heads"),
            "hidden": first("hidden_size", "n_embd", "d_model"), "vocab": first("vocab_size"),
            "context": first("max_position_embeddings", "n_positions", "n_ctx")}
