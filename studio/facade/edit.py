"""Edit scripts: parsed, validated in memory, applied with verification, kept as versions.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TYPE_CHECKING

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.requests import EditRequest
from studio.core.sandbox import require_memory
from studio.core.workspace import Version, Workspace
from studio.edit import edit as _edit, EditScript, load_script, parse_ops, provenance, validate
from studio.projects import ProjectModel as _ProjectModel

if TYPE_CHECKING:
    from studio.projects import ProjectModel

__all__ = [
    "edit_script", "validate_edit_script", "edit", "add_edited_version",
]


def edit_script(source: str | Path | Sequence[Mapping] | Mapping) -> Any:
    """An edit script (``studio.edit.EditScript``) from a .json/.yaml file, or from already-decoded
    operations (``[{"op": "rename", ...}]``); each operation's fields are checked here."""
    if isinstance(source, (str, Path)):
        return load_script(source)
    return parse_ops(source)


def validate_edit_script(handle: ModelHandle, script: Any) -> Any:
    """Apply a script in memory and check the result (names exist, no cycle, full checker, strict
    shape inference); writes nothing. Returns the preview (``EditResult``: interface before/after,
    nodes removed/added) or raises a one-line ``StudioError``."""
    return validate(handle, edit_script(script) if not _is_script(script) else script)


def edit(handle: ModelHandle, request: EditRequest | Any, out_path: str | Path, *, base_dir: str | Path | None = None,
         verify: bool = True, pool_key: str = "default") -> Any:
    """Apply ``request`` (an ``EditRequest``, as the CLI and the Graph page build it) and write the result
    to ``out_path`` (a split's second model beside it as ``OUT.part2.onnx``): checked, verified against the
    original (numbers where the edit keeps them, the original's tensors at a cut, when ``request.verify``),
    written only then; the input is only read. ``base_dir``: the folder the operations' relative files
    (.npy, merged models) are read from, the call's (the CLI: the script's folder; default: the working
    folder). A script (an ``EditScript``, a file or decoded operations, with ``verify``) is still taken,
    for scripts built in code."""
    if isinstance(request, EditRequest):
        script, verify = parse_ops(request.script, base_dir=Path(base_dir) if base_dir else None), request.verify
    elif base_dir is not None:
        raise StudioError("base_dir goes with an EditRequest (a script file's folder is its own)",
                          code=ErrorCode.BAD_REQUEST)
    else:
        script = request if _is_script(request) else edit_script(request)
    if verify:                          # the verification's session holds the weights
        require_memory(handle.path, "edit with verification")
    return _edit(handle, script, out_path, verify_numbers=verify, pool_key=pool_key)


def _is_script(script: Any) -> bool:

    return isinstance(script, EditScript)


def add_edited_version(model: ProjectModel | Workspace, parent: str, result: Any, *, label: str = "edit",
                       job_id: str | None = None, source_sha256: str | None = None,
                       request: EditRequest | None = None) -> Version:
    """The edited model as a new version whose provenance records the script (undo: select ``parent``).
    A split's later parts become versions too (children of ``parent``, labelled ``... part N``); the
    first part is returned. In a project, an edit that changes no byte is refused as "same as vN" (R63)
    and ``source_sha256`` (the content edited) must be ``parent``'s (R59). ``request``: the ``EditRequest``
    that made it, kept in the provenance (``request``) whether the CLI or the Graph page kept it."""
    if not result.outputs:
        raise StudioError("the edit wrote no model to keep", code=ErrorCode.NO_RESULT)
    kwargs: dict[str, Any] = {"job_id": job_id} if job_id is not None else {}
    if isinstance(model, _ProjectModel):
        kwargs.update(refuse_same=True, source_sha256=source_sha256)
    kept = {**provenance(result, parent), **({"request": request.to_dict()} if request is not None else {})}
    first = model.add_file(result.outputs[0], label=label, parent=parent, provenance=kept, **kwargs)
    kwargs.pop("refuse_same", None)           # a later part may equal another version: it is still a part
    for i, path in enumerate(result.outputs[1:], 2):
        model.add_file(path, label=f"{label[:50]} part {i}", parent=parent,
                       provenance={**kept, "part": i}, **kwargs)
    return first

