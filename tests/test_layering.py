"""DESIGN.md §1 import rules, read from the AST: studio.core imports none of the
layers above it, and only studio.ui imports streamlit."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

UPPER = ("studio.api", "studio.cli", "studio.ui", "studio.export", "studio.inspect", "studio.graphview",
         "studio.accuracy", "studio.precision",
         "studio.plugins", "passes", "diagnostics", "profilers")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _py_files(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


def test_core_imports_no_upper_layer():
    bad = [(p.relative_to(ROOT), m) for p in _py_files("studio/core") for m in _imports(p)
           if m.startswith(UPPER)]
    assert bad == []


def test_only_ui_imports_streamlit():
    files = _py_files("studio", "passes", "diagnostics", "profilers")
    bad = [p.relative_to(ROOT) for p in files if "ui" not in p.relative_to(ROOT).parts
           and any(m == "streamlit" or m.startswith("streamlit.") for m in _imports(p))]
    assert bad == []


def test_ui_pages_do_not_reach_into_engines():
    """Pages call the facade and shared modules, not engines or workers directly."""
    bad = [(p.relative_to(ROOT), m) for p in _py_files("studio/ui") for m in _imports(p)
           if m.startswith(("onnxruntime", "openvino", "tensorrt", "studio.core.sandbox"))]
    assert bad == []


# studio/ui renders; the work goes through the facade (issue 15 item 6). Pages import none of the packages
# below; of studio.core they may import only leaf modules: value types, formatting, errors, the path/upload
# checks the widgets apply to what a user types, and the JSON encoder for downloads. studio.core.webguard
# is the ASGI middleware of the server entry (onnx_studio_server.py), not page logic.
UI_FORBIDDEN = ("passes", "diagnostics", "profilers", "studio.inspect", "studio.precision", "studio.accuracy",
                "studio.export", "studio.plugins", "studio.batch", "studio.data", "studio.projects", "studio.core")
UI_ALLOWED_CORE = tuple(f"studio.core.{m}" for m in ("fmt", "types", "errors", "paths", "uploads", "jsonsafe",
                                                      "model", "workspace", "webguard"))


def _is(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_ui_imports_only_the_facade():
    """No file of studio/ui imports engine-side code, at module level or inside a function."""
    bad = [(str(p.relative_to(ROOT)), m) for p in _py_files("studio/ui") for m in _imports(p)
           if _is(m, UI_FORBIDDEN) and not _is(m, UI_ALLOWED_CORE)]
    assert bad == []


def test_ui_facade_names_resolve():
    """Every ``api.NAME`` a page uses exists on the facade (a lazy re-export included)."""
    import studio.api as api

    used = set()
    for p in _py_files("studio/ui"):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
                used.add(node.attr)
    missing = sorted(n for n in used if not hasattr(api, n))
    assert missing == []
