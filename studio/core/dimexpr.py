"""Symbolic dim expressions (``floor(height/2 - 1/2) + 1``, ``2*s0``, ``Max(1, seq)``).

Exporters (torch.onnx's dynamo path, sympy-based shape tracing) write intermediate
dims as sympy-style formulas over the input dims. With the input dims known, these
formulas have a value. Model text is untrusted, so the formula is parsed with
:mod:`ast` and walked over a whitelist (numbers, dim names, + - * / // % **, unary
minus, floor/ceil/Min/Max/Mod/Abs/CeilDiv/FloorDiv): nothing is ever ``eval``-ed (sympy's
``parse_expr`` evaluates its input, so it is no safe parser for model text).
Arithmetic is exact (:class:`fractions.Fraction`), so ``floor(321/2 - 1/2)`` is 160.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from fractions import Fraction

MAX_EXPR_CHARS = 4096         # longer dim_params are labels, not formulas
MAX_NODES = 2000              # a formula of more AST nodes than this is refused
_MAX_MAGNITUDE = 2**62        # results beyond this are no dim

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _floor(x: Fraction) -> Fraction:
    return Fraction(math.floor(x))


def _ceil(x: Fraction) -> Fraction:
    return Fraction(math.ceil(x))


def _mod(a: Fraction, b: Fraction) -> Fraction:
    return a - b * math.floor(a / b)


_FUNCS = {
    "floor": lambda a: _floor(a), "ceil": lambda a: _ceil(a), "ceiling": lambda a: _ceil(a),
    "Abs": abs, "abs": abs,
    "Mod": _mod, "mod": _mod,
    "FloorDiv": lambda a, b: _floor(a / b), "CeilDiv": lambda a, b: _ceil(a / b),
    "CleanDiv": lambda a, b: a / b, "IntTrueDiv": lambda a, b: a / b,
}
_VARIADIC = {"Max": max, "max": max, "Min": min, "min": min}


class _Unsupported(Exception):
    pass


def _parse(expr: str) -> ast.expr | None:
    if not expr or len(expr) > MAX_EXPR_CHARS or "\x00" in expr:
        return None
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        return None
    return tree.body


def free_names(expr: str) -> frozenset[str] | None:
    """The dim names a formula uses (None if it is no formula we can evaluate)."""
    body = _parse(expr)
    if body is None:
        return None
    names: set[str] = set()
    try:
        _walk(body, names.add)
    except _Unsupported:
        return None
    return frozenset(names)


def _walk(node: ast.AST, on_name) -> None:
    """Check ``node`` is of the whitelist, reporting every variable name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.Name):
        on_name(node.id)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _walk(node.operand, on_name)
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv,
                                                            ast.Mod, ast.Pow)):
        _walk(node.left, on_name)
        _walk(node.right, on_name)
        return
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords
            and (node.func.id in _FUNCS or node.func.id in _VARIADIC)):
        for a in node.args:
            _walk(a, on_name)
        return
    raise _Unsupported(type(node).__name__)


def _eval(node: ast.AST, env: Mapping[str, int]) -> Fraction:
    if isinstance(node, ast.Constant):
        return Fraction(node.value)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise _Unsupported(node.id)
        return Fraction(int(env[node.id]))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env), _eval(node.right, env)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)) and b == 0:
            raise _Unsupported("division by zero")
        if isinstance(op, ast.Div):
            return a / b
        if isinstance(op, ast.FloorDiv):
            return _floor(a / b)
        if isinstance(op, ast.Mod):
            return _mod(a, b)
        if isinstance(op, ast.Pow):
            if b.denominator != 1 or not 0 <= b <= 64 or abs(a) > 2**32:
                raise _Unsupported("power")
            return a ** int(b)
    if isinstance(node, ast.Call):
        args = [_eval(a, env) for a in node.args]
        name = node.func.id
        if name in _VARIADIC:
            if not args:
                raise _Unsupported(name)
            return _VARIADIC[name](args)
        try:
            return _FUNCS[name](*args)
        except TypeError as exc:  # wrong number of arguments
            raise _Unsupported(name) from exc
    raise _Unsupported(type(node).__name__)


def evaluate(expr: str, dims: Mapping[str, int]) -> int | None:
    """The integer value of a dim formula given ``dims``; None when it names an unknown
    dim, is no formula, or does not come out a non-negative integer."""
    if _IDENT.match(expr or ""):
        value = dims.get(expr)
        return None if value is None else int(value)
    body = _parse(expr)
    try:
        if body is None:
            raise _Unsupported
        _walk(body, lambda _name: None)
        value = _eval(body, dims)
    except (_Unsupported, OverflowError, ZeroDivisionError, ValueError):
        # no formula of dims: a whole dim name, whatever its characters (paddle2onnx's 'p2o.DynamicDimension.0');
        # a formula ('past + seq') is computed from its parts even when given a value of its own, so that a
        # value that contradicts them is caught, not taken
        return int(dims[expr]) if expr in dims else None
    if value.denominator != 1 or not 0 <= value <= _MAX_MAGNITUDE:
        return None
    return int(value)
