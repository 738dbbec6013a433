"""Issue 34 "Done when": every page hint and a CLI run of the same request give the same result, hint by hint.

Each place under studio/ui that shows an "equivalent CLI command" (``widgets.cli_hint(...)``, or ``st.code``
with a shell language or none) is a *hint site*, named ``FILE::FUNCTION`` (``#N`` when a function shows more
than one). Two checks per site:

- it shows a request's own command line: the shown value is a ``.command(...)`` call, or a name, a
  ``"\\n".join`` of, a same-file function returning, or a ``saved["command"]`` stored from, such a call
  (an AST scan; a page that assembles words through anything else fails here);
- it is registered below with the tests that drive it and run its hint through the CLI (or build the CLI's
  request from it) and compare with what the page ran. A new hint without a registered test fails here, as
  does a registered test that no longer exists.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "studio" / "ui"

_PAGES = "tests/ui/test_page_runs_its_hint.py"
_PAGES_33 = "tests/ui/test_cli_hints_33.py"
_PAGES_34 = "tests/ui/test_cli_hints_pages.py"
_REQUESTS = "tests/ui/test_page_request_is_the_hints.py"
_HINTS = "tests/ui/test_hint_requests_pages.py"
_HANDS = "tests/ui/test_page_hands_its_request.py"
_OPTIMIZE = (f"{_PAGES_33}::test_optimize_hint_run_by_the_cli_gives_the_page_result",
             "tests/passes/test_optimize_request.py::test_the_pages_hint_is_the_request_it_ran",
             "tests/batch/test_optimize_targets.py::test_the_optimize_page_runs_its_request_on_the_chosen_target")

EQUALITY_TESTS: dict[str, tuple[str, ...]] = {
    "views/compatibility.py::render": (
        f"{_PAGES_34}::test_compatibility_check_hint_run_by_the_cli_gives_the_page_verdicts",),
    "views/compatibility.py::_findings": (
        f"{_PAGES_34}::test_compatibility_fix_hint_run_by_the_cli_writes_the_pages_version",),
    "views/verify.py::render": (f"{_PAGES}::test_the_verify_page_compares_what_its_compare_hint_compares",),
    "views/plugins.py::_run_section": (f"{_PAGES}::test_the_plugins_page_runs_the_op_code_its_plugin_hint_runs",
                                       f"{_HANDS}::test_the_plugins_run_hands_make_plugins_the_request_its_hint_prints"),
    "views/plugins.py::_package_section": (
        f"{_PAGES}::test_the_plugins_page_writes_the_packages_its_package_hint_writes",
        f"{_HANDS}::test_generate_and_build_hand_make_plugins_the_request_the_package_hint_prints"),
    "views/optimize.py::render": _OPTIMIZE,
    "views/optimize.py::_report": _OPTIMIZE,
    "views/export.py::render": (f"{_PAGES}::test_the_export_page_runs_the_request_its_export_hint_builds",),
    "views/export.py::_report": (f"{_PAGES}::test_the_export_page_runs_the_request_its_export_hint_builds",),
    "views/batch.py::render": (f"{_PAGES}::test_the_batch_page_runs_the_request_its_batch_hint_builds",),
    "views/precision.py::render": (f"{_REQUESTS}::test_the_precision_page_runs_the_request_its_hint_builds",),
    "views/profile.py::render": (f"{_REQUESTS}::test_the_profile_page_runs_the_request_its_hint_builds",),
    "generation_section.py::render": (f"{_PAGES}::test_the_generation_section_runs_the_options_its_hint_builds",),
    "views/data.py::_add": (f"{_HINTS}::test_the_data_page_adds_the_dataset_its_data_add_hint_adds",),
    "views/data.py::_evaluate": (f"{_PAGES_34}::test_data_eval_hint_run_by_the_cli_gives_the_page_metrics",),
    "recipe_editor.py::edit": (f"{_PAGES_34}::test_data_hints_name_the_project_model_dataset_and_recipe",
                               f"{_HANDS}::test_the_recipe_editor_hands_preprocessing_recipe_the_request_its_hint_prints"),
    "views/graph.py::_detail": (f"{_PAGES_34}::test_graph_region_hint_run_by_the_cli_draws_the_pages_nodes",),
    "views/graph.py::_diff": (f"{_PAGES_34}::test_graph_diff_hint_run_by_the_cli_gives_the_pages_counts",),
    "views/graph.py::render#1": (f"{_HINTS}::test_the_graph_viewer_hint_draws_the_graph_the_page_draws",),
    "views/graph.py::render#2": (f"{_HINTS}::test_the_graph_overview_hint_draws_the_view_the_page_draws",),
    "views/overview.py::render": (f"{_PAGES_33}::test_overview_hint_run_by_the_cli_gives_the_page_figures",),
    "memory_panel.py::render": (f"{_PAGES}::test_the_overview_memory_plan_is_the_plan_its_memory_hint_makes",),
    "decoder_card.py::_calculator": (
        f"{_PAGES_34}::test_decoder_kv_budget_hint_run_by_the_cli_gives_the_pages_budget",),
    "edit_panel.py::preview_apply": (
        "tests/ui/test_graph_edit.py::test_every_action_round_trips_between_ui_script_and_cli",
        "tests/ui/test_graph_edit.py::test_model_panel_actions_round_trip_between_ui_script_and_cli"),
}

_SHELL = (None, "bash", "sh", "shell", "console")


def _shows_a_command(call: ast.Call) -> bool:
    """``widgets.cli_hint(x)``, or ``st.code(x)`` in a shell language (or none)."""
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    if name == "cli_hint":
        return True
    if name == "code" and isinstance(f, ast.Attribute) and getattr(f.value, "id", "") == "st":
        lang = next((k.value for k in call.keywords if k.arg == "language"), None)
        if lang is None and len(call.args) > 1:
            lang = call.args[1]
        return (lang.value if isinstance(lang, ast.Constant) else None) in _SHELL
    return False


class _Module:
    """One UI file: its functions, its ``"command": ...`` entries and its hint sites."""

    def __init__(self, tree: ast.Module):
        self.functions = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        self.stored = [v for n in ast.walk(tree) if isinstance(n, ast.Dict)
                       for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant) and k.value == "command"]
        self.sites: list[tuple[str, ast.Call, ast.FunctionDef | None]] = []
        counts: dict[str, int] = {}

        def visit(node: ast.AST, fn: ast.FunctionDef | None) -> None:
            for child in ast.iter_child_nodes(node):
                inner = child if isinstance(child, ast.FunctionDef) else fn
                if isinstance(child, ast.Call) and _shows_a_command(child) and not (
                        fn is not None and fn.name == "cli_hint"):          # widgets.cli_hint's own st.code
                    name = fn.name if fn is not None else "<module>"
                    counts[name] = counts.get(name, 0) + 1
                    self.sites.append((f"{name}#{counts[name]}", child, fn))
                visit(child, inner)

        visit(tree, None)
        many = {n for n, c in counts.items() if c > 1}
        self.sites = [(s if s.split("#")[0] in many else s.split("#")[0], c, f) for s, c, f in self.sites]

    def from_a_request(self, node: ast.AST | None, fn: ast.FunctionDef | None, depth: int = 0) -> bool:
        """Whether ``node``'s value is a request's ``command()`` line (see the module's docstring)."""
        if node is None or depth > 6:
            return False
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "command":
                return True
            if isinstance(f, ast.Attribute) and f.attr == "join" and isinstance(f.value, ast.Constant) \
                    and len(node.args) == 1 and isinstance(node.args[0], (ast.GeneratorExp, ast.ListComp)):
                return self.from_a_request(node.args[0].elt, fn, depth + 1)
            if isinstance(f, ast.Name) and f.id in self.functions:
                returns = [r.value for r in ast.walk(self.functions[f.id]) if isinstance(r, ast.Return)]
                return bool(returns) and all(self.from_a_request(r, self.functions[f.id], depth + 1) for r in returns)
            return False
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "command":
            return bool(self.stored) and all(self.from_a_request(v, None, depth + 1) for v in self.stored)
        if isinstance(node, ast.Name) and fn is not None:
            assigned = [a.value for a in ast.walk(fn) if isinstance(a, ast.Assign)
                        and any(isinstance(t, ast.Name) and t.id == node.id for t in a.targets)]
            return bool(assigned) and all(self.from_a_request(v, fn, depth + 1) for v in assigned)
        return False

    def violations(self) -> list[str]:
        return [site for site, call, fn in self.sites
                if not self.from_a_request(call.args[0] if call.args else None, fn)]


def _modules(root: Path = UI) -> dict[str, _Module]:
    return {p.relative_to(root).as_posix(): _Module(ast.parse(p.read_text(encoding="utf-8")))
            for p in sorted(root.rglob("*.py"))}


def _hint_sites() -> dict[str, _Module]:
    return {f"{path}::{site}": m for path, m in _modules().items() for site, _c, _f in m.sites}


def _test_functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_the_discovery_finds_the_hint_sites():
    found = set(_hint_sites())
    assert {"views/verify.py::render", "views/plugins.py::_package_section", "views/graph.py::render#2",
            "edit_panel.py::preview_apply"} <= found
    assert not any(s.startswith("widgets.py") for s in found)            # where cli_hint is defined
    assert "views/plugins.py::_run_section#1" not in found               # its st.code(..., "python") is code


def test_every_hint_shows_a_requests_command():
    bad = [f"{path}::{site}" for path, m in _modules().items() for site in m.violations()]
    assert bad == [], "show request.command(...) there (studio/core/requests.py), not words assembled by the page"


def test_the_scan_finds_a_hint_assembled_by_the_page(tmp_path):
    """The check above is not blind: the forms pages used before (api.cli_command, a helper returning it,
    an f-string, a variable holding one) are each found; the allowed forms are not."""
    (tmp_path / "probe.py").write_text(
        "def a(h):\n    widgets.cli_hint(api.cli_command('graph', [h], [('-o', 'g.html')]))\n"
        "def _cli(h):\n    return cli_hints.cli_command('inspect', [h])\n"
        "def b(h):\n    widgets.cli_hint(_cli(h))\n"
        "def c(h):\n    st.code(f'onnx-studio inspect {h}', language='bash')\n"
        "def d(h):\n    line = 'onnx-studio inspect ' + h\n    widgets.cli_hint(line)\n"
        "def ok(h, r):\n    line = r.command(h)\n    widgets.cli_hint(line)\n    st.code('x = 1', language='python')\n"
        "def ok2(h, rs):\n    widgets.cli_hint('\\n'.join(r.command(h) for r in rs))\n")
    assert _modules(tmp_path)["probe.py"].violations() == ["a", "b", "c", "d"]


def test_every_hint_site_has_a_registered_equality_test():
    found = set(_hint_sites())
    assert sorted(found - set(EQUALITY_TESTS)) == [], "register the test that runs this hint"
    assert sorted(set(EQUALITY_TESTS) - found) == [], "this hint site is gone (or renamed): update its entry"


def test_every_registered_equality_test_exists():
    missing = [node for nodes in EQUALITY_TESTS.values() for node in nodes
               if node.split("::")[1] not in _test_functions(node.split("::")[0])]
    assert missing == []
