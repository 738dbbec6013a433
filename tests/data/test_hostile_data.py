"""Hostile dataset inputs (issue 31, R65/R66): code that would run unasked, catalog rows and
manifests that point outside the project, and samples/archives/recipes that would exhaust memory
or crash, each ending in one line naming the item and the limit -- driven through the CLI as a
user would run it."""

from __future__ import annotations

import json
import sqlite3
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from studio.cli import main
from tests.requirements import require_module

skimage_data = require_module("skimage.data")

STRAY = ("import pathlib, sys\n"
         "pathlib.Path({marker!r}).write_text('ran')\n"
         "print('STRAY SCRIPT RAN', file=sys.stderr)\n"
         "def load_data():\n"
         "    import numpy as np\n"
         "    yield {{'x': np.zeros((1, 3, 8, 8), np.float32)}}\n")


def _four_photos(folder: Path) -> Path:
    """Four real photos (scikit-image), as a user's image folder."""
    folder.mkdir(parents=True)
    for name, img in (("cat", skimage_data.chelsea()), ("coffee", skimage_data.coffee()),
                      ("rocket", skimage_data.rocket()), ("astronaut", skimage_data.astronaut())):
        Image.fromarray(img).resize((64, 48)).save(folder / f"{name}.png")
    return folder


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


# ---------------------------------------------------------------------------- R65: code runs only when asked

@pytest.mark.parametrize("stray", ["make_thumbnails.py", "setup.py"])
def test_a_stray_py_in_an_image_folder_never_runs(tmp_path, capsys, stray):
    photos = _four_photos(tmp_path / "photos")
    marker = tmp_path / "MARKER"
    (photos / stray).write_text(STRAY.format(marker=str(marker)))
    rc, out, err = _cli(capsys, "data", "add", str(photos), "--project", "r65", "--name", "pics", "--kind", "auto")
    assert rc == 0, err
    assert not marker.exists() and "STRAY SCRIPT RAN" not in out + err
    assert "pics: 4 image sample(s), 1 skipped" in out
    assert f"skipped    {stray}: ignored: a .py file is never run" in out
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", "r65", "--json")
    data = json.loads(out)
    assert data["kind"] == "image" and len(data["samples"]) == 4
    assert [s["source"] for s in data["skipped"]] == [stray]
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", "r65")
    assert rc == 0 and f"skipped    {stray}: ignored" in out
    assert not marker.exists()


def test_a_stray_py_in_a_zip_never_runs(tmp_path, capsys):
    photos = _four_photos(tmp_path / "photos")
    marker = tmp_path / "MARKER"
    z = tmp_path / "pics.zip"
    with zipfile.ZipFile(z, "w") as zf:
        for p in sorted(photos.iterdir()):
            zf.write(p, p.name)
        zf.writestr("tools/setup.py", STRAY.format(marker=str(marker)))
    rc, out, err = _cli(capsys, "data", "add", str(z), "--project", "r65z")
    assert rc == 0, err
    assert not marker.exists() and "4 image sample(s), 1 skipped" in out and "tools/setup.py: ignored" in out


def test_a_lone_script_needs_kind_script_and_then_runs(tmp_path, capsys):
    marker = tmp_path / "MARKER"
    script = tmp_path / "loader.py"
    script.write_text(STRAY.format(marker=str(marker)))
    rc, out, err = _cli(capsys, "data", "add", str(script), "--project", "r65s")
    assert rc == 2 and not marker.exists()
    assert "'loader.py' is a data-loader script" in err and "--kind script" in err and len(err.strip().splitlines()) == 1
    script.write_text("import numpy as np\ndef load_data():\n    yield {'x': np.zeros((1, 3, 8, 8), np.float32)}\n")
    rc, out, err = _cli(capsys, "data", "add", str(script), "--project", "r65s", "--kind", "script")
    assert rc == 0, err
    assert "executing the data-loader script" in err and "1 script sample(s)" in out


def test_data_add_help_says_a_loader_script_is_executed(capsys):
    with pytest.raises(SystemExit):
        main(["data", "add", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "EXECUTED AS YOU" in text and "--kind auto never runs anything" in text


def test_data_page_runs_a_script_only_on_the_explicit_choice_with_a_warning(app):
    from tests.conftest import open_sample

    at = app().run()
    open_sample(at, "image_classifier")
    at.switch_page("views/data.py").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="data_kind").value == "auto" and not at.warning
    at.selectbox(key="data_kind").set_value("script").run()
    assert not at.exception, at.exception
    assert any("will be executed as the studio's user" in w.value for w in at.warning)
