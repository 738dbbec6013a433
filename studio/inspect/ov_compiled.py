"""The memory plan of OpenVINO CPU as compiled: planned over the graph OpenVINO itself compiled.

Why this way: OpenVINO's CPU plugin fuses (Conv+BatchNorm+activation+Add, snippets ``Subgraph`` kernels),
picks blocked layouts (``aBcd16b``), computes in place and inserts reorders; the ONNX graph as written
says none of that, so a plan of it was 2x off OpenVINO's workspace on half the real corpus. OpenVINO
reports the graph it runs (``CompiledModel.get_runtime_model()``: every node's layer type, execution
index, output layouts and precisions), so the plan is made over that graph, the way the plugin's
``MemoryControl`` lays out its static workspace:

* every edge of the compiled graph is a tensor, sized from its shape, precision and layout (a blocked
  dim padded to its block);
* tensors that share memory form one cluster: all readers of one output; an in-place output (a
  ``Reshape``; a ``Convolution`` with a fused sum writes into the sum input; a ``Split`` or
  ``Concatenation`` along the outermost non-1 axis in memory order (its layout) are views of one buffer;
  an ``Eltwise``/``Subgraph``/``Softmax`` writes into input 0 when every input's producer has that one reader, input 0 does not come from a
  graph input and the shapes match). OpenVINO resolves the conflicts of in-place edges by inserting
  ``Reorder`` copies, which the compiled graph shows;
* a cluster that touches a graph input or output has its own allocation, outside the workspace;
* a cluster lives from its first producer's execution index to its last reader's, and
  ``ov::MemorySolver`` places the clusters (largest first, each lifted above the ones it overlaps in
  time; 32-byte units): its top is the workspace.

Measured against OpenVINO's own workspace on the real corpus (``bench_memory_plan``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.mapped_pages import released_pages
from studio.inspect.memory_plan import MemoryPlan, TensorLife
from studio.core.telemetry import quiet_third_party_telemetry
from studio.core.model import model_weight_bytes
from studio.core.sandbox import default_limits, run_job, session_limits, worker_limit_refusal

OV_ALIGNMENT = 32           # MemoryManagerStatic solves in 32-byte units
LARGE_MODEL_BYTES = 512 * 2**20   # above this the compiled-graph worker gets room for the weights
_ITEMSIZE = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "u64": 8, "i32": 4, "u32": 4, "i16": 2, "u16": 2,
             "i8": 1, "u8": 1, "boolean": 1, "u1": 1, "i4": 1, "u4": 1, "f8e4m3": 1, "f8e5m2": 1}
# Layer types whose output may be written into input 0 (single readers, same shape): the plugin's
# canBeInPlace. Softmax: measured on the real OCR recognisers (FullyConnected -> Softmax -> output: the
# logits are not in OpenVINO's workspace).
INPLACE_KINDS = frozenset({"Eltwise", "Subgraph", "Softmax"})


@dataclass(frozen=True)
class CompiledOp:
    """One node of OpenVINO's compiled (runtime) graph, as its rt_info reports it."""

    name: str
    kind: str                                   # layerType: Convolution, Eltwise, Subgraph, Reorder, Input...
    exec_index: int                             # execOrder
    shapes: tuple[tuple[int, ...] | None, ...]  # per output; None: dynamic
    layouts: tuple[str, ...] = ()               # per output: abcd, acdb, aBcd16b...
    precisions: tuple[str, ...] = ()            # per output: f32, i64...
    inputs: tuple[tuple[str, int], ...] = ()    # (producer name, its output port) per input
    fused: str = ""                             # originalLayersNames: the source nodes it computes


def padded_elements(shape: Sequence[int], layout: str) -> int:
    """Elements a tensor takes in ``layout``: a blocked dim (``16b`` in ``aBcd16b``) is padded to its block."""
    dims = list(shape)
    for block, letter in re.findall(r"(\d+)([a-z])", layout or ""):
        axis = ord(letter) - ord("a")
        if 0 <= axis < len(dims) and int(block) > 0:
            dims[axis] = -(-dims[axis] // int(block)) * int(block)
    return int(np.prod(dims, dtype=np.int64)) if dims else 1


def memory_solver(boxes: Sequence[tuple[int, int, int, int]]) -> tuple[int, dict[int, int]]:
    """``ov::MemorySolver::solve``: boxes (start, finish, size, id), the larger first (equal sizes by id),
    each starting at offset 0 and lifted above every placed box it overlaps in time and space. Returns
    (the top, offset by id)."""
    placed: list[tuple[int, int, int, int]] = []       # (start, finish, offset, size)
    offsets: dict[int, int] = {}
    top = 0
    for start, finish, size, ident in sorted(boxes, key=lambda b: (-b[2], b[3])):
        near = sorted((o, z) for s, f, o, z in placed if not (f < start or s > finish))
        offset = 0
        moved = True
        while moved:
            moved = False
            for o, z in near:
                if offset < o + z and offset + size > o:
                    offset, moved = o + z, True
        placed.append((start, finish, offset, size))
        offsets[ident] = offset
        top = max(top, offset + size)
    return top, offsets


def _axis_changed(a: Sequence[int], b: Sequence[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def _outer_ones(shape: Sequence[int], axis: int, layout: str) -> bool:
    """Whether every dim laid out before ``axis`` in memory is 1: then the parts along ``axis`` are
    contiguous slices of one buffer (a Concat or Split computed in place). ``layout``: the dims in
    memory order (``acdb``: channels last, so a channel concat is not contiguous)."""
    order = list(dict.fromkeys(c.lower() for c in layout if c.isalpha()))
    axes = [ord(c) - ord("a") for c in order]
    if sorted(axes) != list(range(len(shape))):
        axes = list(range(len(shape)))
    return all(shape[d] == 1 for d in axes[:axes.index(axis)])


def compiled_plan(ops: Sequence[CompiledOp]) -> MemoryPlan:
    """The plan of OpenVINO's compiled graph: clusters of shared memory, their lifetimes in execution
    order, and the workspace ``ov::MemorySolver`` makes of them (the plan's ``arena_bytes``)."""
    by_name = {op.name: op for op in ops}
    const: set[str] = set()
    for op in sorted(ops, key=lambda o: o.exec_index):
        if op.kind == "Const" or (op.kind != "Input" and op.inputs and all(p in const for p, _ in op.inputs)):
            const.add(op.name)
    readers: dict[tuple[str, int], list[CompiledOp]] = {}
    for op in ops:
        for src in op.inputs:
            readers.setdefault(src, []).append(op)
    size: dict[tuple[str, int], int] = {}
    unknown: list[str] = []
    for op in ops:
        if op.name in const or op.kind == "Output":
            continue
        for j, shape in enumerate(op.shapes):
            layout = op.layouts[j] if j < len(op.layouts) else (op.layouts[0] if op.layouts else "")
            prec = op.precisions[j] if j < len(op.precisions) else (op.precisions[0] if op.precisions else "f32")
            if shape is None:
                unknown.append(op.name)
                size[(op.name, j)] = 0
            else:
                size[(op.name, j)] = padded_elements(shape, layout) * _ITEMSIZE.get(prec, 4)
    root: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x):
        while root.get(x, x) != x:
            x = root[x]
        return x

    def join(a, b) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            root[ra] = rb

    def edges_out(name: str) -> int:
        return sum(len(readers.get((name, j), ())) for j in range(len(by_name[name].shapes)))

    for op in ops:
        if op.name in const or op.kind == "Output":
            continue
        data = [src for src in op.inputs if src in size]
        out0 = (op.name, 0)
        shape0 = op.shapes[0] if op.shapes else None
        if op.kind == "Reshape" and op.inputs and op.inputs[0] in size:
            join(out0, op.inputs[0])
        elif op.kind == "Convolution" and len(data) >= 2:
            join(out0, data[-1])                           # the fused sum's input is written in place
        elif op.kind == "Split" and data:
            src = by_name[data[0][0]].shapes[data[0][1]]
            axis = _axis_changed(src or (), shape0 or ()) if src and shape0 else None
            if axis is not None and _outer_ones(src, axis, op.layouts[0] if op.layouts else ""):
                for j in range(len(op.shapes)):
                    join((op.name, j), data[0])
        elif op.kind == "Concatenation" and data and shape0:
            first = by_name[data[0][0]].shapes[data[0][1]]
            axis = _axis_changed(shape0, first or ()) if first else None
            if axis is not None and _outer_ones(shape0, axis, op.layouts[0] if op.layouts else ""):
                for src in data:
                    join(src, out0)
        elif op.kind in INPLACE_KINDS and op.inputs and op.inputs[0] in size and shape0 is not None:
            src = op.inputs[0]
            if by_name[src[0]].kind != "Input" and all(edges_out(p) == 1 for p, _ in data) \
                    and len(readers.get(out0, ())) == 1 and by_name[src[0]].shapes[src[1]] == shape0 \
                    and size[src] == size[out0]:
                join(out0, src)
    clusters: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for key in size:
        clusters.setdefault(find(key), []).append(key)
    steps = sorted((op for op in ops if op.name not in const), key=lambda o: o.exec_index)
    step_of = {op.exec_index: i for i, op in enumerate(steps)}

    def step(exec_index: int) -> int:
        return step_of.get(exec_index, 0)

    lives: list[TensorLife] = []
    boxes: list[tuple[int, int, int, int]] = []
    for ident, (_, keys) in enumerate(sorted(clusters.items(), key=lambda kv: min(by_name[k[0]].exec_index
                                                                                   for k in kv[1]))):
        start = min(by_name[k[0]].exec_index for k in keys)
        finish = max([r.exec_index for k in keys for r in readers.get(k, ())] + [start])
        nbytes = max(size[k] for k in keys)
        io = any(by_name[k[0]].kind == "Input" for k in keys) or \
            any(r.kind == "Output" for k in keys for r in readers.get(k, ()))
        label = "|".join(dict.fromkeys(k[0] for k in sorted(keys, key=lambda k: by_name[k[0]].exec_index)))
        kind = "input" if any(by_name[k[0]].kind == "Input" for k in keys) else "output" if io else "activation"
        lives.append(TensorLife(label, nbytes, step(start), step(finish), kind, -1 if io else ident))
        if not io and nbytes:
            boxes.append((start, finish, -(-nbytes // OV_ALIGNMENT), ident))
    top, offsets = memory_solver(boxes)
    lives = [TensorLife(t.name, t.bytes, t.start, t.end, t.kind,
                        offsets.get(t.offset, 0) * OV_ALIGNMENT if t.kind == "activation" else -1) for t in lives]
    n = max(len(steps), 1)
    live, act = [0] * n, [0] * n
    for t in lives:
        for i in range(max(t.start, 0), min(t.end, n - 1) + 1):
            live[i] += t.bytes
            if t.kind == "activation":
                act[i] += t.bytes
    peak_step = max(range(n), key=lambda i: (live[i], -i))
    at_peak = sorted(((t.name, t.bytes) for t in lives if t.start <= peak_step <= t.end), key=lambda x: (-x[1], x[0]))
    weights = sum(padded_elements(s or (), "") * _ITEMSIZE.get(op.precisions[0] if op.precisions else "f32", 4)
                  for op in ops if op.kind == "Const" for s in op.shapes[:1])
    labels = tuple(op.name for op in steps)
    return MemoryPlan(labels, tuple(live), live[peak_step], peak_step, labels[peak_step] if labels else None,
                      tuple(at_peak), max(act), top * OV_ALIGNMENT, int(weights), tuple(lives),
                      tuple(dict.fromkeys(unknown)))


# ============================================================================ OpenVINO's compiled graph

COMPILE_CONFIG = {"INFERENCE_NUM_THREADS": 1, "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}


@dataclass(frozen=True)
class CompiledGraph:
    """OpenVINO's runtime graph of a model compiled for CPU at the plan's static shapes."""

    ops: tuple[CompiledOp, ...]
    version: str                    # the OpenVINO that compiled it
    static_shapes: bool             # compiled at the feeds' shapes (False: the model's dynamic ones)

    @property
    def nodes(self) -> int:
        return sum(op.kind not in ("Input", "Output", "Const") for op in self.ops)


def _op_rows(compiled) -> list[dict]:  # noqa: ANN001 - openvino.CompiledModel
    rows = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        info = op.get_rt_info()
        keys = set(info.keys())

        def get(key: str) -> str:
            return info[key].astype(str) if key in keys else ""

        shapes = []
        for out in op.outputs():
            ps = out.get_partial_shape()
            shapes.append([d.get_length() for d in ps] if ps.is_static else None)
        rows.append({"name": op.get_friendly_name(), "kind": get("layerType"),
                     "exec": int(get("execOrder") or -1), "shapes": shapes,
                     "layouts": get("outputLayouts").split(","), "precisions": get("outputPrecisions").split(","),
                     "inputs": [[op.input(i).get_source_output().get_node().get_friendly_name(),
                                 op.input(i).get_source_output().get_index()] for i in range(op.get_input_size())],
                     "fused": get("originalLayersNames")[:400]})
    return rows


@job("inspect.ov_compiled")
def ov_compiled_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """OpenVINO's runtime graph of ``model_path`` compiled for CPU at the shapes of ``arrays`` (the plan's
    feeds), with the settings the workspace measurement uses (one stream, one thread, f32)."""
    quiet_third_party_telemetry()
    import openvino as ov

    core = ov.Core()
    # the weight files' mapped pages OpenVINO has read are dropped as it repacks them (else held twice;
    # large weights only)
    with released_pages(args["model_path"]):
        ctx.set_stage("OpenVINO reading the model")
        model = core.read_model(args["model_path"])
        ports = {n: p for p in model.inputs for n in p.get_names()}
        feeds = {k: v for k, v in arrays.items() if k in ports}
        static = True
        ctx.set_stage("OpenVINO compiling the model for CPU")
        try:
            if model.is_dynamic():
                model.reshape({ports[k]: ov.PartialShape(list(v.shape)) for k, v in feeds.items()})
            compiled = core.compile_model(model, "CPU", COMPILE_CONFIG)
        except Exception:  # noqa: BLE001 - a shape only some branch allows: the model as it is (dynamic)
            static = False
            del model
            compiled = core.compile_model(core.read_model(args["model_path"]), "CPU", COMPILE_CONFIG)
    return JobOutput(data={"ops": _op_rows(compiled), "version": ov.__version__.split("-")[0], "static": static})


def compiled_graph(model_path: Path, feeds: Mapping[str, np.ndarray], *, pool_key: str = "default",
                   timeout_s: float | None = None) -> CompiledGraph:
    """OpenVINO's compiled graph of the model at the shapes of ``feeds`` (a sandboxed worker). A model
    above 512 MiB gets room for its weights once (the plugin's repacked copy; the mapped file's pages are
    dropped as they are read) and no address-space limit: OpenVINO maps the weight files, address space
    that is not memory (a 6.36 GiB decoder's map and repacked weights take ~12.5 GiB of it, which refused
    it under the 3 GiB default); the worker's resident-memory limit still holds. Where that limit cannot
    hold the weights, the one-line reason (TOO-LARGE) comes before the worker starts."""
    from dataclasses import replace


    refusal = worker_limit_refusal(model_path, "OpenVINO's compiled graph")
    if refusal is not None:
        raise StudioError(refusal, code=ErrorCode.TOO_LARGE)
    limits = default_limits()
    if model_weight_bytes(model_path) > LARGE_MODEL_BYTES:
        limits = replace(session_limits(None, model_path), address_space_limit=False)
    if timeout_s is not None:
        limits = replace(limits, timeout_s=float(timeout_s))
    res = run_job("inspect.ov_compiled", {"model_path": str(model_path)},
                  {k: np.asarray(v) for k, v in feeds.items()}, stage="OpenVINO's compiled graph",
                  pool_key=pool_key, limits=limits)
    ops = tuple(CompiledOp(r["name"], r["kind"], int(r["exec"]),
                           tuple(None if s is None else tuple(int(d) for d in s) for s in r["shapes"]),
                           tuple(r["layouts"]), tuple(r["precisions"]), tuple((a, int(b)) for a, b in r["inputs"]),
                           r.get("fused", "")) for r in res.data["ops"])
    return CompiledGraph(ops, str(res.data["version"]), bool(res.data["static"]))
