"""Shared fixtures: an isolated workspace per test, tiny model builders, the
onnx wheel's backend test models, and helpers asserting RELIABILITY.md's
universal expectations (one-line message, no absolute paths, input unchanged).
Under CI a missing or broken required component fails the run (tests/requirements.py, R55)."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_models"
ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"


def pytest_configure(config) -> None:
    """The run's sandbox: projects root, workspace and XDG homes in one temporary folder, set before any
    fixture or server starts (tests/sandbox.py)."""
    from tests import sandbox

    sandbox.configure(config, ROOT)


def pytest_sessionfinish(session, exitstatus) -> None:
    """Fail the run when the suite wrote under the real home's onnx-studio folders or into the checkout."""
    from tests import sandbox

    sandbox.finish(session, ROOT)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Name the machine at the end of the run, where CI's log tail shows it: the suite's time and the
    CPU-sensitive results (INT8, bf16) are only comparable with the CPU kind and the load beside them."""
    if hasattr(config, "workerinput"):
        return
    from benchmarks.harness import cpu_banner

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    terminalreporter.write_line(f"machine: {cpu_banner()}; load average {load}")


@pytest.hookimpl(trylast=True)          # after -m / -k have deselected theirs
def pytest_collection_modifyitems(config, items) -> None:
    """A test marked ``covered_by("<name>")`` checks a subset of test ``<name>`` (the fast tier's
    share of a sweep). When ``<name>`` runs in the same session it checks that subset too, so the
    subset is deselected (reported as such, never skipped)."""
    names = {item.originalname for item in items}
    covered = [item for item in items
               if (m := item.get_closest_marker("covered_by")) is not None and m.args and m.args[0] in names]
    if covered:
        config.hook.pytest_deselected(items=covered)
        items[:] = [item for item in items if item not in covered]
    _long_tests_first(items)


# The tests that took 25 s or more in full runs (make test, 2 cores), longest first: run before the rest, so that
# under xdist (--dist worksteal) no worker starts one of them when the others have run out of work. A fixed list
# (no timings are read at run time); a test missing from it only runs in its usual place.
LONG_FIRST = (
    "tests/diag/test_agreement.py::test_samples_and_a_stratified_share_of_backend_models_agree",
    "tests/fuzz/test_fuzz.py::test_fuzz_mutated_models",
    "tests/e2e/test_journey.py::test_upload_to_exported_bundle",
    "tests/profilers/test_profile_converted.py::test_profile_reports_conversion_and_load_separately",
    "tests/e2e/test_projects_browser.py::test_project_survives_reload_restart_and_kill_9",
    "tests/e2e/test_deep_links.py::test_every_page_opens_from_its_url",
    "tests/accuracy/test_layerwise_converted.py::test_same_model_has_no_diverging_layer_and_a_changed_weight_is_found",
    "tests/passes/test_differential.py::test_safe_preset_differential_all_backend_models",
    "tests/precision/test_converted_variants.py::test_mnn_and_litert_variants_are_measured_and_judged",
    "tests/core/test_mnn_after_tensorflow.py::test_an_mnn_runner_opened_after_tensorflow_converts_in_a_worker",
    "tests/accuracy/test_layerwise.py::test_resnet50_layerwise_memory_below_twice_plain_inference",
    "tests/e2e/test_graph_edit_browser.py::test_bypass_diff_and_add_output_from_the_graph_page",
    "tests/e2e/test_models_never_mix.py::test_two_projects_three_models_never_mix",
    "tests/passes/test_peer_candidates.py::test_corpus_t3_minilm_dequantizing_folds_refused",
    "tests/ui/test_compatibility_page.py::test_not_run_badge_and_inputs_that_ran",
    "tests/test_readme.py::test_readme_block_runs",
)


def _long_tests_first(items: list) -> None:
    """Move the tests of :data:`LONG_FIRST` to the front, in its order (each test's parameters in their order)."""
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    first = sorted((item for item in items if item.nodeid.split("[")[0] in rank),
                   key=lambda item: rank[item.nodeid.split("[")[0]])
    if first:
        chosen = set(map(id, first))
        items[:] = first + [item for item in items if id(item) not in chosen]


def pytest_sessionstart(session) -> None:
    """Under CI, every required component imports in a fresh interpreter before any test runs,
    or the run stops here naming each one missing or broken (R55). Once per run (not per xdist
    worker). ``ONNX_STUDIO_CI_PRECHECK=0`` leaves it to the per-test checks (their own test)."""
    from tests.requirements import strict

    if hasattr(session.config, "workerinput") or not strict() or os.environ.get("ONNX_STUDIO_CI_PRECHECK") == "0":
        return
    res = subprocess.run([sys.executable, "-m", "tests.requirements"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    if res.returncode != 0:
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("required component")] or \
            [f"python -m tests.requirements exited {res.returncode}: {(res.stderr or res.stdout).strip()[-500:]}"]
        pytest.exit("CI: " + "; ".join(lines), returncode=1)


_IMPORTORSKIP = re.compile(r"could not import '([\w.]+)'")


def _ci_fails_required_skip(report) -> None:
    """A skip from ``pytest.importorskip`` of a required component is a failure under CI."""
    from tests.requirements import component_for_module, message, strict

    if not report.skipped or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    m = _IMPORTORSKIP.search(reason)
    component = component_for_module(m.group(1)) if m else None
    if component is not None and strict(component):
        report.outcome = "failed"
        report.longrepr = f"CI: {message(component, reason.removeprefix('Skipped: '))}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _ci_fails_required_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _ci_fails_required_skip(outcome.get_result())


@pytest.fixture(autouse=True)
def _isolated_workspace(tmp_path_factory, monkeypatch):
    ws = tmp_path_factory.mktemp("workspace")
    monkeypatch.setenv("ONNX_STUDIO_WORKSPACE", str(ws))
    # Projects never land in the real home (~/.local/share/onnx-studio/projects).
    monkeypatch.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(tmp_path_factory.mktemp("projects")))
    yield ws


@pytest.fixture(scope="module")
def module_projects_root(tmp_path_factory):
    """A projects root for a module-scoped fixture that creates projects: ``_isolated_workspace`` (per
    test) has not set one yet when such a fixture runs. Tests still see their own per-test root."""
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("projects")
        mp.setenv("ONNX_STUDIO_PROJECTS_ROOT", str(root))
        yield root


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def parse_model(text: str) -> onnx.ModelProto:
    """A model from ONNX text (onnx.parser), checked."""
    model = onnx.parser.parse_model(text)
    onnx.checker.check_model(model)
    return model


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(path))
    return path


def ort_reference(model: onnx.ModelProto | Path, feeds: dict) -> dict:
    """The oracle for a model's outputs: plain onnxruntime on the CPU with graph optimizations off;
    output name -> value."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    src = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    s = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def assert_user_message(message: str, *needles: str) -> None:
    """RELIABILITY (a): one line, names the problem, no absolute path, no traceback."""
    assert "\n" not in message, message
    assert "Traceback" not in message
    for root in (str(Path.home()), "/tmp/", str(ROOT), os.getcwd()):
        assert root not in message, f"absolute path in message: {message}"
    low = message.lower()
    for n in needles:
        assert n.lower() in low, f"{n!r} not in {message!r}"


def light_models() -> list[Path]:
    return sorted((ONNX_DATA / "light").glob("*.onnx"))


def backend_models() -> list[Path]:
    return sorted(ONNX_DATA.glob("*/*/model.onnx")) + light_models()


def _scan_components_once() -> None:
    """Streamlit reads every installed distribution's metadata for v2 component manifests at each
    AppTest start (``scan_component_manifests``: 11 scans were 35 s of a 231 s UI run under cProfile, load
    ~18). The installed packages do not change during a test session: the first scan's result is reused."""
    from streamlit.components.v2 import manifest_scanner

    scan = manifest_scanner.scan_component_manifests
    if not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)


@pytest.fixture
def app(monkeypatch):
    """AppTest of the real app script: ``app(model_path=None, **env)``."""
    from streamlit.testing.v1 import AppTest

    _scan_components_once()

    def make(model: str | None = None, **env: str) -> AppTest:
        if model:
            monkeypatch.setenv("ONNX_STUDIO_MODEL", model)
        else:
            monkeypatch.delenv("ONNX_STUDIO_MODEL", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return AppTest.from_file(str(ROOT / "studio" / "ui" / "app.py"), default_timeout=120)
    return make


def current_model(at):
    """The model (its version tree) an AppTest session has open in its project."""
    from studio import api

    return api.project_model(at.session_state["onnx_studio_project"], at.session_state["onnx_studio_model"])


def open_sample(at, name: str):
    """Open the catalog sample ``name`` from the Overview page's picker, as a user does."""
    at.selectbox(key="sample_pick").set_value(name).run()
    at.button(key="open_sample").click().run()
    assert not at.exception, at.exception
    return at


def metrics(at) -> dict[str, str]:
    """The page's metric tiles, label -> shown value."""
    return {m.label: m.value for m in at.metric}


def table_with(at, column: str):
    """The page's first dataframe that has ``column`` (the optimize report has 'pass', the op diff 'op')."""
    return next(d.value for d in at.dataframe if column in d.value.columns)


def photos_added_on_the_data_page(app, name: str = "image_classifier"):
    """A fresh session with the catalog sample ``name`` open, its sample photos added as 'my photos' by the
    Data page's own button (the page's add, not the facade's); the AppTest."""
    at = open_sample(app().run(), name)
    at.switch_page("views/data.py").run()
    at.text_input(key="data_name").set_value("my photos").run()
    at.button(key="data_add_photos").click().run()
    assert not at.exception, at.exception
    return at


def sample_with_photos(app, name: str):
    """A fresh session with the catalog sample ``name`` open and the sample photos added to its project
    as the dataset 'photos' (no preprocessing model given); the AppTest and the project id."""
    from studio import api

    at = open_sample(app().run(), name)
    pid = at.session_state["onnx_studio_project"]
    api.add_dataset(pid, api.sample_photos_folder(), name="photos", model=None)
    return at, pid
