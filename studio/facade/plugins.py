"""Custom-op plugins: the op's signature, scaffolds, Python runs and C++ builds.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from diagnostics.custom_ops import detect_custom_ops
from studio.core.model import ModelHandle
from studio.plugins.build import build_package, builds_allowed, check_library
from studio.plugins.runner import (
    PYTHON_TARGETS as PYTHON_PLUGIN_TARGETS,
    read_code,
    read_code as read_plugin_code,
    run_python_op as _run,
)
from studio.plugins.scaffold import (
    expand_targets,
    expand_targets as plugin_targets,
    known_kernel,
    render_python_impl,
    scaffold,
    zip_folder,
)
from studio.plugins.signature import collect_signature


__all__ = [
    "plugin_signature", "scaffold_plugin", "run_python_op", "plugin_builds_allowed", "build_plugin",
    "plugin_kernel_known", "custom_op_names", "PYTHON_PLUGIN_TARGETS", "plugin_targets", "read_plugin_code",
    "render_python_impl", "zip_folder",
]


def plugin_signature(handle: ModelHandle, op: str, *, capture: bool = True, dims: Mapping[str, int] | None = None,
                     pool_key: str = "default"):
    """The op as the model uses it: attributes, ports, dtypes/shapes and captured samples (``OpSignature``)."""
    return collect_signature(handle, op, capture=capture, dims=dims, pool_key=pool_key)


def scaffold_plugin(handle: ModelHandle, op: str, target: str | Sequence[str], out_dir: str | Path, *,
                    signature=None, impl: str | Path | None = None, dims: Mapping[str, int] | None = None,
                    pool_key: str = "default"):
    """Write plugin packages for ``op`` (targets: ort-python, ort-cpp, openvino-python, openvino-cpp, tensorrt,
    all) under ``out_dir/<op>/<target>/`` and return the ``PluginScaffold``. ``impl`` (code or a .py file)
    replaces the generated Python body (``compute`` for ort-python, ``convert`` for openvino-python)."""
    sig = signature or plugin_signature(handle, op, dims=dims, pool_key=pool_key)
    code = {}
    if impl is not None:
        text = read_code(impl)
        code["openvino-python" if "def convert(" in text and "def compute(" not in text else "ort-python"] = text
    opsets = {o.domain: o.version for o in handle.proto.opset_import}
    return scaffold(sig, expand_targets(target), Path(out_dir), model_name=handle.path.name, model_sha=handle.sha256,
                    opsets=opsets, impl_code=code)


def run_python_op(handle: ModelHandle, op: str, impl_code_or_path: str | Path, *, target: str = "ort-python",
                  signature=None, run_model: bool = True, timeout_s: float | None = None, pool_key: str = "default",
                  on_tick=None):
    """Run a Python implementation of ``op`` (ORT Python op or OpenVINO conversion extension) in a fresh,
    confined worker and compare it with the reference (``OpRunResult``; falsy unless it matches)."""
    return _run(handle, op, impl_code_or_path, target=target, signature=signature, run_model=run_model,
                timeout_s=timeout_s, pool_key=pool_key, on_tick=on_tick)


def plugin_builds_allowed() -> bool:
    """Whether this studio compiles C++ plugin packages: not on a shared server (``serve --shared``)."""
    return builds_allowed()


def build_plugin(handle: ModelHandle, scaffold, target: str, *, signature=None, pool_key: str = "default",
                 on_tick=None):
    """Compile a generated C++ package (ort-cpp, openvino-cpp) in a one-off sandboxed worker and check the
    library against the reference (``BuildResult``). TensorRT packages are reported as not compiled here; on a
    shared server (:func:`plugin_builds_allowed` false) this raises ``StudioError``."""
    package = scaffold.package(target)
    folder = scaffold.root.parent / package.folder
    result = build_package(folder, target, pool_key=pool_key, on_tick=on_tick)
    if not result.built:
        return result
    sig = signature or plugin_signature(handle, scaffold.op, pool_key=pool_key)
    check = check_library(handle, sig, target, folder / result.library, pool_key=pool_key, on_tick=on_tick)

    return replace(result, check=check, message=f"{result.message}; {check.message}")


def plugin_kernel_known(signature) -> bool:  # noqa: ANN001 - studio.plugins.signature.OpSignature
    """Whether the plugin templates fill in this op's kernel (a complete package, runnable as generated)."""
    return known_kernel(signature)[0] is not None


def custom_op_names(handle: ModelHandle) -> list[str]:
    """``domain::op`` of every custom (non-standard) op the model uses, for the Plugins page."""
    return [c.qualified for c in detect_custom_ops(handle.proto)]

