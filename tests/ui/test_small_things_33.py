"""Issue 33's small things, each against its own oracle: the Precision plot draws the target chosen,
the decoder card shows its branch input without backslashes, a page never tells its user to "raise
--timeout", task-metric rows are rounded and name no worst samples of a perfect score, the reorder
what-if speaks in MiB."""

from __future__ import annotations

from pathlib import Path

import pytest

from studio import api
from studio.charts.precision import tradeoff_figure
from studio.precision.report import PrecisionReport, VariantResult
from studio.ui import widgets
from tests.conftest import SAMPLES


def _report(target: str | None) -> PrecisionReport:
    fp32 = VariantResult("fp32", "fp32", "onnxruntime", "fp32", "ok", latency_p10_ms=2.0, ratio=1.0, cosine=1.0,
                         task={"target_value": 1.0})
    int8 = VariantResult("int8", "int8", "onnxruntime", "int8", "ok", latency_p10_ms=1.0, ratio=0.5, cosine=0.97,
                         task={"target_value": 0.96})
    return PrecisionReport((fp32, int8), None, {}, 0.99, "random", {}, "classifier", None, target=target)


def test_precision_plot_draws_the_target_chosen():
    fig = tradeoff_figure(_report("top1-agreement>=0.95"))
    (line,) = [s for s in fig.layout.shapes if s.y0 == s.y1]
    assert line.y0 == 0.95                                             # not the 0.99 cosine default
    texts = [a.text for a in fig.layout.annotations]
    assert "target top1-agreement>=0.95" in texts and not any("cosine" in t for t in texts)
    assert [list(t.y) for t in fig.data] == [[1.0, 0.96]]             # each variant at its task metric
    assert fig.layout.yaxis.title.text.startswith("top1-agreement")
    fig = tradeoff_figure(_report(None))                               # without one: the cosine target
    assert [s.y0 for s in fig.layout.shapes if s.y0 == s.y1] == [0.99]
    assert "target cosine 0.99" in [a.text for a in fig.layout.annotations]


def test_no_cli_only_advice_on_a_page():
    said = "litert: check timed out after 120 s (model 4.0 MiB); raise --timeout or simplify the model"
    shown = widgets.for_page(said)
    assert "raise --timeout" not in shown and "--timeout SECONDS" in shown and "simplify the model" in shown


def test_task_metric_rows_are_rounded_and_name_no_worst_sample_of_a_perfect_score():
    outputs = [{"output": "logits", "task": "classification", "metrics": [
        {"metric": "top1-agreement", "value": 1.0, "worst_samples": [0, 1, 2, 3, 4], "detail": ""},
        {"metric": "cosine", "value": 0.9999999999999988, "worst_samples": [3, 1], "detail": ""},
        {"metric": "top1-agreement", "value": 0.75, "worst_samples": [2, 0, 5], "detail": ""},
        {"metric": "top1-agreement", "value": None, "worst_samples": [], "detail": "no labels"}]}]
    rows = widgets.task_metric_rows(outputs)
    assert [r["value"] for r in rows] == ["1", "1", "0.75", "n/a"]
    assert [r["worst samples"] for r in rows] == ["", "", "2, 0, 5", ""]


def test_decoder_card_branch_input_has_no_backslashes(app):
    at = app(str(SAMPLES / "gpt2_decoder_merged.onnx")).run()
    assert not at.exception, at.exception
    card = [c.value for c in at.caption if "branch input `" in c.value]
    assert card and "`use_cache_branch`" in card[0] and "\\_" not in card[0]


@pytest.mark.slow
def test_reorder_what_if_speaks_in_mib(tmp_path):
    """The reorder pass's note (shown by the Overview's what-if) says MiB, not '78643200 bytes'."""
    from studio.core.requests import MemoryRequest

    what_if = api.memory_reorder(api.load(SAMPLES / "mobilenet_like.onnx"), MemoryRequest(measure=False),
                                 Path(tmp_path, "r.onnx"))
    said = " ".join([*what_if.notes, what_if.verification])
    assert not any(w.isdigit() and len(w) >= 6 for w in said.replace(",", " ").split()), said
    from studio.core.fmt import human_bytes

    assert f"peaks at {human_bytes(what_if.before.peak_bytes)}" in said      # e.g. 144.0 KiB, was 147456 bytes


def test_data_page_takes_loose_images_as_they_are():
    """Loose .png/.jpg picks (no zip first) become one image dataset with every picked file, two of the
    same name included; a zip or .npz goes to the import as it is."""
    from studio.ui.views.data import LOOSE, _one_upload

    class Picked:                                  # what Streamlit's uploader hands the page
        def __init__(self, path: Path, name: str | None = None) -> None:
            self.name, self._data = name or path.name, path.read_bytes()

        def getvalue(self) -> bytes:
            return self._data

    assert {"jpg", "jpeg", "png"} <= set(LOOSE)
    folders = sorted(d for d in Path(api.sample_photos_folder()).iterdir() if d.is_dir())
    picks = [Picked(sorted(d.iterdir())[0]) for d in folders]          # 0.png of each subject: one name
    assert len({p.name for p in picks}) == 1 and len(picks) == 4
    up = _one_upload(picks)
    p = api.create_project("loose")
    ds = api.add_dataset_upload(p, up.name, up.data)
    assert ds.kind == "image" and len(ds.calibration) + len(ds.evaluation) == 4
    zipped = _one_upload([type("Z", (), {"name": "x.zip", "getvalue": lambda self: b"PK"})()])
    assert (zipped.name, zipped.data) == ("x.zip", b"PK")


def test_tables_with_mixed_columns_reach_arrow_as_text():
    """The one table helper: a column mixing numbers and text (a metric's value or "n/a", an attribute's
    int or list) is text before Arrow sees it; pyarrow itself refuses the raw frame (the oracle)."""
    import pandas as pd
    import pyarrow as pa

    raw = pd.DataFrame({"value": [0.5, "n/a", 3], "attr": [[1, 1], 2, None], "name": ["a", "b", "c"],
                        "n": [1, 2, 3]})
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError)):
        pa.Table.from_pandas(raw)
    safe = widgets.arrow_safe(raw)
    table = pa.Table.from_pandas(safe)
    assert table.column("value").to_pylist() == ["0.5", "n/a", "3"]
    assert table.column("attr").to_pylist() == ["[1, 1]", "2", ""]
    assert safe["n"].tolist() == [1, 2, 3] and safe is not raw and raw["value"].tolist() == [0.5, "n/a", 3]


def test_every_page_table_goes_through_the_helper():
    from tests.conftest import ROOT

    found = [f"{p.name}:{i}" for p in (ROOT / "studio" / "ui").rglob("*.py") if p.name != "widgets.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if ".dataframe(" in line
             and "widgets.dataframe(" not in line]
    assert not found, found


def test_precision_cli_hint_has_the_budget_the_page_runs_with(app):
    """The Equivalent CLI command says --budget when the page's budget is not the default, and the real
    CLI parser reads the same budget back."""
    import shlex

    from studio.cli import build_parser

    at = app(str(SAMPLES / "cnn_unfused.onnx")).run()
    at.switch_page("views/precision.py").run()
    at.number_input(key="precision_budget").set_value(7).run()
    (hint,) = [c.value for c in at.code if c.value.startswith("onnx-studio precision")]
    args = build_parser().parse_args(shlex.split(hint)[1:])
    assert args.budget == 7.0 and "--budget 7" in hint
