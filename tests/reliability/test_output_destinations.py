"""RELIABILITY R32-R35 (and R38's distinct output folders): where the studio writes.

Every case goes through the CLI (``studio.cli.main`` in-process, or ``python -m studio`` in a
subprocess where the case can hang or kill the process) or the facade, not just
``studio.core.outputs``. Each asserts the universal expectations: a one-line error naming the
path as given, the input byte-identical (sha256), nothing written through a link or outside.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from studio.cli import main
from studio.core.errors import StudioError
from tests.conftest import ROOT, assert_user_message, sha256_file
from tests.forked_cli import file_size_limit, run_forked

HANG_GUARD_S = 300          # a subprocess that outlives this has hung: the test fails, it never waits forever


def _model(seed: int = 0, n: int = 64) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(seed).standard_normal((n, n)).astype("float32"), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder with the input ``m.onnx``, made the current folder (paths below are as a user types them)."""
    onnx.save(_model(), tmp_path / "m.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _cli(capsys, *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err.strip().splitlines()
    return rc, (err[-1] if err else "")


def _subprocess(cwd: Path, *argv: str, preexec=None) -> subprocess.CompletedProcess:
    """A process of its own (a hang guard, a limit), forked from a preloaded server (tests/forked_cli.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return run_forked(argv, cwd=cwd, env=env, timeout=HANG_GUARD_S, preexec=preexec)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert lines, proc
    assert "Traceback" not in proc.stderr, proc.stderr
    return lines[-1]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".onnx-studio-"))


# -- R32: links, aliases of the input, a folder holding the input ---------------------------------

def test_r32_optimize_output_symlink_to_outside_file_is_not_followed(work, capsys):
    outside = work / "outside" / "victim.txt"
    outside.parent.mkdir()
    outside.write_text("keep me")
    os.symlink(outside, work / "out.onnx")
    before = sha256_file(work / "m.onnx")
    rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "out.onnx")
    assert rc == 2
    assert_user_message(err, "out.onnx", "symbolic link")
    assert outside.read_text() == "keep me"
    assert (work / "out.onnx").is_symlink()
    assert sha256_file(work / "m.onnx") == before


def _alias(work: Path, kind: str, name: str) -> str:
    """A path naming the input m.onnx under another spelling."""
    if kind == "symlink":
        os.symlink(work / "m.onnx", work / name)
        return name
    if kind == "hardlink":
        os.link(work / "m.onnx", work / name)
        return name
    if kind == "dotdot":
        (work / "x").mkdir(exist_ok=True)
        return "./x/../m.onnx"
    return "m.onnx"


_SIDE_OUTPUTS = {
    "optimize --report": ["optimize", "m.onnx", "-o", "o.onnx", "--report", "{}"],
    "compare --chart": ["compare", "m.onnx", "m.onnx", "--layerwise", "--chart", "{}"],
    "precision --chart": ["precision", "m.onnx", "--variants", "fp16", "--chart", "{}"],
    "profile --trace": ["profile", "m.onnx", "--iterations", "2", "--warmup", "1", "--trace", "{}"],
    "graph -o": ["graph", "m.onnx", "-o", "{}"],
}


# graph -o picks its format by suffix, so the input's own .onnx name is not a graph destination
_KINDS = ("symlink", "hardlink", "dotdot", "same")


@pytest.mark.parametrize(("command", "kind"), [(c, k) for c in _SIDE_OUTPUTS for k in _KINDS
                                               if c != "graph -o" or k in ("symlink", "hardlink")])
def test_r32_side_outputs_never_replace_the_input(work, capsys, command, kind):
    name = "alias.html" if command == "graph -o" else "alias.json"
    target = _alias(work, kind, name)
    before = sha256_file(work / "m.onnx")
    argv = [a.replace("{}", target) for a in _SIDE_OUTPUTS[command]]
    rc, err = _cli(capsys, *argv)
    assert rc == 2, err
    assert_user_message(err)
    assert ("symbolic link" in err) if kind == "symlink" else ("input model" in err), err
    assert sha256_file(work / "m.onnx") == before
    if kind == "hardlink":
        assert os.stat(work / name).st_ino == os.stat(work / "m.onnx").st_ino      # the link is left as it was
    assert not (work / "o.onnx").exists()


@pytest.mark.parametrize("argv", [["optimize", "m.onnx", "-o", "o.onnx", "--inputs", "x.npz", "--report", "x.npz"],
                                  ["compare", "m.onnx", "m.onnx", "--inputs", "x.npz", "--layerwise", "--chart",
                                   "x.npz"]])
def test_r32_a_data_file_the_run_reads_is_never_an_output(work, capsys, argv):
    np.savez(work / "x.npz", x=np.ones((1, 64), np.float32))
    before = sha256_file(work / "x.npz")
    rc, err = _cli(capsys, *argv)
    assert rc == 2
    assert_user_message(err, "x.npz", "would overwrite")
    assert sha256_file(work / "x.npz") == before


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "dotdot", "same"])
def test_r32_facade_optimize_refuses_every_alias_of_the_input(work, kind):
    target = _alias(work, kind, "alias.onnx")
    before = sha256_file(work / "m.onnx")
    with pytest.raises(StudioError) as info:
        api.optimize(api.load("m.onnx"), preset="safe", out_path=target)
    assert_user_message(str(info.value))
    assert sha256_file(work / "m.onnx") == before


def test_r32_a_bind_mount_of_the_inputs_folder_is_the_same_input(work, capsys):
    alias = work / "alias"
    alias.mkdir()
    proc = subprocess.run(["mount", "--bind", str(work), str(alias)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("bind mounts are not permitted here (needs root in a mount namespace)")
    try:
        before = sha256_file(work / "m.onnx")
        rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "alias/m.onnx")
        assert rc == 2
        assert_user_message(err, "alias/m.onnx", "input model")
        rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "o.onnx", "--report", "alias/m.onnx")
        assert rc == 2
        assert sha256_file(work / "m.onnx") == before
    finally:
        subprocess.run(["umount", "-l", str(alias)], capture_output=True)


def test_r32_optimize_refuses_an_output_that_is_the_inputs_external_data(work, capsys):
    m = _model(n=128)
    onnx.save(m, work / "ext.onnx", save_as_external_data=True, location="o.onnx.data", size_threshold=0)
    before = sha256_file(work / "o.onnx.data")
    rc, err = _cli(capsys, "optimize", "ext.onnx", "-o", "o.onnx")
    assert rc == 2
    assert_user_message(err, "o.onnx.data", "input")
    assert sha256_file(work / "o.onnx.data") == before


def test_r32_export_never_replaces_the_folder_holding_the_input(work, capsys):
    from studio.export.bundle import bundle_name

    handle = api.load("m.onnx")
    folder = work / "out" / bundle_name(handle.name, handle.sha256)
    folder.mkdir(parents=True)
    (work / "m.onnx").rename(folder / "m.onnx")
    before = sha256_file(folder / "m.onnx")
    rel = str((folder / "m.onnx").relative_to(work))
    rc, err = _cli(capsys, "export", rel, "--target", "ort", "-o", "out", "--no-zip")
    assert rc == 2
    assert_user_message(err, "holds the input")
    assert sha256_file(folder / "m.onnx") == before
    assert sorted(p.name for p in folder.iterdir()) == ["m.onnx"]
    assert [p.name for p in (work / "out").iterdir()] == [folder.name]      # no staging folder left


def test_r32_export_never_replaces_a_folder_or_link_it_did_not_write(work, capsys):
    from studio.export.bundle import bundle_name

    handle = api.load("m.onnx")
    name = bundle_name(handle.name, handle.sha256)
    foreign = work / "out" / name
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("mine")
    rc, err = _cli(capsys, "export", "m.onnx", "--target", "ort", "-o", "out", "--no-zip")
    assert rc == 2
    assert_user_message(err, "not written by onnx-studio")
    assert (foreign / "notes.txt").read_text() == "mine"
    # a link at the bundle's name: neither the link nor the folder it points to is touched
    elsewhere = work / "elsewhere"
    foreign.rename(elsewhere)
    os.symlink(elsewhere, foreign)
    rc, err = _cli(capsys, "export", "m.onnx", "--target", "ort", "-o", "out", "--no-zip")
    assert rc == 2
    assert_user_message(err, "symbolic link")
    assert foreign.is_symlink() and (elsewhere / "notes.txt").read_text() == "mine"


def test_r32_export_replaces_its_own_earlier_bundle(work, capsys):
    for _ in range(2):
        rc, _err = _cli(capsys, "export", "m.onnx", "--target", "ort", "-o", "out")
        assert rc == 0
    bundles = [p for p in (work / "out").iterdir() if p.is_dir()]
    assert len(bundles) == 1 and not [p for p in (work / "out").iterdir() if p.name.startswith(".")]
    manifest = json.loads((bundles[0] / "manifest.json").read_text())
    assert manifest["files"]
    for row in manifest["files"]:
        assert sha256_file(bundles[0] / row["path"]) == row["sha256"]


# -- R33: FIFOs, devices, folders, a path under a file, a read-only folder -------------------------

@pytest.mark.parametrize("argv", [["optimize", "m.onnx", "-o", "o.onnx", "--report", "f.json"],
                                  ["compare", "m.onnx", "m.onnx", "--layerwise", "--chart", "f.json"],
                                  ["graph", "m.onnx", "-o", "f.html"]])
def test_r33_fifo_destination_is_refused_without_hanging(work, argv):
    os.mkfifo(work / argv[-1])
    proc = _subprocess(work, *argv)          # the old code blocked forever opening the FIFO
    assert proc.returncode == 2
    assert_user_message(_error_line(proc), argv[-1], "FIFO")
    assert stat.S_ISFIFO(os.lstat(work / argv[-1]).st_mode)


def test_r33_device_destination_is_refused(work, capsys):
    rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "o.onnx", "--report", "/dev/null")
    assert rc == 2
    assert_user_message(err, "null", "device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_r33_existing_folder_and_path_under_a_file(work, capsys):
    (work / "d.onnx").mkdir()
    rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "d.onnx")
    assert rc == 2
    assert_user_message(err, "d.onnx", "folder")
    (work / "file.txt").write_text("x")
    rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "file.txt/m.onnx")
    assert rc == 2
    assert_user_message(err, "file.txt/m.onnx", "is a file, not a folder")
    rc, err = _cli(capsys, "graph", "m.onnx", "-o", "file.txt/sub/g.html")
    assert rc == 2
    assert_user_message(err, "not a folder")
    assert (work / "file.txt").read_text() == "x"


@pytest.fixture
def tmpfs(work):
    """A 64 KiB tmpfs under the test folder (root with mount permission only)."""
    mnt = work / "mnt"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("mounting a small tmpfs is not permitted here (needs root in a mount namespace)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_r33_read_only_folder(work, tmpfs, capsys):
    (tmpfs / "g.html").write_text("old")
    proc = subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip("remounting read-only is not permitted here")
    rc, err = _cli(capsys, "graph", "m.onnx", "-o", "mnt/g.html")
    assert rc == 2
    assert_user_message(err, "mnt/g.html", "read-only")
    assert (tmpfs / "g.html").read_text() == "old"


# -- R34: disk full, file-size limit, name too long, a failing write -------------------------------

def test_r34_disk_full_leaves_no_partial_file_and_the_old_output(work, tmpfs, capsys):
    (tmpfs / "g.html").write_text("old")
    rc, err = _cli(capsys, "graph", "m.onnx", "-o", "mnt/g.html")          # the page is ~0.5 MB
    assert rc == 2
    assert_user_message(err, "mnt/g.html", "no space left")
    assert (tmpfs / "g.html").read_text() == "old"
    assert _leftovers(tmpfs) == []
    from studio.core.save import save_model

    with pytest.raises(StudioError) as info:                               # the facade's model writer
        save_model(_model(n=256), tmpfs / "big.onnx", shown="mnt/big.onnx")
    assert_user_message(str(info.value), "mnt/big.onnx", "no space left")
    assert sorted(p.name for p in tmpfs.iterdir()) == ["g.html"]


def test_r34_optimize_into_a_full_disk(work, tmpfs, capsys):
    onnx.save(_model(n=256), work / "big.onnx")                             # 256 KiB of weights, 64 KiB of disk
    before = sha256_file(work / "big.onnx")
    rc = main(["optimize", "big.onnx", "-o", "mnt/o.onnx", "--no-verify"])
    err = capsys.readouterr().err
    # the pipeline's work folder sits beside the output: the first checkpoint or the save hits ENOSPC
    assert rc in (1, 2) and "Traceback" not in err
    assert "no space left" in err.lower() and "mnt/o.onnx" in err
    assert list(tmpfs.iterdir()) == []                                      # no partial file, no work folder
    assert sha256_file(work / "big.onnx") == before


def test_r34_file_size_limit_is_an_error_not_a_kill(work):
    (work / "g.html").write_text("old")

    proc = _subprocess(work, "graph", "m.onnx", "-o", "g.html", preexec=file_size_limit(200_000))
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])     # not killed by SIGXFSZ
    assert_user_message(_error_line(proc), "g.html", "file-size limit")
    assert (work / "g.html").read_text() == "old"
    assert _leftovers(work) == []


def test_r34_name_too_long(work, capsys):
    long = "r" * 300 + ".json"
    rc, err = _cli(capsys, "optimize", "m.onnx", "-o", "o.onnx", "--report", long)
    assert rc == 2
    assert_user_message(err, "too long")
    rc, err = _cli(capsys, "graph", "m.onnx", "-o", "g" * 300 + ".html")
    assert rc == 2
    assert_user_message(err, "too long")
    assert _leftovers(work) == []


# -- R33/R34: every unwritable destination says why and what to do, at every writer -----------------
# One line: "cannot write 'X': REASON; WHAT TO DO; nothing was written" (studio.core.outputs._REASONS).
# The cases a test can make without root, through the CLI; each is refused before any work, so nothing
# is converted and nothing is written anywhere (the whole work folder is compared before and after).

_UNWRITABLE_WRITERS = {
    "optimize -o": ["optimize", "m.onnx", "-o", "{D}/o.onnx", "--no-verify"],
    "optimize --report": ["optimize", "m.onnx", "-o", "ok.onnx", "--no-verify", "--report", "{D}/r.json"],
    "export -o": ["export", "m.onnx", "--target", "ort", "-o", "{D}/exp"],
    "edit -o": ["edit", "m.onnx", "--script", "rename.json", "-o", "{D}/e.onnx"],
    "precision --out": ["precision", "m.onnx", "--variants", "fp32,fp16", "--budget", "1", "--out", "{D}/var"],
    "precision --chart": ["precision", "m.onnx", "--variants", "fp32,fp16", "--budget", "1", "--chart",
                          "{D}/c.html"],
    "profile --out-dir": ["profile", "m.onnx", "--iterations", "2", "--warmup", "1", "--out-dir", "{D}/p"],
    "profile --trace": ["profile", "m.onnx", "--iterations", "2", "--warmup", "1", "--trace", "{D}/t.json"],
    "graph -o": ["graph", "m.onnx", "-o", "{D}/g.html"],
    "projects create": ["--projects-root", "{D}/pr", "projects", "create", "x"],
    "data add": ["--projects-root", "{D}/pr", "data", "add", "photos", "--project", "p", "--name", "d"],
}


def _kernel_fs_type(path: str) -> str:
    """The file-system type as coreutils reads it (statfs), independent of the studio's mountinfo lookup."""
    proc = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _unwritable(work: Path, case: str) -> tuple[str, tuple[str, ...]]:
    """(the folder {D} stands for, the exact reason and advice words the line must hold)."""
    if case == "a kernel file system":
        if _kernel_fs_type("/proc") != "proc":
            pytest.skip("/proc is not procfs here")
        return "/proc", ("/proc is a kernel file system (proc) that holds no files", "choose a folder on a disk")
    if case == "a path under a file":
        (work / "file.txt").write_text("x")
        return "file.txt", ("a part of the path is a file, not a folder", "choose a path through folders only")
    if case == "a name too long":
        return "L" * 300, ("the name is too long for the file system",
                           "choose a shorter name (at most 255 bytes per file or folder name)")
    raise AssertionError(case)


def _tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): (sha256_file(p) if p.is_file() else "dir") for p in folder.rglob("*")}


@pytest.mark.parametrize("case", ["a kernel file system", "a path under a file", "a name too long"])
@pytest.mark.parametrize("command", sorted(_UNWRITABLE_WRITERS))
def test_r33_an_unwritable_destination_says_why_and_what_to_do(work, capsys, command, case):
    """``export -o /proc/x`` said 'no such file or directory' (the folder exists: procfs refuses new files);
    precision --out and profile --out-dir under a file, on /proc or with a long name were tracebacks."""
    (work / "rename.json").write_text(json.dumps([{"op": "rename", "tensors": {"y": "out"}}]))
    (work / "photos").mkdir()
    (work / "photos" / "a.png").write_bytes((ROOT / "sample_models" / "photos" / "astronaut" / "0.png").read_bytes())
    folder, words = _unwritable(work, case)
    before = _tree(work)
    proc_before = sorted(os.listdir("/proc")) if folder == "/proc" else None
    rc, err = _cli(capsys, *[a.replace("{D}", folder) for a in _UNWRITABLE_WRITERS[command]])
    assert rc == 2, err
    assert_user_message(err, "cannot write", *words, "nothing was written")
    assert err.index(words[0]) < err.index(words[1]) < err.index("nothing was written"), err
    assert _tree(work) == before                       # nothing written here: no output, no model, no folder
    if proc_before is not None:
        assert not [n for n in os.listdir("/proc") if not n.isdigit() and n not in proc_before]


@pytest.mark.parametrize(("argv", "words"), [
    (["optimize", "m.onnx", "-o", "o.onnx", "--no-verify", "--report", "/dev/full"],
     ("'full' is a device", "only regular files are replaced; choose another file name")),
    (["profile", "m.onnx", "--iterations", "2", "--warmup", "1", "--trace", "/dev/full"],
     ("'full' is a device", "choose another file name")),
    (["export", "m.onnx", "--target", "ort", "-o", "/dev/full"],
     ("'full' exists and is a device, not a folder", "choose another folder name")),
    (["optimize", "m.onnx", "-o", "d.onnx", "--no-verify"], ("'d.onnx' is a folder", "give a file name")),
    (["edit", "m.onnx", "--script", "rename.json", "-o", "d.onnx"], ("'d.onnx' is a folder", "give a file name")),
    (["optimize", "m.onnx", "-o", "o.onnx", "--no-verify", "--report", "d.onnx"],
     ("'d.onnx' is a folder", "give a file name")),
    (["export", "m.onnx", "--target", "ort", "-o", "f.txt"], ("'f.txt' exists and is a file, not a folder",
                                                               "choose another folder name")),
])
def test_r33_a_device_or_a_folder_at_a_files_place_says_what_to_do(work, capsys, argv, words):
    (work / "rename.json").write_text(json.dumps([{"op": "rename", "tensors": {"y": "out"}}]))
    (work / "d.onnx").mkdir()
    (work / "f.txt").write_text("x")
    before = _tree(work)
    rc, err = _cli(capsys, *argv)
    assert rc == 2, err
    assert_user_message(err, *words)
    assert _tree(work) == before
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_r33_an_immutable_folder_says_it_refuses_new_files(work, capsys):
    """EPERM on create (``chattr +i``, refused to root too) said only 'operation not permitted'."""
    (work / "imm").mkdir()
    if subprocess.run(["chattr", "+i", str(work / "imm")], capture_output=True).returncode != 0:
        pytest.skip("chattr +i is not permitted here (needs root on a file system with attributes)")
    try:
        for dest, argv in (("imm/o.onnx", ["optimize", "m.onnx", "--no-verify", "-o", "imm/o.onnx"]),
                           ("imm/exp", ["export", "m.onnx", "--target", "ort", "-o", "imm/exp"])):
            rc, err = _cli(capsys, *argv)
            assert rc == 2, err
            assert_user_message(err, f"cannot write '{dest}': operation not permitted: the folder refuses new "
                                     "files (immutable, append-only or a protected mount: lsattr -d imm); choose "
                                     "another folder; nothing was written")
            assert os.listdir(work / "imm") == []
    finally:
        subprocess.run(["chattr", "-i", str(work / "imm")], capture_output=True)


# Through the one mapping: the errnos a test cannot make without root (or at all on demand).
_MAPPED = {
    errno.EROFS: "the file system is read-only; choose a folder on a writable disk",
    errno.EPERM: "operation not permitted: the folder refuses new files (immutable, append-only or a protected "
                 "mount: lsattr -d out); choose another folder",
    errno.ENOSPC: "no space left on the device; free some space or choose a folder on another disk",
    errno.EDQUOT: "the disk quota is exceeded; free some space under the quota or choose another folder",
    errno.EFBIG: "the file would exceed the file-size limit (ulimit -f); raise the limit (ulimit -f unlimited) "
                 "or choose a disk that takes larger files",
    errno.EACCES: "permission denied; choose a folder you can write to, or change its permissions",
    errno.EIO: "the disk reported an input/output error; check the disk (dmesg) or choose another folder",
    errno.EINVAL: "the file system does not accept this name; choose a name of letters, digits, '-' and '_'",
}


@pytest.mark.parametrize("code", sorted(_MAPPED), ids=lambda c: errno.errorcode[c])
def test_r34_each_write_errno_maps_to_a_reason_and_what_to_do(tmp_path, code):
    from studio.core import outputs

    err = outputs.describe(OSError(code, os.strerror(code), str(tmp_path / "out" / ".onnx-studio-x.tmp")),
                           "out/o.onnx")
    assert str(err) == f"cannot write 'out/o.onnx': {_MAPPED[code]}; nothing was written"
    assert err.errno == code
    # as a run meets it (a library writing by path): the same words, the side output's note kept
    side = outputs.side_output_failed(OSError(code, os.strerror(code)), "out/o.onnx", "the model (m2.onnx)")
    if code in outputs.DISK_ERRNOS:
        assert str(side) == (f"cannot write 'out/o.onnx': {_MAPPED[code]}; the model (m2.onnx) was written, "
                             "'out/o.onnx' was not")


def test_r34_a_kernel_file_system_is_named_whatever_its_errno():
    """procfs answers a new file with ENOENT, sysfs with EPERM or EACCES: each is named for what it is."""
    from studio.core import outputs

    for root, kind in (("/proc", "proc"), ("/sys", "sysfs")):
        if _kernel_fs_type(root) != kind:
            continue
        for code in (errno.ENOENT, errno.EPERM, errno.EACCES):
            err = outputs.describe(OSError(code, os.strerror(code), f"{root}/x"), "x")
            assert str(err) == (f"cannot write 'x': {root} is a kernel file system ({kind}) that holds no files; "
                                "choose a folder on a disk; nothing was written")
    err = outputs.describe(OSError(errno.ENOENT, "gone", "/nonexistent-dir/x"), "x")
    assert "kernel" not in str(err) and "does not exist" in str(err)
    for code, (reason, advice) in outputs._REASONS.items():     # every entry: one line, a reason and a remedy
        assert reason and advice and "\n" not in reason + advice and ";" not in reason, errno.errorcode[code]


def test_r34_a_write_that_fails_midway_keeps_the_old_output(work):
    from studio.core import outputs

    (work / "r.json").write_text('{"old": true}')
    with pytest.raises(RuntimeError):
        with outputs.open_output("r.json", "w") as fh:
            fh.write('{"new": ')
            raise RuntimeError("the writer died")
    assert json.loads((work / "r.json").read_text()) == {"old": True}
    assert _leftovers(work) == []


# -- R35: concurrent writers -----------------------------------------------------------------------

def _run_threads(fn, n: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(i: int) -> None:
        try:
            fn(i)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_r35_concurrent_model_writers_never_mix_model_and_data(work):
    from studio.core.save import save_model

    models = [_model(seed=i, n=128) for i in range(4)]
    weights = {numpy_helper.to_array(m.graph.initializer[0]).tobytes() for m in models}

    def write(i: int) -> None:
        for _ in range(5):
            save_model(models[i], work / "out" / "m.onnx", external_data=True)

    assert _run_threads(write, 4) == []
    loaded = onnx.load(str(work / "out" / "m.onnx"))                      # with its .data
    assert numpy_helper.to_array(loaded.graph.initializer[0]).tobytes() in weights
    assert sorted(p.name for p in (work / "out").iterdir()) == ["m.onnx", "m.onnx.data"]


def test_r35_concurrent_report_writers_leave_one_whole_report(work):
    from studio.core import outputs

    def write(i: int) -> None:
        for k in range(20):
            outputs.write_json("report.json", {"writer": i, "k": k, "pad": "x" * (1000 * (i + 1))})

    assert _run_threads(write, 6) == []
    doc = json.loads((work / "report.json").read_text())
    assert len(doc["pad"]) == 1000 * (doc["writer"] + 1)
    assert _leftovers(work) == []


def test_r35_concurrent_bundle_publishers_follow_one_another(work):
    """The bundle swap itself, many times from several threads (the old swap raced: remove, then
    rename, and the other writer's folder appeared in between)."""
    from studio.export.bundle import finalize, staging_dir

    out = work / "out"
    out.mkdir()
    final = out / "m-00000000"

    def publish(i: int) -> None:
        for k in range(15):
            staging = staging_dir(out, final.name, "partial")
            (staging / "manifest.json").write_text(json.dumps({"format": "onnx-studio-export/1", "by": [i, k]}))
            (staging / "model.onnx").write_text(f"{i}-{k}")
            finalize(staging, final)

    assert _run_threads(publish, 4) == []
    by = json.loads((final / "manifest.json").read_text())["by"]
    assert (final / "model.onnx").read_text() == f"{by[0]}-{by[1]}"       # one writer's whole bundle
    assert [p.name for p in out.iterdir()] == [final.name]


def test_r35_concurrent_cli_exports_to_one_folder(work):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-m", "studio", "export", "m.onnx", "--target", "ort", "-o", "out"],
                              cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    results = [(p.wait(timeout=HANG_GUARD_S), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    for rc, err in results:
        assert rc == 0 or (rc == 2 and "Traceback" not in err), err
    assert any(rc == 0 for rc, _ in results)
    bundles = [p for p in (work / "out").iterdir() if p.is_dir()]
    assert len(bundles) == 1
    assert not [p.name for p in (work / "out").iterdir() if p.name.startswith(".")]
    manifest = json.loads((bundles[0] / "manifest.json").read_text())
    assert manifest["files"]
    for row in manifest["files"]:
        assert sha256_file(bundles[0] / row["path"]) == row["sha256"]


# -- R38: output folders from names that collide after sanitizing ----------------------------------

def test_r38_names_that_collide_after_sanitizing_get_distinct_folders(work):
    from studio.core.paths import distinct_name
    from studio.export.bundle import bundle_name

    names = ["a/b", "a_b", "a:b", ".", "..", "a b"]
    assert len({distinct_name(n) for n in names}) == len(names)
    assert distinct_name("resnet50") == "resnet50"                         # clean names are kept as they are
    assert len({bundle_name(n, "0" * 64) for n in names}) == len(names)
    handle = api.load("m.onnx")
    for name in ("a/b", "a_b"):
        r = api.export(handle, "onnxruntime", work / "out", name=name, zip=False)
        assert r.ok
    assert len([p for p in (work / "out").iterdir() if p.is_dir()]) == 2


def test_r38_plugin_op_folders_are_distinct():
    from studio.plugins.scaffold import _op_folder

    assert len({_op_folder(n) for n in ("My/Op", "My_Op", "My:Op")}) == 3
    assert _op_folder("MyOp") == "MyOp"


def test_r35_concurrent_plugin_scaffolds_leave_whole_packages(tmp_path):
    from tests.conftest import save
    from tests.plugins.plugin_models import unknown_op_model

    handle = api.load(save(unknown_op_model(), tmp_path / "in" / "swizzle.onnx"))
    sig = api.plugin_signature(handle, "acme::Swizzle", capture=False)
    alone = api.scaffold_plugin(handle, "acme::Swizzle", "ort-python", tmp_path / "alone", signature=sig)
    expected = {p.relative_to(alone.root).as_posix(): p.read_bytes() for p in alone.root.rglob("*") if p.is_file()}

    def scaffold(i: int) -> None:
        for _ in range(3):
            api.scaffold_plugin(handle, "acme::Swizzle", "ort-python", tmp_path / "out", signature=sig)

    assert _run_threads(scaffold, 4) == []
    root = tmp_path / "out" / alone.root.name
    got = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    assert got == expected                                                   # every file whole, none left over


def test_r32_check_fix_output_is_never_a_link_and_a_noop_fix_keeps_what_was_there(work, capsys):
    """``check --fix -o`` used to resolve the output (following a link) and to delete whatever sat at
    the output when the fix failed or changed nothing."""
    outside = work / "victim.onnx"
    outside.write_bytes(b"precious")
    os.symlink(outside, work / "fixed.onnx")
    rc, err = _cli(capsys, "check", "m.onnx", "--engines", "ort", "--fix", "eliminate-identity", "--output",
                   "fixed.onnx")
    assert rc == 2
    assert_user_message(err, "fixed.onnx", "symbolic link")
    assert outside.read_bytes() == b"precious" and (work / "fixed.onnx").is_symlink()
    (work / "fixed.onnx").unlink()
    (work / "fixed.onnx").write_bytes(b"an older result the user keeps")
    rc, err = _cli(capsys, "check", "m.onnx", "--engines", "ort", "--fix", "eliminate-identity", "--output",
                   "fixed.onnx")
    assert rc == 2
    assert_user_message(err, "changed nothing")
    assert (work / "fixed.onnx").read_bytes() == b"an older result the user keeps"
    assert _leftovers(work) == []
