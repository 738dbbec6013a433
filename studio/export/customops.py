"""Custom-op libraries an export loads and ships: ONNX Runtime custom-op libraries
(``SessionOptions.register_custom_ops_library``, ``--ort-custom-ops``) and OpenVINO extensions
(``Core.add_extension`` / ``convert_model(extension=...)``, ``--ov-extension``), e.g. the ones
``onnx-studio plugin ... --build`` compiles.

The export workers load them when they convert, reload and verify an artifact; the bundle carries a
copy next to the artifact that needs it (``onnxruntime/custom_ops/``, ``openvino/extensions/``, and the
Triton models' folders), recorded in the manifest with its sha256.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from studio.export.context import ExportContext
from studio.core.paths import safe_name
from studio.export.files import copy_file
from studio.export.results import Artifact

__all__ = ["TRITON_MOUNT", "ship"]

# Triton's ONNX Runtime backend passes model_operations.op_library_filename to RegisterCustomOpsLibrary as
# given (dlopen), not relative to the model folder: the config names the path where the repository is mounted.
TRITON_MOUNT = "/models"


def ship(ctx: ExportContext, libs: Sequence[Path], folder: Path, kind: str, label: str) -> tuple[list[str], list[Artifact]]:
    """Copy ``libs`` into ``folder``; (file names, artifact records)."""
    names, artifacts = [], []
    for lib in libs:
        name = safe_name(Path(lib).name, default="library.so")
        copy_file(Path(lib), folder / name)
        names.append(name)
        artifacts.append(ctx.artifact(folder / name, kind, label, portable=False,
                                      notes=("native code: built for this OS/CPU architecture and engine ABI",)))
    return names, artifacts
