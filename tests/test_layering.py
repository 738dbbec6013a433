"""The layer picture (docs/architecture.md section 1) kept true by the import-linter contracts in
pyproject.toml (``[tool.importlinter]``) and by a file-level cycle check read from the AST.

- ``test_contracts_hold`` runs ``lint-imports`` and fails with its report.
- The contracts count imports inside functions (grimp reads every import statement): checked against
  the AST, and each contract is shown to break on one injected import it forbids.
- ``test_no_file_cycles``: no two modules of studio/, passes/, diagnostics/, profilers/ import each
  other, directly or round a longer loop, counting imports inside functions, under TYPE_CHECKING and by
  name through ``importlib.import_module`` (the strings a module hands it: passes.registry's table);
  a failure lists each loop with file and line of every import in it.
"""

from __future__ import annotations

import ast
import copy
import functools
import subprocess
import sys
from collections import defaultdict
from collections.abc import Collection
from pathlib import Path

import pytest

from tests.conftest import ROOT

ROOTS = ("studio", "passes", "diagnostics", "profilers")
CONFIG = ROOT / "pyproject.toml"


def _py_files(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A file's AST, parsed once per run: five tests read every file of the four roots (the trees are only
    walked, never changed)."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of :func:`_tree` (``ast.walk`` once: the graph reads each file's nodes three times)."""
    return tuple(ast.walk(_tree(path)))


@pytest.fixture(scope="module", autouse=True)
def _drop_trees():
    """The cached trees (some hundred MB) are let go when this module's tests are done: an xdist worker runs on."""
    yield
    _tree.cache_clear()
    _nodes.cache_clear()


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# -- import-linter --------------------------------------------------------------------------------

def test_contracts_hold():
    """Every contract of ``[tool.importlinter]`` is kept (``lint-imports`` exits 0)."""
    exe = Path(sys.executable).with_name("lint-imports")
    assert exe.is_file(), "lint-imports is missing: pip install -e '.[dev]' (import-linter)"
    proc = subprocess.run([str(exe), "--config", str(CONFIG), "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    report = proc.stdout[proc.stdout.find("Contracts"):] + proc.stderr
    assert proc.returncode == 0, report
    assert "0 broken" in proc.stdout, report


def _graph():
    import grimp

    return grimp.build_graph(*ROOTS, include_external_packages=True, cache_dir=None)


@pytest.fixture(scope="module")
def graph():
    return _graph()


def _function_level_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of each import of a project module inside a function of ``path``."""
    found = []
    for fn in ast.walk(_tree(path)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            found += [(n, node.lineno) for n in names if n.split(".")[0] in ROOTS]
    return found


def test_contracts_see_function_level_imports(graph):
    """Each import inside a function (of any module: the facade has none left, the rest are few) is an edge
    of the graph the contracts read."""
    missing, seen = [], 0
    for path in _py_files(*ROOTS):
        importer = _module_name(path)
        by_line: dict[int, list[str]] = defaultdict(list)
        for name, line in _function_level_imports(path):
            by_line[line].append(name)
        for line, names in by_line.items():
            targets = [n for n in names if n in graph.modules]
            lines = {d["line_number"] for t in targets for d in graph.get_import_details(importer=importer, imported=t)}
            seen += 1
            if line not in lines:
                missing.append(f"{path.relative_to(ROOT)}:{line} {names[-1]}")
    assert seen >= 20, f"only {seen} function-level imports found: the AST walk is broken"
    assert missing == []


# One import each contract forbids; adding it to the real graph must break that contract (and only the
# allowed leaf import next to it must not).
_INJECTED = {
    "layers": [("studio.core.fmt", "studio.api"), ("studio.api", "studio.batch.runner"),
               ("studio.facade.inspect", "studio.api"), ("studio.inspect.summary", "studio.facade.graph"),
               ("studio.inspect.summary", "studio.api")],
    "capabilities": [("studio.inspect.summary", "passes.pipeline"), ("profilers.stats", "studio.export.bundle"),
                     ("studio.export.bundle", "studio.precision.variants")],
    "front-ends": [("studio.cli.check_cmd", "diagnostics.compatibility"), ("studio.ui.app", "studio.core.sandbox"),
                   ("studio.cli.check_cmd", "studio.facade.check"), ("studio.ui.app", "studio.facade.graph"),
                   ("studio.cli.profile_cmd", "profilers.profile")],
    "streamlit": [("studio.core.fmt", "streamlit"), ("studio.api", "streamlit")],
    "pages-engines": [("studio.ui.app", "onnxruntime")],
}


def _contracts():
    from importlinter.application.use_cases import read_user_options
    from importlinter.configuration import configure
    from importlinter.contracts.forbidden import ForbiddenContract
    from importlinter.contracts.layers import LayersContract

    configure()
    options = read_user_options(str(CONFIG))
    classes = {"layers": LayersContract, "forbidden": ForbiddenContract}
    return {c["id"]: classes[c["type"]](c["name"], options.session_options, c) for c in options.contracts_options}


@pytest.mark.parametrize("contract_id", sorted(_INJECTED))
def test_each_contract_breaks_on_an_import_it_forbids(graph, contract_id):
    contract = _contracts()[contract_id]
    assert contract.check(copy.deepcopy(graph), verbose=False).kept, f"{contract_id} is broken on the real graph"
    for importer, imported in _INJECTED[contract_id]:
        g = copy.deepcopy(graph)
        g.add_import(importer=importer, imported=imported, line_number=1, line_contents=f"import {imported}")
        assert not contract.check(g, verbose=False).kept, f"{contract_id} kept with {importer} -> {imported}"


def test_front_ends_may_import_the_leaf_modules(graph):
    """The allowed studio.core leaves stay allowed (the contract's ignore list matches them)."""
    contract = _contracts()["front-ends"]
    g = copy.deepcopy(graph)
    for importer in ("studio.cli.check_cmd", "studio.ui.app", "studio.cli"):
        for leaf in ("studio.core.fmt", "studio.core.errors", "studio.core.outputs"):
            g.add_import(importer=importer, imported=leaf, line_number=1, line_contents=f"import {leaf}")
    assert contract.check(g, verbose=False).kept


# -- file-level cycles, from the AST ------------------------------------------------------------------

def _import_graph() -> tuple[dict[str, set[str]], dict[tuple[str, str], list[str]]]:
    """Module -> modules it imports (every import statement: module level, in functions, under
    TYPE_CHECKING), and where each edge is written."""
    files = {_module_name(p): p for p in _py_files(*ROOTS)}

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = defaultdict(set)
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _nodes(path):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [resolve(a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
                # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` the module mod
                targets = [(f"{base}.{a.name}" if f"{base}.{a.name}" in files else resolve(base)) for a in node.names]
            for target in targets:
                at = f"{path.relative_to(ROOT)}:{node.lineno}"
                if target and target != module and at not in where[(module, target)]:
                    edges[module].add(target)
                    where[(module, target)].append(at)
    _add_string_imports(files, edges, where)
    return edges, where


@pytest.fixture(scope="module")
def import_graph():
    """:func:`_import_graph` once for the three tests that read it (each walked every file twice)."""
    return _import_graph()


def _named_modules(tree: ast.Module, nodes: Collection[ast.AST], files: Collection[str]) -> list[tuple[str, int]]:
    """(module, line) of each string naming a project module: ``pkg.mod`` or ``pkg.mod:attr``, a constant or
    an f-string of the module's own string constants (the engine table's f"{_ENG}.onnxruntime:OrtRunner")."""
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              and isinstance(n.value.value, str) for t in n.targets if isinstance(t, ast.Name)}

    def text(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else consts.get(getattr(v.value, "id", ""))
                     for v in node.values]
            return "".join(parts) if all(isinstance(p, str) for p in parts) else None
        return None

    found = [(text(n), n.lineno) for n in nodes if isinstance(n, (ast.Constant, ast.JoinedStr))]
    return [(t.partition(":")[0], line) for t, line in found if t and t.partition(":")[0] in files]


def _add_string_imports(files: dict[str, Path], edges: dict[str, set[str]],
                        where: dict[tuple[str, str], list[str]]) -> None:
    """``importlib.import_module(name)`` is an import too: a module that calls it imports every project module
    a string names in it or in a module of its own package it imports (the tables it reads: passes.registry's
    PASS_MODULES, the engine table's "module:attr" rows read by sessions.py)."""
    for module, path in files.items():
        if not any(isinstance(n, ast.Call) and ast.unparse(n.func).endswith("import_module") for n in _nodes(path)):
            continue
        package = module.rpartition(".")[0]
        sources = [module, *(m for m in sorted(edges[module]) if m.rpartition(".")[0] == package)]
        for source in sources:
            for target, line in _named_modules(_tree(files[source]), _nodes(files[source]), files):
                at = f"{files[source].relative_to(ROOT)}:{line} (string)"
                if target != module and at not in where[(module, target)]:
                    edges[module].add(target)
                    where[(module, target)].append(at)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_cycle():
    """The check can fail: a loop a -> b -> c -> a (and a separate pair) is found."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "x": {"y"}, "y": {"x"}}
    assert sorted(_strongly_connected(edges)) == [["a", "b", "c"], ["x", "y"]]


def test_import_graph_reads_function_level_imports(import_graph):
    """An import inside a function is an edge (each one the AST finds, whatever module it sits in)."""
    edges, where = import_graph
    found: dict[tuple[str, int], list[str]] = defaultdict(list)
    for p in _py_files(*ROOTS):
        for name, line in _function_level_imports(p):
            found[(_module_name(p), line)].append(name)
    assert len(found) >= 20
    for (importer, line), names in found.items():
        hits = [n for n in names if n in edges[importer]]
        assert hits, (importer, line, names)
        assert all(":" in w for w in where[(importer, hits[0])])
    assert sum(len(v) for v in edges.values()) > 1000


def test_import_graph_follows_importlib_strings(import_graph):
    """A module importing others by name is an edge to each: the registry to every pass module, sessions.py
    to every engine's runner module (a pass importing the registry back would be a cycle)."""
    edges, where = import_graph
    assert {"passes.fold_constants", "passes.convert_fp16"} <= edges["passes.registry"]
    assert any(w.endswith("(string)") for w in where[("passes.registry", "passes.fold_constants")])
    assert "studio.core.engines.onnxruntime" in edges["studio.core.engines.sessions"]
    assert any(w.endswith("(string)") for w in where[("studio.core.engines.sessions", "studio.core.engines.mnn")])
    for module in ("passes.fold_constants", "passes.convert_fp16"):
        assert "passes.registry" not in edges[module]
    # the runner factory's cycle is broken (issue 34): no engine module imports sessions back; their one-shot
    # runs are sessions' own engine.run job, what every runner shares is in engines.base
    for module in ("onnxruntime", "openvino", "tensorrt", "mnn", "litert", "ncnn"):
        assert "studio.core.engines.sessions" not in edges[f"studio.core.engines.{module}"], module


def test_no_file_cycles(import_graph):
    edges, where = import_graph
    lines = []
    for component in _strongly_connected(edges):
        inside = set(component)
        lines.append("cycle: " + " <-> ".join(component))
        lines += [f"    {a} -> {b}  ({', '.join(where[(a, b)])})" for a in component for b in sorted(edges[a] & inside)]
    assert lines == [], "\n" + "\n".join(lines)


def test_front_end_facade_names_resolve():
    """Every ``api.NAME`` (``batch_api.NAME``) a page or a CLI command uses exists on studio.api (a lazy
    re-export included) or studio.batch.facade."""
    import studio.api as api
    import studio.batch.facade as batch_api

    used: dict[str, set[str]] = {"api": set(), "batch_api": set()}
    for p in _py_files("studio/ui", "studio/cli"):
        for node in ast.walk(_tree(p)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in used:
                used[node.value.id].add(node.attr)
    assert len(used["api"]) > 50 and len(used["batch_api"]) >= 4
    missing = sorted(n for n in used["api"] if not hasattr(api, n))
    missing += sorted(f"batch_api.{n}" for n in used["batch_api"] if not hasattr(batch_api, n))
    assert missing == []
