"""Apply a finding's fix: its registered pass, through the verifying pipeline,
saved as a new workspace version (the original version is never touched).

A fix pass may need options to fix *this* model: convert-opset its target (the
finding carries it), fix-input-shapes the dim values (the user gives them).
``fix_options`` joins the two so the UI button and ``check --fix`` behave alike.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import safe_name
from studio.core.findings import Finding
from studio.core.requests import OptimizeRequest
from studio.core.workspace import Version, Workspace
from diagnostics.lint import FIX_TARGET_OPSET
from studio.core.feeds import choose_dims, input_specs
from studio.core.outputs import check_destination, disk_error, register_input, shown_path, staged_files

__all__ = ["apply_fix", "default_dims", "fix_name", "fix_options", "fix_to_file"]


def fix_name(fix: Finding | str) -> str:
    if isinstance(fix, Finding):
        if not fix.fix_pass:
            raise StudioError(f"finding {fix.code} has no automatic fix; {fix.fix_hint or 'see its message'}",
                              code=ErrorCode.NO_FIX)
        return fix.fix_pass
    name = str(fix).strip()
    if not name:
        raise StudioError("name a fix pass (e.g. legalize-grid-sampler)", code=ErrorCode.NO_FIX)
    return name


def fix_options(name: str, *, finding: Finding | None = None, options: Mapping[str, Any] | None = None,
                dims: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The options fix pass ``name`` runs with: the finding's, then the user's; dims for fix-input-shapes."""
    opts: dict[str, Any] = dict(finding.fix_options or {}) if finding is not None else {}
    opts.update(options or {})
    if name == "fix-input-shapes":
        opts.setdefault("dims", dict(dims or {}))
        if not opts["dims"]:
            raise StudioError("fix-input-shapes needs a value for each dynamic dim to fix (--dim NAME=VALUE, or the "
                              "dim boxes next to the Fix button)", code=ErrorCode.BAD_OPTION)
    if name == "convert-opset" and "target" not in opts:
        opts["target"] = FIX_TARGET_OPSET
    return opts


def default_dims(model_path: Path) -> dict[str, int]:
    """Each symbolic input dim with the value tests would use (1 for batch, 16 for sequence...),
    as the starting values a user edits before fixing the dims."""
    import onnx

    return choose_dims(input_specs(onnx.load_model(str(model_path), load_external_data=False)))


def apply_fix(workspace: Workspace, version_id: str, fix: Finding | str, *, verify: bool = True,
              options: Mapping[str, Any] | None = None, dims: Mapping[str, int] | None = None,
              pool_key: str = "default") -> Version:
    from passes.pipeline import run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    name = fix_name(fix)
    finding = fix if isinstance(fix, Finding) else None
    opts = fix_options(name, finding=finding, options=options, dims=dims)
    request = OptimizeRequest(passes=[name], pass_options={name: opts}, dims=dims or {}, verify=verify)
    source = workspace.version(version_id)
    handle = workspace.handle(version_id)
    # The fixed model is built in scratch inside the workspace/project and stored as a version: a fix
    # that fails (or changes nothing) leaves no folder behind and is never listed as an artifact.
    out_dir = Path(tempfile.mkdtemp(prefix=f"fix-{safe_name(name, max_len=30)}-", dir=workspace.cache_dir()))
    try:
        result = run_pipeline(handle.path, request, out_dir / f"{handle.name}.onnx", pool_key=pool_key)
        if not result.ok:
            raise StudioError(f"fix '{name}' was not applied: {result.summary()}", code=ErrorCode.FIX_FAILED)
        if not result.modified:
            notes = "; ".join(n for r in result.records for n in r.notes)
            raise StudioError(f"fix '{name}' changed nothing in version {source.id}" + (f" ({notes})" if notes else ""),
                              code=ErrorCode.FIX_NOOP)
        provenance = {"fix": name, "options": opts, "finding": finding.to_dict() if finding else None,
                      "pipeline": result.lineage(), "reference": result.reference}
        # a fixed model byte-identical to a version the model has is "same as vN" in a project (R63)
        same = {} if isinstance(workspace, Workspace) else {"refuse_same": True}
        return workspace.add_file(result.output, label=f"fix: {name}", parent=source.id, provenance=provenance,
                                  **same)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # scratch: made above; the version holds its own copy


def fix_to_file(model_path, names: list[str], output, *, verify: bool = True,
                options: Mapping[str, Mapping[str, Any]] | None = None, dims: Mapping[str, int] | None = None,
                inputs: str | Path | None = None, pool_key: str = "default"):
    """CLI path: run fix passes on a model file and save the verified result to ``output``.

    Nothing is left at ``output`` when the fix fails or changes nothing: a file
    there would look fixed and get deployed."""
    from passes.pipeline import run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    register_input(model_path)
    label = shown_path(output)
    output = check_destination(output, shown=label)     # never the input, never through a link
    check_destination(output.with_name(output.name + ".data"), shown=label + ".data")
    # verified on the user's real inputs when given (the pipeline reads the request's .npz)
    request = OptimizeRequest(passes=list(names), dims=dims or {}, verify=verify, inputs=inputs,
                              pass_options={n: fix_options(n, options=(options or {}).get(n), dims=dims) for n in names})
    # The result is staged beside the output and committed only when the fix applied and changed the model:
    # otherwise nothing is written, and nothing that was at the output before is touched.
    with staged_files(output.parent, shown=label, what=label) as stage:
        try:
            result = run_pipeline(Path(model_path).resolve(), request, stage / output.name, pool_key=pool_key,
                                  partial="none")
        except StudioError as exc:          # a full or read-only disk: named as the user gave the output
            raise (disk_error(exc, label) or exc) from None
        if not result.ok:
            raise StudioError(f"fix not applied: {result.summary()}", code=ErrorCode.FIX_FAILED)
        if not result.modified:
            notes = "; ".join(n for r in result.records for n in r.notes)
            raise StudioError("the fix changed nothing, so no file was written" + (f" ({notes})" if notes else ""),
                              code=ErrorCode.FIX_NOOP)
    from dataclasses import replace

    return replace(result, output=output)
