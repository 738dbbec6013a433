"""RELIABILITY R34 for every command that writes: a full disk (a small tmpfs, filled), a read-only
mount, a file-size limit (``ulimit -f``: RLIMIT_FSIZE with SIGXFSZ ignored, as a shell sets it) and
permission denied (EACCES even for root: a Landlock domain that leaves the destination unwritable)
each give one clean line that names the destination as the user typed it and says nothing was
written (or, for a resumable batch, what was kept), a non-zero exit, and nothing left at the
destination. An exit of 0 with nothing saved is a failure (``precision --out`` used to do that).

Full disk and read-only run the CLI in-process; the file-size limit and Landlock need their own process:
a child forked from a preloaded server (tests/forked_cli.py), not a cold interpreter each (48 runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.cli import main
from tests.conftest import ROOT, assert_user_message, sha256_file
from tests.forked_cli import file_size_limit, run_forked, writable_only

pytestmark = pytest.mark.slow
HANG_GUARD_S = 600


def _model(n: int) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n)).astype("float32"), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


# name -> (argv with {D} for the destination folder, RLIMIT_FSIZE bytes that the output exceeds,
#          the destination as the message must name it)
WRITERS: dict[str, tuple[list[str], int, str]] = {
    "optimize -o": (["optimize", "m.onnx", "-o", "{D}/o.onnx"], 100_000, "{D}/o.onnx"),
    "optimize -o --no-verify": (["optimize", "m.onnx", "-o", "{D}/o.onnx", "--no-verify"], 100_000, "{D}/o.onnx"),
    "merge-decoders -o": (["merge-decoders", "gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx", "-o",
                           "{D}/merged.onnx"], 100_000, "{D}/merged.onnx"),
    "optimize --report": (["optimize", "small.onnx", "-o", "o-small.onnx", "--report", "{D}/r.json"], 3_000,
                          "{D}/r.json"),
    "check --fix --output": (["check", "m.onnx", "--engines", "onnxruntime", "--fix", "fold-constants", "--output",
                              "{D}/f.onnx"], 100_000, "{D}/f.onnx"),
    "plugin -o": (["plugin", "foo.onnx", "--op", "my.dom::Foo", "--dim", "N=2", "--target", "ort-python", "-o",
                   "{D}/plug", "--no-run"], 3_000, "{D}/plug"),
    "precision --out": (["precision", "m.onnx", "--variants", "fp32,fp16", "--budget", "1", "--out", "{D}/var"],
                        100_000, "{D}/var"),
    "precision --chart": (["precision", "small.onnx", "--variants", "fp32,fp16", "--budget", "1", "--chart",
                           "{D}/c.html"], 1_000_000, "{D}/c.html"),
    "export -o": (["export", "m.onnx", "--target", "ort", "-o", "{D}/exp"], 100_000, "{D}/exp"),
    "graph -o": (["graph", "m.onnx", "-o", "{D}/g.html"], 100_000, "{D}/g.html"),
    "compare --chart": (["compare", "small.onnx", "small.onnx", "--layerwise", "--chart", "{D}/c.html"], 1_000_000,
                        "{D}/c.html"),
    "profile --trace": (["profile", "small.onnx", "--iterations", "2", "--warmup", "1", "--trace", "{D}/t.json"],
                        3_000, "{D}/t.json"),
    "profile --out-dir": (["profile", "small.onnx", "--iterations", "2", "--warmup", "1", "--out-dir", "{D}/p"],
                          3_000, "{D}/p"),
    "projects export -o": (["projects", "export", "zipped", "-o", "{D}/p.zip"], 150_000, "{D}/p.zip"),
    "batch -o": (["batch", "small.onnx", "-o", "{D}/b", "--workers", "1"], 3_000, "{D}/b"),
    "projects create (root)": (["--projects-root", "{D}/pr", "projects", "create", "x"], 3_000, ""),
    "check --project (root)": (["--projects-root", "{D}/pr", "check", "small.onnx", "--engines", "onnxruntime",
                                "--project", "p"], 3_000, ""),
    "projects import (root)": (["--projects-root", "{D}/pr", "projects", "import", "pz.zip"], 3_000, ""),
    # commands added since round 2 (issue 31 item 10)
    "edit -o": (["edit", "m.onnx", "--script", "rename.json", "-o", "{D}/e.onnx"], 100_000, "{D}/e.onnx"),
    "edit merge -o": (["edit", "m.onnx", "--script", "merge.json", "-o", "{D}/mg.onnx"], 100_000, "{D}/mg.onnx"),
    "memory --reorder -o": (["memory", "m.onnx", "--reorder", "-o", "{D}/r.onnx"], 100_000, "{D}/r.onnx"),
    "profile --generate --out-dir": (["profile", "gpt2_decoder_merged.onnx", "--generate", "--prompt-lengths", "4",
                                      "--new-tokens", "2", "--generations", "1", "--no-generation-memory",
                                      "--out-dir", "{D}/g"], 1_000, "{D}/g"),
    "data add (root)": (["--projects-root", "{D}/pr", "data", "add", "photos", "--project", "p", "--name", "d"],
                        3_000, ""),
    "batch --stages optimize -o": (["batch", "m.onnx", "-o", "{D}/b", "--stages", "optimize", "--workers", "1"],
                                   3_000, "{D}/b"),
}
INPUTS = ("m.onnx", "small.onnx", "foo.onnx", "pz.zip", "gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx",
          "gpt2_decoder_merged.onnx", "other.onnx", "rename.json", "merge.json")


def _other(n: int) -> onnx.ModelProto:
    """A model that can follow ``_model(n)`` in an edit script's merge (y -> x2 -> z)."""
    g = helper.make_graph([helper.make_node("Relu", ["x2"], ["z"])], "g2",
                          [helper.make_tensor_value_info("x2", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, n])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture(scope="module")
def _inputs(tmp_path_factory, module_projects_root):
    """The inputs every writer reads and the projects root holding project 'zipped', made once per module: a
    project's creation and export fsync their files (~0.3 s a test on this disk, 96 tests); each test gets a copy."""
    from tests.plugins.plugin_models import custom_op_model

    folder = tmp_path_factory.mktemp("inputs")
    onnx.save(_model(256), folder / "m.onnx")                   # 256 KiB of weights
    onnx.save(_model(16), folder / "small.onnx")
    onnx.save(custom_op_model(), folder / "foo.onnx")
    for decoder in ("gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx", "gpt2_decoder_merged.onnx"):
        (folder / decoder).write_bytes((ROOT / "sample_models" / decoder).read_bytes())
    onnx.save(_other(256), folder / "other.onnx")
    (folder / "rename.json").write_text(json.dumps([{"op": "rename", "tensors": {"h": "hidden"}}]))
    (folder / "merge.json").write_text(json.dumps([{"op": "merge", "model": "other.onnx", "io_map": [["y", "x2"]],
                                                    "position": "after"}]))
    (folder / "photos").mkdir()
    for cls in ("astronaut", "chelsea", "coffee", "rocket"):               # data add's images
        (folder / "photos" / f"{cls}.png").write_bytes((ROOT / "sample_models" / "photos" / cls / "0.png")
                                                       .read_bytes())
    p = api.create_project("zipped")
    api.add_model(p, folder / "m.onnx")
    api.export_project(p, folder / "pz.zip")
    return folder, module_projects_root


@pytest.fixture
def work(_inputs, tmp_path, monkeypatch):
    """The inputs every writer reads, in the current folder (paths are typed as a user would), and project
    'zipped' in the test's own projects root: copies of the module's (:func:`_inputs`)."""
    import shutil

    folder, projects = _inputs
    shutil.copytree(folder, tmp_path, dirs_exist_ok=True)
    shutil.copytree(projects, os.environ["ONNX_STUDIO_PROJECTS_ROOT"], dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _mount(mnt: Path, *options: str) -> None:
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(("size=64k", *options)), "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {proc.stderr.strip()[:200]}")


@pytest.fixture(params=["full", "read-only"])
def mounted(request, work):
    """``mnt``: a 64 KiB tmpfs, filled to the last byte or read-only."""
    mnt = work / "mnt"
    mnt.mkdir()
    _mount(mnt)
    try:
        if request.param == "full":
            fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(fd, b"\0" * 4096)
            except OSError:
                pass
            finally:
                os.close(fd)
        else:
            proc = subprocess.run(["mount", "-o", "remount,ro", str(mnt)], capture_output=True, text=True)
            if proc.returncode != 0:
                pytest.skip(f"remounting read-only is not permitted here: {proc.stderr.strip()[:200]}")
        yield request.param, mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _check_message(line: str, name: str, dest: str, condition: str) -> None:
    assert_user_message(line)
    assert line.startswith("error: "), line
    reason = {"full": ("no space left", "disk is full", "disk i/o error"),
              "read-only": ("read-only",),
              "fsize": ("file-size limit", "disk i/o error")}[condition]      # SQLite's words for EFBIG
    low = line.lower()
    assert any(r in low for r in reason), line
    advice = {"full": ("free some space",), "read-only": ("writable",),
              "fsize": ("ulimit -f unlimited", "free some space", "raise the limit")}[condition]   # what to do
    assert any(a in low for a in advice), line
    if dest:
        assert dest in line, line
    if name.startswith("batch") and "kept in" in line:
        assert "run the same command again" in line
    elif name == "optimize --report":             # a side output: the model was saved first, and it says so
        assert "the model (o-small.onnx) was written" in line and f"'{dest}' was not" in line, line
    elif name == "profile --trace" and condition == "fsize" and "no per-op trace" in line:
        assert "nothing was written" in line       # ORT itself could not write its profile under the limit
    else:
        assert "nothing was written" in line, line


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_full_or_read_only_destination_is_one_clean_line(mounted, capsys, name):
    condition, mnt = mounted
    argv, _limit, dest = WRITERS[name]
    before = {p.name: sha256_file(p) for p in Path.cwd().glob("*.onnx")}
    rc = main([a.replace("{D}", "mnt") for a in argv])
    err = capsys.readouterr().err
    assert rc != 0, f"{name} exited 0 on a {condition} disk: {err[-500:]}"
    assert "Traceback" not in err
    _check_message(err.strip().splitlines()[-1], name, dest.replace("{D}", "mnt"), condition)
    # Nothing at the destination: no file (an empty folder the run made, e.g. a projects root, holds nothing).
    left = sorted(p.relative_to(mnt).as_posix() for p in mnt.rglob("*") if not p.is_dir())
    assert left == (["filler"] if condition == "full" else []), left
    assert {n: sha256_file(Path(n)) for n in before} == before                 # the inputs untouched


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_file_size_limit_is_one_clean_line(work, name):
    argv, limit, dest = WRITERS[name]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = run_forked([a.replace("{D}", "out") for a in argv], cwd=work, env=env, timeout=HANG_GUARD_S,
                   preexec=file_size_limit(limit))
    assert proc.returncode not in (0, -signal.SIGXFSZ), (proc.returncode, proc.stderr[-800:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    _check_message(proc.stderr.strip().splitlines()[-1], name, dest.replace("{D}", "out"), "fsize")
    out = work / "out"
    files = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    if name.startswith("batch") and "kept in" in proc.stderr:   # resumable: the finished rows stay, as it says
        assert (out / "b" / "batch-state.jsonl").stat().st_size > 0
    else:
        assert files == [], files                                      # nothing half written


@pytest.fixture
def outside_tmp(work):
    """The inputs in a folder outside /tmp (Landlock allows /tmp as a whole: the run's own scratch lives there)."""
    import shutil
    import tempfile

    from studio.plugins.confine import landlock_abi

    if landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock: permission denied cannot be made for root here")
    folder = Path(tempfile.mkdtemp(prefix="onnx-studio-eacces-", dir="/var/tmp"))
    try:
        for f in INPUTS:
            shutil.copy(work / f, folder / f)
        shutil.copytree(work / "photos", folder / "photos")
        (folder / "out").mkdir()
        (folder / "denied").mkdir()
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_permission_denied_is_one_clean_line(outside_tmp, name):
    argv, _limit, dest = WRITERS[name]
    argv = [a.replace("{D}", "denied").replace("o-small.onnx", "out/o-small.onnx") for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    allowed = [Path(d) for d in ("/tmp", "/dev/shm", "/proc") if Path(d).is_dir()]      # the run's own scratch
    # Only ``allowed`` and out/ writable: the destination, outside them, gets EACCES (exit 97: no Landlock).
    proc = run_forked(argv, cwd=outside_tmp, env=env, timeout=HANG_GUARD_S,
                   preexec=writable_only([*allowed, outside_tmp / "out"], refused_exit=97))
    if proc.returncode == 97:
        pytest.skip("Landlock could not be applied here")
    assert proc.returncode != 0, (proc.returncode, proc.stderr[-800:])
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert_user_message(line)
    low = line.lower()
    assert "permission denied" in low or "not permitted" in low or "readonly" in low or "unable to open" in low, line
    if dest:
        assert dest.replace("{D}", "denied") in line, line
    if name == "optimize --report":
        assert "the model (out/o-small.onnx) was written" in line, line
    elif not (name.startswith("batch") and "kept in" in line):
        assert "nothing was written" in line, line
    assert [p for p in (outside_tmp / "denied").rglob("*") if p.is_file()] == []
