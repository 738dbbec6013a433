"""Issue 33, item 5: every page's "Equivalent CLI command" comes from one builder
(``studio.core.cli_hints``), carries every option the page runs with, and the real CLI parser reads it
back; for Overview and Optimize the command, run through ``studio.cli.main``, gives the page's result."""

from __future__ import annotations

import ast
import json
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

import onnx
import pytest

from studio.cli import build_parser, main
from studio.core.cli_hints import cli_command
from studio.ui import widgets
from tests.conftest import ROOT, SAMPLES


def _parse(hint: str, sub: str):
    words = shlex.split(hint)
    assert words[:2] == ["onnx-studio", sub], hint
    return build_parser().parse_args(words[1:])


def _hint(at, prefix: str) -> str:
    (hint,) = [c.value for c in at.code if c.value.startswith(prefix)]
    return hint


def _dims(args) -> dict[str, int]:
    return {k: int(v) for k, v in (s.split("=", 1) for s in args.dim or ())}


def test_builder_quotes_every_word_and_drops_defaults():
    hint = cli_command("precision", ["my model.onnx"], [
        ("--dim", {"batch": 2, "seq len": 5}), ("--budget", 7.0), ("--variants", ["fp16", "int8"]),
        ("--asymmetric", True), ("--ratio", None), ("--target", ""), ("--out", "variants/")])
    args = _parse(hint, "precision")
    assert args.model == "my model.onnx" and _dims(args) == {"batch": 2, "seq len": 5}
    assert (args.budget, args.variants, args.asymmetric, args.ratio, args.target) == (
        7.0, "fp16,int8", True, 1.0, None)


def _hand_typed_commands(path: Path) -> list[str]:
    """String literals (f-string parts included, docstrings not) that begin a command line by hand,
    ``"onnx-studio <sub> ..."`` (prose that names a command mid-sentence is not one)."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return [f"{shown}:{n.lineno}: {n.value[:60]!r}" for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs
            and n.value.lstrip().startswith("onnx-studio ")]


def test_no_page_formats_its_own_hint():
    """One implementation: no file of studio/ui types a command line (every hint a page shows is built
    by a request's command(), through studio.core.cli_hints), and no page quotes words by hand."""
    ui = sorted((ROOT / "studio" / "ui").rglob("*.py"))
    assert len(ui) > 20 and any(p.name == "compatibility.py" for p in ui)
    assert not [hit for p in ui for hit in _hand_typed_commands(p)]
    assert not [str(p.relative_to(ROOT)) for p in ui if re.search(r"^\s*import shlex|\bshlex\.", p.read_text(), re.M)]


def test_the_check_finds_a_hand_typed_hint(tmp_path):
    """The check above is not blind: a hint typed the way the Compatibility page typed it is found."""
    probe = tmp_path / "probe.py"
    probe.write_text('def f(h):\n    """onnx-studio check MODEL (a docstring is prose)."""\n'
                     '    return (f"onnx-studio check {h} --engines ort "\n            f"--ep cpu")\n')
    assert [h.split(": ", 1)[1] for h in _hand_typed_commands(probe)] == ["'onnx-studio check '"]


def test_every_command_builder_of_the_facade_uses_the_one_builder(monkeypatch):
    """Optimize, Export, Profile and generation hints are their requests' command(); each formats its
    words through studio.core.cli_hints (a spy on it sees every call); the facade has no builder of its own."""
    from studio import api
    from studio.core import cli_hints
    from studio.core.requests import ExportRequest, GenerationRequest, OptimizeRequest, ProfileRequest

    seen: list[str] = []
    real = cli_hints.cli_command
    monkeypatch.setattr(cli_hints, "cli_command", lambda sub, *a, **k: seen.append(sub) or real(sub, *a, **k))
    OptimizeRequest(preset="default").command("m.onnx")
    ExportRequest(targets=["onnxruntime"]).command("m.onnx")
    ProfileRequest().command(["m.onnx"])
    GenerationRequest().command(["m.onnx"])
    assert not hasattr(api, "optimize_command") and not hasattr(api, "generation_command")
    assert seen == ["optimize", "export", "profile", "profile"]


def test_precision_hint_has_the_dims_and_options_the_page_runs_with(app):
    """Precision runs at the model's dims (yolo_detector: 320x320 from its own hints) and the page's
    method, target and budget: the hint said none of the dims before."""
    at = app(str(SAMPLES / "yolo_detector.onnx")).run()
    at.switch_page("views/precision.py").run()
    at.selectbox(key="precision_method").set_value("entropy").run()
    at.slider(key="precision_target").set_value(0.95).run()
    at.number_input(key="precision_budget").set_value(9).run()
    page_dims = dict(at.session_state["onnx_studio_dims"])
    assert page_dims, "the sample states its height and width"
    args = _parse(_hint(at, "onnx-studio precision"), "precision")
    assert args.model == "yolo_detector.onnx"
    assert _dims(args) == page_dims
    assert (args.calibration_method, args.target_cosine, args.budget) == ("entropy", 0.95, 9.0)


def test_batch_hint_has_engines_force_and_the_models_chosen(app):
    at = app().run()
    at.switch_page("views/batch.py").run()
    at.multiselect(key="batch_samples").set_value(["yolo_detector"]).run()
    at.multiselect(key="batch_engines").set_value(["onnxruntime", "openvino"]).run()
    at.checkbox(key="batch_force").check().run()
    args = _parse(_hint(at, "onnx-studio batch"), "batch")
    assert args.engines == "onnxruntime,openvino" and args.force is True
    assert args.paths == ["yolo_detector.onnx"]       # by file name, as every page's hint names a model
    assert args.stages == "inspect,check"


@pytest.mark.slow
def test_overview_hint_run_by_the_cli_gives_the_page_figures(app, tmp_path, capsys, monkeypatch):
    """`inspect` at the hint's dims gives the FLOPs and node count the page shows at its dims."""
    at = app(str(SAMPLES / "yolo_detector.onnx")).run()
    (box,) = [n for n in at.number_input if (n.key or "").startswith("dim_") and "height" in n.key]
    box.set_value(256).run()
    hint = _hint(at, "onnx-studio inspect")
    args = _parse(hint, "inspect")
    assert args.model == "yolo_detector.onnx" and _dims(args) == {"height": 256, "width": 320}
    shown = {m.label: m.value for m in at.metric}
    shutil.copy(SAMPLES / "yolo_detector.onnx", tmp_path / args.model)
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(shlex.split(hint)[1:] + ["--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert shown["FLOPs"].lstrip("≥ ") == widgets.fmt_count(cli["flops"]["flops"])
    assert shown["Nodes"] == f"{cli['node_counts']['total']:,}"


@pytest.mark.slow
def test_optimize_hint_run_by_the_cli_gives_the_page_result(app, tmp_path, monkeypatch):
    """The page's op counts after its run equal those of the model the hint's command writes."""
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/optimize.py").run()
    at.button(key="opt_run").click().run()
    hint = _hint(at, "onnx-studio optimize")
    args = _parse(hint, "optimize")
    (ops,) = [d.value for d in at.dataframe if list(d.value.columns[:3]) == ["op", "before", "after"]]
    page_after = {r.op: int(r.after) for r in ops.itertuples()}
    work = tmp_path / "w"
    work.mkdir()
    shutil.copy(SAMPLES / "cnn_unfused.onnx", work / args.model)
    monkeypatch.chdir(work)
    assert main(shlex.split(hint)[1:]) == 0
    cli_ops = Counter(n.op_type for n in onnx.load(str(work / args.output)).graph.node)
    assert page_after == {op: cli_ops.get(op, 0) for op in page_after}
    assert page_after, "the preset changes op counts on this sample"
