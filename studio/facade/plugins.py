"""Custom-op plugins: the op's signature, scaffolds, Python runs and C++ builds.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from diagnostics.custom_ops import detect_custom_ops
from studio.core.errors import ErrorCode, StudioError
from studio.core.model import ModelHandle
from studio.core.requests import PluginRequest
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
    "PluginRun", "make_plugins", "plugin_signature", "scaffold_plugin", "run_python_op", "plugin_builds_allowed",
    "build_plugin",
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



# A run's verdicts that fail it ("unverified": ran with the declared outputs, no reference to compare with, is not).
_FAILED = ("error", "mismatch")


@dataclass(frozen=True)
class PluginRun:
    """What ``plugin`` made of a ``PluginRequest``: the op's signature, the packages written, the Python runs and
    the C++ builds (each against the reference), and whether every run and build asked for passed."""

    request: PluginRequest
    signature: Any                  # studio.plugins.signature.OpSignature
    scaffold: Any                   # studio.plugins.scaffold.PluginScaffold
    runs: tuple = ()
    builds: tuple = ()

    @property
    def failed(self) -> bool:
        return (any(r.status in _FAILED for r in self.runs)
                or any(b.target != "tensorrt" and (not b.built or b.check is None or b.check.status in _FAILED)
                       for b in self.builds))

    def to_dict(self) -> dict[str, Any]:
        """``plugin --json``: signature, packages, runs and builds, and ``ok``."""
        return {"signature": self.signature.to_dict(), "scaffold": self.scaffold.to_dict(),
                "runs": [r.to_dict() for r in self.runs], "builds": [b.to_dict() for b in self.builds],
                "ok": not self.failed}


def make_plugins(handle: ModelHandle, request: PluginRequest, out_dir: str | Path, *,
                 signature=None, impl_code: str | None = None, pool_key: str = "default",
                 on_tick=None) -> PluginRun:
    """Run a ``PluginRequest`` (the one ``onnx-studio plugin`` builds from its flags, and the Plugins page from its
    widgets): the op's signature at the request's dims, its packages for the request's targets under
    ``out_dir/<op>/``, with ``request.impl`` (a path, read here) as the Python body; unless ``run`` is off, each
    Python package whose kernel is known (or is the user's) is run against the reference; with ``build``, each
    C++ package is compiled and checked.

    The page's two extras: ``signature``, the op's signature it already collected for this request's op and dims
    (not collected again), and ``impl_code``, the text of the file ``request.impl`` names as the page's editor
    holds it (the page edits the body in place; the CLI reads the saved file)."""
    if impl_code is not None and not request.impl:
        raise StudioError("impl_code is the text of the request's impl file, and the request names none",
                          code=ErrorCode.BAD_REQUEST)
    if signature is not None and signature.qualified != request.op and signature.op_type != request.op:
        raise StudioError(f"the signature given is {signature.qualified!r}'s, the request asks for "
                          f"{request.op[:80]!r}", code=ErrorCode.BAD_REQUEST)
    targets = expand_targets(",".join(request.targets))
    sig = signature or plugin_signature(handle, request.op, dims=dict(request.dims), pool_key=pool_key)
    impl_text = impl_code if impl_code is not None else read_code(Path(request.impl)) if request.impl else None
    made = scaffold_plugin(handle, request.op, targets, Path(out_dir), signature=sig, impl=impl_text,
                           pool_key=pool_key)
    runs, builds = [], []
    if request.run:
        complete = plugin_kernel_known(sig)
        for target in (t for t in targets if t in PYTHON_PLUGIN_TARGETS):
            package = made.package(target)
            body = next(f.path for f in package.files if f.path.endswith(("_op.py", "_extension.py")))
            user_code = impl_text is not None and (("def convert(" in impl_text) == (target == "openvino-python"))
            if user_code or complete:
                code = (made.root.parent / package.folder / body).read_text()
                runs.append(run_python_op(handle, sig.qualified, code, target=target, signature=sig,
                                          pool_key=pool_key, on_tick=on_tick))
    if request.build:
        for target in (t for t in targets if t in ("ort-cpp", "openvino-cpp", "tensorrt")):
            builds.append(build_plugin(handle, made, target, signature=sig, pool_key=pool_key, on_tick=on_tick))
    return PluginRun(request, sig, made, tuple(runs), tuple(builds))
