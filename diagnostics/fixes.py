"""Apply a finding's fix: its registered pass, through the verifying pipeline,
saved as a new workspace version (the original version is never touched)."""

from __future__ import annotations

from studio.core.errors import StudioError
from studio.core.findings import Finding
from studio.core.workspace import Version, Workspace

__all__ = ["apply_fix", "fix_name"]


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
