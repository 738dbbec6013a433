"""Error codes in one enum (studio/core/error_codes.py), each documented in docs/errors.md: every code a
StudioError is raised with anywhere in the source (an AST scan of ``code="..."`` / ``code=ErrorCode.X``
at calls of StudioError subclasses, and ``code = ...`` in their class bodies) is a member, and every
member is raised somewhere (no dead codes); ``--json`` still shows the plain string."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from studio.core.error_codes import WHAT_TO_DO, ErrorCode, render_markdown
from studio.core.errors import PathError, StudioError
from tests.conftest import ROOT

PACKAGES = ("studio", "diagnostics", "passes", "profilers")


def _trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for d in PACKAGES for p in sorted((ROOT / d).rglob("*.py"))}


def _base_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _error_classes(trees) -> set[str]:
    """Names of StudioError and every class deriving from it (to a fixpoint, across modules)."""
    names, grew = {"StudioError"}, True
    while grew:
        grew = False
        for tree in trees.values():
            for n in ast.walk(tree):
                if isinstance(n, ast.ClassDef) and n.name not in names and any(_base_name(b) in names for b in n.bases):
                    names.add(n.name)
                    grew = True
    return names


def _code_value(node: ast.expr) -> str | None:
    """The code a literal or ``ErrorCode.X`` gives (``ErrorCode.X`` that is no member: 'ErrorCode.X?');
    None for a computed code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and _base_name(node.value) == "ErrorCode":
        return ErrorCode[node.attr].value if node.attr in ErrorCode.__members__ else f"ErrorCode.{node.attr}?"
    return None


def raised_codes() -> dict[str, list[str]]:
    """code -> the 'file:line' of each place it is set on a StudioError."""
    trees = _trees()
    errors = _error_classes(trees)
    found: dict[str, list[str]] = {}
    for path, tree in trees.items():
        where = str(path.relative_to(ROOT))
        for n in ast.walk(tree):
            if isinstance(n, ast.ClassDef) and n.name in errors:
                for st in n.body:
                    target = st.targets[0] if isinstance(st, ast.Assign) else getattr(st, "target", None)
                    if _base_name(target) == "code" and getattr(st, "value", None) is not None:
                        if (code := _code_value(st.value)) is not None:
                            found.setdefault(code, []).append(f"{where}:{st.lineno}")
            elif isinstance(n, ast.Call) and _base_name(n.func) in errors:
                for kw in n.keywords:
                    if kw.arg == "code" and (code := _code_value(kw.value)) is not None:
                        found.setdefault(code, []).append(f"{where}:{n.lineno}")
    return found


def test_every_raised_code_is_in_the_enum_and_every_member_is_raised():
    found = raised_codes()
    values = {c.value for c in ErrorCode}
    assert len(found) >= 80                                  # the scan sees the raise sites (101 codes when written)
    assert "BAD-OPTION" in found and "WORKER-ERROR" in found  # a call's keyword and a class attribute
    unknown = {code: sites[:3] for code, sites in found.items() if code not in values}
    assert unknown == {}, f"codes raised but not in studio/core/error_codes.py's ErrorCode: {unknown}"
    assert sorted(values - set(found)) == [], "ErrorCode members raised nowhere (dead codes): remove them"


def test_every_code_says_what_to_do_and_the_page_is_current():
    assert set(WHAT_TO_DO) == set(ErrorCode)
    assert all(len(text) > 20 and "|" not in text and "\n" not in text for text in WHAT_TO_DO.values())
    page = (ROOT / "docs" / "errors.md").read_text()
    assert page == render_markdown(), "docs/errors.md is stale: python -m studio.core.error_codes > docs/errors.md"
    for code in ErrorCode:
        assert f"| `{code.value}` |" in page


def test_a_member_is_its_string_in_json_and_messages():
    err = PathError("no such folder")
    assert err.code == "BAD-PATH" and f"{err.code}" == "BAD-PATH"
    assert json.dumps(err.to_dict()) == '{"code": "BAD-PATH", "message": "no such folder"}'
    assert StudioError("x", code=ErrorCode.BAD_OPTION).to_dict() == {"code": "BAD-OPTION", "message": "x"}
    assert StudioError("x").code == "STUDIO-ERROR"
