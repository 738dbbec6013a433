"""Error codes in one enum (studio/core/error_codes.py), each documented in docs/errors.md: every code a
StudioError is raised with anywhere in the source (an AST scan of ``code=ErrorCode.X`` at calls of StudioError
subclasses, ``super().__init__(..., code=...)`` inside them, and ``code = ...`` in their class bodies) is a
member, and every member is raised somewhere (no dead codes); a raise site names the member, never a string
literal (issue 34 item 4: 381 sites passed one); ``--json`` still shows the plain string."""

from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

from studio.core.error_codes import WHAT_TO_DO, ErrorCode, render_markdown
from studio.core.errors import PathError, StudioError
from tests.conftest import ROOT

PACKAGES = ("studio", "diagnostics", "passes", "profilers")


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    """The source's syntax trees, parsed once for the module's tests (they only read them)."""
    return {p: ast.parse(p.read_text(), str(p)) for d in PACKAGES for p in sorted((ROOT / d).rglob("*.py"))}


@functools.cache
def _source_sites() -> tuple[tuple[str, ast.expr], ...]:
    """:func:`code_sites` of the source, walked once for the module's tests."""
    return tuple(code_sites(_trees()))


def _base_name(node: ast.expr) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _error_classes(trees) -> set[str]:
    """Names of StudioError and every class deriving from it (to a fixpoint, across modules)."""
    classes = [(n.name, {_base_name(b) for b in n.bases}) for tree in trees.values() for n in ast.walk(tree)
               if isinstance(n, ast.ClassDef)]          # the trees walked once, the fixpoint over their classes
    names, grew = {"StudioError"}, True
    while grew:
        grew = False
        for name, bases in classes:
            if name not in names and bases & names:
                names.add(name)
                grew = True
    return names


def _code_values(node: ast.expr) -> list[str]:
    """The codes a literal or ``ErrorCode.X`` gives (``ErrorCode.X`` that is no member: 'ErrorCode.X?'), each
    branch of a conditional (``A if c else B``, ``a or B``) counted; nothing for a computed code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Attribute) and _base_name(node.value) == "ErrorCode":
        return [ErrorCode[node.attr].value if node.attr in ErrorCode.__members__ else f"ErrorCode.{node.attr}?"]
    if isinstance(node, ast.IfExp):
        return _code_values(node.body) + _code_values(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [c for v in node.values for c in _code_values(v)]
    return []


def _literals(node: ast.expr) -> list[str]:
    """String literals written where a code is given (the value, or a branch of a conditional)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [c for v in node.values for c in _literals(v)]
    return []


def code_sites(trees: dict[Path, ast.Module]) -> list[tuple[str, ast.expr]]:
    """('file:line', the code expression) for every place a code is set on a StudioError: a call of a
    StudioError class, ``super().__init__`` in one, and ``code = ...`` in its class body."""
    errors = _error_classes(trees)
    sites: list[tuple[str, ast.expr]] = []
    for path, tree in trees.items():
        where = str(path.relative_to(ROOT)) if path.is_absolute() else str(path)
        for n in ast.walk(tree):
            if not (isinstance(n, ast.ClassDef) and n.name in errors):
                if isinstance(n, ast.Call) and _base_name(n.func) in errors:
                    sites += [(f"{where}:{n.lineno}", kw.value) for kw in n.keywords if kw.arg == "code"]
                continue
            for st in n.body:
                target = st.targets[0] if isinstance(st, ast.Assign) else getattr(st, "target", None)
                if _base_name(target) == "code" and getattr(st, "value", None) is not None:
                    sites.append((f"{where}:{st.lineno}", st.value))
            for c in ast.walk(n):
                if (isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "__init__"
                        and isinstance(c.func.value, ast.Call) and _base_name(c.func.value.func) == "super"):
                    sites += [(f"{where}:{c.lineno}", kw.value) for kw in c.keywords if kw.arg == "code"]
    return sites


def raised_codes() -> dict[str, list[str]]:
    """code -> the 'file:line' of each place it is set on a StudioError."""
    found: dict[str, list[str]] = {}
    for where, expr in _source_sites():
        for code in _code_values(expr):
            found.setdefault(code, []).append(where)
    return found


def literal_sites(trees: dict[Path, ast.Module]) -> list[str]:
    """'file:line "CODE"' for each code given as a string literal rather than an ErrorCode member."""
    return _literal_lines(code_sites(trees))


def _literal_lines(sites) -> list[str]:
    return [f'{where} "{lit}"' for where, expr in sites for lit in _literals(expr)]


def test_the_literal_scan_sees_calls_subclasses_super_and_class_bodies():
    """The checker on written sources: a literal in a call of a subclass (found across modules), in a
    conditional, in ``super().__init__`` and in a class body is reported; ErrorCode members, computed
    codes and a ``code=`` of an unrelated call are not."""
    src = {Path("a.py"): ast.parse("class BadThing(StudioError):\n    code = 'BAD-THING'\n"),
           Path("b.py"): ast.parse(
               "class Lost(BadThing):\n"
               "    def __init__(self, m, kind):\n"
               "        super().__init__(m, code='A-LOST' if kind else ErrorCode.WORKER_LOST)\n"
               "raise BadThing('x', code='BAD-INPUT')\n"
               "raise StudioError('x', code=ErrorCode.BAD_INPUT)\n"
               "raise StudioError('x', code=exc.code)\n"
               "row = EngineRow('ort', code='ORT')\n")}
    assert sorted(literal_sites(src)) == ['a.py:2 "BAD-THING"', 'b.py:3 "A-LOST"', 'b.py:4 "BAD-INPUT"']
    assert sorted(c for _, e in code_sites(src) for c in _code_values(e)) == [
        "A-LOST", "BAD-INPUT", "BAD-INPUT", "BAD-THING", "WORKER-LOST"]


def test_raise_sites_name_the_enum_member_not_a_string():
    literals = _literal_lines(_source_sites())
    assert literals == [], (f"{len(literals)} error codes given as string literals; write ErrorCode.<NAME> "
                            f"(studio/core/error_codes.py): {literals[:10]}")


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
    missing = sorted(code for code in raised_codes() if f"| `{code}` |" not in page)
    assert missing == [], f"codes raised but not on docs/errors.md: {missing}"


def test_a_member_is_its_string_in_json_and_messages():
    err = PathError("no such folder")
    assert err.code == "BAD-PATH" and f"{err.code}" == "BAD-PATH"
    assert json.dumps(err.to_dict()) == '{"code": "BAD-PATH", "message": "no such folder"}'
    assert StudioError("x", code=ErrorCode.BAD_OPTION).to_dict() == {"code": "BAD-OPTION", "message": "x"}
    assert StudioError("x").code == "STUDIO-ERROR"
