"""Engine names live in the engine table, the engines' own modules and per-layer dispatch tables (issue 34
item 2): a ratchet on what is left elsewhere.

Counted over studio/, passes/, profilers/ and diagnostics/ with the AST (docstrings and messages never match:
only a string constant that *is* an engine name or alias, any case, counts):

- BRANCHES: comparisons (``==``, ``!=``, ``in``, ``not in``) with an engine-name literal or a tuple/list/set
  of them -- an if-ladder on engine names;
- LITERALS: every engine-name literal, except the keys of a module-level dict literal (a per-layer table such
  as ``diagnostics.compatibility.ENGINE_CHECKS`` or ``profilers.ops.PER_OP``).

Allowed files: ``studio/core/engines/table.py`` and each engine's own modules (its row's adapter, runner, job
and limits modules). Before issue 34 item 2 (commit 51ed09e): 77 branches in 24 files and 301 literals in 66
files; after it: 40 in 13 and 236 in 57 (the limits below; lower them as branches move into tables). What is
left is mostly engine-specific on purpose: the memory plan (ORT's and OpenVINO's own graphs), OpenVINO-only
options (--ov-precision, the model cache), ORT execution-provider names ("tensorrt" EP), plugin targets,
precision variants.
LiteRT's memory limits are applied by its adapter (through ``engines.engine_limits`` / its row), nowhere by hand.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter
from pathlib import Path

from studio.core.engines.table import ENGINES

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("studio", "passes", "profilers", "diagnostics")
NAMES = frozenset(s.lower() for r in ENGINES for s in (r.name, *r.aliases, r.short))

BRANCH_LIMIT = 38
LITERAL_LIMIT = 233     # +2: export's PRESET_ENGINES values (the engine each engine preset is made for)


def _own_modules() -> set[str]:
    own = {"studio/core/engines/table.py"}
    for row in ENGINES:
        for target in (row.adapter, row.runner, row.limits, *(t for _job, t in row.jobs)):
            if target:
                own.add(target.partition(":")[0].replace(".", "/") + ".py")
    return own


def _names_in(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lower() in NAMES:
        return [node]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [c for e in node.elts for c in _names_in(e)]
    return []


def _table_keys(tree: ast.Module) -> set[int]:
    """ids of the keys of module-level dict literals (per-layer tables)."""
    keys: set[int] = set()
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(value, ast.Dict):
            keys.update(id(k) for k in value.keys if isinstance(k, ast.Constant))
    return keys


def scan_source(text: str | ast.Module) -> tuple[list[int], list[int]]:
    """(lines of engine-name comparisons, lines of engine-name literals outside module-level tables)."""
    tree = ast.parse(text) if isinstance(text, str) else text
    branches = [c.lineno for node in ast.walk(tree) if isinstance(node, ast.Compare)
                for side in (node.left, *node.comparators) for c in _names_in(side)]
    tables = _table_keys(tree)
    literals = sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant) and _names_in(node)
                      and id(node) not in tables)
    return sorted(branches), literals


@functools.lru_cache(maxsize=1)
def _trees() -> dict[str, ast.Module]:
    """Every scanned module, parsed once for all the tests here."""
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text())
            for folder in SCANNED for path in sorted((ROOT / folder).rglob("*.py"))}


@functools.lru_cache(maxsize=1)
def _scan() -> tuple[Counter, Counter]:
    own = _own_modules()
    branches: Counter = Counter()
    literals: Counter = Counter()
    for rel, tree in _trees().items():
        if rel in own:
            continue
        b, lit = scan_source(tree)
        branches.update({rel: len(b)} if b else {})
        literals.update({rel: len(lit)} if lit else {})
    return branches, literals


def test_the_scan_counts_branches_and_skips_tables():
    src = ('PER_OP = {"onnxruntime": 1, "ov": 2}\n'
           'def f(engine):\n'
           '    if engine == "ort" or engine in ("MNN", "litert"):\n'
           '        return "tensorrt"\n'
           '    """OpenVINO runs this: not a literal name"""\n'
           '    return {"openvino": 1}.get(engine)\n')
    branches, literals = scan_source(src)
    assert branches == [3, 3, 3]
    assert literals == [3, 3, 3, 4, 6]          # the module-level table's keys (line 1) are not counted


def test_engine_name_branches_stay_under_the_limit():
    branches, _ = _scan()
    total = sum(branches.values())
    assert total <= BRANCH_LIMIT, (f"{total} engine-name comparisons outside the engine table and the engines' "
                                   f"modules (limit {BRANCH_LIMIT}); move the new one into a table column or a "
                                   f"per-layer table: {branches.most_common()}")


def test_engine_name_literals_stay_under_the_limit():
    _, literals = _scan()
    total = sum(literals.values())
    assert total <= LITERAL_LIMIT, (f"{total} engine-name literals outside the engine table, the engines' "
                                    f"modules and module-level tables (limit {LITERAL_LIMIT}): "
                                    f"{literals.most_common()}")


def test_litert_limits_are_applied_by_its_adapter_only():
    """Its row names ``litert_limits``; ``engines.engine_limits`` applies it for every job of the engine."""
    users = []
    for rel, tree in _trees().items():
        for node in ast.walk(tree):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if name == "litert_limits" or "litert_limits" in imported:
                users.append(rel)
    assert set(users) <= {"studio/core/engines/litert.py"}, sorted(set(users))
