"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from collections.abc import Sequence

from studio.core.findings import Finding, Report
from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.workspace import Version, Workspace
from studio.inspect.summary import ModelSummary, summarize

__all__ = ["Finding", "ModelHandle", "ModelSummary", "Report", "Version", "Workspace", "apply_fix", "build_plugin",
           "check", "inspect", "load", "plugin_signature", "run_python_op", "scaffold_plugin"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


def check(handle: ModelHandle, engines: Sequence[str] | str = ("onnxruntime", "openvino", "tensorrt"), *,
          eps: Sequence[str] = ("cpu",), trt_version: str | int = "10", run: bool = True,
          dims: Mapping[str, int] | None = None, pool_key: str = "default") -> Report:
    """Compatibility per node and per engine (ONNX Runtime and OpenVINO decided by a real session in a
    worker, TensorRT by its support table), plus lint and custom ops. See docs/findings.md."""
    from diagnostics.compatibility import check_model

    return check_model(handle, engines, eps=eps, trt_version=trt_version, run=run, dims=dims, pool_key=pool_key)


def apply_fix(workspace: Workspace, version_id: str, fix: Finding | str, *, verify: bool = True,
              pool_key: str = "default") -> Version:
    """Run the fix pass (a pass name, or a finding's ``fix_pass``) through the verifying pipeline
    and add the result as a new version whose provenance records the fix and the pipeline."""
    from diagnostics.fixes import apply_fix as _apply_fix

    return _apply_fix(workspace, version_id, fix, verify=verify, pool_key=pool_key)


def release_session(pool_key: str) -> None:
    """Stop the sandbox workers of one session (a browser session that ended)."""
    from studio.core.sandbox import shutdown_pool

    shutdown_pool(pool_key)


# ---------------------------------------------------------------------------- custom-op plugins

def plugin_signature(handle: ModelHandle, op: str, *, capture: bool = True, dims: Mapping[str, int] | None = None,
                     pool_key: str = "default"):
    """The op as the model uses it: attributes, ports, dtypes/shapes and captured samples (``OpSignature``)."""
    from studio.plugins.signature import collect_signature

    return collect_signature(handle, op, capture=capture, dims=dims, pool_key=pool_key)


def scaffold_plugin(handle: ModelHandle, op: str, target: str | Sequence[str], out_dir: str | Path, *,
                    signature=None, impl: str | Path | None = None, dims: Mapping[str, int] | None = None,
                    pool_key: str = "default"):
    """Write plugin packages for ``op`` (targets: ort-python, ort-cpp, openvino-python, openvino-cpp, tensorrt,
    all) under ``out_dir/<op>/<target>/`` and return the ``PluginScaffold``. ``impl`` (code or a .py file)
    replaces the generated Python body (``compute`` for ort-python, ``convert`` for openvino-python)."""
    from studio.plugins.runner import read_code
    from studio.plugins.scaffold import expand_targets, scaffold

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
    from studio.plugins.runner import run_python_op as _run

    return _run(handle, op, impl_code_or_path, target=target, signature=signature, run_model=run_model,
                timeout_s=timeout_s, pool_key=pool_key, on_tick=on_tick)


def build_plugin(handle: ModelHandle, scaffold, target: str, *, signature=None, pool_key: str = "default",
                 on_tick=None):
    """Compile a generated C++ package (ort-cpp, openvino-cpp) and check the library against the reference
    (``BuildResult``). TensorRT packages are reported as not compiled here."""
    from studio.plugins.build import build_package, check_library

    package = scaffold.package(target)
    folder = scaffold.root.parent / package.folder
    result = build_package(folder, target)
    if not result.built:
        return result
    sig = signature or plugin_signature(handle, scaffold.op, pool_key=pool_key)
    check = check_library(handle, sig, target, folder / result.library, pool_key=pool_key, on_tick=on_tick)
    from dataclasses import replace

    return replace(result, check=check, message=f"{result.message}; {check.message}")
