"""Python's cyclic garbage collector held off while a build makes many objects that all live on.

A 10k-node model's viewer page (graph, hierarchy, summary, scene: some 10^6 tuples, dicts and lists, nearly
all kept) set off about five full collections, each walking the whole heap (onnx, numpy, every model
loaded), for a quarter of the page's CPU (issue 35 item 2). Paused, the objects are walked once, by the
first young collection after the pause (a few hundredths of a second). Reference counting still frees
everything acyclic meanwhile; only cycles wait for the end of the pause.

Process-wide (the collector is), so nested and concurrent pauses count: the collector runs again when the
last one ends, and only if it was running when the first began."""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

_lock = threading.Lock()
_holders = 0
_resume = False        # whether the collector ran when the first holder came

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def gc_paused() -> Iterator[None]:
    """The collector off for the ``with`` block (see the module doc)."""
    global _holders, _resume
    with _lock:
        if _holders == 0:
            _resume = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _resume:
                gc.enable()


def without_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` run under :func:`gc_paused`."""
    @functools.wraps(fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with gc_paused():
            return fn(*args, **kwargs)
    return run
