"""The CLI starts light (issue 34 item 6): ``main`` builds only the subparser of the command it runs, so a
command's start-up does not import every other command's module and option tables (``check``'s help reads
the engines, ``precision``'s the variants: ~0.35 s of imports), and ``--help`` lists the commands without
building their options. The oracle is the whole parser (``build_parser()``): the same namespace, the same help
text, the same errors; and ``sys.modules`` of a fresh interpreter says what a run imported.
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys

import pytest

from studio import cli
from tests.conftest import ROOT

# Never needed to print help or to refuse a missing file (each is ~0.1-0.5 s to import).
HEAVY = ("onnxruntime", "openvino", "streamlit", "dask", "distributed", "plotly", "onnx_ir", "onnxscript", "torch")


def _imported_by(*argv: str) -> tuple[int, str, set[str]]:
    """(exit code, stdout + stderr, modules imported) of one CLI run in a fresh interpreter."""
    code = ("import json, sys\nfrom studio.cli import main\n"
            "try:\n    rc = main(sys.argv[1:])\nexcept SystemExit as e:\n    rc = e.code\n"
            "sys.stdout.flush()\nprint('\\nMODULES ' + json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    err, _, mods = proc.stderr.rpartition("\nMODULES ")
    return proc.returncode, proc.stdout + err, set(json.loads(mods))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def test_an_early_error_imports_only_its_own_command(tmp_path):
    rc, out, modules = _imported_by("inspect", str(tmp_path / "missing.onnx"))
    assert rc == 2 and "does not exist" in out, out
    assert _heavy(modules) == []
    assert "studio.cli.inspect_cmd" in modules
    others = sorted(m for m in modules if m.startswith("studio.cli.") and m.endswith("_cmd"))
    assert others == ["studio.cli.inspect_cmd"]                # was all 17: every subparser was built
    assert not {"studio.precision", "profilers", "studio.facade.verify"} & modules   # check's/precision's help


def test_help_lists_every_command_without_building_their_options():
    rc, out, modules = _imported_by("--help")
    assert rc == 0
    for name in cli.COMMANDS:
        module = importlib.import_module(f"studio.cli.{name}_cmd")
        assert module.NAME in out
    assert _heavy(modules) == []
    assert not {"studio.precision", "profilers", "studio.facade.verify", "studio.facade.inspect"} & modules


def test_each_command_word_is_its_modules_name():
    """``WORDS`` (the stubs' names, known without importing the modules) agrees with each module's NAME."""
    for name in cli.COMMANDS:
        assert importlib.import_module(f"studio.cli.{name}_cmd").NAME == cli.WORDS.get(name, name)


ARGVS = [
    ["inspect", "m.onnx", "--json"],
    ["--timeout", "5", "check", "m.onnx", "--engines", "onnxruntime"],
    ["--time=5", "-v", "profile", "m.onnx", "--iterations", "3"],             # an abbreviated global option
    ["--projects-root", "inspect", "check", "m.onnx"],                        # a value that reads as a command
    ["--memory-gb", "2", "merge-decoders", "a.onnx", "b.onnx", "-o", "c.onnx"],
    ["projects", "list", "--projects-root", "r"],
    ["precision", "m.onnx", "--variants", "fp32,fp16", "--budget", "3"],
    ["-v"],
]


def _plain(ns: argparse.Namespace) -> dict:
    return {k: (getattr(v, "__module__", None) if k == "_run" else v) for k, v in vars(ns).items()}


@pytest.mark.parametrize("argv", ARGVS, ids=" ".join)
def test_the_lazy_parse_reads_what_the_whole_parser_reads(argv):
    _, lazy = cli._parse(argv)
    assert _plain(lazy) == _plain(cli.build_parser().parse_args(argv))


def _outcome(parse, argv, capsys) -> tuple[object, str, str]:
    try:
        parse(argv)
        code = None
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("argv", [["--help"], ["inspect", "--help"], ["-h", "check"], ["merge-decoders", "-h"],
                                  ["inspect"], ["nope", "m.onnx"], ["--timeout", "x", "inspect", "m.onnx"],
                                  ["inspect", "m.onnx", "--bogus"], ["--timeout"]], ids=" ".join)
def test_help_and_usage_errors_are_the_whole_parsers(argv, capsys):
    whole = _outcome(lambda a: cli.build_parser().parse_args(a), argv, capsys)
    assert whole[0] is not None                                     # each of these exits
    assert _outcome(cli._parse, argv, capsys) == whole


@pytest.mark.parametrize("argv, timeout, memory_gb", [
    (["--timeout", "50", "profile", "m.onnx"], 50.0, None),       # profile's own option used to reset it to None
    (["--time=50", "--memory-gb", "2", "profile", "m.onnx"], 50.0, 2.0),
    (["profile", "m.onnx", "--timeout", "70"], 70.0, None),
    (["--timeout", "50", "profile", "m.onnx", "--timeout", "70"], 70.0, None),   # the later, nearer one wins
    # what the timeout error says ("raise --timeout"), after the command word as well as before it
    (["export", "m.onnx", "--target", "litert", "-o", "x", "--timeout", "1200", "--memory-gb", "6"], 1200.0, 6.0),
    (["check", "m.onnx", "--timeout", "5"], 5.0, None),
    (["inspect", "m.onnx"], None, None),
])
def test_the_worker_limits_read_the_same_before_and_after_the_command(argv, timeout, memory_gb):
    _, args = cli._parse(argv)
    assert (args.timeout, args.memory_gb) == (timeout, memory_gb)


def test_a_limit_after_the_command_reaches_the_workers(monkeypatch, capsys):
    """main() hands the limits to the sandbox through its environment (default_limits reads it)."""
    from studio.core.sandbox import default_limits

    monkeypatch.delenv("ONNX_STUDIO_TIMEOUT_S", raising=False)
    monkeypatch.delenv("ONNX_STUDIO_MEMORY_GB", raising=False)
    # returned, not a usage error (argparse exits): the run got past parsing and stopped at the missing file
    assert cli.main(["inspect", "no-such.onnx", "--timeout", "33", "--memory-gb", "1.5"]) == 2
    assert "no-such.onnx" in capsys.readouterr().err
    limits = default_limits()
    assert limits.timeout_s == 33.0 and limits.memory_bytes == int(1.5 * 2**30)
