"""``onnx-studio`` command line: one subcommand per module in this package.

Each command module has ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. Errors a user can fix print one line and exit 2; a
command's own "failed" verdict (check found errors, verification failed)
exits 1.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Collection, Sequence

from studio import __version__
from studio.core.errors import StudioError
from studio.core.outputs import disk_error

# Order is the order of `onnx-studio --help`.
COMMANDS = ["inspect", "memory", "graph", "check", "optimize", "merge", "edit", "compare", "precision", "profile", "plugin",
            "export", "batch", "worker", "serve", "projects", "data"]
# The command word of a module whose word is not its name (tests/cli/test_cli_startup.py checks each NAME).
WORDS = {"merge": "merge-decoders"}
# Commands that read or write projects (they also take --projects-root after the command name).
PROJECT_COMMANDS = {"inspect", "check", "optimize", "edit", "precision", "profile", "export", "serve", "projects", "data",
                    "compare"}


def _positive(text: str) -> float:
    """An argparse type: a positive, finite number (a worker's time or memory limit), else a usage error."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:40]!r}") from None
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"it must be a positive number, got {text[:40]}")
    return value


_positive.__name__ = "number"      # argparse names the type in its own messages


def build_parser(full: Collection[str] | None = None, helps: bool = True) -> argparse.ArgumentParser:
    """The whole parser; with ``full``, only those commands (by word) get their options and the rest are
    stubs that take any words (``main`` builds only the command it runs: the others' modules and option
    tables, which read engines and variants, are ~0.5 s of start-up). ``helps``: stubs import their
    module for the one-line help of ``onnx-studio --help``."""
    parser = argparse.ArgumentParser(
        prog="onnx-studio",
        description="Inspect, check, optimize, verify, profile and export ONNX models.")
    parser.add_argument("--version", action="version", version=f"onnx-studio {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--timeout", type=_positive, metavar="S",
                        help="wall-clock limit of each sandboxed job (engine runs, conversions), seconds")
    parser.add_argument("--projects-root", metavar="DIR",
                        help="where projects live (default $ONNX_STUDIO_PROJECTS_ROOT, else "
                             "~/.local/share/onnx-studio/projects)")
    parser.add_argument("--memory-gb", type=_positive, metavar="GB", help="memory limit of each sandbox worker")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        word = WORDS.get(name, name)
        if full is not None and word not in full:
            help_text = importlib.import_module(f"studio.cli.{name}_cmd").HELP if helps else None
            stub = sub.add_parser(word, help=help_text, add_help=False)
            stub.add_argument("_words", nargs=argparse.REMAINDER)
            stub.set_defaults(_run=None, _stub=True)
            continue
        module = importlib.import_module(f"studio.cli.{name}_cmd")
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        # the worker limits after the command word too (the timeout error says "raise --timeout"), into the
        # global options' own dests: given in neither place, the global's default stays (a local default of
        # None used to clobber `onnx-studio --timeout S profile ...`)
        p.add_argument("--timeout", type=_positive, metavar="S", default=argparse.SUPPRESS,
                       help="wall-clock limit of each sandboxed job, seconds (as the global --timeout)")
        p.add_argument("--memory-gb", type=_positive, metavar="GB", default=argparse.SUPPRESS,
                       help="memory limit of each sandbox worker (as the global --memory-gb)")
        if name in PROJECT_COMMANDS:
            p.add_argument("--projects-root", dest="projects_root_here", metavar="DIR", default=argparse.SUPPRESS,
                           help="where projects live (as the global --projects-root)")
        p.set_defaults(_run=module.run)
    return parser


def _command_word(argv: Sequence[str]) -> tuple[str | None, bool]:
    """(the command word ``argv`` names, whether it asks for help), read with the global options alone; a
    guess (``main`` rebuilds the whole parser when the real parse picks another command)."""
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("-h", "--help", action="store_true")
    for flag in ("--timeout", "--projects-root", "--memory-gb"):
        pre.add_argument(flag)
    try:
        known, rest = pre.parse_known_args(list(argv))
    except (argparse.ArgumentError, ValueError):
        return None, True
    word = next((w for w in rest if not w.startswith("-")), None)
    return word, bool(known.help)


def _parse(argv: Sequence[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    word, helps = _command_word(argv)
    parser = build_parser(full={word} if word else set(), helps=helps or word is None)
    args = parser.parse_args(argv)
    if getattr(args, "_stub", False):          # the guess missed: the whole parser decides
        parser = build_parser()
        args = parser.parse_args(argv)
    return parser, args


def main(argv: list[str] | None = None) -> int:
    parser, args = _parse(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    # Worker limits travel as the environment the sandbox reads (studio.core.sandbox.default_limits).
    if args.timeout is not None:
        os.environ["ONNX_STUDIO_TIMEOUT_S"] = str(args.timeout)
    if args.memory_gb is not None:
        os.environ["ONNX_STUDIO_MEMORY_GB"] = str(args.memory_gb)
    root = getattr(args, "projects_root_here", None) or args.projects_root
    if root is not None:          # the environment the server, workers and api.projects_root() read
        os.environ["ONNX_STUDIO_PROJECTS_ROOT"] = os.path.abspath(os.path.expanduser(root))
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except StudioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:          # `onnx-studio inspect --json | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:           # a write no command translated itself: a full or read-only disk, a limit

        err = disk_error(exc, note="the command stopped there")
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
