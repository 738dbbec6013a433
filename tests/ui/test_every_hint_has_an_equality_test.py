"""Issue 34 "Done when": every page hint and a CLI run of the same request give the same result. Each file
under studio/ui that shows an "equivalent CLI command" (``widgets.cli_hint(...)``, or a command line in
``st.code``) is registered here with the tests that drive it and run its hint through the CLI (or build the
CLI's request from it) and compare with what the page ran. A new page with a hint and no registered test
fails here, as does a registered test that no longer exists."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UI = ROOT / "studio" / "ui"
_SHOWS_A_HINT = re.compile(r"(?<!def )\bcli_hint\(|st\.code\([^\n]*\bcli_command\(")

_PAGES = "tests/ui/test_page_runs_its_hint.py"
_PAGES_33 = "tests/ui/test_cli_hints_33.py"
_PAGES_34 = "tests/ui/test_cli_hints_pages.py"
_REQUESTS = "tests/ui/test_page_request_is_the_hints.py"

EQUALITY_TESTS: dict[str, tuple[str, ...]] = {
    "views/compatibility.py": (f"{_PAGES_34}::test_compatibility_check_hint_run_by_the_cli_gives_the_page_verdicts",
                               f"{_PAGES_34}::test_compatibility_fix_hint_run_by_the_cli_writes_the_pages_version"),
    "views/verify.py": (f"{_PAGES}::test_the_verify_page_compares_what_its_compare_hint_compares",),
    "views/plugins.py": (f"{_PAGES}::test_the_plugins_page_runs_the_op_code_its_plugin_hint_runs",
                         f"{_PAGES}::test_the_plugins_page_writes_the_packages_its_package_hint_writes"),
    "views/optimize.py": (f"{_PAGES_33}::test_optimize_hint_run_by_the_cli_gives_the_page_result",
                          "tests/passes/test_optimize_request.py::test_the_pages_hint_is_the_request_it_ran"),
    "views/export.py": (f"{_PAGES}::test_the_export_page_runs_the_request_its_export_hint_builds",),
    "views/batch.py": (f"{_PAGES}::test_the_batch_page_runs_the_request_its_batch_hint_builds",),
    "views/precision.py": (f"{_REQUESTS}::test_the_precision_page_runs_the_request_its_hint_builds",),
    "views/profile.py": (f"{_REQUESTS}::test_the_profile_page_runs_the_request_its_hint_builds",),
    "generation_section.py": (f"{_PAGES}::test_the_generation_section_runs_the_options_its_hint_builds",),
    "views/data.py": (f"{_PAGES_34}::test_data_eval_hint_run_by_the_cli_gives_the_page_metrics",),
    "recipe_editor.py": (f"{_PAGES_34}::test_data_hints_name_the_project_model_dataset_and_recipe",),
    "views/graph.py": (f"{_PAGES_34}::test_graph_region_hint_run_by_the_cli_draws_the_pages_nodes",
                       f"{_PAGES_34}::test_graph_diff_hint_run_by_the_cli_gives_the_pages_counts"),
    "views/overview.py": (f"{_PAGES_33}::test_overview_hint_run_by_the_cli_gives_the_page_figures",),
    "memory_panel.py": (f"{_PAGES}::test_the_overview_memory_plan_is_the_plan_its_memory_hint_makes",),
    "decoder_card.py": (f"{_PAGES_34}::test_decoder_kv_budget_hint_run_by_the_cli_gives_the_pages_budget",),
    "edit_panel.py": ("tests/ui/test_graph_edit.py::test_every_action_round_trips_between_ui_script_and_cli",
                      "tests/ui/test_graph_edit.py::test_model_panel_actions_round_trip_between_ui_script_and_cli"),
}


def _pages_with_a_hint() -> set[str]:
    return {p.relative_to(UI).as_posix() for p in UI.rglob("*.py")
            if _SHOWS_A_HINT.search(p.read_text(encoding="utf-8"))}


def _test_functions(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_the_discovery_finds_the_pages_with_hints():
    found = _pages_with_a_hint()
    assert {"views/verify.py", "views/plugins.py", "views/precision.py", "edit_panel.py"} <= found
    assert "widgets.py" not in found                  # where cli_hint is defined, not a page


def test_every_page_that_shows_a_hint_has_a_registered_equality_test():
    found = _pages_with_a_hint()
    assert sorted(found - set(EQUALITY_TESTS)) == [], "register the test that runs this page's hint"
    assert sorted(set(EQUALITY_TESTS) - found) == [], "this file no longer shows a hint: drop its entry"


def test_every_registered_equality_test_exists():
    missing = [node for nodes in EQUALITY_TESTS.values() for node in nodes
               if node.split("::")[1] not in _test_functions(node.split("::")[0])]
    assert missing == []
