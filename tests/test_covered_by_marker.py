"""The ``covered_by`` marker (tests/conftest.py): a subset test is deselected -- never skipped -- when the
test that covers it runs in the same session, and runs when it is selected alone (the fast tier)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.conftest import ROOT


def _run(folder, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           "-rA", str(folder), *args], capture_output=True, text=True, cwd=folder, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"})
    return proc.stdout + proc.stderr


def test_a_covered_subset_is_deselected_beside_its_cover_and_runs_alone(tmp_path):
    (tmp_path / "conftest.py").write_text(textwrap.dedent("""
        from tests.conftest import pytest_collection_modifyitems  # the hook under test

        def pytest_configure(config):
            config.addinivalue_line("markers", "covered_by(name): subset")
        """))
    (tmp_path / "test_pair.py").write_text(textwrap.dedent("""
        import pytest

        def test_whole_sweep():
            pass

        @pytest.mark.covered_by("test_whole_sweep")
        def test_fast_subset():
            pass
        """))
    both = _run(tmp_path)
    assert "PASSED test_pair.py::test_whole_sweep" in both and "test_fast_subset" not in both.split("short test")[-1]
    assert "1 passed, 1 deselected" in both and "skipped" not in both
    alone = _run(tmp_path, "-k", "fast_subset")
    assert "PASSED test_pair.py::test_fast_subset" in alone and "1 passed, 1 deselected" in alone
