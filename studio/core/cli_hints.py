"""One builder for every "Equivalent CLI command" a page shows (issue 33, item 5).

Why: each page used to format its own hint by hand, and several dropped options the page ran with
(Precision's --dim, Batch's --engines/--force). A page now lists the options it runs with, once, and this
module turns them into a command the real parser reads back: values are shell-quoted, a mapping becomes
repeated ``--flag key=value``, a sequence becomes one comma-joined value, ``True`` a bare flag and
``None``/``False``/``""`` (the CLI's default) nothing.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

Option = tuple[str, object]


def _words(flag: str, value: object) -> list[str]:
    """The words one option adds to the command; none when the value is the CLI's default."""
    if value is None or value is False or value == "" or (isinstance(value, (list, tuple, dict)) and not value):
        return []
    if value is True:
        return [flag]
    if isinstance(value, Mapping):
        return [w for k, v in value.items() for w in (flag, f"{k}={v}")]
    if isinstance(value, (list, tuple)):
        return [flag, ",".join(str(v) for v in value)]
    if isinstance(value, float):
        return [flag, f"{value:g}"]
    return [flag, str(value)]


def cli_command(subcommand: str, positionals: Sequence[str] = (), options: Sequence[Option] = (),
                raw: str = "") -> str:
    """``onnx-studio <subcommand> <positionals> <options>``, every word quoted for a POSIX shell.

    ``raw`` is appended as it is, for words the shell must expand (Batch's ``--cluster $ONNX_STUDIO_CLUSTER``);
    every option with a value the page knows goes through ``options``."""
    words = ["onnx-studio", *subcommand.split(), *positionals]
    words += [w for flag, value in options for w in _words(flag, value)]
    text = " ".join(shlex.quote(w) for w in words)
    return f"{text} {raw.strip()}".strip()
