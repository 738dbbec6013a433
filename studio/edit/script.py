"""Edit scripts as data: parse JSON (or YAML when PyYAML is installed) into checked operations.

A script is a list of operations (``[{"op": "rename", "tensors": {"a": "b"}}, ...]``, or
``{"ops": [...]}``). Each operation's fields are checked here, before anything runs: names and
types of fields, no unknown keys, so a typo is one line naming the operation, not a surprise
half-way through. Whether the names exist in the model is checked by applying the script in
memory (``studio.edit.apply``), still before anything is written.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.errors import StudioError
from studio.core.bounds import number_text
from studio.core.error_codes import ErrorCode
from studio.core.paths import check_regular_file, user_data_path


class EditError(StudioError):
    """An edit that cannot be applied: named, with what to do. Nothing was written."""

    code = ErrorCode.BAD_EDIT


_STR, _INT, _LIST, _MAP, _ANY, _BOOL = "str", "int", "list", "map", "any", "bool"

# op -> {field: (type, required)}; the one table of what a script may say.
SCHEMA: dict[str, dict[str, tuple[str, bool]]] = {
    "bypass": {"node": (_STR, True)},
    "delete": {"node": (_STR, True)},
    "rename": {"tensors": (_MAP, False), "nodes": (_MAP, False)},
    "set_attr": {"node": (_STR, True), "name": (_STR, True), "value": (_ANY, True), "type": (_STR, False)},
    "remove_attr": {"node": (_STR, True), "name": (_STR, True)},
    "insert": {"tensor": (_STR, True), "op_type": (_STR, True), "attrs": (_MAP, False), "consumers": (_LIST, False),
               "name": (_STR, False), "output": (_STR, False)},
    "rewire": {"node": (_STR, True), "input": (_INT, True), "tensor": (_STR, True)},
    "add_output": {"tensor": (_STR, True)},
    "remove_outputs": {"outputs": (_LIST, True)},
    "set_input": {"input": (_STR, True), "shape": (_LIST, False), "dims": (_MAP, False), "dtype": (_STR, False)},
    "replace_initializer": {"name": (_STR, True), "npy": (_STR, True)},
    "extract": {"inputs": (_LIST, True), "outputs": (_LIST, True), "metadata": (_STR, False)},
    "split": {"cut": (_LIST, True)},
    "merge": {"model": (_STR, True), "io_map": (_LIST, True), "position": (_STR, False), "prefix": (_STR, False)},
    "add_opset": {"domain": (_STR, True), "version": (_INT, True)},
}
INSERTABLE = ("Identity", "Cast", "Transpose")


@dataclass(frozen=True)
class EditOp:
    """One checked operation: its kind, its fields, and its place in the script (1-based)."""

    kind: str
    args: Mapping[str, Any]
    index: int

    def where(self) -> str:
        return f"edit #{self.index} ({self.kind})"

    def to_dict(self) -> dict:
        return {"op": self.kind, **dict(self.args)}


@dataclass(frozen=True)
class EditScript:
    """A checked script. ``base_dir``: the folder its relative paths (.npy, merged models) are read from."""

    ops: tuple[EditOp, ...]
    base_dir: Path = field(default_factory=Path.cwd)

    def to_list(self) -> list[dict]:
        return [op.to_dict() for op in self.ops]

    def path(self, text: str) -> Path:
        p = Path(text).expanduser()
        return p if p.is_absolute() else self.base_dir / p


def _type_ok(kind: str, value: Any) -> bool:
    if kind == _ANY:
        return value is not None
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, {_STR: str, _LIST: list, _MAP: dict, _BOOL: bool}[kind])


# Bounds on a script's data (R64): an edit script is a few levels deep (list, operation, field, a list
# value), its integers go into ONNX int64 fields, its names into UTF-8 protobuf strings.
MAX_DEPTH = 32
MAX_ITEMS = 1_000_000                     # values in all (YAML aliases can multiply a small text)
INT64 = (-(2**63), 2**63 - 1)


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside double-quoted strings, without recursion (numpy over the
    bytes): what lets a script nested thousands deep be refused before a parser recurses into it."""
    import re

    import numpy as np

    body = re.sub(r'"(?:[^"\\]|\\.)*"', '""', text).encode("utf-8", "surrogatepass")
    b = np.frombuffer(body, dtype=np.uint8)
    step = np.isin(b, (ord("["), ord("{"))).astype(np.int32) - np.isin(b, (ord("]"), ord("}"))).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _where(index: int | None, kind: str | None, path: str) -> str:
    head = f"edit #{index}" + (f" ({kind})" if kind else "") if index is not None else "the edit script"
    return f"{head}: {path}" if path else head


def _check_data(raw: Any) -> None:
    """Every value of the decoded script is JSON data, at most MAX_DEPTH deep and MAX_ITEMS in all, its
    integers fit int64 and its text is valid UTF-8 (no lone surrogate): one line naming the operation and
    the field otherwise. Iterative, so no input can exhaust the stack."""
    ops = raw.get("ops") if isinstance(raw, dict) and "ops" in raw else raw
    todo: list[tuple[Any, int, int | None, str | None, str]] = []
    if isinstance(ops, list):
        for i, op in enumerate(ops):
            kind = op.get("op") if isinstance(op, dict) and isinstance(op.get("op"), str) else None
            todo.append((op, 1, i + 1, kind if kind in SCHEMA else None, ""))
    else:
        todo.append((raw, 0, None, None, ""))
    seen = 0
    while todo:
        value, depth, index, kind, path = todo.pop()
        seen += 1
        if seen > MAX_ITEMS:
            raise EditError(f"the edit script holds more than {MAX_ITEMS:,} values; split it")
        if depth > MAX_DEPTH:
            raise EditError(f"{_where(index, kind, path)} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, bool) or value is None or isinstance(value, float):
            continue
        if isinstance(value, int):
            if not INT64[0] <= value <= INT64[1]:
                raise EditError(f"{_where(index, kind, path or 'a value')} is {number_text(value)}, beyond int64 "
                                "(the range of an ONNX integer)")
            continue
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise EditError(f"{_where(index, kind, path or 'a value')} holds text that is not valid UTF-8 (a lone "
                                "UTF-16 surrogate); ONNX names are UTF-8 text") from None
            continue
        if isinstance(value, list):
            todo.extend((v, depth + 1, index, kind, path or "a value") for v in value)
            continue
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    raise EditError(f"{_where(index, kind, path)} has a key of type {type(k).__name__}; keys are "
                                    "names (text)")
                try:
                    k.encode("utf-8")
                except UnicodeEncodeError:
                    raise EditError(f"{_where(index, kind, path)} has a key that is not valid UTF-8 (a lone UTF-16 "
                                    "surrogate); ONNX names are UTF-8 text") from None
                todo.append((v, depth + 1, index, kind, path or f"'{k[:40]}'"))
            continue
        raise EditError(f"{_where(index, kind, path or 'a value')} is a {type(value).__name__}, not JSON data "
                        "(text, number, true/false, null, list or object)")


def _check_op(raw: Any, index: int) -> EditOp:
    if not isinstance(raw, dict) or not isinstance(raw.get("op"), str):
        raise EditError(f"edit #{index}: each operation is an object with an \"op\" field (one of "
                        f"{', '.join(SCHEMA)})")
    kind = raw["op"]
    schema = SCHEMA.get(kind)
    if schema is None:
        raise EditError(f"edit #{index}: unknown operation '{kind[:60]}'; known: {', '.join(SCHEMA)}")
    args = {k: v for k, v in raw.items() if k != "op"}
    unknown = sorted(set(args) - set(schema))
    if unknown:
        raise EditError(f"edit #{index} ({kind}): unknown field '{unknown[0][:60]}'; fields: {', '.join(schema)}")
    for name, (t, required) in schema.items():
        if name not in args:
            if required:
                raise EditError(f"edit #{index} ({kind}): the field '{name}' is missing")
            continue
        if not _type_ok(t, args[name]):
            raise EditError(f"edit #{index} ({kind}): '{name}' must be a {dict(map=('object'), list='list').get(t, t)}")
    if kind == "rename" and not (args.get("tensors") or args.get("nodes")):
        raise EditError(f"edit #{index} (rename): give \"tensors\" and/or \"nodes\" as {{old: new}}")
    for key in ("tensors", "nodes"):
        if kind == "rename" and not all(isinstance(k, str) and isinstance(v, str) and v
                                        for k, v in args.get(key, {}).items()):
            raise EditError(f"edit #{index} (rename): '{key}' maps old names to new, non-empty names")
    if kind == "insert" and args["op_type"] not in INSERTABLE:
        raise EditError(f"edit #{index} (insert): op_type must be one of {', '.join(INSERTABLE)}")
    if kind == "merge" and args.get("position", "before") not in ("before", "after"):
        raise EditError(f"edit #{index} (merge): position is 'before' (the other model feeds this one) or 'after'")
    if kind == "merge" and not all(isinstance(p, list) and len(p) == 2 and all(isinstance(s, str) for s in p)
                                   for p in args["io_map"]) or kind == "merge" and not args["io_map"]:
        raise EditError(f"edit #{index} (merge): io_map is a non-empty list of [output, input] name pairs")
    for key in ("inputs", "outputs", "cut", "consumers"):
        if key in args and not all(isinstance(s, str) for s in args[key]):
            raise EditError(f"edit #{index} ({kind}): '{key}' is a list of names")
    if kind in ("extract", "split") and not args.get("outputs" if kind == "extract" else "cut"):
        raise EditError(f"edit #{index} ({kind}): name at least one tensor")
    if kind == "set_input" and not ({"shape", "dims", "dtype"} & set(args)):
        raise EditError(f"edit #{index} (set_input): give shape, dims and/or dtype")
    return EditOp(kind, args, index)


def parse_ops(raw: Any, *, base_dir: Path | None = None) -> EditScript:
    """A script from already-decoded data: a list of operations, or ``{"ops": [...]}``."""
    if isinstance(raw, EditScript):
        return raw
    _check_data(raw)
    if isinstance(raw, dict) and "ops" in raw:
        raw = raw["ops"]
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise EditError("an edit script is a non-empty list of operations ([{\"op\": ...}, ...])")
    ops = tuple(_check_op(r, i + 1) for i, r in enumerate(raw))
    for op in ops[:-1]:
        if op.kind == "split":
            raise EditError(f"{op.where()}: split makes two models, so it must be the script's last operation")
    return EditScript(ops, Path(base_dir or Path.cwd()).absolute())


def parse_text(text: str, *, yaml_ok: bool = True, base_dir: Path | None = None) -> EditScript:
    """A script from JSON text (YAML too when PyYAML is installed and ``yaml_ok``)."""
    depth = _json_depth(text)
    if depth > MAX_DEPTH:
        raise EditError(f"the edit script is nested {depth} levels deep; an edit script needs a few (at most "
                        f"{MAX_DEPTH})")
    try:
        data = json.loads(text)
    except RecursionError:
        raise EditError(f"the edit script is nested too deeply to read (at most {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        msg = getattr(exc, "msg", None) or (str(exc).splitlines() or ["parse error"])[0][:120]
        where = f" at line {exc.lineno}" if hasattr(exc, "lineno") else ""
        if not yaml_ok:
            raise EditError(f"the edit script is not valid JSON ({msg}{where})") from None
        try:
            import yaml
        except ImportError:
            raise EditError(f"the edit script is not valid JSON ({msg}{where}); YAML scripts need PyYAML") from None
        try:
            data = yaml.safe_load(text)
        except RecursionError:
            raise EditError(f"the edit script is nested too deeply to read (at most {MAX_DEPTH} levels)") from None
        except yaml.YAMLError as yexc:
            first = (str(yexc).splitlines() or ["parse error"])[0]
            raise EditError(f"the edit script is neither JSON nor YAML ({first[:120]})") from None
        except (ValueError, TypeError, OverflowError) as yexc:     # a YAML scalar Python cannot convert
            first = (str(yexc).splitlines() or [type(yexc).__name__])[0]
            raise EditError(f"the edit script is neither JSON nor YAML ({first[:120]})") from None
    return parse_ops(data, base_dir=base_dir)


def load_script(path: str | Path) -> EditScript:
    """A script from a .json/.yaml file; relative paths inside it are read from its folder."""
    p = user_data_path(path, label="edit script")
    check_regular_file(p, max_bytes=16 * 2**20, label="edit script")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise EditError("the edit script is not UTF-8 text") from None
    return parse_text(text, yaml_ok=p.suffix.lower() != ".json", base_dir=p.parent)
