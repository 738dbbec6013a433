"""No module reads another project module's private (``_``-prefixed) name (docs/architecture.md: one
implementation of each idea, used through its public name): ``from passes.ir_helpers import _all_values`` or
``qt._save(...)`` through ``from passes import quant_tools as qt`` ties a module to another's internals, so a
rename breaks a caller the owner cannot see. A name others need is made public where it lives.

No room holds any: passes/ held six (fp16 ranges' review, 2026-12-05), studio/ 28, benchmarks/ 9, profilers/ 2 and
diagnostics/ 1 (made public where they live, or a thin wrapper dropped, the same day).
A private method of a same-module class (``states.tensor_state`` was ``_tensor_state``) is not seen here: only
names reached through an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PROJECT = ("studio", "passes", "diagnostics", "profilers", "sample_models", "benchmarks")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_module(dotted: str, root: Path) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def private_uses(source: str, module: str, root: Path = ROOT, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, ``other.module._name``) of each private name of another project module that ``source`` (the
    module ``module``) imports (``from m import _x``, relative too) or reads through a module it imported
    (``alias._x``, ``pkg.mod._x``)."""
    tree = ast.parse(source)
    package = module if is_package else module.rpartition(".")[0]
    bound: dict[str, str] = {}          # local name -> project module it is bound to
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                source_module = f"{base}.{node.module}" if node.module else base
            else:
                source_module = node.module or ""
            if source_module.split(".")[0] not in PROJECT:
                continue
            for alias in node.names:
                full = f"{source_module}.{alias.name}"
                if _is_module(full, root):
                    bound[alias.asname or alias.name] = full
                elif _private(alias.name) and source_module != module:
                    found.append((node.lineno, full))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PROJECT:
                    bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else \
                        alias.name.split(".")[0]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and _private(node.attr)):
            continue
        parts, value = [], node.value
        while isinstance(value, ast.Attribute):
            parts.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        target = ".".join([bound[value.id], *reversed(parts)])
        if _is_module(target, root) and target != module:
            found.append((node.lineno, f"{target}.{node.attr}"))
    return sorted(found)


def _all() -> list[str]:
    out = []
    for room in PROJECT:
        for path in sorted((ROOT / room).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if ".cache" in rel.parts:
                continue
            parts = rel.with_suffix("").parts
            is_package = parts[-1] == "__init__"
            module = ".".join(parts[:-1] if is_package else parts)
            for line, name in private_uses(path.read_text(encoding="utf-8"), module, ROOT, is_package):
                out.append(f"{rel}:{line} {name}")
    return out


def test_the_finder_sees_each_form_of_a_private_cross_module_use():
    source = (
        "from passes.ir_helpers import _all_values, inferred_shapes\n"     # 1: private, of another module
        "from passes import quant_tools as qt\n"
        "from . import fuse_conv_bn\n"
        "import studio.core.protowalk\n"
        "from passes.fp16_ranges import _TAP\n"                          # 5: of this module itself: fine
        "qt._save(m, p)\n"                                               # 6: through a module alias
        "qt.save_scratch(m, p)\n"
        "fuse_conv_bn._bn_problem(a, b, c)\n"                            # 8: through a relative import
        "studio.core.protowalk._walk_graph(g, '', 0, None)\n"            # 9: through a dotted import
        "states._tensor_state(t)\n"                                      # an object, not a module: not seen
        "import numpy as np\nnp._private\n"                              # not a project module
    )
    assert private_uses(source, "passes.fp16_ranges") == [
        (1, "passes.ir_helpers._all_values"),
        (6, "passes.quant_tools._save"),
        (8, "passes.fuse_conv_bn._bn_problem"),
        (9, "studio.core.protowalk._walk_graph"),
    ]


def test_no_module_reads_another_modules_private_names():
    found = _all()
    listing = "\n".join(f"  {f}" for f in found)
    assert found == [], f"private names of other modules used; make each public where it lives:\n{listing}"
