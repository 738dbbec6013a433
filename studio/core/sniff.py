"""Name what a file is before trying to parse it as ONNX.

A protobuf parser accepts surprisingly much, so common non-ONNX content
(PyTorch checkpoints, Git LFS pointers, HTML error pages, TFLite, OpenVINO IR,
safetensors, ...) is recognised by its magic bytes and named in the error.
Nothing here unpickles or executes anything.
"""

from __future__ import annotations

import json
import struct
import zipfile
from dataclasses import dataclass


@dataclass(frozen=True)
class Sniffed:
    kind: str          # "onnx-candidate" | "zip" | "pytorch" | "lfs-pointer" | ...
    message: str | None = None  # why it is not ONNX, with what to do


# ModelProto field tags a serialized model can start with (field numbers 1-8,
# 14, 20, 25, 26 with their wire types).
_MODEL_FIRST_TAGS = {0x08, 0x12, 0x1A, 0x22, 0x28, 0x32, 0x3A, 0x42, 0x72, 0xA2, 0xCA, 0xD2}


def sniff_bytes(head: bytes, *, total_size: int, zip_names: list[str] | None = None) -> Sniffed:
    """Classify a file from its first bytes (pass at least 4 KiB when available).

    ``zip_names``: member names when the caller could read the zip directory.
    """
    if total_size == 0 or not head:
        return Sniffed("empty", "empty file (0 bytes): not an ONNX model")
    stripped = head.lstrip()
    lower = stripped[:512].lower()
    if head.startswith(b"version https://git-lfs"):
        return Sniffed("lfs-pointer", "Git LFS pointer, not the model itself: fetch the real file "
                                      "(git lfs pull) and load that")
    if head[:2] == b"PK":
        return _sniff_zip(head, zip_names or [])
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return Sniffed("pickle", "Python pickle (e.g. a legacy PyTorch checkpoint): export the model "
                                 "to ONNX first (torch.onnx.export); pickles are never opened here")
    if len(head) >= 8 and head[4:8] == b"TFL3":
        return Sniffed("tflite", "TensorFlow Lite flatbuffer, not ONNX: convert it with tf2onnx first")
    if head.startswith(b"GGUF"):
        return Sniffed("gguf", "GGUF (llama.cpp) file, not ONNX")
    if head.startswith(b"\x89HDF"):
        return Sniffed("hdf5", "HDF5 (e.g. Keras .h5) file, not ONNX: convert it with tf2onnx first")
    if lower.startswith(b"<?xml") or lower.startswith(b"<net"):
        if b"<net" in lower:
            return Sniffed("openvino-ir", "OpenVINO IR XML, not ONNX: load the original .onnx model")
        return Sniffed("xml", "XML document, not an ONNX model")
    if lower.startswith(b"<!doctype html") or lower.startswith(b"<html") or b"<html" in lower[:256]:
        return Sniffed("html", "HTML page, not an ONNX model (a download link that returned a web page?)")
    if stripped[:1] in (b"{", b"["):
        try:
            json.loads(head.decode("utf-8")) if len(head) == total_size else None
            return Sniffed("json", "JSON text, not an ONNX model")
        except (UnicodeDecodeError, ValueError):
            if _mostly_text(head):
                return Sniffed("json", "JSON-like text, not an ONNX model")
    if _safetensors_header(head, total_size):
        return Sniffed("safetensors", "safetensors weights file, not an ONNX model: export the model "
                                      "to ONNX first")
    if head[0] not in _MODEL_FIRST_TAGS:
        if _mostly_text(head):
            return Sniffed("text", "text file, not an ONNX model")
        return Sniffed("unknown", "not an ONNX model (unrecognised binary content)")
    return Sniffed("onnx-candidate")


def zip_member_names(path) -> list[str]:
    """Member names of a zip (reads only its directory), or [] when unreadable."""
    try:
        with zipfile.ZipFile(path) as zf:
            return zf.namelist()[:10_000]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError):
        return []


def _sniff_zip(head: bytes, names: list[str]) -> Sniffed:
    text = head[:65536]
    if any(n.endswith("data.pkl") for n in names) or b"data.pkl" in text or b"/data/0" in text:
        return Sniffed("pytorch", "PyTorch checkpoint (zip with a pickle), not ONNX: export the model "
                                  "to ONNX first (torch.onnx.export); checkpoints are never unpickled here")
    if b".npy" in text:
        return Sniffed("npz", "NumPy .npz archive, not an ONNX model (use it as an input file instead)")
    return Sniffed("zip", "zip archive: upload it as a model bundle (a .onnx plus its external-data "
                          "files) or extract the .onnx first")


def _mostly_text(head: bytes) -> bool:
    sample = head[:2048]
    printable = sum(32 <= b < 127 or b in (9, 10, 13) for b in sample)
    return printable / max(1, len(sample)) > 0.95


def _safetensors_header(head: bytes, total_size: int) -> bool:
    if len(head) < 10:
        return False
    (n,) = struct.unpack("<Q", head[:8])
    return 2 <= n < min(total_size, 100_000_000) and head[8:9] == b"{"
