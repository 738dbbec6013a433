"""Render plugin packages for one op from its signature: ONNX Runtime (Python op, C++ custom-op library),
OpenVINO (Python conversion extension, C++ ``ov::op::Op`` extension) and TensorRT (IPluginV3 C++ plugin and a
``tensorrt.plugin`` Python plugin).

Each package is self-contained: sources pre-filled with the op's names, attributes, port counts and dtypes,
build files, a README saying how to build and load it, the samples captured from the model
(``samples/*.npz``: ``in<i>`` inputs, ``out<j>`` reference outputs) and a test harness that feeds them and
compares. Where the studio knows the op (the GridSample family) shape inference and the kernel are filled in;
for any other op they are marked TODO -- the honest output for an op nobody has described.

Templates are Jinja2 (``templates/``), rendered with ``StrictUndefined`` so a missing field is an error here,
not a hole in the generated code. Model text never reaches a generated file raw (RELIABILITY R31): each
language has its own environment whose ``finalize`` escapes every value that is not generated
:class:`~studio.plugins.codegen.Code` (see :mod:`studio.plugins.codegen`), code positions take checked
identifiers only, and the op registers under its real op type and domain written as escaped literals.
"""

from __future__ import annotations

import io
import json
import keyword
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.choices import comma_items
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.paths import atomic_write_bytes, atomic_write_text, safe_child
from studio.plugins import codegen
from studio.plugins.codegen import Code, identifier
from studio.plugins.opgraph import ident as make_ident
from studio.plugins.reference import get_reference
from studio.plugins.signature import OpSignature
from diagnostics import reference_ops as r
from studio import __version__
from studio.core.outputs import writing_folder

__all__ = ["TARGETS", "PluginFile", "PluginPackage", "PluginScaffold", "expand_targets", "known_kernel",
           "render_python_impl", "scaffold", "zip_folder"]

TARGETS = ("ort-python", "ort-cpp", "openvino-python", "openvino-cpp", "tensorrt")
_TITLES = {"ort-python": "ONNX Runtime Python custom op (onnxruntime-extensions)",
           "ort-cpp": "ONNX Runtime C++ custom-op library",
           "openvino-python": "OpenVINO Python conversion extension",
           "openvino-cpp": "OpenVINO C++ extension (ov::op::Op)",
           "tensorrt": "TensorRT plugin (IPluginV3, C++/CUDA, plus a tensorrt.plugin Python plugin)"}
_TEMPLATES = Path(__file__).resolve().parent / "templates"

# Ops whose kernel the templates know: (domain, op_type) -> (kernel family, attribute style).
_KNOWN_KERNELS = {("mmdeploy", "grid_sampler"): ("grid_sample", "enum"),
                  ("mmcv", "grid_sampler"): ("grid_sample", "enum"),
                  ("com.microsoft", "GridSample"): ("grid_sample", "names"),
                  ("", "GridSample"): ("grid_sample", "names")}

_CPP_PORT = {"float32": "float", "float64": "double", "int64": "int64_t", "int32": "int32_t", "int16": "int16_t",
             "int8": "int8_t", "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
             "bool": "bool", "float16": "Ort::Float16_t", "bfloat16": "Ort::BFloat16_t"}
_TRT_DTYPE = {"float32": "DataType::kFLOAT", "float16": "DataType::kHALF", "bfloat16": "DataType::kBF16",
              "int32": "DataType::kINT32", "int64": "DataType::kINT64", "int8": "DataType::kINT8",
              "uint8": "DataType::kUINT8", "bool": "DataType::kBOOL"}
_OV_TYPE = {"float32": "ov::element::f32", "float64": "ov::element::f64", "float16": "ov::element::f16",
            "bfloat16": "ov::element::bf16", "int64": "ov::element::i64", "int32": "ov::element::i32",
            "int8": "ov::element::i8", "uint8": "ov::element::u8", "bool": "ov::element::boolean"}
_PYOP_DT = {"float32": "dt_float", "float64": "dt_double", "float16": "dt_float16", "int64": "dt_int64",
            "int32": "dt_int32", "int16": "dt_int16", "int8": "dt_int8", "uint8": "dt_uint8", "uint16": "dt_uint16",
            "uint32": "dt_uint32", "uint64": "dt_uint64", "bool": "dt_bool", "string": "dt_string"}
_CPP_KEYWORDS = {"int", "float", "double", "class", "struct", "new", "delete", "this", "operator", "default", "case",
                 "switch", "template", "typename", "namespace", "private", "public", "protected", "virtual", "const",
                 "auto", "register", "union", "char", "long", "short", "signed", "unsigned", "void", "bool", "true",
                 "false", "return", "if", "else", "for", "while", "do", "goto", "static", "extern", "inline"}


# Names the templates themselves use (parameters, namespaces, modules): a port or attribute may not shadow them.
_TEMPLATE_NAMES = {"outputs", "stream", "node", "tactic", "std", "Ort", "ov", "nvinfer1", "studio_gs", "studio_plugin",
                   "np", "trtp", "torch", "Tuple", "os", "sys", "glob", "onnx", "ort", "helper", "info", "api"}


@dataclass(frozen=True)
class PluginFile:
    path: str            # relative to the package folder
    description: str
    bytes: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class PluginPackage:
    target: str
    folder: str          # relative to the scaffold's output folder
    title: str
    status: str
    complete: bool       # the kernel and shape inference are filled in (a known op)
    files: tuple[PluginFile, ...]

    def to_dict(self) -> dict:
        return {"target": self.target, "folder": self.folder, "title": self.title, "status": self.status,
                "complete": self.complete, "files": [f.to_dict() for f in self.files]}


@dataclass(frozen=True)
class PluginScaffold:
    op: str
    root: Path = field(repr=False)               # the op's folder inside the output folder
    packages: tuple[PluginPackage, ...]
    signature: dict = field(repr=False, compare=False, default_factory=dict)

    def package(self, target: str) -> PluginPackage:
        for p in self.packages:
            if p.target == target:
                return p
        raise KeyError(target)

    def to_dict(self) -> dict:
        return {"op": self.op, "folder": self.root.name, "packages": [p.to_dict() for p in self.packages],
                "signature": self.signature}


def expand_targets(target: str | Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    for t in comma_items(target):
        if t == "all":
            out.extend(x for x in TARGETS if x not in out)
        elif t in TARGETS:
            if t not in out:
                out.append(t)
        else:
            raise StudioError(f"unknown plugin target '{t[:40]}'; choose from {', '.join(TARGETS)} or all",
                              code=ErrorCode.BAD_TARGET)
    if not out:
        raise StudioError(f"choose a plugin target: {', '.join(TARGETS)} or all", code=ErrorCode.BAD_TARGET)
    return tuple(out)


def known_kernel(sig: OpSignature) -> tuple[str | None, str | None]:
    """(kernel family, attribute style) when the templates can fill in the kernel; (None, None) otherwise."""
    family, style = _KNOWN_KERNELS.get((sig.domain, sig.op_type), (None, None))
    if family == "grid_sample" and (len(sig.inputs) != 2 or len(sig.outputs) != 1):
        return None, None
    return family, style


# ---------------------------------------------------------------------------- template context

def _unique(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        base = n
        if keyword.iskeyword(base) or base in _CPP_KEYWORDS or base in _TEMPLATE_NAMES:
            base = f"{base}_"
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.append(base if k == 0 else f"{base}_{k}")
    return out


def _shapes_text(shapes: Sequence[Any]) -> str:
    parts = ["[" + ",".join("?" if d is None else str(d) for d in s) + "]" for s in shapes if s is not None]
    return " | ".join(parts[:4]) + (" ..." if len(parts) > 4 else "") if parts else "(shape unknown)"


def _cpp_float(value: Any) -> str:
    v = float(value or 0.0)
    if v != v:
        return "std::numeric_limits<float>::quiet_NaN()"
    if v in (float("inf"), float("-inf")):
        return ("" if v > 0 else "-") + "std::numeric_limits<float>::infinity()"
    return f"{v!r}f"


def _cpp_literal(value: Any, kind: str) -> Code:
    """A C++ literal of an attribute's default (strings escaped by :func:`codegen.c_string`)."""
    if kind == "int":
        return Code(f"int64_t{{{int(value or 0)}}}")
    if kind == "float":
        return Code(_cpp_float(value))
    if kind == "string":
        return Code(f"std::string({codegen.c_string(str(value or ''))})")
    if kind == "ints":
        return Code("std::vector<int64_t>{" + ", ".join(str(int(v)) for v in (value or [])) + "}")
    if kind == "floats":
        return Code("std::vector<float>{" + ", ".join(_cpp_float(v) for v in (value or [])) + "}")
    if kind == "strings":
        return Code("std::vector<std::string>{" + ", ".join(codegen.c_string(str(v)) for v in (value or [])) + "}")
    return Code("{}")


def _code(value: str | None) -> Code | None:
    """A studio table entry (a C++/Python type or constant name) as generated code."""
    return None if value is None else Code(value)


_ATTR_CPP = {"int": "int64_t", "float": "float", "string": "std::string", "ints": "std::vector<int64_t>",
             "floats": "std::vector<float>", "strings": "std::vector<std::string>"}
_ATTR_TRT = {"int": ("int32_t", "PluginFieldType::kINT32"), "float": ("float", "PluginFieldType::kFLOAT32"),
             "string": ("std::string", "PluginFieldType::kCHAR")}
_ATTR_QDP = {"int": "int", "float": "float", "string": "str"}
_ATTR_PYOP = {"int": "dt_int64", "float": "dt_float", "string": "dt_string"}


def _attr_kind(value: Any) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "unknown"


def _attrs(sig: OpSignature) -> list[dict[str, Any]]:
    specs: list[tuple[str, str, list[Any]]] = [(a.name, a.type, list(a.values)) for a in sig.attributes]
    ref = get_reference(sig.domain, sig.op_type)
    for name, value in (ref.attr_defaults.items() if ref else []):
        if not any(n == name for n, _, _ in specs):
            specs.append((name, _attr_kind(value), [value]))
    names = _unique([make_ident(n) for n, _, _ in specs])
    out = []
    for (name, kind, values), cname in zip(specs, names):
        default = values[0] if values else None
        if ref and name in ref.attr_defaults:
            default = ref.attr_defaults[name]
        trt = _ATTR_TRT.get(kind)
        out.append({
            "name": name, "cname": identifier(cname), "py": identifier(cname), "type": kind,
            "values_text": ", ".join(json.dumps(v)[:40] for v in values[:8]) + (" ..." if len(values) > 8 else ""),
            "cpp_type": _code(_ATTR_CPP.get(kind)), "cpp_default": _cpp_literal(default, kind),
            "py_default": codegen.py_literal(default) if kind in ("int", "float", "string") else Code("None"),
            "pyop_dt": _code(_ATTR_PYOP.get(kind)), "trt_type": _code(trt[0]) if trt else None,
            "trt_field": _code(trt[1]) if trt else None, "qdp_type": _code(_ATTR_QDP.get(kind)),
            "is_list": kind in ("ints", "floats", "strings")})
    return out


def _ports(sig: OpSignature, outputs: bool) -> list[dict[str, Any]]:
    ports = sig.outputs if outputs else sig.inputs
    names = _unique([make_ident(p.name) for p in ports])
    out = []
    for p, cname in zip(ports, names):
        dtype = p.dtype
        out.append({
            "index": p.index, "name": p.name, "cname": identifier(cname), "py": identifier(cname), "dtype": dtype,
            "optional": p.optional, "shapes_text": _shapes_text(p.shapes), "rank": p.rank,
            "cpp_type": Code(_CPP_PORT.get(dtype or "float32", "float")),
            "trt_dtype": Code(_TRT_DTYPE.get(dtype or "float32", "DataType::kFLOAT")),
            "trt_type_expr": Code(_TRT_DTYPE.get(dtype) if dtype in _TRT_DTYPE else "inputTypes[0]"),
            "ov_type": Code(_OV_TYPE.get(dtype) if dtype in _OV_TYPE else "get_input_element_type(0)"),
            "pyop_dt": Code(_PYOP_DT.get(dtype or "float32", "dt_float"))})
    return out


def _sample_attrs(sig: OpSignature) -> dict[str, dict[str, Any]]:
    def plain(attrs: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in attrs.items() if v not in ("<graph>", "<tensor>")}
    return {f"sample_{i}.npz": plain(s.attrs) for i, s in enumerate(sig.samples)}


def _output_specs(sig: OpSignature) -> list[dict[str, Any]]:
    """What the harnesses check outputs against when a sample has no reference output."""
    return [{"dtype": p.dtype, "shapes": [None if s is None else list(s) for s in p.shapes]} for p in sig.outputs]


def _grid_sample_numpy() -> str:
    """The reference's own GridSample code (any rank), as source to write into a standalone Python op."""
    return Code(r.grid_sample_source())


def _context(sig: OpSignature, model_name: str, model_sha: str, opsets: dict[str, int]) -> dict[str, Any]:
    kernel, style = known_kernel(sig)
    gs_numpy = _grid_sample_numpy() if kernel == "grid_sample" else ""
    inputs, outputs = _ports(sig, False), _ports(sig, True)
    attrs = _attrs(sig)
    taken = {p["cname"] for p in inputs + outputs}
    for a in attrs:   # a C++/Python parameter list holds ports and attributes together
        if a["cname"] in taken:
            a["cname"] = a["py"] = identifier(f"{a['cname']}_attr")
    params = [p["py"] for p in inputs]
    kw = [f"{a['py']}={a['py_default']}" for a in attrs]
    return {
        "qualified": sig.qualified, "domain": sig.domain, "op_type": sig.op_type, "ident": identifier(sig.ident),
        "class_name": identifier(sig.class_name), "model_name": model_name, "model_sha8": Code(model_sha[:8]),
        "node_count": len(sig.nodes), "reference": sig.reference.split(":")[0] if sig.reference else None,
        "inputs": inputs, "outputs": outputs, "attrs": attrs,
        "kernel": None if kernel is None else Code(kernel), "attr_style": None if style is None else Code(style),
        "py_params": Code(", ".join(params + (["*"] + kw if kw else []))),
        "alias": identifier(f"StudioPyOp_{sig.ident}"), "opsets": opsets, "sample_attrs": _sample_attrs(sig),
        "output_specs": _output_specs(sig), "grid_sample_numpy": gs_numpy,
        "studio_version": Code(__version__), "plugin_id": f"{sig.domain or 'ai.onnx'}::{sig.op_type}",
        "plugin_namespace": sig.domain or "ai.onnx",
    }


_ENVS: dict[str, Any] = {}


def _env(language: str) -> Any:
    """The Jinja environment of one target language: its ``finalize`` escapes every value that is not
    :class:`Code`, and it has only that language's literal filters (no ``tojson``: JSON is not C++ or Python)."""
    env = _ENVS.get(language)
    if env is None:
        import jinja2

        env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(_TEMPLATES)), undefined=jinja2.StrictUndefined,
                                 trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                                 autoescape=False, finalize=codegen.finalizer(language))
        env.filters.pop("tojson", None)
        env.filters.update(codegen.filters(language))
        _ENVS[language] = env
    return env


def render(template: str, ctx: dict[str, Any]) -> str:
    """One template rendered in the environment of its file's language."""
    return _env(codegen.language_of(template)).get_template(template).render(**ctx)


def render_python_impl(sig: OpSignature, target: str, *, model_name: str = "model.onnx") -> str:
    """The editable Python body of ``target`` ("ort-python" or "openvino-python"), pre-filled for the op."""
    ctx = _context(sig, model_name, "", {})
    if target == "ort-python":
        ctx.update(file_name=Code(f"{sig.ident}_op.py"), module_name=identifier(f"{sig.ident}_op"))
        return render("ort_python/op.py.j2", ctx)
    if target == "openvino-python":
        ctx.update(file_name=Code(f"{sig.ident}_extension.py"), module_name=identifier(f"{sig.ident}_extension"))
        return render("openvino_python/extension.py.j2", ctx)
    raise StudioError(f"no Python implementation for target '{target}'; use ort-python or openvino-python",
                      code=ErrorCode.BAD_TARGET)


# ---------------------------------------------------------------------------- packages

def _status(target: str, complete: bool) -> str:
    body = ("shape inference and kernel filled in for this op (4-D and 5-D)" if complete
            else "skeleton: shape inference and the kernel are marked TODO (onnx-studio knows no kernel for this op)")
    if target == "tensorrt":
        return ("NOT COMPILED HERE -- TensorRT is not installable on the machine that generated it (it needs CUDA "
                "and NVIDIA's packages); written against the documented TensorRT 10/11 IPluginV3 API, not verified "
                f"here; {body}")
    if target in ("ort-cpp", "openvino-cpp"):
        return f"C++ sources; `onnx-studio plugin ... --build` compiles them and checks them against the reference; {body}"
    return f"Python; `onnx-studio plugin ... --impl FILE` runs it in a confined worker against the reference; {body}"


def _files_for(target: str, sig: OpSignature, ctx: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(template, output path, description) per file of a package."""
    i = sig.ident
    kernel = ctx["kernel"]
    if target == "ort-python":
        return [("ort_python/op.py.j2", f"{i}_op.py", "the op's NumPy body, `compute(...)` -- edit this"),
                ("ort_python/register.py.j2", "register.py", "registers it with onnxruntime-extensions and runs a model"),
                ("ort_python/test_op.py.j2", "test_op.py", "test harness: captured inputs vs. reference outputs")]
    if target == "openvino-python":
        return [("openvino_python/extension.py.j2", f"{i}_extension.py",
                 "`convert(node)`: the op mapped onto OpenVINO operations -- edit this"),
                ("openvino_python/run_model.py.j2", "run_model.py", "converts a model with the extension and runs it"),
                ("openvino_python/test_extension.py.j2", "test_extension.py",
                 "test harness: captured inputs vs. reference outputs")]
    kernel_file = [("common/grid_sample_kernel.h", "grid_sample_kernel.h",
                    "the GridSample maths, shared by CPU and CUDA code")] if kernel == "grid_sample" else []
    if target == "ort-cpp":
        return [("ort_cpp/op.cc.j2", f"{i}_op.cc", "the custom op (Ort::Custom::CreateLiteCustomOp) and RegisterCustomOps"),
                ("ort_cpp/CMakeLists.txt.j2", "CMakeLists.txt", "CMake build of the shared library"),
                *kernel_file,
                ("common/test_cpp_ort.py.j2", "test_op.py", "test harness: the built library vs. reference outputs")]
    if target == "openvino-cpp":
        return [("openvino_cpp/op.hpp.j2", f"{i}_op.hpp", "the ov::op::Op subclass"),
                ("openvino_cpp/op.cpp.j2", f"{i}_op.cpp", "shape inference and evaluate() (the kernel)"),
                ("openvino_cpp/extension.cpp.j2", "extension.cpp",
                 "OPENVINO_CREATE_EXTENSIONS: the op and its ONNX frontend conversion"),
                ("openvino_cpp/CMakeLists.txt.j2", "CMakeLists.txt", "CMake build against OpenVINO's package config"),
                *kernel_file,
                ("common/test_cpp_openvino.py.j2", "test_extension.py",
                 "test harness: the built extension vs. reference outputs")]
    if target == "tensorrt":
        return [("tensorrt/plugin.h.j2", f"{i}_plugin.h", "IPluginV3 plugin and IPluginCreatorV3One creator"),
                ("tensorrt/plugin.cpp.j2", f"{i}_plugin.cpp", "plugin methods, creator and the getCreators entry point"),
                ("tensorrt/kernel.cu.j2", f"{i}_kernel.cu", "the CUDA kernel and its launcher"),
                ("tensorrt/CMakeLists.txt.j2", "CMakeLists.txt", "CMake build (CUDA + TensorRT)"),
                *kernel_file,
                ("tensorrt/python_plugin.py.j2", f"{i}_plugin.py", "the same op as a tensorrt.plugin Python plugin"),
                ("tensorrt/test_plugin.py.j2", "test_plugin.py", "test harness: engine with the plugin vs. reference outputs")]
    raise StudioError(f"unknown target {target}", code=ErrorCode.BAD_TARGET)


def _op_folder(raw: str) -> str:
    """The op's folder: its identifier, plus a hash of the raw name when that changed it, so ops whose
    names collide after sanitizing (``a/b``, ``a_b``) never share a folder (R38)."""
    name = make_ident(raw)
    if name == raw:
        return name
    import hashlib

    return f"{name[:80]}-{hashlib.sha256(raw.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def _module_name(target: str, ident: str) -> Code:
    return identifier({"ort-python": f"{ident}_op", "openvino-python": f"{ident}_extension"}.get(target, ident))


def _library_name(target: str, ident: str) -> Code:
    return identifier({"ort-cpp": f"{ident}_ort", "openvino-cpp": f"{ident}_openvino",
                       "tensorrt": f"{ident}_trt"}.get(target, ident))


def _write_samples(folder: Path, sig: OpSignature) -> list[PluginFile]:
    """One ``samples/sample_<i>.npz`` per captured sample: ``in<j>`` inputs and, when the op has a reference,
    ``out<j>`` expected outputs. Inputs are written without outputs too (the normal case for a truly custom op):
    the harnesses then run the op and check its outputs against the declared dtype/shape."""
    files = []
    for i, s in enumerate(sig.samples):
        arrays = {f"in{j}": a for j, a in enumerate(s.inputs) if a is not None}
        if not arrays:
            continue
        arrays.update({f"out{j}": a for j, a in enumerate(s.outputs or ())})
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # scratch: an in-memory buffer
        rel = f"samples/sample_{i}.npz"
        atomic_write_bytes(safe_child(folder, rel), buf.getvalue())
        what = ("and the reference outputs" if s.outputs is not None
                else "(no reference output: the harness checks the outputs' dtype/shape only)")
        files.append(PluginFile(rel, f"inputs captured at node {s.node[:60]} {what}", len(buf.getvalue())))
    return files


def scaffold(sig: OpSignature, targets: str | Sequence[str], out_dir: Path, *, model_name: str = "model.onnx",
             model_sha: str = "", opsets: dict[str, int] | None = None,
             impl_code: dict[str, str] | None = None) -> PluginScaffold:
    """Write one package per target under ``out_dir/<op>/<target>/``; nothing is written elsewhere.

    ``impl_code`` replaces the generated Python body of "ort-python" / "openvino-python" (the user's edit)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise StudioError(f"output folder '{out_dir.name}' is a file; choose a folder", code=ErrorCode.BAD_PATH)

    with writing_folder(out_dir):         # a full or read-only disk: one line, and no half package left
        return _scaffold(sig, targets, out_dir, model_name=model_name, model_sha=model_sha, opsets=opsets,
                         impl_code=impl_code)


def _scaffold(sig: OpSignature, targets: str | Sequence[str], out_dir: Path, *, model_name: str, model_sha: str,
              opsets: dict[str, int] | None, impl_code: dict[str, str] | None) -> PluginScaffold:
    root = safe_child(out_dir, _op_folder(f"{sig.domain}_{sig.op_type}" if sig.domain else sig.op_type))
    ctx_base = _context(sig, model_name, model_sha, dict(opsets or {}))
    packages = []
    for target in expand_targets(targets):
        folder = safe_child(root, target)
        folder.mkdir(parents=True, exist_ok=True)
        ctx = dict(ctx_base, target=Code(target), target_title=Code(_TITLES[target]),
                   module_name=_module_name(target, sig.ident), library_name=_library_name(target, sig.ident))
        complete = ctx["kernel"] is not None
        ctx["status"] = Code(_status(target, complete))
        files: list[PluginFile] = []
        for template, rel, description in _files_for(target, sig, ctx):
            ctx["file_name"] = Code(rel)
            if template.endswith(".j2"):
                text = render(template, ctx)
            else:
                text = (_TEMPLATES / template).read_text()
            if impl_code and target in impl_code and rel == f"{ctx['module_name']}.py":
                text = impl_code[target]
            atomic_write_text(safe_child(folder, rel), text)
            files.append(PluginFile(rel, description, len(text.encode())))
        files.extend(_write_samples(folder, sig))
        sig_json = json.dumps(sig.to_dict(), indent=2, default=str)
        atomic_write_text(safe_child(folder, "signature.json"), sig_json)
        files.append(PluginFile("signature.json", "the op's signature as collected from the model", len(sig_json)))
        notes = list(sig.notes)
        if not any(f.path.startswith("samples/") for f in files):
            notes.append("no samples: the op's inputs could not be captured (see the notes above), so the test "
                         "harness has nothing to compare; give the model's inputs with --dim values, or test by hand")
        elif any(s.outputs is None for s in sig.samples):
            notes.append("the samples hold the op's captured inputs but no reference outputs (no reference "
                         "implementation is registered for this op): the test harness runs the op on them and "
                         "checks each output's dtype/shape against the signature, and reports \"ran, not compared "
                         "(no reference)\" instead of comparing values")
        unsupported = [a["name"] for a in ctx["attrs"] if a["cpp_type"] is None]
        if unsupported:
            notes.append(f"attributes of types the templates do not map ({', '.join(unsupported)}) are left out")
        readme_files = [*files, PluginFile("README.md", "this file", 0)]
        ctx.update(files=[f.to_dict() for f in readme_files], notes=notes)
        readme = render("common/README.md.j2", ctx)
        atomic_write_text(safe_child(folder, "README.md"), readme)
        files.append(PluginFile("README.md", "how to build, load and test this package", len(readme.encode())))
        packages.append(PluginPackage(target, f"{root.name}/{target}", _TITLES[target], ctx["status"], complete,
                                      tuple(files)))
    return PluginScaffold(sig.qualified, root, tuple(packages), sig.to_dict())


def zip_folder(folder: Path, *, exclude_dirs: tuple[str, ...] = ("build",)) -> bytes:
    """The folder as a zip (paths relative to its parent), build outputs left out."""
    folder = Path(folder)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder)
            if path.is_symlink() or not path.is_file() or any(part in exclude_dirs for part in rel.parts[:-1]):
                continue
            zf.write(path, str(Path(folder.name) / rel))
    return buf.getvalue()
