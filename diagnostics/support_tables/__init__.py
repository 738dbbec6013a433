"""Shipped support tables (JSON built by ``build_tensorrt_table.py`` from the
transcribed ``*.psv`` source facts beside it)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

HERE = Path(__file__).resolve().parent
TENSORRT_VERSIONS = ("10", "11")


def normalize_trt_version(version: str | int) -> str:
    major = str(version).strip().lower().removesuffix(".x").split(".")[0]
    if major not in TENSORRT_VERSIONS:
        raise StudioError(f"unknown TensorRT version {str(version)[:20]!r}; tables exist for "
                          f"{', '.join(v + '.x' for v in TENSORRT_VERSIONS)}", code=ErrorCode.BAD_OPTION)
    return major


@lru_cache(maxsize=4)
def tensorrt_table(version: str | int = "10") -> dict:
    """The TensorRT ONNX-parser support table for major version ``version``."""
    major = normalize_trt_version(version)
    return json.loads((HERE / f"tensorrt_{major}.json").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def ort_cuda_table() -> dict:
    """ONNX Runtime CUDA execution provider kernels (op, domain, opset range)."""
    return json.loads((HERE / "ort_cuda.json").read_text(encoding="utf-8"))
