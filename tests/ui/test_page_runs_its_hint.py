"""Issue 34 "Done when" (a page hint and a CLI run of the same request do the same thing) for the hints that
were only parsed or compared with a literal: Verify/compare, Plugins (run and package), Export, Batch, the
Profile page's generation section and the Overview's memory plan. The page is driven with ``AppTest`` and a
spy records what it hands ``studio.api`` (or the batch facade); the page's own hint is then run through
``studio.cli.main`` (the model copied under the hint's file name) with the same spy, and the two calls must
agree on everything that decides the result (the request, or for plugin, which has no request type, the
facade's arguments). Plugins' package hint and the memory plan run for real:
the CLI writes the page's files byte for byte and plans the page's peak. Each test fails when the hint
drops or changes one of the page's settings (checked by editing each page's hint by one option).

The registry of these tests per page is tests/ui/test_every_hint_has_an_equality_test.py."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from pathlib import Path

import pytest

from studio import api
from studio.cli import main
from studio.core.errors import StudioError
from tests.conftest import SAMPLES

pytestmark = pytest.mark.slow


class _Stop(StudioError):
    """Raised by a spy once it has recorded the call: the page shows it as an error line, the CLI exits 2."""


def _spy(calls: list):
    def spy(*args, **kwargs):
        calls.append((args, kwargs))
        raise _Stop("recorded")
    return spy


def _hints(at, prefix: str) -> list[str]:
    return [line for c in at.code for line in c.value.splitlines() if line.startswith(prefix)]


def _run_hint(hint: str, folder: Path, models: dict[str, Path], monkeypatch) -> int:
    """Run ``hint`` as a user would, in ``folder`` holding each model under the hint's file name."""
    folder.mkdir(exist_ok=True)
    for name, path in models.items():
        shutil.copy(path, folder / name)
    monkeypatch.chdir(folder)
    return main(shlex.split(hint)[1:])


def test_the_verify_page_compares_what_its_compare_hint_compares(app, monkeypatch, tmp_path):
    calls: list = []
    monkeypatch.setattr(api, "compare", _spy(calls), raising=False)
    model = SAMPLES / "cnn_unfused.onnx"
    at = app(str(model)).run()
    at.switch_page("views/verify.py").run()
    at.selectbox(key="verify_engine_b").set_value("openvino").run()
    at.selectbox(key="verify_ov_b").set_value("f16").run()
    at.number_input(key="verify_inputs_count").set_value(3).run()
    at.checkbox(key="verify_layerwise").check().run()
    at.number_input(key="verify_threshold").set_value(0.02).run()
    (hint,) = _hints(at, "onnx-studio compare")
    at.button(key="verify_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    (ha, hb, page), page_kw = calls.pop()
    words = shlex.split(hint)
    assert _run_hint(hint, tmp_path / "cli", {words[2]: model, words[3]: model}, monkeypatch) == 2
    assert len(calls) == 1
    (ca, cb, cli), cli_kw = calls.pop()
    # one CompareRequest both ways (issue 34 item 2): the page hands the facade the request its hint prints
    assert (ca.sha256, cb.sha256) == (ha.sha256, hb.sha256)
    assert {f.name: (getattr(page, f.name), getattr(cli, f.name)) for f in dataclasses.fields(page)
            if getattr(page, f.name) != getattr(cli, f.name)} == {}, hint
    assert page_kw["dataset"] is cli_kw["dataset"] is None and cli_kw["feeds"] is None
    assert not any(page_kw["files"].values())          # random samples: no upload
    # the page's own settings, not defaults, went both ways
    assert (page.engine_b, page.ov_precision_b, page.count, page.layer_threshold) == ("openvino", "f16", 3, 0.02)


def test_the_plugins_page_runs_the_op_code_its_plugin_hint_runs(app, monkeypatch, tmp_path):
    from studio.facade import plugins as plugins_room

    calls: list = []
    monkeypatch.setattr(api, "run_python_op", _spy(calls), raising=False)
    # the CLI runs its PluginRequest through api.make_plugins, which runs the op in the same room
    monkeypatch.setattr(plugins_room, "run_python_op", _spy(calls))
    model = SAMPLES / "mmdeploy_grid_sampler.onnx"
    at = app(str(model)).run()
    at.switch_page("views/plugins.py").run()
    assert not at.exception, at.exception
    run_hint = next(h for h in _hints(at, "onnx-studio plugin") if "--impl" in h)
    at.button(key="plugin_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    (handle, op, code), kw = calls.pop()
    words = shlex.split(run_hint)
    impl = tmp_path / "cli" / words[words.index("--impl") + 1]
    impl.parent.mkdir()
    impl.write_text(code)                     # the file the hint names holds the page's editor code
    assert _run_hint(run_hint, tmp_path / "cli", {words[2]: model}, monkeypatch) == 2
    assert len(calls) == 1
    (cli_handle, cli_op, cli_code), cli_kw = calls.pop()
    assert (cli_handle.sha256, cli_op, cli_kw["target"]) == (handle.sha256, op, kw["target"])
    assert cli_code == code                   # the same implementation ran
    assert cli_kw["signature"].to_dict() == kw["signature"].to_dict()     # the same op, samples and reference


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_plugins_page_writes_the_packages_its_package_hint_writes(app, monkeypatch, tmp_path):
    model = SAMPLES / "mmdeploy_grid_sampler.onnx"
    at = app(str(model)).run()
    at.switch_page("views/plugins.py").run()
    at.multiselect(key="plugin_targets").set_value(["ort-python", "openvino-python", "tensorrt"]).run()
    package_hint = next(h for h in _hints(at, "onnx-studio plugin") if "--no-run" in h)
    at.button(key="plugin_generate").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    _, _, scaffold = at.session_state["plugin_scaffold"]
    page = _files(Path(scaffold.root))
    words = shlex.split(package_hint)
    assert _run_hint(package_hint, tmp_path / "cli", {words[2]: model}, monkeypatch) == 0
    out = tmp_path / "cli" / words[words.index("-o") + 1]
    cli = _files(next(p for p in out.iterdir() if p.is_dir()))
    assert sorted(page) == sorted(cli) and len(page) > 3
    assert [name for name in page if page[name] != cli[name]] == []


def _differences(a, b) -> list[str]:
    return [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]


def test_the_export_page_runs_the_request_its_export_hint_builds(app, monkeypatch, tmp_path):
    """The Export page's hint was only checked for a few words (tests/ui/test_export_page.py)."""
    calls: list = []
    monkeypatch.setattr(api, "export", _spy(calls), raising=False)
    model = SAMPLES / "cnn_unfused.onnx"
    at = app(str(model)).run()
    at.switch_page("views/export.py").run()
    at.multiselect(key="exp_targets").set_value(["onnxruntime", "openvino"]).run()
    at.text_input(key="exp_shape_0").set_value("1x3x32x32:2x3x32x32:4x3x32x32").run()
    (hint,) = _hints(at, "onnx-studio export")
    at.button(key="exp_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    (handle, page, *_), _ = calls.pop()
    words = shlex.split(hint)
    assert _run_hint(hint, tmp_path / "cli", {words[2]: model}, monkeypatch) == 2
    (cli_handle, cli, *_), _ = calls.pop()
    assert cli_handle.sha256 == handle.sha256 and _differences(page, cli) == [], hint
    assert page.shapes and set(page.targets) == {"ort", "openvino"}    # the page's own settings


def test_the_batch_page_runs_the_request_its_batch_hint_builds(app, monkeypatch, tmp_path):
    """Before, only a request built by hand went through the CLI (tests/batch/test_request_trips.py)."""
    from studio.batch import facade as batch_api

    calls: list = []
    monkeypatch.setattr(batch_api, "batch", _spy(calls))
    at = app().run()
    at.switch_page("views/batch.py").run()
    at.multiselect(key="batch_samples").set_value(["cnn_unfused", "if_loop"]).run()
    at.multiselect(key="batch_engines").set_value(["onnxruntime", "openvino"]).run()
    at.checkbox(key="batch_force").check().run()
    (hint,) = _hints(at, "onnx-studio batch")
    at.button(key="batch_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    (paths, _out, page), kw = calls.pop()
    names = shlex.split(hint)[2:4]          # the models by file name, as every page's hint names them
    assert names == [Path(p).name for p in paths], hint
    assert _run_hint(hint, tmp_path / "cli", dict(zip(names, map(Path, paths))), monkeypatch) == 2
    (cli_paths, _cli_out, cli), cli_kw = calls.pop()
    assert [Path(p).name for p in cli_paths] == names
    assert _differences(page, cli) == [] and (cli_kw["target"], cli_kw["cluster"]) == (kw["target"], kw["cluster"])
    assert page.force and list(page.engines) == ["onnxruntime", "openvino"]


def test_the_generation_section_runs_the_options_its_hint_builds(app, monkeypatch, tmp_path):
    """The Profile page's generation hint was only compared with a literal (tests/ui/test_profile_generation.py)."""
    calls: list = []
    monkeypatch.setattr(api, "profile_generation", _spy(calls), raising=False)
    model = SAMPLES / "llama_optimum.onnx"
    at = app(str(model)).run()
    at.switch_page("views/profile.py").run()
    at.multiselect(key="profile_engines").set_value(["ort", "ov"])
    at.text_input(key="profile_gen_lengths").set_value("4,8")
    at.number_input(key="profile_gen_tokens").set_value(4)
    at.number_input(key="profile_gen_count").set_value(2)
    at.text_input(key="profile_gen_batch").set_value("1,2")
    at.run()
    (hint,) = [h for h in _hints(at, "onnx-studio profile") if "--generate" in h]
    at.button(key="profile_generate_run").click().run()
    assert len(calls) == 1, [e.value for e in at.error]
    (targets, engines, options), _ = calls.pop()
    words = shlex.split(hint)
    assert _run_hint(hint, tmp_path / "cli", {words[2]: model}, monkeypatch) == 2
    (cli_targets, cli_engines, cli_options), _ = calls.pop()
    assert [t.handle.sha256 for t in targets] == [h.sha256 for _, h in cli_targets]
    assert [api.parse_engine(e).key for e in engines] == [e.key for e in api.parse_engines(",".join(cli_engines))]
    assert cli_options == options, hint
    assert (options.prompt_lengths, options.new_tokens, options.batch_sizes, options.generations) == (
        (4, 8), 4, (1, 2), 2)


def test_the_overview_memory_plan_is_the_plan_its_memory_hint_makes(app, monkeypatch, tmp_path):
    """Before, only a ``MemoryRequest`` built by hand went through the CLI (tests/batch/test_request_trips.py);
    here the Overview's section runs for real and its hint's run plans the same request to the same peak."""
    calls: list = []
    real = api.memory_plan

    def recording(handle, request, **kw):
        result = real(handle, request, **kw)
        calls.append((handle.sha256, request, result))
        return result
    monkeypatch.setattr(api, "memory_plan", recording, raising=False)
    model = SAMPLES / "cnn_unfused.onnx"
    at = app(str(model)).run()
    at.checkbox(key="memory_measure").uncheck().run()
    at.button(key="memory_plan_run").click().run()
    assert len(calls) == 1 and not at.exception, [e.value for e in at.error]
    (hint,) = _hints(at, "onnx-studio memory")
    sha, page, page_plan = calls.pop()
    words = shlex.split(hint)
    assert _run_hint(hint, tmp_path / "cli", {words[2]: model}, monkeypatch) == 0
    cli_sha, cli, cli_plan = calls.pop()
    assert cli_sha == sha and _differences(page, cli) == [], hint
    assert cli_plan.plan.peak_bytes == page_plan.plan.peak_bytes > 0 and not page.measure


def test_the_precision_hint_is_the_command_its_request_prints(app, monkeypatch):
    """The Precision page assembled its hint from ``request.cli_options()`` through ``api.cli_command``; now
    the request prints its own command line, as every other request's page does."""
    from studio.core.requests import PrecisionRequest

    printed: list = []
    real = PrecisionRequest.command

    def command(self, *args, **kwargs):
        printed.append((self, real(self, *args, **kwargs)))
        return printed[-1][1]
    monkeypatch.setattr(PrecisionRequest, "command", command)
    at = app(str(SAMPLES / "yolo_detector.onnx")).run()
    at.switch_page("views/precision.py").run()
    at.selectbox(key="precision_method").set_value("entropy").run()
    (hint,) = _hints(at, "onnx-studio precision")
    request, line = printed[-1]
    assert hint == line and request.calibration_method == "entropy" and "--out variants/" in hint
