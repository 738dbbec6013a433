"""One name, one class (issue 34 item 4): two different classes with the same name across the
project's packages make every reader (and every ``import``) ask which one is meant. At issue 34's
start 13 names each named two classes (``Runner``, ``VariantResult``, ``Dataset``, ``Recipe``,
``Artifact``, ``Verification``, ``GraphIndex``, ``Measured``, ``Found``, ``Applied``, ``Change``,
``PassRecord``, ``_Job``); this scan (every ``class`` statement, nested ones included) keeps it at 0.

``ALLOWED`` is for a genuine protocol/implementation pair that must share a name; it is empty, and an
entry needs its reason."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("studio", "passes", "profilers", "diagnostics")

ALLOWED: dict[str, str] = {}     # class name -> why two classes may carry it


def class_sites(sources: dict[str, str]) -> dict[str, list[str]]:
    """class name -> 'file:line' of each class statement, over ``sources`` (file name -> Python text)."""
    sites: dict[str, list[str]] = {}
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text, name)):
            if isinstance(node, ast.ClassDef):
                sites.setdefault(node.name, []).append(f"{name}:{node.lineno}")
    return sites


def shared_names(sources: dict[str, str]) -> dict[str, list[str]]:
    return {n: where for n, where in class_sites(sources).items() if len(where) > 1 and n not in ALLOWED}


def _project_sources() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for d in PACKAGES for p in sorted((ROOT / d).rglob("*.py"))}


def test_the_scan_finds_a_shared_name_across_files_and_nested():
    """The checker itself, on written sources: a name in two files, and a nested class named like a
    top-level one, are both reported; distinct names are not."""
    found = shared_names({"a.py": "class Runner:\n    pass\n",
                          "b.py": "class Runner(Protocol):\n    x: int\n\nclass Other:\n    pass\n",
                          "c.py": "def f():\n    class Other:\n        pass\n"})
    assert found == {"Runner": ["a.py:1", "b.py:1"], "Other": ["b.py:4", "c.py:2"]}


def test_no_two_classes_share_a_name():
    sources = _project_sources()
    sites = class_sites(sources)
    assert len(sites) > 400                    # the scan sees the project's classes
    assert "Runner" in sites and "PassRecord" in sites
    shared = shared_names(sources)
    assert shared == {}, ("two classes share a name; give each a name that says what it is "
                          f"(or, for a protocol and its implementation, an ALLOWED entry with the reason): {shared}")


def test_allowed_entries_are_real_and_give_a_reason():
    sites = class_sites(_project_sources())
    for name, why in ALLOWED.items():
        assert len(sites.get(name, ())) > 1, f"ALLOWED names {name}, which no longer names two classes: remove it"
        assert len(why) > 20, f"ALLOWED entry {name} needs its reason"
