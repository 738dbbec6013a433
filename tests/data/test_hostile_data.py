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


# ---------------------------------------------------------------------------- R66: containment by resolved paths

def _project_with_photos(tmp_path, capsys, project: str) -> tuple[Path, str]:
    from studio import api

    photos = _four_photos(tmp_path / "photos")
    rc, out, err = _cli(capsys, "data", "add", str(photos), "--project", project, "--name", "pics")
    assert rc == 0, err
    p = api.open_project(project)
    (row,) = api.project_datasets(p)
    return p.root, row.id


def _victim(folder: Path, dataset: Path) -> Path:
    """A user's folder outside the project: precious.txt beside a copy of the dataset's manifest
    (what the old code then read as the project's data, and deleted)."""
    folder.mkdir()
    (folder / "precious.txt").write_text("irreplaceable")
    (folder / "dataset.json").write_bytes((dataset / "dataset.json").read_bytes())
    return folder


def _set_row_path(root: Path, ds_id: str, path: str) -> None:
    con = sqlite3.connect(root / "catalog.sqlite")
    with con:
        con.execute("UPDATE datasets SET path=? WHERE id=?", (path, ds_id))
    con.close()


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_catalog_row_pointing_outside_is_damaged_and_rm_deletes_nothing_outside(tmp_path, capsys, how):
    root, ds_id = _project_with_photos(tmp_path, capsys, f"r66{how}")
    victim = _victim(root.parent / f"sibling-{how}", root / "data" / ds_id)   # beside the project
    if how == "dotdot":
        _set_row_path(root, ds_id, f"data/../../{victim.name}")
    elif how == "absolute":
        _set_row_path(root, ds_id, str(victim))
    else:                                                     # the row is intact; its folder is a link out
        import shutil
        shutil.rmtree(root / "data" / ds_id)
        (root / "data" / ds_id).symlink_to(victim, target_is_directory=True)
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", f"r66{how}")
    assert rc == 2 and "dataset 'pics' is damaged" in err and "nothing was read" in err
    assert len(err.strip().splitlines()) == 1
    rc, out, err = _cli(capsys, "data", "list", "--project", f"r66{how}")
    assert rc == 0 and "DAMAGED" in out
    rc, out, err = _cli(capsys, "data", "rm", "pics", "--project", f"r66{how}", "--yes")
    assert rc == 0, err
    assert "no file was deleted" in out
    assert (victim / "precious.txt").read_text() == "irreplaceable" and (victim / "dataset.json").exists()
    rc, out, err = _cli(capsys, "data", "list", "--project", f"r66{how}", "--json")
    assert json.loads(out) == []


def test_rm_of_an_intact_dataset_deletes_only_its_own_folder(tmp_path, capsys):
    root, ds_id = _project_with_photos(tmp_path, capsys, "r66ok")
    assert (root / "data" / ds_id / "dataset.json").exists()
    rc, out, err = _cli(capsys, "data", "rm", "pics", "--project", "r66ok", "--yes")
    assert rc == 0 and out.strip() == "removed dataset pics"
    assert not (root / "data" / ds_id).exists() and (root / "catalog.sqlite").exists()


@pytest.mark.parametrize("how", ["dotdot", "symlink"])
def test_a_manifest_sample_pointing_outside_is_refused_before_reading(tmp_path, capsys, how):
    from sample_models.catalog import path_of

    root, ds_id = _project_with_photos(tmp_path, capsys, f"r66m{how}")
    folder = root / "data" / ds_id
    outside = tmp_path / "outside.png"
    Image.fromarray(skimage_data.coffee()).save(outside)
    manifest = json.loads((folder / "dataset.json").read_text())
    if how == "dotdot":
        manifest["samples"][0]["file"] = "../../../../outside.png"
        (folder / "dataset.json").write_text(json.dumps(manifest))
    else:                                       # every sample a link out: whichever one a command reads first
        for ref in manifest["samples"]:
            (folder / ref["file"]).unlink()
            (folder / ref["file"]).symlink_to(outside)
    model = str(path_of("image_classifier"))
    for argv in (["data", "show", "pics", "--model", model], ["data", "eval", "pics", "--model", model, "--part", "all"],
                 ["profile", model, "--dataset", "pics", "--iterations", "1", "--rounds", "1"]):
        rc, out, err = _cli(capsys, *argv, "--project", f"r66m{how}")
        assert rc == 2 and "the dataset is damaged" in err and "points outside the dataset folder" in err, (argv, err)
        assert len(err.strip().splitlines()) == 1


# ---------------------------------------------------------------------------- archives (item 6)

def _assert_refused(capsys, project: str, source: Path, *needles: str) -> str:
    from studio import api

    rc, out, err = _cli(capsys, "data", "add", str(source), "--project", project)
    assert rc == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, err
    p = api.open_project(project)
    assert api.project_datasets(p) == []
    left = [x for x in (p.root / "data").rglob("*")] if (p.root / "data").exists() else []
    assert left == [], left                         # nothing half-unpacked stays in the project
    return err


def test_a_lying_zip_is_one_line(tmp_path, capsys):
    z = tmp_path / "lying.zip"
    z.write_bytes(b"PK\x03\x04" + b"\x00" * 200)
    _assert_refused(capsys, "zip1", z, "corrupt zip archive")


def test_a_crc_error_is_one_line(tmp_path, capsys):
    photos = _four_photos(tmp_path / "photos")
    z = tmp_path / "crc.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
        for p in sorted(photos.iterdir()):
            zf.write(p, p.name)
    blob = bytearray(z.read_bytes())
    info = zipfile.ZipFile(z).infolist()[1]
    blob[info.header_offset + 30 + len(info.filename) + 100] ^= 0xFF      # one byte of the member's data
    z.write_bytes(bytes(blob))
    _assert_refused(capsys, "zip2", z, "is corrupt (CRC error)", info.filename)


def test_a_huge_declared_member_is_refused_before_reading(tmp_path, capsys):
    """A sparse archive's member declares 1 GiB (stored, so its ratio is 1:1): refused by the
    per-member limit from the central directory, before a byte is read or allocated."""
    z = tmp_path / "sparse.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("big.npy", b"\x00" * 64)
    blob = bytearray(z.read_bytes())
    cd = blob.rindex(b"PK\x01\x02")
    blob[cd + 20: cd + 28] = (2**30).to_bytes(4, "little") * 2        # compressed and uncompressed size
    z.write_bytes(bytes(blob))
    _assert_refused(capsys, "zip3", z, "big.npy", "unpacks to 1.0 GiB", "limit of 256 MiB per member")


def test_many_small_members_are_refused_by_the_total_ratio(tmp_path, capsys):
    z = tmp_path / "bomb.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for i in range(300):
            zf.writestr(f"s{i:03d}.npy", b"\x00" * 2**20)             # exactly 1 MiB each: per-member check passes
    assert z.stat().st_size < 0.4e6
    _assert_refused(capsys, "zip4", z, "unpacks to 300 MiB", "over the whole archive", "limit 200:1")


@pytest.mark.parametrize("member", ["../escape.png", "/abs/escape.png", "..\\escape.png", "a\\..\\..\\escape.png",
                                    "C:\\escape.png", "\\escape.png"])
def test_archive_member_paths_that_climb_out_are_refused(tmp_path, capsys, member):
    photos = _four_photos(tmp_path / "photos")
    z = tmp_path / "climb.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.write(photos / "cat.png", "cat.png")
        zf.writestr(member, (photos / "coffee.png").read_bytes())
    _assert_refused(capsys, "zip5", z, "unsafe path")
    assert not list(tmp_path.rglob("escape.png"))
