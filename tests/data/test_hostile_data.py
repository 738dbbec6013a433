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


# ---------------------------------------------------------------------------- samples bounded before use (item 6)

def _model(path: Path, *, dtype=None, shape=("N", 4), text: bool = False, image_hw=None) -> Path:
    """A tiny model: float x[N,4] -> Relu; text: int64 input_ids[1,seq] -> Cast float; image: x[1,3,H,W]."""
    import onnx
    from onnx import TensorProto, helper

    if text:
        nodes = [helper.make_node("Cast", ["input_ids"], ["y"], to=TensorProto.FLOAT)]
        ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, "seq"])]
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seq"])]
    elif image_hw is not None:
        elem = dtype or TensorProto.FLOAT
        nodes = [helper.make_node("ReduceMean", ["x"], ["y"], keepdims=0, axes=[2, 3])]
        ins = [helper.make_tensor_value_info("x", elem, [1, 3, *image_hw])]
        outs = [helper.make_tensor_value_info("y", elem, [1, 3])]
    else:
        nodes = [helper.make_node("Relu", ["x"], ["y"])]
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))]
        outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, outs), opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(m, path)
    return path


def _npy_header_only(path: Path, shape: tuple, descr: str = "<f4", data: bytes = b"\0" * 16) -> bytes:
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    blob = buf.getvalue() + data
    if path is not None:
        path.write_bytes(blob)
    return blob


def _hostile_npy(kind: str, path: Path) -> None:
    if kind == "object":
        np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    elif kind == "string":
        np.save(path, np.array([["a", "b", "c", "d"]]))
    elif kind == "complex":
        np.save(path, np.ones((1, 4), np.complex64))
    elif kind == "truncated":
        np.save(path, np.ones((64, 4), np.float32))
        path.write_bytes(path.read_bytes()[:-100])
    elif kind == "4TiB":
        _npy_header_only(path, (2**38, 4))                       # 2^40 float32 = 4 TiB claimed, 16 bytes held
    elif kind == "8GiB-npz":
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.npy", _npy_header_only(None, (2**29, 4)))   # 8 GiB claimed
    else:
        raise AssertionError(kind)


NPY_CASES = {  # kind: (file name, what the one line must say)
    "object": ("s.npy", "holds Python objects (a pickle)"),
    "string": ("s.npy", "holds strings (<U1)"),
    "truncated": ("s.npy", "is truncated: its header declares 1 KiB of data"),
    "4TiB": ("s.npy", "declares shape [274877906944, 4] float32 = 4 TiB, over the 2 GiB memory limit"),
    "8GiB-npz": ("s.npz", "declares shape [536870912, 4] float32 = 8 GiB, over the 2 GiB memory limit"),
}


@pytest.mark.parametrize("kind", sorted(NPY_CASES))
def test_hostile_tensor_files_are_refused_at_add_in_one_line(tmp_path, capsys, kind):
    name, needle = NPY_CASES[kind]
    src = tmp_path / "t"
    src.mkdir()
    _hostile_npy(kind, src / name)
    rc, out, err = _cli(capsys, "data", "add", str(src), "--project", f"np{kind}", "--kind", "tensor")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "no usable samples" in err and needle in err, err


FEED_COMMANDS = (("data", "show", "d", "--model", "{m}"), ("data", "eval", "d", "--model", "{m}", "--part", "all"),
                 ("profile", "{m}", "--dataset", "d", "--iterations", "1", "--rounds", "1"))


def _feed_refused(capsys, project: str, model: Path, *needles: str) -> None:
    for argv in FEED_COMMANDS:
        rc, out, err = _cli(capsys, *(a.format(m=model) for a in argv), "--project", project)
        assert rc == 2, (argv, out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, (argv, err)
        for n in needles:
            assert n in err, (argv, err)


@pytest.mark.parametrize("kind", sorted(NPY_CASES) + ["complex"])
def test_hostile_tensor_samples_are_refused_on_show_eval_and_profile(tmp_path, capsys, kind):
    """A dataset whose sample files were replaced after import (an older studio's, or damaged):
    each use ends in one line naming the sample, the problem and the limit, before allocation."""
    from studio import api

    name, needle = NPY_CASES.get(kind, ("s.npy", "input 'x' needs float32, the sample gives complex complex64; "
                                                 "refusing rather than dropping the imaginary part"))
    src = tmp_path / "t"
    src.mkdir()
    good = {"x": np.ones((1, 4), np.float32)}
    np.savez(src / "s.npz", **good) if name.endswith(".npz") else np.save(src / "s.npy", good["x"])
    project = f"feed{kind}"
    rc, out, err = _cli(capsys, "data", "add", str(src), "--project", project, "--name", "d")
    assert rc == 0, err
    ds = api.dataset(api.open_project(project), "d")
    _hostile_npy(kind, ds.folder / ds.samples[0].file)
    model = _model(tmp_path / "m.onnx")
    _feed_refused(capsys, project, model, "dataset d, sample 0", needle)


def test_a_complex_sample_is_refused_not_cast(tmp_path):
    """The mechanism: a complex .npy for a float input is refused (the old code cast it to its real part)."""
    from studio.core.errors import StudioError
    from studio.data.datasets import dataset_feeds, import_dataset
    import onnx

    src = tmp_path / "t"
    src.mkdir()
    np.save(src / "c.npy", np.array([[1 + 2j, 3, 4, 5]], np.complex64))
    ds = import_dataset(src, tmp_path / "data")
    assert len(ds) == 1                                      # numbers: imported, judged against the input when fed
    with pytest.raises(StudioError, match="complex complex64; refusing"):
        dataset_feeds(ds, onnx.load(_model(tmp_path / "m.onnx")), part="all")


@pytest.mark.parametrize("case", ["nested", "ragged", "strings", "beyond-int64"])
def test_hostile_jsonl_samples_are_refused_in_one_line(tmp_path, capsys, case):
    from studio import api

    src = tmp_path / "j"
    src.mkdir()
    (src / "ids.jsonl").write_text(json.dumps({"input_ids": [[1, 2, 3]]}) + "\n")
    project = f"jsonl{case}"
    rc, out, err = _cli(capsys, "data", "add", str(src), "--project", project, "--name", "d")
    assert rc == 0, err
    line, needle = {
        "nested": ('{"input_ids": ' + "[" * 5000 + "]" * 5000 + "}", "JSON nested 5001 levels deep, over the limit of 32"),
        "ragged": ('{"input_ids": [[1, 2], [3]]}', "input 'input_ids' is ragged"),
        "strings": ('{"input_ids": [["a", "b"]]}', "input 'input_ids' holds strings"),
        "beyond-int64": ('{"input_ids": [[1, 100000000000000000000000]]}', "beyond 64-bit integers"),
    }[case]
    ds = api.dataset(api.open_project(project), "d")
    (ds.folder / ds.samples[0].file).write_text(line + "\n")
    _feed_refused(capsys, project, _model(tmp_path / "m.onnx", text=True), "dataset d, sample 0", needle)
    if case == "nested":                                     # and at import: listed as skipped with the limit
        (src / "ids.jsonl").write_text(line + "\n" + json.dumps({"input_ids": [[4, 5]]}) + "\n")
        rc, out, err = _cli(capsys, "data", "add", str(src), "--project", project, "--name", "d2")
        assert rc == 0 and "1 text sample(s), 1 skipped" in out and "ids.jsonl:1: JSON nested 5001 levels" in out


# ---------------------------------------------------------------------------- recipes and image sizes (item 6)

@pytest.mark.parametrize("flag,value,needle", [("--std", "1e-320", "std 1e-320 is 0 in float32"),
                                               ("--scale", "1e38", "the recipe overflows float32"),
                                               # inf in float32: every pixel / inf = 0 (was accepted)
                                               ("--std", "1e39", "std 1e+39 is beyond float32's range")])
def test_a_recipe_that_would_feed_inf_is_refused_at_save(tmp_path, capsys, flag, value, needle):
    root, ds_id = _project_with_photos(tmp_path, capsys, f"rec{flag[2:]}")
    manifest = (root / "data" / ds_id / "dataset.json").read_bytes()
    rc, out, err = _cli(capsys, "data", "recipe", "pics", "--project", f"rec{flag[2:]}", flag, value)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1
    assert (root / "data" / ds_id / "dataset.json").read_bytes() == manifest


def test_a_recipe_that_overflows_a_float16_input_is_refused_when_fed(tmp_path, capsys):
    """std 0.001 keeps float32 finite (255000) but not float16 (max 65504): refused against the model's input."""
    from onnx import TensorProto

    root, ds_id = _project_with_photos(tmp_path, capsys, "rec16")
    rc, out, err = _cli(capsys, "data", "recipe", "pics", "--project", "rec16", "--scale", "1", "--std", "0.001")
    assert rc == 0, err
    fp16 = _model(tmp_path / "fp16.onnx", dtype=TensorProto.FLOAT16, image_hw=(32, 32))
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", "rec16", "--model", str(fp16))
    assert rc == 2 and "input 'x' (float16): the recipe overflows float16" in err


def test_an_image_size_beyond_the_memory_budget_is_refused_before_allocating(tmp_path, capsys):
    root, ds_id = _project_with_photos(tmp_path, capsys, "img16k")
    dyn = _model(tmp_path / "dyn.onnx", image_hw=("H", "W"))
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", "img16k", "--model", str(dyn),
                        "--image-size", "16384x16384")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "image size 16384x16384 needs about 12.8 GiB to preprocess one sample (3 channels, float32), over " \
           "the 2 GiB memory budget" in err
    rc, out, err = _cli(capsys, "data", "show", "pics", "--project", "img16k", "--model", str(dyn),
                        "--image-size", "48x64")
    assert rc == 0 and "float32[1, 3, 48, 64]" in out


def test_data_add_never_writes_through_a_data_folder_linked_out(tmp_path, capsys):
    import shutil

    root, ds_id = _project_with_photos(tmp_path, capsys, "r66add")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.rmtree(root / "data")
    (root / "data").symlink_to(outside, target_is_directory=True)
    rc, out, err = _cli(capsys, "data", "add", str(tmp_path / "photos"), "--project", "r66add", "--name", "again")
    assert rc == 2 and "data folder is a link out of the project" in err
    assert list(outside.iterdir()) == []


def test_a_single_file_named_through_a_link_is_copied_not_linked(tmp_path, capsys):
    """The user names a link to their .npy: its content is copied in, so the dataset holds no link out."""
    from studio import api

    real = tmp_path / "real.npy"
    np.save(real, np.ones((1, 4), np.float32))
    link = tmp_path / "link.npy"
    link.symlink_to(real)
    rc, out, err = _cli(capsys, "data", "add", str(link), "--project", "lnk", "--name", "d")
    assert rc == 0, err
    ds = api.dataset(api.open_project("lnk"), "d")
    stored = ds.folder / ds.samples[0].file
    assert not stored.is_symlink() and np.load(stored).tolist() == [[1, 1, 1, 1]]
    rc, out, err = _cli(capsys, "data", "show", "d", "--project", "lnk", "--model", str(_model(tmp_path / "m.onnx")))
    assert rc == 0 and "float32[1, 4]" in out, err


@pytest.mark.parametrize("kind,needle", [("object", "holds Python objects (a pickle)"),
                                         ("8GiB", "float32 = 8 GiB, over the"),
                                         ("crc", "is not a readable .npz (a CRC error in array 'x')")])
def test_an_inputs_npz_is_read_header_first_too(tmp_path, capsys, kind, needle):
    """--inputs goes through the same reader (feeds.load_npz -> tensor_safety.load_npz)."""
    model = _model(tmp_path / "m.onnx")
    f = tmp_path / "in.npz"
    if kind == "object":
        np.savez(f, x=np.array([{"a": 1}], dtype=object))
    elif kind == "8GiB":
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("x.npy", _npy_header_only(None, (2**29, 4)))
    else:
        np.savez(f, x=np.arange(4096, dtype=np.float32).reshape(1024, 4))
        blob = bytearray(f.read_bytes())
        blob[200] ^= 0xFF                                   # inside the stored member's data
        f.write_bytes(bytes(blob))
    rc, out, err = _cli(capsys, "profile", str(model), "--inputs", str(f), "--iterations", "1", "--rounds", "1")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and needle in err, err
