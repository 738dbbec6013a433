"""Model text in generated sources: escaped for its target language, or a checked identifier.

An op type, a domain, an attribute or tensor name and a doc string come from the model, and the model may come
from anyone. The plugin generator puts them into C++, CMake, Python and Markdown files that a user builds or runs
(RELIABILITY R31: a newline and ``execute_process(COMMAND ...)`` in an op type became a CMake command; a quote
in it put ``open(...)`` into a Python op). So every template value is one of:

* :class:`Code` -- text the generator itself wrote: identifiers checked against :data:`IDENT_PATTERN`
  (:func:`identifier`), literals built by the functions below (:func:`c_string`, :func:`py_literal`,
  :func:`shell_arg`, :func:`md_code`), type names from the studio's own tables. Rendered as is.
* anything else -- rendered through the Jinja environment's ``finalize`` for the file's language
  (:func:`finalizer`), which escapes it so that it is inert in every place a template may put text: inside a
  string literal of that language it decodes to the original text, inside a comment it cannot end the comment
  or the line. Forgetting a filter therefore cannot inject; at worst it shows an escaped name.

Code positions (a function name, a parameter, a CMake target) only ever take :class:`Code` identifiers; a name
that is not one gets a generated identifier (:func:`studio.plugins.opgraph.ident`) and the original appears
escaped in a comment or a string. The generated op still registers under the model's real op type and domain,
written as an escaped string literal.
"""

from __future__ import annotations

import math
import re
import shlex
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["IDENT_PATTERN", "LANGUAGES", "Code", "c_string", "c_text", "cmake_text", "finalizer", "identifier",
           "language_of", "md_code", "md_text", "py_literal", "py_text", "shell_arg"]

IDENT_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
LANGUAGES = ("cpp", "python", "cmake", "markdown")


class Code(str):
    """Text written by the generator (identifier, literal, studio table entry): rendered without escaping."""

    __slots__ = ()


def identifier(text: str) -> Code:
    """``text`` as a :class:`Code` identifier; ``ValueError`` unless it matches :data:`IDENT_PATTERN`."""
    if not isinstance(text, str) or not IDENT_PATTERN.match(text):
        raise ValueError(f"not a generated identifier: {str(text)[:60]!r}")
    return Code(text)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace")


# ---------------------------------------------------------------------------- C / C++

_C_PLAIN = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 !#$%&'()+,-./:;<=>@[]^_`{|}~")


def c_text(text: object) -> str:
    """``text`` for inside a C/C++ string literal or comment: printable ASCII, every other byte of its UTF-8 as a
    three-digit octal escape (never greedy, unlike ``\\x``). ``"``, ``\\`` and ``*`` are always escaped (no
    string end, no line splice, no ``*/``); so are a second ``?`` (no trigraph) and a leading ``/``."""
    out: list[str] = []
    prev = -1
    for i, b in enumerate(_utf8(str(text))):
        plain = b in _C_PLAIN and not (b == 0x2F and i == 0) and not (b == 0x3F and prev == 0x3F)
        if b == 0x3F and prev != 0x3F:
            plain = True
        out.append(chr(b) if plain else f"\\{b:03o}")
        prev = b
    return "".join(out)


def c_string(text: object) -> Code:
    """A C/C++ string literal whose bytes are exactly ``text``'s UTF-8."""
    return Code(f'"{c_text(text)}"')


def _escaped(text: object, table: Mapping[str, str], outside: Callable[[str], str]) -> str:
    """``text`` character by character: ``table``'s escape where it has one, printable ASCII as itself,
    any other character as ``outside(ch)``."""
    return "".join(table[ch] if ch in table else ch if " " <= ch <= "~" else outside(ch) for ch in str(text))


# ---------------------------------------------------------------------------- Python

_PY_ESCAPES = {"\\": "\\\\", "'": "\\'", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def py_text(text: object) -> str:
    """``text`` for inside a Python string literal (any quotes, docstrings too) or a ``#`` comment: ASCII only,
    quotes and backslashes escaped, everything outside printable ASCII as ``\\x``/``\\u``/``\\U`` escapes."""
    return _escaped(text, _PY_ESCAPES, _py_codepoint)


def _py_codepoint(ch: str) -> str:
    cp = ord(ch)
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def py_literal(value: Any) -> Code:
    """A Python literal of plain data (str, bytes, bool, int, float, None, list, tuple, dict), ASCII only;
    non-finite floats as ``float("nan")``/``float("inf")``. Other objects become their ``str``."""
    if value is None or isinstance(value, bool):
        return Code(repr(value))
    if isinstance(value, int):
        return Code(str(int(value)))
    if isinstance(value, float):
        if math.isnan(value):
            return Code('float("nan")')
        if math.isinf(value):
            return Code('float("inf")' if value > 0 else '-float("inf")')
        return Code(repr(value))
    if isinstance(value, bytes):
        return Code(ascii(value))
    if isinstance(value, (list, tuple)):
        items = ", ".join(py_literal(v) for v in value)
        return Code(f"[{items}]" if isinstance(value, list) else f"({items}{',' if len(value) == 1 else ''})")
    if isinstance(value, dict):
        return Code("{" + ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items()) + "}")
    if hasattr(value, "item") and callable(value.item):      # numpy scalars
        return py_literal(value.item())
    return Code(f"'{py_text(value)}'")


# ---------------------------------------------------------------------------- CMake

_CMAKE_ESCAPES = {"\\": "\\\\", '"': '\\"', "$": "\\$", ";": "\\;", "@": "\\@", "[": "\\[", "]": "\\]",
                  "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def cmake_text(text: object) -> str:
    """``text`` for inside a quoted CMake argument or a ``#`` comment: no variable reference (``${}``,
    ``$ENV{}``, ``$<>``), no quote, no line end; characters outside printable ASCII as ``<U+XXXX>``
    (CMake has no numeric escapes)."""
    return _escaped(text, _CMAKE_ESCAPES, lambda ch: f"<U+{ord(ch):04X}>")


# ---------------------------------------------------------------------------- Markdown

_MD_PUNCT = frozenset("\\`*[]<>|~&$")   # what can start a link, emphasis, code, HTML, entity, math or cell
_MD_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _visible(ch: str) -> bool:
    return ch == " " or (unicodedata.category(ch) not in _MD_INVISIBLE and not ch.isspace())


def md_text(text: object) -> str:
    """``text`` as Markdown text (paragraph, list item, table cell; never at a line start in the templates): one
    line, the characters that open a link, emphasis, code span, HTML tag, entity, math or table cell
    backslash-escaped ('_' unless inside a word), control and format characters (newline, NUL, U+202E ...)
    shown as ``[U+XXXX]``."""
    out: list[str] = []
    s = str(text)
    for i, ch in enumerate(s):
        if ch in _MD_PUNCT or (ch == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum())):
            out.append("\\" + ch)
        elif _visible(ch):
            out.append(ch)
        else:
            out.append(f"\\[U+{ord(ch):04X}\\]")
    return "".join(out)


def md_code(text: object) -> Code:
    """An inline Markdown code span showing ``text`` literally (invisible characters as ``[U+XXXX]``)."""
    shown = "".join(ch if _visible(ch) else f"[U+{ord(ch):04X}]" for ch in str(text))
    longest = max((len(m) for m in re.findall(r"`+", shown)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or longest else ""
    return Code(f"{fence}{pad}{shown}{pad}{fence}")


# ---------------------------------------------------------------------------- shell

def shell_arg(text: object) -> Code:
    """One POSIX-shell word for ``text``, on one line of printable ASCII: ``shlex.quote`` when ``text`` is
    printable ASCII, else ANSI-C quoting (``$'...'``, bash/zsh/ksh) with ``\\x`` escapes of its UTF-8 bytes."""
    s = str(text)
    if all(" " <= ch <= "~" for ch in s):
        return Code(shlex.quote(s))
    body = []
    for b in _utf8(s):
        ch = chr(b)
        body.append("\\\\" if ch == "\\" else "\\'" if ch == "'" else ch if " " <= ch <= "~" else f"\\x{b:02x}")
    return Code("$'" + "".join(body) + "'")


# ---------------------------------------------------------------------------- Jinja

_ESCAPE: dict[str, Callable[[object], str]] = {"cpp": c_text, "python": py_text, "cmake": cmake_text,
                                               "markdown": md_text}


def language_of(template: str) -> str:
    """The target language of a template, from its file name."""
    name = template.rsplit("/", 1)[-1]
    if name.endswith(".py.j2"):
        return "python"
    if name.endswith(".md.j2"):
        return "markdown"
    if name.startswith("CMakeLists.txt"):
        return "cmake"
    if name.endswith((".cc.j2", ".cpp.j2", ".hpp.j2", ".h.j2", ".cu.j2")):
        return "cpp"
    raise ValueError(f"no escaping rule for template {template}")


def finalize_value(value: Any, escape: Callable[[object], str]) -> Any:
    """What a ``{{ }}`` expression renders: :class:`Code` as is, numbers as numbers, anything else escaped."""
    import jinja2

    if isinstance(value, Code) or isinstance(value, jinja2.Undefined):
        return value
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, float)):
        return repr(value) if math.isfinite(value) else escape(repr(value))
    return escape(value)


def finalizer(language: str) -> Callable[[Any], Any]:
    """The Jinja ``finalize`` of ``language``'s environment."""
    escape = _ESCAPE[language]
    return lambda value: finalize_value(value, escape)


def filters(language: str) -> dict[str, Callable[[Any], Code]]:
    """Filters a template of ``language`` may use; each returns :class:`Code` valid in that language."""
    escape = _ESCAPE[language]
    if language == "cpp":
        return {"cstr": c_string}
    if language == "python":
        return {"py": py_literal, "shell": lambda v: Code(py_text(shell_arg(v)))}
    if language == "markdown":
        return {"code": md_code, "shell": shell_arg, "py": py_literal, "cstr": c_string}
    return {"cmake": lambda v: Code(f'"{escape(v)}"')}
