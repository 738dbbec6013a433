"""Language-level checks of generated files (RELIABILITY R31): each turns a file into its *structure* -- what
would run or be declared -- so that a rendering with hostile names can be compared with one with benign names.

* Python: ``ast.parse`` and the node types plus every called name.
* C/C++/CUDA: a tokenizer that splices lines like the compiler (phase 2), drops comments and reads string and
  character literals with their escapes; it fails on an unclosed literal or comment. Identifiers become
  ``ID``, literals ``STR``/``NUM``: two renderings from the same template must give the same token stream.
* CMake: a tokenizer of CMake's grammar (commands, quoted/bracket/unquoted arguments, line and bracket
  comments): the list of commands with their argument counts, and the unquoted arguments.
* Markdown: the kind of every line (fence, heading, table row, list item, text), shell lines of ``bash`` fences
  split into words by bash itself (``printf``), ``python`` fences parsed.
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections import Counter
from pathlib import Path

_CPP_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<line_comment>//[^\n]*)
  | (?P<block_comment>/\*.*?\*/)
  | (?P<open_comment>/\*)
  | (?P<string>(?:u8|u|U|L)?"(?:[^"\\\n]|\\.)*")
  | (?P<char>(?:u8|u|U|L)?'(?:[^'\\\n]|\\.)+')
  | (?P<bad_quote>["'])
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<number>\.?[0-9](?:[eEpP][+-]|[A-Za-z0-9_.])*)
  | (?P<punct>::|->|<<|>>|<=|>=|==|!=|&&|\|\||\+\+|--|[-+*/%&|^~!=<>?:;,.(){}\[\]#])
  | (?P<other>.)
""", re.S | re.X)


# Model text that would break out of every language the plugin templates write (the key says which).
HOSTILE = {
    "cmake": 'X"\n);execute_process(COMMAND touch /tmp/pwned)\n#',
    "python": "x');open('/etc/hostname').read();('\"\"\"\nimport os; os.system('id') #",
    "comment": "*/ int evil(); /* \\",
    "shell": "${CMAKE_COMMAND}$ENV{HOME}$(id)`id`$<1:x>@v@;",
    "nul": "a\x00b\x00",
    "long": "L" * 5000,
    "rtl": "\u202eevil\u2066😀",
    "markdown": "](javascript:alert(1))<script>|x|&#8238;*_`code`_\r\n# h\n```\n",
    "splice": "trail\\",
}


def cpp_structure(text: str) -> list[str]:
    """The token stream of a C/C++/CUDA source with identifiers, literals and numbers abstracted."""
    if "\x00" in text:
        raise AssertionError("raw NUL byte in a C++ source")
    spliced = text.replace("\\\n", "")
    out: list[str] = []
    for m in _CPP_TOKEN.finditer(spliced):
        kind = m.lastgroup
        if kind in ("ws", "line_comment", "block_comment"):
            continue
        if kind in ("open_comment", "bad_quote", "other"):
            raise AssertionError(f"unclosed comment/literal or stray character at {spliced[m.start():m.start() + 60]!r}")
        out.append({"string": "STR", "char": "STR", "ident": "ID", "number": "NUM"}.get(kind, m.group()))
    return out


def cpp_strings(text: str) -> list[str]:
    """The string literals of a C++ source, decoded (octal/simple escapes), in order."""
    spliced = text.replace("\\\n", "")
    values = []
    for m in _CPP_TOKEN.finditer(spliced):
        if m.lastgroup == "string":
            body = m.group()[m.group().index('"') + 1:-1]
            raw = bytearray()
            i = 0
            while i < len(body):
                ch = body[i]
                if ch != "\\":
                    raw += ch.encode()
                    i += 1
                    continue
                nxt = body[i + 1]
                if nxt in "01234567":
                    j = i + 1
                    while j < min(i + 4, len(body)) and body[j] in "01234567":
                        j += 1
                    raw.append(int(body[i + 1:j], 8))
                    i = j
                else:
                    raw += {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0"}.get(nxt, nxt.encode())
                    i += 2
            values.append(raw.decode("utf-8", "surrogateescape"))
    return values


def python_structure(text: str) -> tuple[Counter, set[str]]:
    """(node-type counts without constants and names, every name called) of a Python source."""
    tree = ast.parse(text)
    kinds: Counter = Counter()
    called: set[str] = set()
    for node in ast.walk(tree):
        kinds[type(node).__name__] += 1
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else "?")
    return kinds, called


_CMAKE_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r]+)
  | (?P<newline>\n)
  | (?P<bracket_comment>\#\[(?P<eq1>=*)\[.*?\](?P=eq1)\])
  | (?P<line_comment>\#[^\n]*)
  | (?P<bracket_arg>\[(?P<eq2>=*)\[.*?\](?P=eq2)\])
  | (?P<quoted>"(?:[^"\\]|\\.)*")
  | (?P<open>\()
  | (?P<close>\))
  | (?P<unquoted>(?:[^\s()#"\\]|\\.)+)
  | (?P<bad>.)
""", re.S | re.X)


def bash_words(line: str, cwd: Path) -> list[str]:
    """The words bash makes of one command line (``printf`` prints them; nothing else runs unless the line
    itself substitutes a command -- which is what a hostile name must not achieve)."""
    proc = subprocess.run(["bash", "--norc", "--noprofile", "-c", "printf '%s\\0' " + line], capture_output=True,
                          timeout=30, cwd=cwd)
    if proc.returncode != 0:
        raise AssertionError(f"bash could not read {line[:80]!r}: {proc.stderr[-300:]!r}")
    return proc.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def cmake_commands(text: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(command, argument count, unquoted arguments) of every command invocation in a CMakeLists.txt."""
    commands: list[tuple[str, int, tuple[str, ...]]] = []
    depth = 0
    name: str | None = None
    args: list[str] = []
    unquoted: list[str] = []
    pending: str | None = None
    for m in _CMAKE_TOKEN.finditer(text):
        kind = m.lastgroup
        if kind in ("ws", "newline", "bracket_comment", "line_comment"):
            if kind == "line_comment" and depth == 0 and pending is not None:
                raise AssertionError(f"command name {pending!r} without arguments")
            continue
        if kind == "bad":
            raise AssertionError(f"unparsable CMake at {text[m.start():m.start() + 60]!r}")
        if depth == 0:
            if kind == "unquoted" and pending is None:
                pending = m.group()
                continue
            if kind == "open" and pending is not None:
                name, args, unquoted, depth, pending = pending, [], [], 1, None
                continue
            raise AssertionError(f"text outside a command: {m.group()[:60]!r}")
        if kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
            if depth == 0:
                commands.append((str(name).lower(), len(args), tuple(unquoted)))
        else:
            args.append(m.group())
            if kind == "unquoted":
                unquoted.append(m.group())
    if depth or pending is not None:
        raise AssertionError("unclosed CMake command")
    return commands


_HTML = re.compile(r"(?<!\\)<[A-Za-z/!?]")
_CELL = re.compile(r"(?<!\\)\|")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)")


def markdown_structure(text: str) -> tuple[list[str], list[str], list[str]]:
    """(line kinds, the lines of `bash` fences, python fence sources) of a Markdown file. A line's kind carries
    its count of table-cell bars and of raw HTML tag openings (outside code fences and code spans)."""
    kinds, shell, python = [], [], []
    fence: str | None = None
    block: list[str] = []
    for line in text.split("\n"):
        if line.startswith("```"):
            if fence is None:
                fence, block = line[3:].strip(), []
            else:
                if fence == "python":
                    python.append("\n".join(block))
                fence = None
            kinds.append("fence")
            continue
        if fence is not None:
            kinds.append(f"code:{fence}")
            block.append(line)
            if fence == "bash" and line.strip():
                shell.append(line)
            continue
        kind = ("blank" if not line.strip() else "heading" if line.startswith("#")
                else "table" if line.startswith("|") else "item" if line.startswith("- ") else "text")
        if kind != "table":                 # a code span shows its text literally (in a table a '|' still splits)
            line = _CODE_SPAN.sub("CODE", line)
        kinds.append(f"{kind}:{len(_CELL.findall(line))}:{len(_HTML.findall(line))}")
    if fence is not None:
        raise AssertionError("unclosed code fence")
    return kinds, shell, python
