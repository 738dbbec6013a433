"""The facade is thin (issue 34 item 3, docs/architecture.md section 1): ``studio/api.py`` holds no logic,
only value types and the table naming the room module of ``studio/facade/`` that defines each facade name.

- the table, the ``TYPE_CHECKING`` imports (what the layer contracts read) and each room's ``__all__``
  name the same things, and every name reaches the room's own object through ``api``;
- api.py stays under 600 lines with no function of its own beyond the PEP 562 loader, and no re-export
  table of capability internals (each name the front ends use is defined or imported in a room);
- ``onnx-studio --help`` imports no engine, no plotly and no pass (onnx_ir): the rooms load on first use.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys

from tests.conftest import ROOT

API = ROOT / "studio" / "api.py"


def _tree() -> ast.Module:
    return ast.parse(API.read_text(), str(API))


def _type_checking_names() -> dict[str, set[str]]:
    """room -> names api.py imports from ``studio.facade.<room>`` under ``if TYPE_CHECKING:``."""
    out: dict[str, set[str]] = {}
    for node in _tree().body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module.startswith("studio.facade."), ast.unparse(imp)
                out.setdefault(imp.module.rpartition(".")[2], set()).update(a.asname or a.name for a in imp.names)
    return out


def test_table_type_checking_imports_and_rooms_agree():
    import studio.api as api

    rooms = {room: set(names) for room, names in api._ROOMS.items()}
    assert len(rooms) >= 10 and sum(map(len, rooms.values())) > 120
    assert _type_checking_names() == rooms
    for room, names in rooms.items():
        module = importlib.import_module(f"studio.facade.{room}")
        assert set(module.__all__) == names, room
        for name in names:
            assert getattr(api, name) is getattr(module, name), f"api.{name} is not studio.facade.{room}.{name}"
    assert sum(map(len, rooms.values())) == len(api._ROOM_OF), "a name is defined in two rooms"


def test_api_is_thin():
    tree = _tree()
    assert len(API.read_text().splitlines()) < 600
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert functions == ["__getattr__", "__dir__"]
    imports_in_functions = [n for f in tree.body if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
                            if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert imports_in_functions == []
    # the loader imports rooms only: no (module, attribute) re-export table of capability internals
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    internals = ("passes.", "profilers.", "diagnostics.", "studio.export.", "studio.precision.", "studio.data.")
    assert not [s for s in strings if s.startswith(internals)]


def test_unknown_name_is_an_attribute_error():
    import studio.api as api

    try:
        api.no_such_facade_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_facade_name" in str(exc)
    else:
        raise AssertionError("api.no_such_facade_name resolved")


def test_cli_help_loads_no_capability_it_does_not_need():
    """``onnx-studio --help`` (the parser of every command) imports no engine, no plotly, no onnx_ir (passes)
    and no room beyond those whose option tuples the parser shows."""
    code = ("import sys, studio.cli; studio.cli.build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('onnxruntime', 'openvino', 'tensorflow', "
            "'torch', 'plotly', 'onnx_ir', 'streamlit') or m.startswith('studio.facade.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    loaded = eval(out)  # noqa: S307 - a list of module names printed above
    assert [m for m in loaded if not m.startswith("studio.facade.")] == []
    assert {"studio.facade.graph", "studio.facade.optimize", "studio.facade.profile", "studio.facade.export",
            "studio.facade.charts", "studio.facade.plugins"}.isdisjoint(loaded)
