"""Every file the studio writes goes through ``studio.core.outputs`` (docs/reliability.md R32-R35).

Read from the AST: a direct write (``open(..., "w")``, ``write_text``, ``write_html``, ``onnx.save_model``,
``np.savez``, ``json.dump``, ``shutil.copy*/move/rmtree``, ``os.replace/rename/unlink/link``...) outside
that module fails this test, unless

* the file is in ``SCRATCH_MODULES``: code that writes only inside a sandbox worker's own scratch
  folder or the worker protocol's job folders (never a user-chosen destination), or
* the call (or the line above it) says ``# scratch: <why>``: a write into a folder the run made for itself
  (a ``studio.core.outputs.scratch_dir``/``staged_files`` folder, a worker's cwd, a temp dir).

A new writer should use ``studio.core.outputs`` (``open_output``, ``write_bytes/text/json``,
``copy_file``, ``write_html_figure``, ``staged_files`` for libraries that write by path,
``publish_folder`` for folders) instead of joining either list.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

SCRATCH_MODULES = {
    # the sandbox itself: job folders, worker logs, the workers' base folder
    "studio/core/sandbox/pool.py": "the workers' base folder (per process; stale ones swept)",
    "studio/core/sandbox/process.py": "a worker's own folder and log",
    "studio/core/sandbox/protocol.py": "job in/out folders of sandbox workers",
    "studio/core/worker.py": "runs inside a worker: result arrays into its job folder, /proc writes",
    "studio/core/jobs.py": "job functions run inside workers, in their scratch cwd",
    # build-time tool, not part of a run
    "diagnostics/support_tables/build_tensorrt_table.py": "developer script regenerating a checked-in table",
}

_ATTR_WRITES = {"write_text", "write_bytes", "write_html", "savez", "savez_compressed", "tofile",
                "copyfile", "copy", "copy2", "copytree", "move", "rmtree", "replace", "rename", "unlink",
                "remove", "link", "symlink", "save_model", "save", "dump", "save_model_to_file"}
_MODULES = {"os", "shutil", "np", "numpy", "onnx", "ir", "ov", "openvino", "json", "onnx_ir"}
_PATH_METHODS = {"write_text", "write_bytes", "write_html", "unlink", "tofile", "save_model_to_file"}


def _is_write(node: ast.Call) -> bool:
    f = node.func
    if isinstance(f, ast.Name) and f.id == "open":
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")
    if not isinstance(f, ast.Attribute) or f.attr not in _ATTR_WRITES:
        return False
    base = f.value
    if isinstance(base, ast.Name) and base.id == "outputs":
        return False
    if f.attr in _PATH_METHODS:
        return True
    if f.attr == "dump" and len(node.args) > 1 and ast.unparse(node.args[1]) in ("sys.stdout", "sys.stderr"):
        return False
    if isinstance(base, ast.Name) and base.id in _MODULES:
        if base.id == "os" and f.attr == "open":
            return False
        return not (base.id == "json" and f.attr != "dump")
    return False


def _violations(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, ast.Call) and _is_write(node):
            span = lines[max(node.lineno - 2, 0):(node.end_lineno or node.lineno)]     # the line above counts
            if any("# scratch:" in line for line in span):
                continue
            found.append(f"{path.relative_to(root)}:{node.lineno}: {lines[node.lineno - 1].strip()[:100]}")
    return found


def _files() -> list[Path]:
    out = []
    for part in ("studio", "passes", "profilers", "diagnostics"):
        for p in sorted((ROOT / part).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            if rel == "studio/core/outputs.py" or rel in SCRATCH_MODULES:
                continue
            out.append(p)
    return out


def test_no_direct_writes_outside_outputs_module():
    bad = [v for p in _files() for v in _violations(p)]
    assert bad == [], "direct writes outside studio.core.outputs:\n" + "\n".join(bad)


def test_the_checker_sees_direct_writes(tmp_path):
    """The AST check itself: each kind of direct write is caught, a marked scratch write is not."""
    sample = tmp_path / "sample.py"
    sample.write_text("import json, os, shutil\nimport numpy as np\nimport onnx\n"
                      "open(p, 'w')\np.write_text('x')\nfig.write_html(p)\nonnx.save_model(m, p)\n"
                      "np.savez(p)\njson.dump(o, fh)\nshutil.rmtree(d)\nos.replace(a, b)\n"
                      "shutil.rmtree(d)  # scratch: a temp dir\nopen(p)\njson.dumps(o)\n")
    assert len(_violations(sample, tmp_path)) == 8
