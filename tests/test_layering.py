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
