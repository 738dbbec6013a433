"""Apply a finding's fix: its registered pass, through the verifying pipeline,
saved as a new workspace version (the original version is never touched)."""

from __future__ import annotations

from studio.core.errors import StudioError
from studio.core.findings import Finding
from studio.core.workspace import Version, Workspace

__all__ = ["apply_fix", "fix_name", "fix_to_file"]


def fix_name(fix: Finding | str) -> str:
    if isinstance(fix, Finding):
        if not fix.fix_pass:
            raise StudioError(f"finding {fix.code} has no automatic fix; {fix.fix_hint or 'see its message'}",
                              code="NO-FIX")
        return fix.fix_pass
    name = str(fix).strip()
    if not name:
        raise StudioError("name a fix pass (e.g. legalize-grid-sampler)", code="NO-FIX")
    return name


def apply_fix(workspace: Workspace, version_id: str, fix: Finding | str, *, verify: bool = True,
              pool_key: str = "default") -> Version:
    from passes.pipeline import run_pipeline
    from passes.registry import make_pass

    name = fix_name(fix)
    pass_ = make_pass(name)             # unknown names: StudioError listing the known passes
    source = workspace.version(version_id)
    handle = workspace.handle(version_id)
    out_dir = workspace.job_dir(f"fix-{name}")
    result = run_pipeline(handle.path, [pass_], out_dir / f"{handle.name}.onnx", verify=verify, pool_key=pool_key)
    if not result.ok:
        raise StudioError(f"fix '{name}' was not applied: {result.summary()}", code="FIX-FAILED")
    if not result.modified:
        raise StudioError(f"fix '{name}' changed nothing in version {source.id}", code="FIX-NOOP")
    provenance = {"fix": name, "finding": fix.to_dict() if isinstance(fix, Finding) else None,
                  "pipeline": result.lineage(), "reference": result.reference}
    return workspace.add_file(result.output, label=f"fix: {name}", parent=source.id, provenance=provenance)


def fix_to_file(model_path, names: list[str], output, *, verify: bool = True, pool_key: str = "default"):
    """CLI path: run fix passes on a model file and save the verified result to ``output``."""
    from pathlib import Path

    from passes.pipeline import run_pipeline
    from passes.registry import make_pass
    from studio.core.paths import check_regular_file

    output = Path(output)
    if output.resolve() == Path(model_path).resolve():
        raise StudioError("--output must differ from the model: the original file is never modified", code="BAD-PATH")
    if output.exists():
        check_regular_file(output, max_bytes=None, label="output")
    result = run_pipeline(Path(model_path).resolve(), [make_pass(n) for n in names], output.resolve(), verify=verify,
                          pool_key=pool_key)
    if not result.ok:
        raise StudioError(f"fix not applied: {result.summary()}", code="FIX-FAILED")
    return result
