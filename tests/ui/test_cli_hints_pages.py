"""Issue 33 item 5 / issue 34 item 2, the pages test_cli_hints_33 does not cover: Compatibility (check
and fix), Plugins, Data (add, eval, recipe), Graph (a region, a diff), the decoder card's KV budget and
the edit panel's script command. Each hint is a request's ``command()`` (through ``studio.core.cli_hints``);
here it is parsed by the real CLI parser for the options the page ran with, and where it is cheap run through
``studio.cli.main`` for the page's own result (verdicts, the fixed model's ops, the diff's counts, the
KV budget, the drawn region's nodes)."""

from __future__ import annotations

import json
import shlex
import shutil
from collections import Counter

import onnx
import pytest

from sample_models.catalog import path_of
from studio import api
from studio.cli import build_parser, main
from studio.core.requests import CheckRequest, OptimizeRequest
from studio.ui import edit_panel
from tests.conftest import SAMPLES, current_model, metrics, open_sample, photos_added_on_the_data_page

pytestmark = pytest.mark.slow


def _parse(hint: str, *sub: str):
    words = shlex.split(hint)
    assert words[:1 + len(sub)] == ["onnx-studio", *sub], hint
    return build_parser().parse_args(words[1:])


def _hints(at, prefix: str) -> list[str]:
    """Every command line of the page's hints that starts with ``prefix`` (a hint may hold several)."""
    return [line for c in at.code for line in c.value.splitlines() if line.startswith(prefix)]


def _dims(args) -> dict[str, int]:
    return {k: int(v) for k, v in (s.split("=", 1) for s in args.dim or ())}


def _run(hint: str, workdir, model, capsys, monkeypatch, *extra: str) -> tuple[int, str]:
    """Run a hint as a user would, in a folder holding the model under the hint's name (its first
    positional, or its --model)."""
    workdir.mkdir(exist_ok=True)
    words = shlex.split(hint)
    shutil.copy(model, workdir / (words[words.index("--model") + 1] if "--model" in words else words[2]))
    monkeypatch.chdir(workdir)
    capsys.readouterr()
    code = main(shlex.split(hint)[1:] + list(extra))
    got = capsys.readouterr()
    return code, got.out if code in (0, 1) else got.out + got.err


def _ort_only(at):
    """Check only with ONNX Runtime (the page's stored engine choice), as a user who unticked the rest."""
    api.set_setting(at.session_state["onnx_studio_project"], "ui:compat_engines", ["onnxruntime"],
                    model_id=at.session_state["onnx_studio_model"])


def test_compatibility_check_hint_run_by_the_cli_gives_the_page_verdicts(app, tmp_path, capsys, monkeypatch):
    at = app(str(SAMPLES / "transformer_block.onnx")).run()
    _ort_only(at)
    at.switch_page("views/compatibility.py").run()
    assert not at.exception, at.exception
    (hint,) = [h for h in _hints(at, "onnx-studio check") if "--fix" not in h]
    args = _parse(hint, "check")
    assert args.model == "transformer_block.onnx" and api.check_engines(args.engines) == ("onnxruntime",)
    assert (args.ep, args.trt_version) == ("cpu", "10")
    assert _dims(args) == dict(at.session_state["onnx_studio_dims"])
    shown = " ".join(m.value for m in at.markdown)
    code, out = _run(hint, tmp_path / "w", SAMPLES / "transformer_block.onnx", capsys, monkeypatch, "--json")
    verdicts = [v["verdict"] for v in json.loads(out)["verdicts"]]
    assert verdicts and all(v in shown for v in verdicts), (verdicts, shown)
    assert code == (1 if "fails" in verdicts else 0)


def test_compatibility_fix_hint_run_by_the_cli_writes_the_pages_version(app, tmp_path, capsys, monkeypatch):
    """The fix button's command (its pass, its options, the dims typed beside it) writes a model with the
    same inputs and op counts as the version the button saved."""
    at = app(str(SAMPLES / "transformer_block.onnx")).run()
    _ort_only(at)
    at.switch_page("views/compatibility.py").run()
    boxes = {n.label: n for n in at.number_input if n.key and n.key.startswith("compat_dim_")}
    boxes["batch"].set_value(2)
    boxes["sequence"].set_value(7).run()
    (hint,) = [h for h in _hints(at, "onnx-studio check") if "--fix fix-input-shapes" in h]
    args = _parse(hint, "check")
    assert args.fix == ["fix-input-shapes"] and _dims(args) == {"batch": 2, "sequence": 7}
    assert api.check_engines(args.engines) == ("onnxruntime",) and args.output == "fixed.onnx"
    next(b for b in at.button if b.label == "Fix: fix-input-shapes").click().run()
    assert not at.exception, at.exception
    ws = current_model(at)
    page = onnx.load(ws.handle(ws.versions[-1].id).path)
    _run(hint, tmp_path / "w", SAMPLES / "transformer_block.onnx", capsys, monkeypatch)
    cli = onnx.load(str(tmp_path / "w" / "fixed.onnx"))
    assert [str(i.type) for i in cli.graph.input] == [str(i.type) for i in page.graph.input]
    assert Counter(n.op_type for n in cli.graph.node) == Counter(n.op_type for n in page.graph.node)


def test_fix_options_are_json_as_set_reads_them():
    """A pass option that is a list or a string reaches the CLI as the value the page passes."""
    fix = OptimizeRequest(passes=("convert-opset", "x"), pass_options={"convert-opset": {"target": 17},
                                                                        "x": {"names": ["a b", "c"]}})
    hint = CheckRequest().command("m.onnx", fix=fix, output="fixed.onnx")
    from studio.cli.common import parse_options

    assert parse_options(_parse(hint, "check").options) == {"convert-opset": {"target": 17},
                                                              "x": {"names": ["a b", "c"]}}


def test_plugins_hints_name_the_op_and_targets_the_page_uses(app):
    at = app(str(SAMPLES / "mmdeploy_grid_sampler.onnx")).run()
    at.switch_page("views/plugins.py").run()
    assert not at.exception, at.exception
    at.multiselect(key="plugin_targets").set_value(["ort-python", "tensorrt"]).run()
    run_hint, package_hint = _hints(at, "onnx-studio plugin")
    run_args, package_args = _parse(run_hint, "plugin"), _parse(package_hint, "plugin")
    assert run_args.op == package_args.op == "mmdeploy::grid_sampler"
    assert run_args.target == at.radio(key="plugin_py_target").value and run_args.impl.endswith(".py")
    assert api.plugin_targets(package_args.target) == ("ort-python", "tensorrt")
    assert package_args.no_run and not package_args.build            # no C++ package chosen: nothing to build


def test_data_hints_name_the_project_model_dataset_and_recipe(app):
    at = photos_added_on_the_data_page(app)
    pid = at.session_state["onnx_studio_project"]
    (add,) = _hints(at, "onnx-studio data add")
    args = _parse(add, "data", "add")
    assert (args.project, args.name, args.model) == (pid, "my photos", "image_classifier.onnx")
    (evaluate,) = _hints(at, "onnx-studio data eval")
    args = _parse(evaluate, "data", "eval")
    assert (args.dataset, args.project, args.model, args.engine) == ("my photos", pid, "image_classifier.onnx",
                                                                     "onnxruntime")
    assert args.goal == "top1-agreement>=0.99" and args.old_goal is None     # the goal is --goal on every command
    (recipe,) = _hints(at, "onnx-studio data recipe")
    args = _parse(recipe, "data", "recipe")
    ds = api.dataset(pid, api.project_datasets(pid)[0].id)
    assert (args.dataset, args.project) == ("my photos", pid)
    rebuilt = api.preprocessing_recipe(changes={k: v for k, v in vars(args).items()
                                                if k in ("resize", "scale", "color", "layout", "dtype")})
    assert (rebuilt.resize, rebuilt.scale, rebuilt.color, rebuilt.layout, rebuilt.dtype) == (
        ds.recipe.resize, ds.recipe.scale, ds.recipe.color, ds.recipe.layout, ds.recipe.dtype)
    assert [float(v) for v in args.mean.split(",")] == pytest.approx(list(ds.recipe.mean))


def test_data_eval_hint_run_by_the_cli_gives_the_page_metrics(app, tmp_path, capsys, monkeypatch):
    from studio import api

    calls: list = []
    real = api.evaluate_on_dataset

    def recording(ds, request, *args, **kwargs):
        calls.append(request)
        return real(ds, request, *args, **kwargs)

    monkeypatch.setattr(api, "evaluate_on_dataset", recording)
    at = app().run()
    open_sample(at, "image_classifier")
    at.switch_page("views/data.py").run()
    at.button(key="data_add_photos").click().run()
    at.button(key="data_eval").click().run()
    assert not at.exception, at.exception
    page = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert len(page), "the page shows the metrics"
    (hint,) = _hints(at, "onnx-studio data eval")
    code, out = _run(hint, tmp_path / "w", path_of("image_classifier"), capsys, monkeypatch, "--json")
    assert code == 0, out
    cli = json.loads(out)
    page_request, cli_request = calls             # one DatasetEvalRequest both ways (issue 34 item 2)
    assert page_request == cli_request and page_request.model == "image_classifier.onnx"
    got = {(o["output"], m["metric"]): m["value"] for o in cli["outputs"] for m in o["metrics"]}
    for row in page.itertuples():
        assert got[(row.output, row.metric)] == pytest.approx(float(row.value), rel=1e-3), row


def test_graph_region_hint_run_by_the_cli_draws_the_pages_nodes(app, tmp_path, capsys, monkeypatch):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/graph.py").run()
    at.radio(key="graph_mode").set_value("Detail").run()
    at.slider(key="graph_hops").set_value(1).run()
    assert not at.exception, at.exception
    (hint,) = _hints(at, "onnx-studio graph")
    args = _parse(hint, "graph")
    assert (args.focus, args.hops, args.overlay) == (at.text_input(key="graph_focus").value, 1, "op type")
    drawn = at.selectbox(key="graph_detail_node").options
    _run(hint.replace("region.svg", "region.dot"), tmp_path / "w", SAMPLES / "cnn_unfused.onnx", capsys,
         monkeypatch)
    dot = (tmp_path / "w" / "region.dot").read_text()
    assert drawn and all(n in dot for n in drawn), drawn
    at.radio(key="graph_region").set_value("A group").run()
    (hint,) = _hints(at, "onnx-studio graph")
    args = _parse(hint, "graph")
    assert args.group == at.selectbox(key="graph_group_pick").value and args.focus is None
    drawn = at.selectbox(key="graph_detail_node").options
    _run(hint.replace("region.svg", "group.dot"), tmp_path / "w2", SAMPLES / "cnn_unfused.onnx", capsys,
         monkeypatch)
    dot = (tmp_path / "w2" / "group.dot").read_text()
    assert drawn and all(n in dot for n in drawn), drawn


def test_graph_diff_hint_run_by_the_cli_gives_the_pages_counts(app, tmp_path, capsys, monkeypatch):
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    at.switch_page("views/graph.py").run()
    at.radio(key="graph_mode").set_value("Diff").run()
    at.radio(key="diff_mode").set_value("side-by-side").run()
    assert not at.exception, at.exception
    (hint,) = _hints(at, "onnx-studio graph")
    args = _parse(hint, "graph")
    assert args.diff_mode == "side-by-side"
    shown = metrics(at)
    ws = current_model(at)
    work = tmp_path / "w"
    work.mkdir()
    before, after = ws.versions[0], ws.versions[-1]       # stored under one name: the hint names them apart
    assert (args.model, args.diff) == ("cnn_unfused-v0.onnx", "cnn_unfused-v1.onnx")
    shutil.copy(ws.handle(before.id).path, work / args.model)
    shutil.copy(ws.handle(after.id).path, work / args.diff)
    monkeypatch.chdir(work)
    capsys.readouterr()
    assert main(shlex.split(hint)[1:]) == 0
    out = capsys.readouterr().out
    assert (f"diff: {shown['Removed']} removed, {shown['Added']} added, {shown['Changed']} changed, "
            f"{shown['Unchanged']} unchanged") in out


def test_decoder_kv_budget_hint_run_by_the_cli_gives_the_pages_budget(app, tmp_path, capsys, monkeypatch):
    at = app(str(path_of("llama_genai"))).run()
    at.number_input(key="kv_memory_gib").set_value(0.002).run()
    at.number_input(key="kv_batch").set_value(3).run()
    at.number_input(key="kv_length").set_value(40).run()
    at.selectbox(key="kv_dtype").set_value("int8").run()
    assert not at.exception, at.exception
    (hint,) = [h for h in _hints(at, "onnx-studio inspect") if "--decoder" in h]
    args = _parse(hint, "inspect")
    assert (args.decoder, args.kv_length, args.batch, args.kv_dtype) == (True, 40, 3, "int8")
    m = metrics(at)
    code, out = _run(hint, tmp_path / "w", path_of("llama_genai"), capsys, monkeypatch, "--json")
    budget = json.loads(out)["budget"]
    assert code == 0 and budget["memory_bytes"] == int(0.002 * 2**30)
    assert (m["Max length at batch 3"], m["Max batch at 40 tokens"]) == (str(budget["max_length"]),
                                                                         str(budget["max_batch"]))


def test_edit_panel_script_command_parses():
    args = _parse(edit_panel.cli_command("my model.onnx", "team's project"), "edit")
    assert (args.model, args.script, args.output, args.project) == ("my model.onnx", "edits.json", "edited.onnx",
                                                                    "team's project")
    assert _parse(edit_panel.cli_command("m.onnx"), "edit").project is None


def test_verify_two_versions_hint_names_them_apart_with_the_dims(app):
    """Two versions stored under one file name: `compare X X` compared a file with itself; the page runs
    at the model's dims, which the hint did not carry."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.number_input(key="dim_0_batch").set_value(2).run()        # the model's dims, set on the Overview
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    at.switch_page("views/verify.py").run()
    at.radio(key="verify_mode").set_value("Two versions").run()
    assert not at.exception, at.exception
    (hint,) = _hints(at, "onnx-studio compare")
    args = _parse(hint, "compare")
    assert (args.a, args.b) == ("cnn_unfused-v0.onnx", "cnn_unfused-v1.onnx")
    assert _dims(args) == dict(at.session_state["onnx_studio_dims"]) == {"batch": 2}


def test_hint_file_names_tell_versions_stored_under_one_name_apart():
    from studio.ui import widgets

    assert widgets.hint_file_names([("a.onnx", "v0"), ("b.onnx", "v1")]) == ["a.onnx", "b.onnx"]
    assert widgets.hint_file_names([("m.onnx", "m1:v0"), ("m.onnx", "m1:v1"), ("x.onnx", "m2:v0")]) == [
        "m-m1-v0.onnx", "m-m1-v1.onnx", "x.onnx"]


def test_profile_hint_names_each_version_and_carries_the_page_options(app):
    """Profile's default pick after an optimize is v0 and v1, stored under one file name: the hint said
    `profile cnn_unfused.onnx cnn_unfused.onnx`, one file twice."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    at.switch_page("views/profile.py").run()
    at.number_input(key="profile_iterations").set_value(25).run()
    assert not at.exception, at.exception
    assert at.multiselect(key="profile_versions").value == ["m1:v0", "m1:v1"]
    (hint,) = _hints(at, "onnx-studio profile")
    args = _parse(hint, "profile")
    assert args.models == ["cnn_unfused-v0.onnx", "cnn_unfused-v1.onnx"]
    assert [e.key for e in api.parse_engines(args.engine)] == ["ort", "ov"] and args.iterations == 25
    assert _dims(args) == dict(at.session_state["onnx_studio_dims"])
