"""RELIABILITY R32/R33 for the writers added since round 2 (issue 31 item 10): ``edit -o`` (a rename and
an edit-script merge), ``memory --reorder -o``, ``merge-decoders -o``, ``profile --generate --out-dir`` and
``batch -o``. A destination that is a link to a file outside, a hard link to the input, the input itself or
a FIFO is refused in one line naming it; the input and the link's target stay byte-identical; a FIFO never
blocks the run (a subprocess, bounded only to catch a hang). The R34 cases of the same commands are in
test_write_failures_every_command.py."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio.cli import main
from tests.conftest import ROOT, assert_user_message, sha256_file
from tests.forked_cli import run_forked

HANG_GUARD_S = 300


def _model(n: int = 64) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((n, n)).astype("float32"), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def work(tmp_path, monkeypatch):
    onnx.save(_model(), tmp_path / "m.onnx")
    (tmp_path / "rename.json").write_text(json.dumps([{"op": "rename", "tensors": {"h": "hidden"}}]))
    for name in ("gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx", "gpt2_decoder_merged.onnx"):
        shutil.copyfile(ROOT / "sample_models" / name, tmp_path / name)
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("keep me")
    monkeypatch.chdir(tmp_path)
    return tmp_path


FILE_WRITERS = {
    "edit -o": (["edit", "m.onnx", "--script", "rename.json", "-o"], "m.onnx"),
    "memory --reorder -o": (["memory", "m.onnx", "--reorder", "--no-engine-graph", "-o"], "m.onnx"),
    "merge-decoders -o": (["merge-decoders", "gpt2_decoder.onnx", "gpt2_decoder_with_past.onnx", "-o"],
                          "gpt2_decoder.onnx"),
}


def _destination(work: Path, kind: str, source: str) -> tuple[str, str]:
    """(the -o argument, the words the refusal must hold)."""
    if kind == "symlink":
        os.symlink(work / "outside" / "victim.txt", work / "dest.onnx")
        return "dest.onnx", "symbolic link"
    if kind == "hardlink":
        os.link(work / source, work / "dest.onnx")
        return "dest.onnx", "input model"
    if kind == "same":
        return f"./x/../{source}", "input model"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "same"])
@pytest.mark.parametrize("command", sorted(FILE_WRITERS))
def test_r32_new_file_writers_never_write_through_a_link_or_over_the_input(work, capsys, command, kind):
    argv, source = FILE_WRITERS[command]
    (work / "x").mkdir()
    dest, needle = _destination(work, kind, source)
    before = {p.name: sha256_file(p) for p in work.glob("*.onnx")}
    rc = main([*argv, dest])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2, err
    assert_user_message(err[-1], needle)
    assert {p.name: sha256_file(p) for p in work.glob("*.onnx") if p.name in before} == before
    assert (work / "outside" / "victim.txt").read_text() == "keep me"
    assert sorted(p.name for p in work.iterdir() if p.name.startswith(".onnx-studio-")) == []


def _subprocess(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    """A process of its own (the hang guard), forked from a preloaded server (tests/forked_cli.py)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return run_forked(argv, cwd=cwd, env=env, timeout=HANG_GUARD_S)


FIFO_CASES = {
    **{name: ([*argv, "fifo.onnx"], "fifo.onnx") for name, (argv, _) in FILE_WRITERS.items()},
    "profile --generate --out-dir": (["profile", "gpt2_decoder_merged.onnx", "--generate", "--prompt-lengths", "4",
                                      "--new-tokens", "2", "--generations", "1", "--no-generation-memory",
                                      "--out-dir", "fifo"], "fifo"),
    "batch -o": (["batch", "m.onnx", "-o", "fifo", "--stages", "inspect", "--workers", "1"], "fifo"),
}


@pytest.mark.parametrize("command", sorted(FIFO_CASES))
def test_r33_a_fifo_destination_is_one_line_and_never_blocks(work, command):
    """profile --generate --out-dir and batch -o on a FIFO were a raw FileExistsError / 'something else
    is in the way'; the file writers were right already and stay so."""
    argv, fifo = FIFO_CASES[command]
    os.mkfifo(work / fifo)
    proc = _subprocess(work, *argv)
    assert proc.returncode == 2, proc.stderr[-1500:]
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert_user_message(line, fifo, "FIFO")
    assert stat.S_ISFIFO(os.lstat(work / fifo).st_mode)
