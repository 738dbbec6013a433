"""Where the C++ toolchain and each engine's development files are, and why not when they are missing.

* CMake and a C++17 compiler: ``cmake`` and ``c++``/``g++``/``clang++`` on PATH.
* OpenVINO: the ``openvino`` pip wheel ships its headers and ``OpenVINOConfig.cmake`` (``openvino/cmake``);
  found with ``importlib.util.find_spec`` so the engine is never imported in the studio process.
* ONNX Runtime: the pip wheel ships no headers. Looked for in ``$ONNX_STUDIO_ORT_INCLUDE``, in the studio's
  cache (``~/.cache/onnx-studio/ort-headers/<version>``, filled by ``scripts/fetch_ort_headers.sh`` from an
  npm package that carries ONNX Runtime's public headers), then ``/usr/include/onnxruntime`` and
  ``/usr/local/include/onnxruntime``. Any release's headers work: the C API is ABI-stable and a library asks
  the runtime for the API version of the headers it was built with.
* TensorRT: needs CUDA and NVIDIA's packages; ``tensorrt_available()`` says so honestly.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from studio.core.workspace import user_cache_dir

__all__ = ["Tool", "cmake", "cxx_compiler", "openvino_cmake_dir", "ort_include_dir", "tensorrt_available"]

ORT_HEADER = "onnxruntime_lite_custom_op.h"


@dataclass(frozen=True)
class Tool:
    ok: bool
    path: str | None
    reason: str | None = None


def cmake() -> Tool:
    path = shutil.which("cmake")
    return Tool(True, path) if path else Tool(False, None, "cmake is not installed (apt-get install cmake)")


def cxx_compiler() -> Tool:
    for name in (os.environ.get("CXX") or "", "c++", "g++", "clang++"):
        path = shutil.which(name) if name else None
        if path:
            return Tool(True, path)
    return Tool(False, None, "no C++ compiler found (apt-get install g++)")


def openvino_cmake_dir() -> Tool:
    spec = importlib.util.find_spec("openvino")
    if spec is None or not spec.submodule_search_locations:
        return Tool(False, None, "OpenVINO is not installed (pip install openvino)")
    folder = Path(list(spec.submodule_search_locations)[0]) / "cmake"
    if (folder / "OpenVINOConfig.cmake").is_file():
        return Tool(True, str(folder))
    return Tool(False, None, "this OpenVINO installation has no CMake config (openvino/cmake/OpenVINOConfig.cmake)")


def _cache_root() -> Path:
    return user_cache_dir() / "ort-headers"


def ort_include_dir() -> Tool:
    candidates: list[Path] = []
    if os.environ.get("ONNX_STUDIO_ORT_INCLUDE"):
        candidates.append(Path(os.environ["ONNX_STUDIO_ORT_INCLUDE"]))
    root = _cache_root()
    if root.is_dir():
        candidates.extend(sorted((p for p in root.iterdir() if p.is_dir()), reverse=True))
    candidates += [Path("/usr/include/onnxruntime"), Path("/usr/local/include/onnxruntime"),
                   Path("/usr/include/onnxruntime/core/session")]
    for folder in candidates:
        if (folder / ORT_HEADER).is_file() and (folder / "onnxruntime_cxx_api.h").is_file():
            return Tool(True, str(folder))
    return Tool(False, None, "ONNX Runtime's C++ headers were not found (the pip wheel has none): run "
                "scripts/fetch_ort_headers.sh, or set ONNX_STUDIO_ORT_INCLUDE to the include/ folder of an "
                "ONNX Runtime release")


def tensorrt_available() -> Tool:
    if importlib.util.find_spec("tensorrt") is None:
        return Tool(False, None, "TensorRT is not installed here (it needs CUDA, an NVIDIA GPU and NVIDIA's packages)")
    return Tool(True, None)
