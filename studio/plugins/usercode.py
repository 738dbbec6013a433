"""Load a user's custom-op module from a file and check what its function returns.

Runs only inside a worker (never in the studio process): the file path comes
in a job's arguments, the module is executed under a private name, and every
call is guarded so that an exception, ``None``, a wrong dtype, rank or shape
becomes one message naming the op -- instead of reaching the engine (an
exception inside an onnxruntime-extensions Python op aborts the interpreter;
a float64 result is silently cast to float32 by it).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CallGuard", "UserCodeError", "describe_array", "load_user_function", "short_error"]


class UserCodeError(Exception):
    """The user's code failed; the message is the one line to show."""


def short_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def user_line(exc: BaseException, filename: str) -> int | None:
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename == filename:
            return frame.lineno
    return getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None


def load_user_function(path: Path, name: str, label: str) -> Callable[..., Any]:
    """Execute the file as a fresh module and return its function ``name``."""
    source = str(path)
    module_name = f"studio_user_op_{abs(hash(source)) % 10**8}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, source)
        if spec is None or spec.loader is None:
            raise UserCodeError(f"{label}: the code file cannot be loaded")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except UserCodeError:
        raise
    except SyntaxError as exc:
        raise UserCodeError(f"{label}: syntax error at line {exc.lineno}: {exc.msg}") from None
    except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt from user code too
        line = user_line(exc, source)
        where = f" (line {line})" if line else ""
        raise UserCodeError(f"{label}: importing the code raised {short_error(exc)}{where}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserCodeError(f"{label}: the code defines no function `{name}(...)`")
    return fn


def describe_array(dtype: str, shape: Sequence[Any] | None) -> str:
    """'float32[1,4,8,8]' (dims: ints, symbolic names, '?')."""
    dims = "?" if shape is None else ",".join("?" if d is None else str(d) for d in shape)
    return f"{dtype}[{dims}]"


def shape_ok(shape: tuple[int, ...], allowed: Sequence[Sequence[Any] | None]) -> bool:
    if not allowed:
        return True
    for want in allowed:
        if want is None:
            return True
        if len(want) == len(shape) and all(not isinstance(w, int) or w == s for w, s in zip(want, shape)):
            return True
    return False


@dataclass
class CallGuard:
    """Wraps the user's function; the first failure is kept in ``error`` and a
    placeholder of the declared dtype goes back to the engine instead."""

    fn: Callable[..., Any]
    label: str                                   # "custom op `grid_sampler`"
    output_dtypes: list[str]                     # numpy names, one per output
    output_shapes: list[list[Sequence[Any] | None]] = field(default_factory=list)   # allowed shapes per output
    filename: str = ""
    error: str | None = None
    calls: int = 0

    def placeholder(self) -> Any:
        outs = [np.zeros((0,), dtype=np.dtype(d) if d != "string" else object) for d in self.output_dtypes]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def check(self, result: Any) -> tuple[np.ndarray, ...]:
        n = len(self.output_dtypes)
        if result is None:
            raise UserCodeError(f"{self.label} returned None, declared {n} output(s) "
                                f"{', '.join(self._declared(i) for i in range(n))}")
        values = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        if len(values) != n:
            raise UserCodeError(f"{self.label} returned {len(values)} output(s), declared {n}")
        out = []
        for i, value in enumerate(values):
            if not isinstance(value, np.ndarray):
                if isinstance(value, np.generic):
                    value = np.asarray(value)
                else:
                    raise UserCodeError(f"{self.label} output {i} is a {type(value).__name__}, declared a numpy "
                                        f"array {self._declared(i)}")
            want = self.output_dtypes[i]
            got = value.dtype.name if value.dtype.kind not in "OUS" else "string"
            shapes = self.output_shapes[i] if i < len(self.output_shapes) else []
            if got != want or not shape_ok(value.shape, shapes):
                raise UserCodeError(f"{self.label} output {i} returned {describe_array(got, value.shape)}, "
                                    f"declared {self._declared(i)}")
            out.append(value)
        return tuple(out)

    def _declared(self, i: int) -> str:
        shapes = self.output_shapes[i] if i < len(self.output_shapes) else []
        known = [s for s in shapes if s is not None]
        return describe_array(self.output_dtypes[i], known[0] if len(known) == 1 else None)

    def __call__(self, *inputs: Any, **attrs: Any) -> Any:
        self.calls += 1
        if self.error is not None:
            return self.placeholder()
        try:
            result = self.fn(*inputs, **attrs)
        except BaseException as exc:  # noqa: BLE001 - SystemExit too; an escaping exception aborts ORT
            line = user_line(exc, self.filename) if self.filename else None
            self.error = f"{self.label} raised {short_error(exc)}" + (f" (line {line})" if line else "")
            return self.placeholder()
        try:
            values = self.check(result)
        except UserCodeError as exc:
            self.error = str(exc)
            return self.placeholder()
        return values[0] if len(values) == 1 else values
