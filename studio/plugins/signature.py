"""The signature of one op as the model uses it -- what a plugin must accept and return.

Collected from the model itself: attributes (names, types, every value seen
across its nodes), input/output counts, dtypes and shapes from (sandboxed)
shape inference and from a real run, and sample tensors for tests: the
inputs each node really receives (ONNX Runtime runs the model cut just
before the op, in a worker; see :mod:`studio.plugins.capture`) and the
reference's outputs for them, plus whole-model expected outputs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from diagnostics.custom_ops import detect_custom_ops, lookup
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.model import ModelHandle
from studio.core.protowalk import iter_graphs
from studio.core.sandbox import Limits, run_job
from studio.core.types import Dim
from studio.plugins.opgraph import find_nodes, ident, norm_domain
from studio.plugins.reference import get_reference
from studio.plugins.opgraph import attr_values
from studio.inspect.shapes import sandboxed_shapes
import studio.plugins.capture
from studio.core.feeds import input_specs, random_feeds

log = logging.getLogger(__name__)

__all__ = ["AttributeSpec", "OpSample", "OpSignature", "PortSpec", "collect_signature", "parse_op", "resolve_op"]

_ATTR_TYPES = {onnx.AttributeProto.INT: "int", onnx.AttributeProto.FLOAT: "float", onnx.AttributeProto.STRING: "string",
               onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.FLOATS: "floats",
               onnx.AttributeProto.STRINGS: "strings", onnx.AttributeProto.TENSOR: "tensor",
               onnx.AttributeProto.GRAPH: "graph", onnx.AttributeProto.GRAPHS: "graphs",
               onnx.AttributeProto.SPARSE_TENSOR: "sparse_tensor", onnx.AttributeProto.TENSORS: "tensors",
               onnx.AttributeProto.TYPE_PROTO: "type_proto"}
MAX_VALUES = 16


@dataclass(frozen=True)
class AttributeSpec:
    name: str
    type: str                    # int | float | string | ints | floats | strings | tensor | graph ...
    values: tuple[Any, ...]      # distinct values seen (at most 16)
    nodes_with: int              # nodes that set it
    nodes_total: int

    @property
    def default(self) -> Any:
        return self.values[0] if self.values else None

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "values": list(self.values), "nodes_with": self.nodes_with,
                "nodes_total": self.nodes_total}


@dataclass(frozen=True)
class PortSpec:
    index: int
    name: str
    dtypes: tuple[str, ...]                        # numpy names seen
    shapes: tuple[tuple[Dim, ...] | None, ...]     # distinct shapes seen (None: rank unknown)
    optional: bool = False
    sources: tuple[str, ...] = ()                  # where the facts come from

    @property
    def dtype(self) -> str | None:
        return self.dtypes[0] if self.dtypes else None

    @property
    def rank(self) -> int | None:
        ranks = {len(s) for s in self.shapes if s is not None}
        return ranks.pop() if len(ranks) == 1 else None

    def to_dict(self) -> dict:
        return {"index": self.index, "name": self.name, "dtypes": list(self.dtypes),
                "shapes": [None if s is None else list(s) for s in self.shapes], "optional": self.optional,
                "sources": list(self.sources)}


@dataclass(frozen=True)
class OpSample:
    """One node's real inputs and, with a reference, its expected outputs."""

    node: str
    attrs: dict[str, Any]
    inputs: tuple[np.ndarray | None, ...] = field(repr=False, compare=False)
    outputs: tuple[np.ndarray, ...] | None = field(default=None, repr=False, compare=False)
    error: str | None = None      # the reference rejected these inputs

    def to_dict(self) -> dict:
        def spec(a):
            return None if a is None else {"dtype": a.dtype.name, "shape": list(a.shape)}
        return {"node": self.node, "attrs": self.attrs, "inputs": [spec(a) for a in self.inputs],
                "outputs": None if self.outputs is None else [spec(a) for a in self.outputs], "error": self.error}


@dataclass(frozen=True)
class OpSignature:
    domain: str
    op_type: str
    opset: int | None
    nodes: tuple[str, ...]
    inputs: tuple[PortSpec, ...]
    outputs: tuple[PortSpec, ...]
    attributes: tuple[AttributeSpec, ...]
    custom: bool                                   # not a standard op at the model's opset
    reference: str | None = None                   # the registered reference's summary
    known: dict | None = None                      # knowledge-base entry (diagnostics.custom_ops)
    samples: tuple[OpSample, ...] = field(default=(), compare=False)
    model_feeds: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)
    model_outputs: dict[str, np.ndarray] | None = field(default=None, repr=False, compare=False)
    notes: tuple[str, ...] = ()

    @property
    def qualified(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"

    @property
    def ident(self) -> str:
        """The op type as a C/Python identifier."""
        return ident(self.op_type)

    @property
    def class_name(self) -> str:
        parts = [p for p in self.ident.split("_") if p]
        return "".join(p[:1].upper() + p[1:] for p in parts) or "CustomOp"

    def attribute(self, name: str) -> AttributeSpec | None:
        return next((a for a in self.attributes if a.name == name), None)

    def to_dict(self) -> dict:
        return {"domain": self.domain, "op_type": self.op_type, "qualified": self.qualified, "opset": self.opset,
                "custom": self.custom, "nodes": list(self.nodes[:50]), "node_count": len(self.nodes),
                "inputs": [p.to_dict() for p in self.inputs], "outputs": [p.to_dict() for p in self.outputs],
                "attributes": [a.to_dict() for a in self.attributes], "reference": self.reference,
                "known": self.known, "samples": [s.to_dict() for s in self.samples],
                "model_feeds": {k: {"dtype": v.dtype.name, "shape": list(v.shape)} for k, v in self.model_feeds.items()},
                "model_outputs": None if self.model_outputs is None else sorted(self.model_outputs),
                "notes": list(self.notes)}


# ---------------------------------------------------------------------------- choosing the op

def parse_op(text: str) -> tuple[str | None, str]:
    """'mmdeploy::grid_sampler' -> ('mmdeploy', 'grid_sampler'); 'grid_sampler' -> (None, 'grid_sampler')."""
    raw = str(text or "").strip()
    if not raw:
        raise StudioError("name the op as DOMAIN::OP_TYPE (e.g. mmdeploy::grid_sampler)", code=ErrorCode.BAD_OP)
    if "::" in raw:
        domain, _, op_type = raw.rpartition("::")
        domain = norm_domain(domain)
    else:
        domain, op_type = None, raw
    if not op_type:
        raise StudioError(f"op '{raw[:80]}' has no op type after '::'", code=ErrorCode.BAD_OP)
    return domain, op_type


def resolve_op(model: onnx.ModelProto, text: str) -> tuple[str, str]:
    """The (domain, op_type) of a model's op named by ``text`` (custom ops preferred when ambiguous)."""
    domain, op_type = parse_op(text)
    present: dict[tuple[str, str], int] = {}
    for ref in iter_graphs(model):
        for n in ref.graph.node:
            key = (norm_domain(n.domain), n.op_type)
            present[key] = present.get(key, 0) + 1
    matches = [k for k in present if k[1] == op_type and (domain is None or k[0] == domain)]
    customs = [f"{c.qualified}" for c in detect_custom_ops(model)]
    if not matches:
        hint = f"custom ops in the model: {', '.join(customs)}" if customs else "the model has no custom ops"
        raise StudioError(f"op '{text[:80]}' is not in the model; {hint}", code=ErrorCode.BAD_OP)
    if len(matches) > 1:
        options = ", ".join(f"{d or 'ai.onnx'}::{o}" for d, o in matches)
        raise StudioError(f"op '{op_type[:80]}' exists in several domains ({options}); name one as DOMAIN::OP",
                          code=ErrorCode.BAD_OP)
    return matches[0]


# ---------------------------------------------------------------------------- static facts

def _attributes(nodes: list[onnx.NodeProto]) -> tuple[AttributeSpec, ...]:
    seen: dict[str, tuple[str, list[Any], int]] = {}
    for n in nodes:
        values = attr_values(n)
        for a in n.attribute:
            kind, vals, count = seen.get(a.name, (_ATTR_TYPES.get(a.type, "unknown"), [], 0))
            v = values.get(a.name)
            if v not in vals and len(vals) < MAX_VALUES:
                vals.append(v)
            seen[a.name] = (kind, vals, count + 1)
    return tuple(AttributeSpec(name, kind, tuple(vals), count, len(nodes))
                 for name, (kind, vals, count) in sorted(seen.items()))


def _add(bucket: dict[int, dict[str, list]], index: int, dtype: str | None, shape: Any, source: str) -> None:
    slot = bucket.setdefault(index, {"dtypes": [], "shapes": [], "sources": []})
    if dtype and dtype not in ("undefined",) and dtype not in slot["dtypes"]:
        slot["dtypes"].append(dtype)
    shape = None if shape is None else tuple(shape)
    if shape is not None and shape not in slot["shapes"]:
        slot["shapes"].append(shape)
    if source not in slot["sources"]:
        slot["sources"].append(source)


def _ports(count: int, bucket: dict[int, dict[str, list]], names: tuple[str, ...], prefix: str,
           optional: set[int]) -> tuple[PortSpec, ...]:
    ports = []
    for i in range(count):
        slot = bucket.get(i, {"dtypes": [], "shapes": [], "sources": []})
        name = names[i] if i < len(names) else f"{prefix}{i}"
        ports.append(PortSpec(i, name, tuple(slot["dtypes"]), tuple(slot["shapes"]) or (None,), i in optional,
                              tuple(slot["sources"])))
    return tuple(ports)


def collect_signature(handle: ModelHandle, op: str, *, capture: bool = True, dims: Mapping[str, int] | None = None,
                      max_nodes: int = 4, pool_key: str = "default", limits: Limits | None = None,
                      seed: int = 0) -> OpSignature:
    """Everything a plugin for ``op`` needs to know, from ``handle``'s model.

    With ``capture`` the op's real inputs are captured in a one-off worker
    (ONNX Runtime up to the op, then the reference); without it, only the
    static facts (attributes, counts, inferred dtypes/shapes)."""
    model = handle.proto
    domain, op_type = resolve_op(model, op)
    found = list(find_nodes(model, domain, op_type))
    nodes = [n for _, n, _ in found]
    opsets = {norm_domain(o.domain): o.version for o in model.opset_import}
    customs = {(c.domain, c.op_type) for c in detect_custom_ops(model)}
    known = lookup(domain, op_type)
    reference = get_reference(domain, op_type)
    n_in = max((len(n.input) for n in nodes), default=0)
    n_out = max((len(n.output) for n in nodes), default=0)
    optional = {i for i in range(n_in) if any(i >= len(n.input) or not n.input[i] for n in nodes)}
    ins: dict[int, dict[str, list]] = {}
    outs: dict[int, dict[str, list]] = {}
    notes: list[str] = []

    table, _ = sandboxed_shapes(handle.path.resolve(), model, None, pool_key=pool_key)
    if table.error:
        notes.append(f"shape inference: {table.error[:200]}")
    for n in nodes:
        for i, name in enumerate(n.input):
            info = table.get(name) if name else None
            if info is not None:
                _add(ins, i, info.dtype, info.shape, "shape inference")
        for i, name in enumerate(n.output):
            info = table.get(name) if name else None
            if info is not None and (info.dtype not in ("undefined",) or info.shape):
                _add(outs, i, info.dtype, info.shape, "declared in the model")

    samples: list[OpSample] = []
    feeds: dict[str, np.ndarray] = {}
    model_outputs = None
    if capture and found:
        samples, feeds, model_outputs, cap_notes = _capture(handle, domain, op_type, ins, outs, dims, max_nodes,
                                                            pool_key, limits, seed, reference is not None,
                                                            customs - {(domain, op_type)})
        notes.extend(cap_notes)
    names_in = reference.input_names if reference else ()
    names_out = reference.output_names if reference else ()
    return OpSignature(
        domain=domain, op_type=op_type, opset=opsets.get(domain), nodes=tuple(nid for nid, _, _ in found),
        inputs=_ports(n_in, ins, names_in, "input", optional), outputs=_ports(n_out, outs, names_out, "output", set()),
        attributes=_attributes(nodes), custom=(domain, op_type) in customs,
        reference=None if reference is None else f"{reference.qualified}: {reference.summary}",
        known=None if known is None else {"origin": known.origin, "engines": dict(known.engines), "note": known.note,
                                          "standard_equivalent": known.standard_equivalent,
                                          "fix_pass": known.fix_pass, "tensorrt_plugin": known.tensorrt_plugin},
        samples=tuple(samples), model_feeds=feeds, model_outputs=model_outputs, notes=tuple(notes))


def _capture(handle: ModelHandle, domain: str, op_type: str, ins: dict, outs: dict, dims: Mapping[str, int] | None,
             max_nodes: int, pool_key: str, limits: Limits | None, seed: int, has_reference: bool,
             other_customs: set[tuple[str, str]]) -> tuple[list[OpSample], dict, dict | None, list[str]]:
    notes: list[str] = []
    try:
        feeds = random_feeds(input_specs(handle.proto), dims, seed=seed)
    except StudioError as exc:
        return [], {}, None, [f"no samples captured: {exc}"]
    feeds = {k: v for k, v in feeds.items() if isinstance(v, np.ndarray)}
    run_model = has_reference and not other_customs
    if has_reference and other_customs:
        notes.append("whole-model expected outputs skipped: the model has other custom ops ("
                     + ", ".join(f"{d}::{o}" for d, o in sorted(other_customs))[:200] + ")")
    try:
        res = run_job("plugins.capture", {"model_path": str(handle.path.resolve()), "domain": domain, "op_type": op_type,
                                          "max_nodes": max_nodes, "run_model": run_model},
                      {f"feed:{k}": v for k, v in feeds.items()}, stage="capturing the op's inputs (ONNX Runtime)",
                      limits=limits, fresh=True, pool_key=pool_key)
    except WorkerError as exc:
        return [], feeds, None, [f"no samples captured: {exc}"]
    notes.extend(res.data.get("notes", []))
    samples = []
    for i, s in enumerate(res.data.get("samples", [])):
        for j, spec in enumerate(s["inputs"]):
            if spec is not None:
                _add(ins, j, spec[0], spec[1], "captured run")
        for j, spec in enumerate(s.get("outputs") or []):
            _add(outs, j, spec[0], spec[1], "reference run")
        if not s.get("kept"):
            continue
        inputs = tuple(res.arrays.get(f"s{i}.in{j}") for j in range(len(s["inputs"])))
        outputs = None
        if s.get("outputs"):
            outputs = tuple(res.arrays[f"s{i}.out{j}"] for j in range(len(s["outputs"])))
        samples.append(OpSample(s["node"], s["attrs"], inputs, outputs, s.get("error")))
        if s.get("error"):
            notes.append(f"node {s['node'][:60]}: {s['error']}")
    model = res.data.get("model")
    model_outputs = None
    if model and not model.get("error"):
        model_outputs = {name: res.arrays[f"model:{name}"] for name in model["outputs"]}
    elif model and model.get("error"):
        notes.append(f"whole-model expected outputs failed: {model['error'][:200]}")
    return samples, feeds, model_outputs, notes
