"""R55: a required component missing or broken under CI fails the run and is named; on a
developer machine the tests that need it skip with the reason. nncf is made unimportable for a
child pytest by a shim on PYTHONPATH: "missing" (a sitecustomize finder that raises
ModuleNotFoundError) or "broken" (a package of that name whose import raises)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.requirements import COMPONENTS, require, require_module

_MISSING = '''import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "nncf" or name.startswith("nncf."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the R55 test)", name=name)
        return None
sys.meta_path.insert(0, _Block())
'''
NNCF_TEST = "tests/precision/test_precision_dataset.py"


def _shim(tmp_path, kind: str):
    folder = tmp_path / kind
    if kind == "missing":
        folder.mkdir()
        (folder / "sitecustomize.py").write_text(_MISSING)
    else:
        (folder / "nncf").mkdir(parents=True)
        (folder / "nncf" / "__init__.py").write_text('raise ImportError("nncf is broken (the R55 test)")\n')
    return folder


def _pytest(tmp_path, shim, *args: str, ci: bool, precheck: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "PYTHONPATH", "ONNX_STUDIO_CI_PRECHECK", "PYTEST_XDIST_WORKER",
                        "PYTEST_ADDOPTS") and not k.startswith("ONNX_STUDIO_REQUIRE_")}
    env["PYTHONPATH"] = str(shim)
    if ci:
        env["CI"] = "true"
    if not precheck:
        env["ONNX_STUDIO_CI_PRECHECK"] = "0"
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "0",
                           "-o", "addopts=-ra", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)


def test_the_shim_really_blocks_nncf(tmp_path):
    """The mechanism the tests below rely on: the child cannot import nncf, and can import the rest."""
    for kind, error in (("missing", "ModuleNotFoundError"), ("broken", "nncf is broken")):
        env = {**os.environ, "PYTHONPATH": str(_shim(tmp_path, kind))}
        res = subprocess.run([sys.executable, "-c", "import onnx; import nncf"], env=env, capture_output=True,
                             text=True, timeout=300)
        assert res.returncode != 0 and error in res.stderr, res.stderr[-500:]


@pytest.mark.slow
def test_ci_run_without_nncf_fails_before_any_test_and_names_it(tmp_path):
    res = _pytest(tmp_path, _shim(tmp_path, "missing"), NNCF_TEST, "--collect-only", ci=True)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-2000:]
    assert "CI: required component nncf is missing or broken: import nncf: ModuleNotFoundError" in out, out[-2000:]
    assert "collected" not in out         # stopped at the session start, before collection
    named = [c.label for c in COMPONENTS if f"required component {c.label} " in out]
    assert named == ["nncf"], named       # everything else is here and is not blamed


@pytest.mark.parametrize("kind", ["missing", "broken"])
def test_ci_test_that_needs_nncf_fails_and_says_why(tmp_path, kind):
    """The per-test layer alone (session pre-check off): the module that needs nncf is an error."""
    res = _pytest(tmp_path, _shim(tmp_path, kind), NNCF_TEST, ci=True, precheck=False)
    out = res.stdout + res.stderr
    assert res.returncode not in (0, 5), out[-2000:]
    assert f"ERROR {NNCF_TEST} - Failed: CI: required component nncf is missing or broken" in out, out[-2000:]
    assert ("ModuleNotFoundError" if kind == "missing" else "nncf is broken (the R55 test)") in out


def test_without_ci_the_test_skips_with_the_reason(tmp_path):
    res = _pytest(tmp_path, _shim(tmp_path, "missing"), NNCF_TEST, ci=False)
    out = res.stdout + res.stderr
    assert res.returncode == 5, out[-2000:]      # the module skipped as a whole: pytest's "no tests ran"
    assert "1 skipped" in out and "required component nncf is missing or broken" in out, out[-2000:]


@pytest.mark.slow
def test_pytest_importorskip_of_a_required_module_fails_under_ci(tmp_path):
    """A raw ``pytest.importorskip`` (module level and inside a test) of a required component is
    turned into a failure under CI by tests/conftest.py, and stays a skip otherwise."""
    probe = ROOT / "tests" / f"test_r55_probe_{os.getpid()}.py"     # under tests/: tests/conftest.py applies
    probe.write_text('import pytest\n\n\ndef test_inside():\n    pytest.importorskip("nncf")\n')
    try:
        shim = _shim(tmp_path, "missing")
        ci = _pytest(tmp_path, shim, str(probe.relative_to(ROOT)), ci=True, precheck=False)
        local = _pytest(tmp_path, shim, str(probe.relative_to(ROOT)), ci=False)
    finally:
        probe.unlink()
    assert ci.returncode == 1 and "1 failed" in ci.stdout, ci.stdout[-2000:]
    assert "CI: required component nncf is missing or broken: could not import 'nncf'" in ci.stdout
    assert local.returncode == 0 and "1 skipped" in local.stdout, local.stdout[-2000:]


def test_require_helpers_fail_under_ci_and_skip_otherwise(monkeypatch):
    monkeypatch.setitem(sys.modules, "nncf", None)       # None in sys.modules: `import nncf` raises ImportError
    for name in ("CI", "ONNX_STUDIO_REQUIRE_ALL", "ONNX_STUDIO_REQUIRE_NNCF"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(pytest.skip.Exception, match="required component nncf is missing or broken"):
        require_module("nncf")
    monkeypatch.setenv("ONNX_STUDIO_REQUIRE_NNCF", "1")          # one component made required
    with pytest.raises(pytest.fail.Exception, match="CI: required component nncf"):
        require("NNCF")
    monkeypatch.delenv("ONNX_STUDIO_REQUIRE_NNCF")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI: required component nncf is missing or broken: import nncf"):
        require_module("nncf")
    with pytest.raises(KeyError, match="no required component"):
        require_module("numpy")           # only declared components are looked up: a typo is not a skip


@pytest.mark.slow
def test_ensure_test_deps_fails_under_ci_when_the_litert_converter_is_broken(tmp_path):
    """scripts/ensure_test_deps.sh: onnx2tf that does not import is fatal under CI, a note elsewhere."""
    shim = tmp_path / "o2t"
    (shim / "onnx2tf").mkdir(parents=True)
    (shim / "onnx2tf" / "__init__.py").write_text('raise ImportError("onnx2tf is broken (the R55 test)")\n')
    python = tmp_path / "python"
    python.write_text(f'#!/usr/bin/env bash\nexec env PYTHONPATH={shim} {sys.executable} "$@"\n')
    python.chmod(0o755)
    # The script's first step fetches ONNX Runtime's headers (npm pack, ~9 s over the network) unless its cache
    # folder holds them; the suite's sandbox cache never does. That step is not what is tested: a cache with the
    # file the script looks for (its own check) keeps this test to the converter and off the network.
    cache = tmp_path / "cache"
    (cache / "onnx-studio" / "ort-headers" / "npm-r55-test").mkdir(parents=True)
    (cache / "onnx-studio" / "ort-headers" / "npm-r55-test" / "onnxruntime_lite_custom_op.h").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "ONNX_STUDIO_REQUIRE_ALL")}
    scratch = tmp_path / "tmp"          # the script's logs: mktemp there, removed (never a fixed /tmp name)
    scratch.mkdir()
    env.update(XDG_CACHE_HOME=str(cache), ORT_HEADERS_NPM_VERSION="r55-test", TMPDIR=str(scratch))
    runs = {}
    for ci in (True, False):
        runs[ci] = subprocess.run(["bash", str(ROOT / "scripts" / "ensure_test_deps.sh")],
                                  env={**env, "PYTHON": str(python), **({"CI": "true"} if ci else {})},
                                  capture_output=True, text=True, timeout=600)
    assert runs[True].returncode == 1, runs[True].stderr
    assert "CI: LiteRT's converter does not import (ImportError: onnx2tf is broken (the R55 test)); CI requires it" \
        in runs[True].stderr
    assert "LiteRT tests will be skipped" in runs[False].stderr and "CI requires" not in runs[False].stderr
    assert not list(scratch.iterdir())
