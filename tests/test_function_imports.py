"""Imports sit at module level (issue 34 item 3, docs/architecture.md section 1): a module's dependencies
are read at its top, the layer contracts and the cycle test see them, and a moved name fails at import,
not in the one branch that reaches it. Inside a function, an import of a project module is kept only
for a heavy dependency (passes pull in onnx_ir), to break a real cycle, or to keep a start-up light,
and then says why on its own line (``# heavy: ...``, ``# cycle: ...``, ``# start-up: ...``).

The count over studio/ was 380 at issue 34's start (the facade alone held 102); the limit is 60.
passes/, profilers/ and diagnostics/ held 76, 5 and 48 (none with a reason); 4 are left, each heavy.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

from tests.conftest import ROOT

PROJECT = ("studio", "passes", "diagnostics", "profilers", "sample_models", "benchmarks")
LIMITS = {"studio": 60, "passes": 2, "profilers": 0, "diagnostics": 2}


def function_level_imports(source: str) -> list[tuple[int, str, str]]:
    """(line, statement, reason) of every import of a project module (absolute or relative) inside a
    function, TYPE_CHECKING blocks left out; ``reason`` is the comment on the statement's first line."""
    tree = ast.parse(source)
    comments = {tok.start[0]: tok.string.lstrip("#").strip()
                for tok in tokenize.generate_tokens(io.StringIO(source).readline) if tok.type == tokenize.COMMENT}
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)) and _is_project(child):
                found.append((child.lineno, ast.unparse(child), comments.get(child.lineno, "")))
            visit(child, inside)

    visit(tree, False)
    return found


def _is_project(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in PROJECT
    return any(a.name.split(".")[0] in PROJECT for a in node.names)


def _all() -> list[tuple[str, int, str, str]]:
    out = []
    for room in LIMITS:
        for path in sorted((ROOT / room).rglob("*.py")):
            for line, stmt, reason in function_level_imports(path.read_text(encoding="utf-8")):
                out.append((str(path.relative_to(ROOT)), line, stmt, reason))
    return out


def test_the_counter_finds_imports_in_functions_and_their_reasons():
    source = (
        "from studio.core import fmt\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from studio.api import Report\n"
        "def f():\n"
        "    import json\n"
        "    from passes.registry import make_pass  # heavy: onnx_ir\n"
        "    def g():\n"
        "        from . import sibling\n"
        "    class C:\n"
        "        def m(self):\n"
        "            import studio.core.model\n"
    )
    assert function_level_imports(source) == [
        (7, "from passes.registry import make_pass", "heavy: onnx_ir"),
        (9, "from . import sibling", ""),
        (12, "import studio.core.model", ""),
    ]


def test_function_level_imports_are_few_and_each_says_why():
    found = _all()
    listing = "\n".join(f"  {p}:{line} {stmt}  # {reason}" for p, line, stmt, reason in found)
    counts = {room: sum(p.split("/")[0] == room for p, *_ in found) for room in LIMITS}
    over = {room: n for room, n in counts.items() if n > LIMITS[room]}
    assert over == {}, f"function-level imports of project modules {counts} (limits {LIMITS}):\n{listing}"
    missing = [f"{p}:{line} {stmt}" for p, line, stmt, reason in found if len(reason.split()) < 3]
    assert missing == [], "a function-level import without a '# reason' comment (heavy / cycle / start-up):\n" + \
        "\n".join(missing)
