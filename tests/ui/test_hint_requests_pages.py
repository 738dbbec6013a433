"""Issue 34 "Done when" for the hints that were only parsed: Data's ``data add`` and the Graph page's whole-graph
views (the box viewer and the levelled overview). The page is driven with ``AppTest`` and what it hands
``studio.api`` is recorded; the page's own hint (a request's ``command()``) is then run through
``studio.cli.main`` with the same recording, and the two calls must agree on everything that decides the result
(the dataset's source, name, kind, preset, split and model; the overlay, level and search, and the view drawn).

Each test fails when the hint drops one of the page's settings: the viewer hint had no ``--overlay`` before
(the CLI drew op types where the page drew the chosen overlay); checked for data add by dropping ``--split``
from ``DatasetAddRequest.command``."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from pathlib import Path

import pytest

from sample_models.catalog import path_of
from studio import api
from studio.cli import main
from tests.conftest import SAMPLES, open_sample

pytestmark = pytest.mark.slow


def _hint(at, prefix: str) -> str:
    (line,) = [line for c in at.code for line in c.value.splitlines() if line.startswith(prefix)]
    return line


def _recording(calls: list, real):
    """``real``, recording its arguments and result."""
    def wrapper(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append((args, kwargs, out))
        return out
    return wrapper


def _run_hint(hint: str, folder: Path, models: dict[str, Path], monkeypatch, *replace: tuple[str, str]) -> int:
    folder.mkdir(exist_ok=True)
    for name, path in models.items():
        shutil.copy(path, folder / name)
    monkeypatch.chdir(folder)
    words = shlex.split(hint)[1:]
    for old, new in replace:
        words = [new if w == old else w for w in words]
    return main(words)


def test_the_data_page_adds_the_dataset_its_data_add_hint_adds(app, tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(api, "add_dataset", _recording(calls, api.add_dataset))
    at = app().run()
    open_sample(at, "image_classifier")
    at.switch_page("views/data.py").run()
    at.text_input(key="data_name").set_value("my photos").run()
    at.selectbox(key="data_preset").set_value("caffe").run()
    at.slider(key="data_split").set_value(0.25).run()
    at.button(key="data_add_photos").click().run()
    assert not at.exception, at.exception
    (page_args, page_kw, page_ds), = calls
    hint = _hint(at, "onnx-studio data add")
    photos = str(api.sample_photos_folder())
    code = _run_hint(hint.replace("my photos", "my photos (cli)"), tmp_path / "w",
                     {"image_classifier.onnx": path_of("image_classifier")}, monkeypatch, ("DIR", photos))
    assert code == 0
    (cli_args, cli_kw, cli_ds) = calls[1]

    def effect(args, kw, ds) -> dict:
        return {"source": str(args[1]), "request": dataclasses.replace(args[2], name=None),   # one DatasetAddRequest
                "model": getattr(kw.get("model"), "sha256", None),
                "recipe": ds.recipe.to_dict() if ds.recipe else None, "calibration": len(ds.calibration),
                "evaluation": len(ds.evaluation)}

    assert effect(page_args, page_kw, page_ds) == effect(cli_args, cli_kw, cli_ds)
    assert page_args[2].name == "my photos" and cli_args[2].name == "my photos (cli)"
    assert (page_args[2].split, page_args[2].preset, page_args[2].kind) == (0.25, "caffe", "auto")


def test_the_graph_viewer_hint_draws_the_graph_the_page_draws(app, tmp_path, monkeypatch):
    """The Graph view (the box viewer) with an overlay chosen: the hint draws the viewer with that overlay."""
    page_calls: list = []
    monkeypatch.setattr(api, "graph_viewer_html", _recording(page_calls, api.graph_viewer_html))
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/graph.py").run()
    at.radio(key="graph_mode").set_value("Graph").run()
    at.selectbox(key="graph_overlay").set_value("FLOPs share").run()
    assert not at.exception, at.exception
    args, kw, _html = page_calls[-1]
    page_request = args[1]                        # one GraphRequest both ways (issue 34 item 2)
    page = {"nodes": args[0].nodes, "overlay": page_request.overlay}
    cli_calls: list = []
    monkeypatch.setattr(api, "write_graph_viewer", _recording(cli_calls, api.write_graph_viewer))
    assert _run_hint(_hint(at, "onnx-studio graph"), tmp_path / "w",
                     {"cnn_unfused.onnx": SAMPLES / "cnn_unfused.onnx"}, monkeypatch) == 0
    (cargs, ckw, written), = cli_calls
    assert cargs[2] == page_request and "overlay" not in kw and "overlay" not in ckw
    assert {"nodes": cargs[0].nodes, "overlay": cargs[2].overlay} == page
    assert page["overlay"] == "FLOPs share" and written.format == "html"


def test_the_graph_overview_hint_draws_the_view_the_page_draws(app, tmp_path, monkeypatch):
    """The levelled overview with an overlay and a search: the hint's view has the page's items and highlights."""
    calls: list = []
    monkeypatch.setattr(api, "graph_view", _recording(calls, api.graph_view))
    at = app(str(SAMPLES / "transformer_block.onnx")).run()
    at.switch_page("views/graph.py").run()
    at.radio(key="graph_mode").set_value("Overview").run()
    at.selectbox(key="graph_overlay").set_value("FLOPs share").run()
    at.text_input(key="graph_query").set_value("MatMul").run()
    assert not at.exception, at.exception
    _args, kw, page_view = calls[-1]
    hint = _hint(at, "onnx-studio graph")
    calls.clear()
    assert _run_hint(hint, tmp_path / "w", {"transformer_block.onnx": SAMPLES / "transformer_block.onnx"},
                     monkeypatch) == 0
    (_cargs, ckw, cli_view), = calls

    def effect(kw, view) -> dict:
        return {"overlay": view.painted.name, "level": view.projection.level, "items": len(view),
                "highlight": sorted(map(str, view.highlight))}

    assert ckw["request"] == kw["request"]          # one GraphRequest both ways (issue 34 item 2)
    assert effect(ckw, cli_view) == effect(kw, page_view)
    assert kw["request"].search == "MatMul" and kw["request"].overlay == "FLOPs share" and page_view.highlight


def test_the_graph_detail_hint_draws_the_region_the_page_draws(app, tmp_path, monkeypatch):
    """Detail, a node's neighbourhood at 1 hop coloured by FLOPs share: the page and its hint hand
    ``api.graph_view`` the same ``GraphRequest`` and draw the same region."""
    calls: list = []
    monkeypatch.setattr(api, "graph_view", _recording(calls, api.graph_view))
    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/graph.py").run()
    at.radio(key="graph_mode").set_value("Detail").run()
    at.selectbox(key="graph_detail_overlay").set_value("FLOPs share").run()
    at.slider(key="graph_hops").set_value(1).run()
    assert not at.exception, at.exception
    _args, kw, page_view = calls[-1]
    hint = _hint(at, "onnx-studio graph")
    calls.clear()
    assert _run_hint(hint, tmp_path / "w", {"cnn_unfused.onnx": SAMPLES / "cnn_unfused.onnx"}, monkeypatch) == 0
    (_cargs, ckw, cli_view), = calls
    assert ckw["request"] == kw["request"] and (kw["request"].hops, kw["request"].overlay) == (1, "FLOPs share")
    assert page_view.mode == cli_view.mode == "region" and page_view.title == cli_view.title
    assert [it.ref for it in page_view.items] == [it.ref for it in cli_view.items]
    assert page_view.painted.name == cli_view.painted.name == "FLOPs share"
