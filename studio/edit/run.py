"""An edit from start to end: load lazily, apply in memory, check, verify, then (only then) write.

``validate`` is the same path without verification and without writing, so what the UI previews
and what the CLI refuses are the same answer."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from studio.core.compare import Verification, VerifyStatus
from studio.core.model import ModelHandle
from studio.edit.apply import AppliedEdits, apply_script, load_model
from studio.edit.script import EditError, EditScript
from studio.edit.verify import DOES_NOT_LOAD, interface, node_changes, node_list, verify
from studio.core.model_io import save_result
from studio.core.outputs import check_destination, disk_error, shown_path


@dataclass(frozen=True)
class EditResult:
    """What an edit did: the models written (none for a validation), interface before/after,
    nodes removed/added, one note per operation, and its verification."""

    ok: bool
    message: str
    script: list[dict]
    notes: tuple[str, ...]
    kinds: tuple[str, ...]
    before: dict[str, list[str]]
    after: tuple[dict[str, list[str]], ...]
    nodes_removed: tuple[str, ...]
    nodes_added: tuple[str, ...]
    verification: Verification | None = None
    nodes_renamed: tuple[str, ...] = ()
    outputs: tuple[Path, ...] = ()
    seconds: float = 0.0
    renamed: dict[str, str] = field(default_factory=dict)

    @property
    def interface_changed(self) -> bool:
        return any(a != self.before for a in self.after)

    def to_dict(self) -> dict:
        return {"ok": self.ok, "message": self.message, "script": self.script, "notes": list(self.notes),
                "kinds": list(self.kinds), "interface_changed": self.interface_changed,
                "before": self.before, "after": list(self.after), "nodes_removed": list(self.nodes_removed),
                "nodes_added": list(self.nodes_added), "nodes_renamed": list(self.nodes_renamed),
                "renamed": dict(self.renamed),
                "verification": self.verification.to_dict() if self.verification else None,
                "outputs": [str(p) for p in self.outputs], "seconds": round(self.seconds, 3)}


def _applied(handle: ModelHandle, script: EditScript, *, verify_numbers: bool = True,
             pool_key: str = "default") -> tuple[AppliedEdits, dict, list]:
    original = load_model(handle.path)
    before_nodes = node_list(original)
    from studio.edit.graph import infer_types  # cycle: the studio.edit package imports this module

    infer_types(original)
    before = interface(original)
    return apply_script(original, script, verify=verify_numbers, pool_key=pool_key), before, before_nodes


def node_renames(script: EditScript) -> dict[str, str]:
    """Original node name -> its name after the script's ``rename`` operations, in their order (a node
    renamed twice maps to its last name; one renamed back is left out)."""
    current: dict[str, str] = {}            # original -> current
    for op in script.ops:
        if op.kind != "rename":
            continue
        step = dict(op.args.get("nodes", {}) or {})
        by_current = {cur: orig for orig, cur in current.items()}
        for old, new in step.items():
            current[by_current.get(old, old)] = new
    return {orig: cur for orig, cur in current.items() if orig != cur}


def _result(applied: AppliedEdits, before: dict, before_nodes: list, script: EditScript, **kw) -> EditResult:
    after_nodes = [n for m in applied.models for n in node_list(m)]
    renames = node_renames(script)
    present = set(after_nodes)
    moved = [(name, op) for name, op in before_nodes if name in renames and (renames[name], op) in present]
    # a renamed node is neither removed nor added: the diff is taken under its new name
    kept = set(moved)
    removed, added = node_changes([(renames[n], t) if (n, t) in kept else (n, t) for n, t in before_nodes],
                                  after_nodes)
    return EditResult(ok=kw.pop("ok", True), message=kw.pop("message"), script=script.to_list(), notes=applied.notes,
                      kinds=applied.kinds, before=before, after=tuple(interface(m) for m in applied.models),
                      nodes_removed=tuple(removed), nodes_added=tuple(added), renamed=applied.renamed,
                      nodes_renamed=tuple(f"{n} -> {renames[n]} ({t})" for n, t in moved), **kw)


def validate(handle: ModelHandle, script: EditScript) -> EditResult:
    """Apply the script in memory and check the result (checker, strict inference); writes nothing.
    Raises ``EditError`` (one line) when an operation or the result is refused."""
    started = time.perf_counter()
    applied, before, before_nodes = _applied(handle, script)
    return _result(applied, before, before_nodes, script, message="the script applies; the result passes the "
                   "checker and strict shape inference", seconds=time.perf_counter() - started)


def part_paths(out: Path, count: int) -> tuple[Path, ...]:
    """Where a script's models go: ``OUT``, then ``OUT-stem.part2.onnx`` for a split's second model."""
    return (out, *(out.with_name(f"{out.stem}.part{i + 1}{out.suffix}") for i in range(1, count)))


def edit(handle: ModelHandle, script: EditScript, out_path: str | Path, *, verify_numbers: bool = True,
         pool_key: str = "default") -> EditResult:
    """Apply, check, verify, and write the edited model(s) to ``out_path`` (a split's second model
    beside it). A refused or failed edit raises ``EditError`` and writes nothing."""
    out = Path(out_path)
    if out.suffix != ".onnx":
        raise EditError("the output must name a .onnx file")
    started = time.perf_counter()
    try:        # a merge's or the verification's scratch copy past `ulimit -f` or on a full disk: the run stops
        applied, before, before_nodes = _applied(handle, script, verify_numbers=verify_numbers, pool_key=pool_key)
        paths = part_paths(out, len(applied.models))
        for p in paths:
            check_destination(p, shown=shown_path(p))
        verification = (verify(handle.path, applied.models, applied.kinds, applied.notes, applied.renamed,
                               pool_key=pool_key) if verify_numbers else
                        Verification(VerifyStatus.SKIPPED, "numbers not compared", reason="verification turned off",
                                     method="none"))
    except OSError as exc:
        err = disk_error(exc, shown_path(out))
        if err is None:
            raise
        raise err from None
    if not verification.ok and verification.reason == DOES_NOT_LOAD:
        raise EditError(f"the edited model {verification.message[:400]}; refused, nothing was written")
    if not verification.ok:
        raise EditError(f"the edit changes the model's numbers ({verification.message[:240]}); refused, nothing "
                        "was written")
    for m, p in zip(applied.models, paths):
        save_result(m, p, shown=shown_path(p))
    return _result(applied, before, before_nodes, script, message=f"edited: {len(script.ops)} operations; "
                   f"verification {verification.verdict}", verification=verification, outputs=paths,
                   seconds=time.perf_counter() - started)


def provenance(result: EditResult, parent: str) -> dict:
    """What a project version records of the edit (the script itself: replaying it gives the version)."""
    return {"edit": {"script": result.script, "notes": list(result.notes),
                     "verification": result.verification.to_dict() if result.verification else None,
                     "nodes_removed": list(result.nodes_removed), "nodes_added": list(result.nodes_added),
                     "nodes_renamed": list(result.nodes_renamed)},
            "parent": parent, "ok": result.ok, "summary": result.message}
