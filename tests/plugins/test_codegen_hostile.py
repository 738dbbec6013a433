"""Every template of every plugin target rendered with hostile model text (RELIABILITY R31).

The op type, domain, attribute names and values, port names, symbolic dims, node names, notes and the model
file name carry newlines, quotes, backslashes, ``${}``, ``#``, ``*/``, ``\"\"\"``, NUL, 5,000 characters, U+202E,
``$(...)`` and backticks. Each generated file must parse in its language and have exactly the structure of the
same package rendered with benign names (:mod:`tests.plugins.codegen_checks`): no statement, command, token,
table cell or HTML tag more or less. And the op must still be registered under its real names: the string
literals that name it decode to the hostile text itself.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from studio.plugins import codegen, toolchain
from studio.plugins.scaffold import TARGETS, scaffold
from studio.plugins.signature import AttributeSpec, OpSample, OpSignature, PortSpec
from tests.plugins.codegen_checks import (HOSTILE, bash_words, cmake_commands, cpp_strings, cpp_structure,
                                          markdown_structure, python_structure)
from tests.plugins.plugin_models import require_tool

CPP_SUFFIXES = (".cc", ".cpp", ".hpp", ".h", ".cu")


def _signature(name: str, attr_value: str) -> OpSignature:
    """An op whose every model-supplied string is ``name`` (prefixed per field) -- the same structure for any
    name, so two renderings differ only in the text."""
    def t(prefix: str) -> str:
        return prefix + name

    return OpSignature(
        domain=t("dom"), op_type=name, opset=1, nodes=(t("node"),),
        inputs=(PortSpec(0, t("in"), ("float32",), ((t("N"), 3),)), PortSpec(1, t("in"), ("int64",), ((2,),))),
        outputs=(PortSpec(0, t("out"), ("float32",), ((None, 3),)),),
        attributes=(AttributeSpec(t("s"), "string", (attr_value,), 1, 1), AttributeSpec(t("i"), "int", (3,), 1, 1),
                    AttributeSpec(t("f"), "float", (0.5,), 1, 1), AttributeSpec(t("fs"), "floats", ([1.5, 2.0],), 1, 1),
                    AttributeSpec(t("is"), "ints", ([1, 2],), 1, 1),
                    AttributeSpec(t("ss"), "strings", ([attr_value, "b"],), 1, 1)),
        custom=True,
        samples=(OpSample(t("node"), {t("s"): attr_value, t("i"): 3},
                          (np.ones((2, 3), np.float32), np.zeros((2,), np.int64))),),
        notes=(t("note: "),))


def _render(tmp: Path, name: str, attr_value: str) -> tuple[OpSignature, Path]:
    sig = _signature(name, attr_value)
    sc = scaffold(sig, "all", tmp, model_name=f"m{name}.onnx", model_sha="ab" * 32, opsets={"": 17, sig.domain: 1})
    return sig, sc.root


def _files(root: Path) -> dict[str, Path]:
    """Generated text files by (target, role): the op-named files get a role name so benign and hostile match."""
    out = {}
    for target in TARGETS:
        for path in sorted((root / target).iterdir()):
            if path.is_file():
                role = path.name
                for suffix in ("_op.py", "_extension.py", "_plugin.py", "_op.cc", "_op.cpp", "_op.hpp",
                               "_plugin.cpp", "_plugin.h", "_kernel.cu"):
                    if path.name.endswith(suffix) and path.name not in ("test_op.py", "test_extension.py",
                                                                         "test_plugin.py"):
                        role = "OP" + suffix
                out[f"{target}/{role}"] = path
    return out


@pytest.fixture(scope="module")
def benign(tmp_path_factory):
    return _render(tmp_path_factory.mktemp("benign"), "Foo", "v")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_every_generated_file_keeps_its_structure(case, benign, tmp_path):
    name = HOSTILE[case]
    sig, root = _render(tmp_path, name, "v" + name)
    want, got = _files(benign[1]), _files(root)
    assert sorted(want) == sorted(got)
    for key, path in got.items():
        text = path.read_text(encoding="utf-8")
        base = want[key].read_text(encoding="utf-8")
        assert "\x00" not in text and "\u202e" not in text or key.endswith("signature.json"), key
        if key.endswith(".py"):
            assert text.isascii(), key
            assert python_structure(text) == python_structure(base), key
        elif key.endswith(CPP_SUFFIXES):
            assert text.isascii(), key
            assert cpp_structure(text) == cpp_structure(base), key
        elif key.endswith("CMakeLists.txt"):
            assert text.isascii(), key
            # the op's generated identifier names the targets: the same commands and arguments otherwise
            assert (cmake_commands(text.replace(sig.ident, "IDENT"))
                    == cmake_commands(base.replace(benign[0].ident, "IDENT"))), key
        elif key.endswith(".md"):
            k1, sh1, py1 = markdown_structure(text)
            k0, sh0, py0 = markdown_structure(base)
            assert k1 == k0, key
            assert len(sh1) == len(sh0), key
            for line, line0 in zip(sh1, sh0):
                if line != line0:           # a line with model text: the same words, and nothing ran
                    words, words0 = bash_words(line, tmp_path), bash_words(line0, tmp_path)
                    assert len(words) == len(words0) and words[0] == words0[0], (key, line)
            assert not (tmp_path / "pwned").exists()
            assert [python_structure(p) for p in py1] == [python_structure(p) for p in py0], key
        elif key.endswith(".json"):
            data = json.loads(text)
            assert data["op_type"] == name and data["domain"] == "dom" + name
        else:
            raise AssertionError(f"no check for {key}")


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_the_op_still_registers_under_its_real_names(case, tmp_path):
    """The literals that name the op decode to the model's own strings (escaped, not replaced)."""
    name = HOSTILE[case]
    sig, root = _render(tmp_path, name, "v" + name)
    for target, script in (("ort-python", "register.py"), ("ort-cpp", "test_op.py"),
                           ("openvino-python", "run_model.py"), ("tensorrt", "test_plugin.py")):
        tree = ast.parse((root / target / script).read_text())
        assign = next(n for n in tree.body if isinstance(n, ast.Assign)
                      and any(isinstance(t, ast.Tuple) and [e.id for e in t.elts] == ["DOMAIN", "OP_TYPE"]
                              for t in n.targets))
        assert ast.literal_eval(assign.value) == (sig.domain, sig.op_type)
    ort_cc = next((root / "ort-cpp").glob("*_op.cc")).read_text()
    strings = cpp_strings(ort_cc)
    assert sig.domain in strings and sig.op_type in strings and "s" + name in strings and "v" + name in strings
    ov_ext = cpp_strings((root / "openvino-cpp" / "extension.cpp").read_text())
    assert sig.op_type in ov_ext and sig.domain in ov_ext
    trt_h = cpp_strings(next((root / "tensorrt").glob("*_plugin.h")).read_text())
    assert sig.op_type in trt_h
    readme = (root / "openvino-python" / "README.md").read_text()
    _, _, python = markdown_structure(readme)
    call = next(n for n in ast.walk(ast.parse(python[0])) if isinstance(n, ast.Call)
                and getattr(n.func, "id", "") == "ConversionExtension")
    assert [ast.literal_eval(a) for a in call.args[:2]] == [sig.op_type, sig.domain]


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("case", sorted(set(HOSTILE) - {"nul"}))     # a shell argument cannot hold NUL
def test_readme_commands_quote_the_op_exactly(case, tmp_path):
    """The README's check command, run by bash, hands `--op` the op's real name and nothing runs."""
    name = HOSTILE[case]
    sig, root = _render(tmp_path, name, "v")
    readme = (root / "ort-python" / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if ln.startswith("onnx-studio plugin"))
    command = line.split("   # ")[0].replace("onnx-studio", "printf '%s\\0'", 1)
    proc = subprocess.run(["bash", "--norc", "-c", command], capture_output=True, timeout=30, cwd=tmp_path)
    argv = proc.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert proc.returncode == 0 and argv[argv.index("--op") + 1] == sig.qualified
    assert not (tmp_path / "pwned").exists()
    op_py = (root / "ort-python" / f"{sig.ident}_op.py").read_text()
    doc = ast.get_docstring(ast.parse(op_py))
    doc_line = next(ln.strip() for ln in doc.splitlines() if ln.strip().startswith("onnx-studio plugin"))
    proc = subprocess.run(["bash", "--norc", "-c", doc_line.replace("onnx-studio", "printf '%s\\0'", 1)],
                          capture_output=True, timeout=30, cwd=tmp_path)
    argv = proc.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]
    assert argv[argv.index("--op") + 1] == sig.qualified and argv[1] == f"m{name}.onnx"


def _gxx_syntax(source: Path, includes: list[Path]) -> subprocess.CompletedProcess:
    cmd = [toolchain.cxx_compiler().path or "g++", "-std=c++17", "-fsyntax-only", *(f"-I{i}" for i in includes),
           str(source)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_hostile_cpp_sources_compile(tmp_path):
    """g++ -fsyntax-only on the ONNX Runtime and OpenVINO sources rendered with every hostile string at once,
    with the headers the build uses (skipped where the compiler or the headers are missing; CI has them all)."""
    cxx, ort, ov = toolchain.cxx_compiler(), toolchain.ort_include_dir(), toolchain.openvino_cmake_dir()
    for tool in (cxx, ort, ov):
        require_tool(tool)
    name = "".join(v for k, v in HOSTILE.items() if k != "long")
    sig, root = _render(tmp_path, name, "v" + name)
    src = next((root / "ort-cpp").glob("*_op.cc"))
    proc = _gxx_syntax(src, [Path(ort.path), src.parent])
    assert proc.returncode == 0, proc.stderr[-3000:]
    include = Path(ov.path).parent / "include"
    for src in [next((root / "openvino-cpp").glob("*_op.cpp")), root / "openvino-cpp" / "extension.cpp"]:
        proc = _gxx_syntax(src, [include, src.parent])
        assert proc.returncode == 0, proc.stderr[-3000:]


def test_forgetting_a_filter_cannot_inject():
    """A raw model string in any template position is escaped by the environment's finalize."""
    from studio.plugins.scaffold import _env

    raw = HOSTILE["cmake"] + HOSTILE["python"] + HOSTILE["comment"]
    py = _env("python").from_string('x = "{{ v }}"  # {{ v }}\n"""{{ v }}"""\n').render(v=raw)
    tree = ast.parse(py)
    assert ast.literal_eval(tree.body[0].value) == raw and ast.literal_eval(tree.body[1].value) == raw
    cpp = _env("cpp").from_string('const char* x = "{{ v }}";  // {{ v }}\n/* {{ v }} */ int y;\n').render(v=raw)
    assert cpp_structure(cpp) == cpp_structure('const char* x = "";\nint y;\n') and cpp_strings(cpp) == [raw]
    cm = _env("cmake").from_string('# {{ v }}\nset(X "{{ v }}")\n').render(v=raw)
    assert cmake_commands(cm) == [("set", 2, ("X",))]
    md = _env("markdown").from_string("- {{ v }}\n| {{ v }} | b |\n").render(v=raw + "\n")
    assert markdown_structure(md)[0] == ["item:0:0", "table:3:0", "blank:0:0"]
    with pytest.raises(Exception, match="tojson"):
        _env("python").from_string("{{ v|tojson }}").render(v=raw)


def test_escapers_round_trip():
    for value in [*HOSTILE.values(), "", "plain_name", "a??=b", "/leading"]:
        assert ast.literal_eval(codegen.py_literal(value)) == value
        assert cpp_strings(codegen.c_string(value)) == [value]
        assert "\n" not in codegen.md_text(value) and "\n" not in codegen.cmake_text(value)
        assert codegen.shell_arg(value).isascii() and "\n" not in codegen.shell_arg(value)
    assert codegen.py_literal({"a": [1, float("nan"), None, True]}) == "{'a': [1, float(\"nan\"), None, True]}"
    assert codegen.identifier("Foo_1") == "Foo_1"
    with pytest.raises(ValueError):
        codegen.identifier("a b")
