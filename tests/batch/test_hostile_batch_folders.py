"""Issue 31 items 9 and the batch-folder cases: reports a spreadsheet opens as text, a batch that never
reads its own output folder, and folders holding FIFOs, links out of the folder and 10,000 empty files.

Oracles: Python's ``csv`` module reads the CSV back (every cell that a spreadsheet would run as a formula
starts with ``'``, and the rest of the cell is the name as it is on disk); the number of models a run finds
is counted from the files the test made; the FIFO is never opened (opening it would block: the run ends).
A worker killed mid-task is tests/batch/test_lost_dask_worker.py (R53)."""

from __future__ import annotations

import csv
import html
import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sample_models.catalog import path_of
from studio.batch import facade as batch_api
from studio.batch.runner import discover
from studio.cli import main
from studio.core.fmt import FORMULA_STARTS, spreadsheet_safe
from tests.conftest import ROOT, sha256_file

HANG_GUARD_S = 300          # only guards a hang (a FIFO opened would block for ever); never a timing assert

HOSTILE_NAMES = ["+cmd;calc.onnx", "@SUM(1+1).onnx", "=HYPERLINK(x).onnx", "-2+3.onnx"]


def _hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "models"
    folder.mkdir()
    for i, name in enumerate(HOSTILE_NAMES):
        src = [path_of("cnn_unfused"), path_of("if_loop"), path_of("mobilenet_like"), path_of("constant_weights")][i]
        shutil.copyfile(src, folder / name)
    return folder


def test_spreadsheet_safe_follows_the_owasp_rule():
    for start in ("=", "+", "-", "@", "\t", "\r"):
        assert spreadsheet_safe(f"{start}1+1") == f"'{start}1+1"
    assert spreadsheet_safe("model.onnx") == "model.onnx"
    assert spreadsheet_safe(-1.5) == -1.5 and spreadsheet_safe(3) == 3        # numbers stay numbers
    assert FORMULA_STARTS == ("=", "+", "-", "@", "\t", "\r")


def test_batch_csv_cells_never_start_a_formula_and_html_escapes_names(tmp_path):
    folder = _hostile_folder(tmp_path)
    (folder / "<img src=x onerror=alert(1)>.onnx").write_bytes(path_of("gridsample_4d").read_bytes())
    r = batch_api.batch([folder], tmp_path / "out", stages=["inspect"], workers=1)
    assert len(r.rows) == len(HOSTILE_NAMES) + 1
    rows = list(csv.reader(io.StringIO((tmp_path / "out" / "batch.csv").read_text(encoding="utf-8"), newline="")))
    header, body = rows[0], rows[1:]
    cells = [c for row in rows for c in row]
    assert not [c for c in cells if c.startswith(FORMULA_STARTS)], cells
    models = {row[header.index("model")] for row in body}
    assert {f"'{n}" for n in HOSTILE_NAMES} <= models, models          # neutralized, and otherwise unchanged
    assert "<img src=x onerror=alert(1)>.onnx" in models                 # a name that starts with no formula char
    page = (tmp_path / "out" / "batch.html").read_text(encoding="utf-8")
    assert "<img src=x" not in page
    assert html.escape("<img src=x onerror=alert(1)>.onnx") in page


def test_a_batch_never_reads_its_own_output_folder(tmp_path, capsys):
    """-o inside the scanned folder: each run's optimized.onnx artifacts were inputs of the next run (1, 2, 2)."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copyfile(path_of("cnn_unfused"), folder / "cnn_unfused.onnx")
    counts, errs = [], []
    for _ in range(3):
        rc = main(["batch", str(folder), "-o", str(folder / "out"), "--stages", "optimize", "--workers", "1"])
        got = capsys.readouterr()
        assert rc == 0, got.err[-500:]
        counts.append(int(got.out.strip().splitlines()[-1].split(" model(s)")[0]))
        errs.append(got.err)
    assert list((folder / "out").rglob("optimized*.onnx")), "the optimize stage wrote its model into -o"
    assert counts == [1, 1, 1]
    assert all("the batch's own output folder: 1" in e for e in errs[1:]), errs
    assert [m.path.name for m in discover([folder], folder / "out").models] == ["cnn_unfused.onnx"]


def test_fifos_links_out_and_empty_files_are_passed_over_in_one_line(tmp_path):
    folder = tmp_path / "models"
    (folder / "sub").mkdir(parents=True)
    shutil.copyfile(path_of("cnn_unfused"), folder / "real.onnx")
    os.mkfifo(folder / "pipe.onnx")
    os.mkfifo(folder / "sub" / "deeper.onnx")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copyfile(path_of("if_loop"), outside / "secret.onnx")
    os.symlink(outside / "secret.onnx", folder / "link_out.onnx")
    os.symlink(outside, folder / "dir_link")
    (folder / "empty.onnx").touch()
    before = sha256_file(outside / "secret.onnx")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "studio", "batch", "models", "-o", "out", "--stages", "inspect",
                           "--workers", "1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr
    assert "real.onnx" in proc.stdout and "secret.onnx" not in proc.stdout and "pipe.onnx" not in proc.stdout
    summary = [ln for ln in proc.stderr.splitlines() if ln.startswith("skipped ")]
    assert len(summary) == 1, proc.stderr
    line = summary[0]
    assert "skipped 5 item(s)" in line
    assert "FIFO, not a regular file: 2 (pipe.onnx, deeper.onnx)" in line or \
        "FIFO, not a regular file: 2 (deeper.onnx, pipe.onnx)" in line, line
    assert "link out of the folder, not followed: 2" in line and "empty file: 1 (empty.onnx)" in line, line
    assert sha256_file(outside / "secret.onnx") == before


@pytest.mark.slow
def test_ten_thousand_empty_files_are_one_summary_line(tmp_path):
    """10,000 empty *.onnx files beside one model: the model runs, the rest is one line (they were 10,000
    failing rows, past the 5,000-model limit: the batch refused to start)."""
    folder = tmp_path / "models"
    folder.mkdir()
    for i in range(10_000):
        (folder / f"e{i:05d}.onnx").touch()
    shutil.copyfile(path_of("cnn_unfused"), folder / "zz_real.onnx")
    found = discover([folder])
    assert [m.path.name for m in found.models] == ["zz_real.onnx"]
    assert len(found.skipped) == 10_000 and {r for _, r in found.skipped} == {"empty file"}
    line = batch_api.skipped_summary(found.skipped)
    assert "\n" not in line and line.startswith("skipped 10000 item(s): empty file: 10000 (") and "+9997 more" in line
    r = batch_api.batch([folder], tmp_path / "out", stages=["inspect"], workers=1)
    assert [row.model.name for row in r.rows] == ["zz_real.onnx"] and r.ok
    assert len(r.passed_over) == 10_000
