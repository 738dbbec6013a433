"""What a pass is: one class, one transform, a result that says what changed.

Follows ``onnx_ir.passes`` (a pass's ``call(model)`` is wrapped by a template
method that checks pre/post-conditions) and adds what the UI needs: the list
of changes (kind, nodes, detail) and counts. Passes mutate the IR in place;
the pipeline clones the model once before the first pass.

A pass states its transform as an arrow in its docstring's first line, e.g.
``Conv → BatchNormalization  ⇒  Conv (folded weights)``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from typing import ClassVar

import onnx_ir as ir
from onnx_ir.passes import InPlacePass
from onnx_ir.passes import PassResult as _IrPassResult

from studio.core.compare import Tolerance
from studio.core.sandbox import Limits

CHANGE_KINDS = ("removed", "added", "fused", "replaced", "changed")


@dataclasses.dataclass(frozen=True)
class Change:
    """One thing a pass did. ``nodes`` are node names in the model before the pass."""

    kind: str          # removed | added | fused | replaced | changed
    nodes: tuple[str, ...]
    detail: str = ""

    def to_dict(self) -> dict:
        return {"kind": self.kind, "nodes": list(self.nodes), "detail": self.detail}


@dataclasses.dataclass
class PassResult(_IrPassResult):
    """``onnx_ir`` PassResult plus what changed, for reports and the graph diff."""

    changes: tuple[Change, ...] = ()
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()      # where the pass chose not to apply, and why
    warnings: tuple[str, ...] = ()   # what the user must know (slower than fp32, degenerate ranges...)
    details: dict = dataclasses.field(default_factory=dict)   # JSON report (measurements, choices made)


class StudioPass(InPlacePass):
    """Base of every registered pass. Subclasses set ``name`` and implement ``call``.

    ``changes_interface``: the pass may legitimately specialise input/output
    shapes (``fix-input-shapes``); verification then allows that.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""          # one line for UIs: what and why
    changes_interface: ClassVar[bool] = False
    calls_engines: ClassVar[bool] = False   # runs an engine/onnxsim: run it in a worker
    # Verification of this pass's result: None keeps the pipeline's tolerance; quantization and
    # reduced-precision passes set a cosine-based one (studio.core.compare.QUANTIZED...).
    verify_tolerance: ClassVar[Tolerance | None] = None
    verify_quantized: ClassVar[bool] = False
    # The pass repairs what onnx.checker's full check refuses (fix-cast-types): a pipeline that
    # starts with it does not refuse the input for that reason; its result is still fully checked.
    accepts_invalid: ClassVar[bool] = False
    # Options whose values are user paths (calibration data...): resolved to absolute paths at the
    # API/CLI boundary, because passes that call engines run in a worker with its own cwd.
    path_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **options) -> None:
        super().__init__()
        self.options = options

    def describe(self) -> str:
        doc = (type(self).__doc__ or "").strip().splitlines()
        return doc[0] if doc else self.summary

    def call(self, model: ir.Model) -> PassResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def changes_io_dtypes(self) -> bool:
        """True when this pass, with these options, changes float input/output dtypes on purpose
        (``convert-fp16`` with ``keep_io_types=false``): verification then accepts float -> float
        dtype changes and feeds the result the same values in its own input dtypes."""
        return False

    def worker_limits(self, limits: Limits | None) -> Limits | None:
        """Limits for running this pass in a sandbox worker (default: the pipeline's)."""
        return limits


def all_nodes(model: ir.Model) -> Iterator[ir.Node]:
    """Every node of the main graph, subgraphs and functions (onnx-ir's recursive iterator)."""
    yield from ir.traversal.RecursiveGraphIterator(model.graph)
    for fn in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(fn)


def node_label(node: ir.Node) -> str:
    return node.name or f"{node.op_type}({', '.join(v.name or '?' for v in node.outputs)})"


class ChangeTracker:
    """Record node identities before a transform; afterwards report what was
    removed and added, so simple passes need not track changes by hand."""

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.before = {id(n): n for n in all_nodes(model)}
        self.labels = {id(n): node_label(n) for n in self.before.values()}

    def changes(self, removed_kind: str = "removed", detail: str = "") -> tuple[Change, ...]:
        after = {id(n): n for n in all_nodes(self.model)}
        removed = tuple(self.labels[i] for i in self.before if i not in after)
        added = tuple(node_label(n) for i, n in after.items() if i not in self.before)
        out = []
        if removed:
            out.append(Change(removed_kind, removed, detail))
        if added:
            out.append(Change("added", added, detail))
        return tuple(out)


def count_ops(model: ir.Model) -> Counter:
    return Counter(n.op_type for n in all_nodes(model))


def result(model: ir.Model, changes: list[Change] | tuple[Change, ...], *, notes: tuple[str, ...] | list[str] = (),
           **counts: int) -> PassResult:
    """A PassResult whose ``modified`` follows from the changes. ``notes`` say where
    the pass did not apply and why (shown in reports)."""
    changes = tuple(changes)
    return PassResult(model, bool(changes), changes, {k: v for k, v in counts.items() if v},
                      tuple(str(n)[:300] for n in notes)[:20])


def label_diff(before: dict[str, str], model: ir.Model, detail: str) -> list[Change]:
    """Changes by node label, for passes that rebuild nodes (converters, onnxsim):
    labels gone are "removed", new labels "added". ``before`` maps label -> op type."""
    after = {node_label(n): n.op_type for n in all_nodes(model)}
    removed = tuple(k for k in before if k not in after)
    added = tuple(k for k in after if k not in before)
    out = []
    if removed:
        out.append(Change("removed", removed, detail))
    if added:
        out.append(Change("added", added, detail))
    return out


def labels(model: ir.Model) -> dict[str, str]:
    return {node_label(n): n.op_type for n in all_nodes(model)}


# name -> pass class, filled by ``@register`` as each pass module loads (passes.registry looks them up and
# imports the modules by name: the pass modules import this module, never the registry, so no cycle)
PASSES: dict[str, type[StudioPass]] = {}


def register_in(table: dict[str, type[StudioPass]], cls: type[StudioPass]) -> type[StudioPass]:
    """Add ``cls`` to ``table`` under ``cls.name``; a second class under one name is refused."""
    if not cls.name:
        raise TypeError(f"{cls.__name__} has no name")
    existing = table.get(cls.name)
    if existing is not None and existing.__qualname__ != cls.__qualname__:
        raise TypeError(f"pass name {cls.name!r} registered twice ({existing.__qualname__}, {cls.__qualname__})")
    table[cls.name] = cls
    return cls


def register(cls: type[StudioPass]) -> type[StudioPass]:
    """Class decorator: make a pass available under ``cls.name``."""
    return register_in(PASSES, cls)
