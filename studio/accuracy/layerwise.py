"""First diverging layer: compare intermediate tensors of two runs without ever
holding all of them.

Polygraphy's ``--onnx-outputs mark all`` makes every tensor an output at once
and runs out of memory on real models. Here the reference's tensors are taken
in topological order and split into chunks by estimated bytes; for each chunk
a worker marks just those tensors as outputs in both models, runs the
reference, then the candidate, compares tensor by tensor, and sends back only
the metrics. Peak memory is one session plus two chunks of tensors.

Matching a reference tensor in the candidate: by tensor name first (names
survive most rewrites: a Conv+BatchNormalization fusion keeps the BN output's
name, quantization keeps the float tensor names in QDQ models), then by the
producing node's name, then ONNX Runtime's NCHWc node (``<tensor>_nchwc``,
level "all": the blocked layout is reordered to NCHW before comparing).
Tensors with no counterpart (fused away, renamed) are counted, not compared.
A matched tensor ONNX shape inference cannot type (outputs of ``com.microsoft``
ops such as FusedConv in ORT-optimized models) takes the reference's dtype.

Marking a tensor as an output stops the fusions that would hide it, in both
engines; errors are therefore measured with those fusions off (as Polygraphy's
are). QOperator-format quantized models rename their integer tensors; use the
QDQ format to compare them layer by layer.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.accuracy.runs import pack_sets, unpack_sets
from studio.core.compare import Tolerance, compare_arrays
from studio.core.engines import ENGINES, RunOptions, engine_row, get_engine, resolve_engine_name
from studio.core.engines.base import check_model_file, require_available
from studio.core.engines.layout import channels_last, to_channels_first
from studio.core.engines import sessions
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.feeds import Feeds
from studio.core.save import save_scratch
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.types import np_dtype
from studio.core.model import load, model_weight_bytes

log = logging.getLogger(__name__)

__all__ = ["LayerError", "LayerwiseResult", "compare_layers", "plan_layers"]

_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE,
                onnx.TensorProto.BFLOAT16}
_SKIP_OPS = {"Constant", "ConstantOfShape", "Shape", "Size", "QuantizeLinear", "DynamicQuantizeLinear"}


@dataclass(frozen=True)
class LayerError:
    """Error of one intermediate tensor (the output of one reference node)."""

    index: int                      # position in the reference's topological order
    node: str                       # reference node name (or "Op(output)" when unnamed)
    op_type: str
    tensor: str
    candidate_tensor: str
    candidate_node: str | None      # the candidate's producer, when it differs (fused / renamed)
    matched_by: str                 # "tensor name" | "node name"
    shape: tuple[int, ...] | None
    max_abs: float | None
    rel_l2: float | None
    cosine: float | None
    exceeds: bool
    note: str = ""

    @property
    def error(self) -> float:
        """The scalar plotted per layer: relative L2 error (inf when shapes differ)."""
        return float("inf") if self.rel_l2 is None else float(self.rel_l2)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["shape"] = list(self.shape) if self.shape is not None else None
        for k in ("max_abs", "rel_l2", "cosine"):
            if d[k] is not None and not math.isfinite(d[k]):
                d[k] = None
        return d


@dataclass(frozen=True, eq=False)
class LayerwiseResult:
    layers: tuple[LayerError, ...]
    first_divergence: LayerError | None
    tolerance: str
    compared: int
    unmatched: int                  # reference tensors with no counterpart in the candidate
    skipped: int                    # tensors without a known float type, or beyond max_tensors
    chunks: int
    chunk_bytes: int
    peak_worker_rss_bytes: int | None
    seconds: float
    notes: tuple[str, ...] = ()
    unmatched_examples: tuple[str, ...] = field(default=())

    def node_errors(self) -> dict[str, float]:
        """Reference node name -> relative L2 error, the shape the graph view's overlays take."""
        out: dict[str, float] = {}
        for layer in self.layers:
            out[layer.node] = max(out.get(layer.node, 0.0), layer.error)
        return out

    def summary(self) -> str:
        if self.first_divergence is None:
            return (f"no layer exceeds the tolerance ({self.compared} tensors compared, "
                    f"{self.unmatched} without a counterpart)")
        d = self.first_divergence
        return (f"first diverging layer: '{d.node[:80]}' ({d.op_type}), tensor '{d.tensor[:60]}', "
                f"relative L2 {d.error:.3g}, cosine {d.cosine if d.cosine is not None else float('nan'):.5f}")

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "tolerance": self.tolerance, "compared": self.compared,
                "unmatched": self.unmatched, "skipped": self.skipped, "chunks": self.chunks,
                "chunk_bytes": self.chunk_bytes, "peak_worker_rss_bytes": self.peak_worker_rss_bytes,
                "seconds": round(self.seconds, 3), "notes": list(self.notes),
                "unmatched_examples": list(self.unmatched_examples),
                "first_divergence": self.first_divergence.to_dict() if self.first_divergence else None,
                "layers": [x.to_dict() for x in self.layers], "node_errors": {
                    k: (v if math.isfinite(v) else None) for k, v in self.node_errors().items()}}


# ---------------------------------------------------------------------------- planning (worker)

def _node_label(node: onnx.NodeProto) -> str:
    return node.name or f"{node.op_type}({next((o for o in node.output if o), '?')})"


def _with_feed_shapes(model: onnx.ModelProto, shapes: Mapping[str, list[int]]) -> None:
    for vi in model.graph.input:
        shape = shapes.get(vi.name)
        if shape is None or not vi.type.HasField("tensor_type"):
            continue
        dims = vi.type.tensor_type.shape.dim
        if len(dims) == len(shape):
            for d, n in zip(dims, shape):
                d.Clear()
                d.dim_value = int(n)


def _typed_values(model: onnx.ModelProto, feed_shapes: Mapping[str, list[int]]) -> dict[str, tuple[int, int | None]]:
    """tensor name -> (elem type, element count or None), from shape inference on the graph."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    _with_feed_shapes(m, feed_shapes)
    try:
        m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - partial information is still useful
        log.debug("shape inference failed: %s", exc)
    out: dict[str, tuple[int, int | None]] = {}
    for vi in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input):
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            continue
        t = vi.type.tensor_type
        numel: int | None = None
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            numel = int(np.prod([d.dim_value for d in t.shape.dim], dtype=np.int64))
        out[vi.name] = (t.elem_type, numel)
    return out


@job("accuracy.layer_plan")
def layer_plan_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("layer-wise plan (shape inference)")
    ref = onnx.load_model(args["reference"], load_external_data=False)
    cand = onnx.load_model(args["candidate"], load_external_data=False)
    shapes = {k: list(v) for k, v in (args.get("feed_shapes") or {}).items()}
    plan = plan_layers(ref, cand, shapes)
    if args.get("engine_b") in FUSING_ENGINES:    # where a converter may have fused the next activation
        after = activation_successors(ref, [it["tensor"] for it in plan["items"]])
        for it in plan["items"]:
            if it["tensor"] in after:
                it["after"] = list(after[it["tensor"]])
    return JobOutput(data=plan)


def _same_node(node: onnx.NodeProto, other: onnx.NodeProto | None, k: int, ref_tensors: set[str]) -> bool:
    """Match by node name only when the op is the same and the candidate's output does not
    carry another reference tensor's name (a fused node takes over its last member's output
    name: that output stands for that tensor, not for this node's)."""
    if other is None or not node.name or other.op_type != node.op_type or k >= len(other.output):
        return False
    target = other.output[k]
    return bool(target) and target not in ref_tensors


def plan_layers(ref: onnx.ModelProto, cand: onnx.ModelProto, feed_shapes: Mapping[str, list[int]]) -> dict:
    """Which reference tensors to compare, their counterparts, types and sizes (JSON)."""
    ref_types = _typed_values(ref, feed_shapes)
    cand_types = _typed_values(cand, feed_shapes)
    cand_producer: dict[str, str] = {}
    cand_by_node: dict[str, onnx.NodeProto] = {}
    for n in cand.graph.node:
        for o in n.output:
            if o:
                cand_producer[o] = _node_label(n)
        if n.name:
            cand_by_node[n.name] = n
    cand_inputs = {i.name for i in cand.graph.input}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in cand.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def after_qdq(name: str) -> str:
        """In QDQ models the float tensor a node writes is re-quantized before anyone reads it
        (and a Relu folded into the quantization range is gone); what consumers see is the
        DequantizeLinear output, so that is what gets compared."""
        users = consumers.get(name, [])
        if users and all(u.op_type == "QuantizeLinear" for u in users):
            deq = [d for u in users for d in consumers.get(u.output[0], []) if d.op_type == "DequantizeLinear"]
            if deq:
                return deq[0].output[0]
        return name
    ref_tensors = {o for n in ref.graph.node for o in n.output if o}
    # A NCHWc Conv that took in a following Add (its 4th, "Sum" input) computes a later tensor than
    # the one it is named after: not a counterpart.
    nchwc = {n.name[:-len("_nchwc")]: n for n in cand.graph.node
             if n.name.endswith("_nchwc") and n.domain == "com.microsoft.nchwc" and n.output and n.output[0]
             and not (n.op_type == "Conv" and len(n.input) > 3 and n.input[3])}
    items, unmatched, untyped, examples = [], 0, 0, []
    typed_from_reference = 0
    for index, node in enumerate(ref.graph.node):
        if node.op_type in _SKIP_OPS:
            continue
        label = _node_label(node)
        for k, tensor in enumerate(node.output):
            if not tensor:
                continue
            et, numel = ref_types.get(tensor, (0, None))
            if et not in _FLOAT_TYPES:
                untyped += et == 0
                continue
            layout = None
            if tensor in cand_producer and tensor not in cand_inputs:
                target, by = tensor, "tensor name"
            elif _same_node(node, cand_by_node.get(node.name), k, ref_tensors):
                target, by = cand_by_node[node.name].output[k], "node name"
            elif tensor in nchwc:
                # ORT (level "all") names a blocked-layout kernel after the tensor it computes.
                target, by, layout = nchwc[tensor].output[0], "NCHWc node", "nchwc"
            else:
                unmatched += 1
                if len(examples) < 5:
                    examples.append(label)
                continue
            deq = after_qdq(target)
            if deq != target:
                target, by = deq, by + " (after Q/DQ)"
            cet, _ = cand_types.get(target, (0, None))
            if cet == 0:
                # ONNX shape inference does not know contrib ops (FusedConv, NCHWc...): their outputs
                # stand for the reference's tensor, so they carry its dtype.
                cet = et
                typed_from_reference += 1
            if cet not in _FLOAT_TYPES:
                untyped += 1
                continue
            producer = cand_producer.get(target)
            item = {"index": index, "node": label, "op": node.op_type, "tensor": tensor, "target": target,
                    "by": by, "ref_type": et, "cand_type": cet, "numel": numel,
                    "cand_node": producer if producer != label else None}
            if layout:
                item["layout"] = layout
            items.append(item)
    return {"items": items, "unmatched": unmatched, "untyped": untyped, "unmatched_examples": examples,
            "typed_from_reference": typed_from_reference}


def _nchwc_block() -> int:
    """MLAS's NCHWc block size on this CPU (the kernels that ran): 16 with AVX-512F, else 8."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return 8
    return 16 if " avx512f" in flags else 8


def _from_nchwc(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """ORT's NCHWc tensor (declared [N, C padded to the block, H, W], stored blocked as
    [N, C/b, H, W, b]) back to the reference's NCHW layout; padding channels dropped."""
    if got.ndim != ref.ndim or got.ndim < 3 or got.shape[0] != ref.shape[0] or got.shape[2:] != ref.shape[2:]:
        return got
    block = _nchwc_block()
    n, c = got.shape[0], got.shape[1]
    if c % block or c < ref.shape[1]:
        return got
    blocked = np.ascontiguousarray(got).reshape(n, c // block, *got.shape[2:], block)
    plain = np.moveaxis(blocked, -1, 2).reshape(got.shape)        # [N, C/b, b, H, W] -> [N, C, H, W]
    return plain[:, :ref.shape[1]]


# ---------------------------------------------------------------------------- one chunk (worker)

# Engines whose converter refuses ONNX-style tensor names as outputs (onnx2tf's signature names): the marked
# tensors leave through Identity nodes with plain names.
PLAIN_NAME_ENGINES = tuple(r.name for r in ENGINES if r.channels_last)


def _with_outputs(src: str, names: list[tuple[str, int]], dst: Path, *, aliases: bool = False) -> dict[str, str]:
    """Write ``src`` with ``names`` as extra outputs to ``dst``; the output name of each tensor.
    ``aliases``: expose each through an Identity with a plain name (``lw_out_N``): onnx2tf refuses
    signature names like PyTorch's "/layer/Conv_output_0"."""
    model = onnx.load_model(src, load_external_data=False)
    existing = {o.name for o in model.graph.output}
    taken = {t for n in model.graph.node for t in n.output} | existing | {i.name for i in model.graph.input}
    mapping: dict[str, str] = {}
    for name, elem_type in names:
        if name in existing or name in mapping:
            mapping.setdefault(name, name)
            continue
        out = name
        if aliases:
            k = len(mapping)
            while f"lw_out_{k}" in taken:
                k += 1
            out = f"lw_out_{k}"
            taken.add(out)
            model.graph.node.append(onnx.helper.make_node("Identity", [name], [out], name=f"{out}_identity"))
        model.graph.output.append(onnx.helper.make_tensor_value_info(out, elem_type, None))
        mapping[name] = out
    with open(dst, "wb") as fh:  # scratch: a chunk model in the layer-wise work folder
        fh.write(model.SerializeToString())
    return mapping


def _release_memory() -> None:
    """Return the closed session's freed heap to the OS before the next session opens, so
    peak memory is one session plus the chunk, not two sessions."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


# Engines that may store a tensor channels-last (onnx2tf: NCHW -> NHWC) under the same shape (their row says so).
CHANNELS_LAST_ENGINES = tuple(r.name for r in ENGINES if r.channels_last)


def _ambiguous_layout(name: str, ref: np.ndarray, got: np.ndarray, tolerance, quantized: bool):
    """The comparison with ``got`` read channels-last, when its shape is the same both ways
    (a 1x16x16x16 tensor): the runner cannot tell which layout it has. None otherwise."""
    if not 3 <= got.ndim <= 5 or channels_last(got.shape) != got.shape:
        return None
    d = compare_arrays(name, ref, to_channels_first(got), tolerance, quantized=quantized)
    return d if d.rel_l2 is not None and d.ref_shape == d.got_shape else None


# Engines whose converter fuses ops under the ONNX tensor names, and the ops it folds into the op before.
FUSING_ENGINES = tuple(r.name for r in ENGINES if r.converted and r.fuses_ops)     # from the engine table
_ACTIVATIONS = frozenset({"Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "LeakyRelu", "Elu",
                          "Selu", "PRelu", "Gelu", "Softplus", "Mish"})
_FUSED_MIN_ERROR = 1e-3      # below this the tensor matches as it is
_FUSED_MAX_ERROR = 1e-3      # the fused candidate must match the activation at least this well


def activation_successors(model: onnx.ModelProto, tensors: list[str]) -> dict[str, tuple[str, ...]]:
    """For each tensor read by exactly one node that is an activation, that activation's output
    (and the next one's, for two activations in a row)."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    out: dict[str, tuple[str, ...]] = {}
    for t in tensors:
        chain, cur = [], t
        for _ in range(2):
            users = consumers.get(cur, [])
            if len(users) != 1 or users[0].op_type not in _ACTIVATIONS or not users[0].output:
                break
            cur = users[0].output[0]
            chain.append(cur)
        if chain:
            out[t] = tuple(chain)
    return out


def same_values_other_rank(got: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``got`` in the reference's shape when it only differs by size-1 axes: MNN keeps fully
    connected results 4-D ([1, 32, 1, 1] for ONNX's [1, 32]); the values and their order are
    the same. Any other difference is left for the comparison to report."""
    if got.shape == ref.shape or got.size != ref.size:
        return got
    if [d for d in got.shape if d != 1] != [d for d in ref.shape if d != 1]:
        return got
    return got.reshape(ref.shape)


def compare_chunk(reference: str, candidate: str, items: list[dict], feeds: Feeds, ctx: JobContext, *,
                  engine_a: str, engine_b: str, options_a: Mapping[str, Any], options_b: Mapping[str, Any],
                  dir_a: Path, dir_b: Path, chunk: int = 0, tolerance: Tolerance | None = None,
                  quantized: bool = False) -> dict[str, dict]:
    """Worker side: mark ``items`` as outputs in both models, run the reference, then the
    candidate, and return metrics per reference tensor (no arrays leave this function)."""

    sides = (("a", reference, engine_a, options_a, dir_a, "tensor", "ref_type"),
             ("b", candidate, engine_b, options_b, dir_b, "target", "cand_type"))
    values: dict[str, dict[str, Any]] = {}
    # Converters (MNN, LiteRT) fuse an activation into the op before it and may keep that op's
    # tensor name for the fused result: the reference also gives the activation's output (the plan
    # names it per item).
    after = {it["tensor"]: tuple(it["after"]) for it in items if it.get("after")}
    for side, model, engine, opts, folder, tensor_key, type_key in sides:
        ctx.set_stage(f"layer-wise chunk {chunk + 1}: {'reference' if side == 'a' else 'candidate'} on {engine}")
        extra = [(t, it["ref_type"]) for it in items for t in after.get(it["tensor"], ())] if side == "a" else []
        path = Path(folder) / f"chunk{chunk}-{os.getpid()}.onnx"
        names = _with_outputs(model, [(it[tensor_key], it[type_key]) for it in items] + extra, path,
                              aliases=engine in PLAIN_NAME_ENGINES)
        try:
            runner = sessions.open_runner(engine, path, opts or {}, ctx)
            wanted = list(dict.fromkeys([it[tensor_key] for it in items] + [t for t, _ in extra]))
            got = runner.infer(feeds, list(dict.fromkeys(names.get(t, t) for t in wanted)))
            values[side] = {t: got[names.get(t, t)] for t in wanted if names.get(t, t) in got}
            runner.close()
            del runner
        finally:
            path.unlink(missing_ok=True)  # scratch: the chunk model in the work folder
            _release_memory()
    results: dict[str, dict] = {}
    for it in items:
        ref, got = values["a"].get(it["tensor"]), values["b"].get(it["target"])
        if ref is None or got is None:
            continue
        if it.get("layout") == "nchwc":
            got = _from_nchwc(np.asarray(got), np.asarray(ref))
        got = same_values_other_rank(np.asarray(got), np.asarray(ref))
        d = compare_arrays(it["tensor"], ref, got, tolerance, quantized=quantized)
        comparable = d.rel_l2 is not None and d.ref_shape == d.got_shape
        note = d.note if not comparable else ""
        if engine_b in CHANNELS_LAST_ENGINES and comparable and d.rel_l2 > _FUSED_MIN_ERROR:
            flipped = _ambiguous_layout(it["tensor"], np.asarray(ref), np.asarray(got), tolerance, quantized)
            if flipped is not None and flipped.rel_l2 < d.rel_l2 / 10:
                d, got = flipped, to_channels_first(np.asarray(got))
                note = "same shape in both layouts: compared as channels-last (N..C), which matches"
        for succ in after.get(it["tensor"], ()):
            if not comparable or d.rel_l2 <= _FUSED_MIN_ERROR or values["a"].get(succ) is None:
                break
            fused = compare_arrays(succ, values["a"][succ], got, tolerance, quantized=quantized)
            if fused.rel_l2 is not None and fused.ref_shape == fused.got_shape and \
                    fused.rel_l2 < min(_FUSED_MAX_ERROR, d.rel_l2 / 10):
                d = fused       # the same values as the activation after it: fused, not diverged
                note = f"{engine_b} fused this op with the next one: its tensor holds {succ[:80]}'s values " \
                       "(compared with those)"
                break
        results[it["tensor"]] = {"shape": list(d.ref_shape or ()), "max_abs": d.max_abs,
                                 "rel_l2": d.rel_l2 if comparable and math.isfinite(d.rel_l2) else None,
                                 "cosine": d.cosine, "note": note}
    values.clear()
    return results


@job("accuracy.layer_chunk")
def layer_chunk_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Mark one chunk of tensors as outputs in both models, run both, compare, return metrics."""
    tol = Tolerance(**args["tolerance"]) if args.get("tolerance") else None   # only for the metrics
    results = compare_chunk(args["reference"], args["candidate"], args["items"], unpack_sets(arrays, 1)[0], ctx,
                            engine_a=args["engine_a"], engine_b=args["engine_b"],
                            options_a=args.get("options_a") or {}, options_b=args.get("options_b") or {},
                            dir_a=Path(args["dir_a"]), dir_b=Path(args["dir_b"]), chunk=int(args["chunk"]),
                            tolerance=tol, quantized=bool(args.get("quantized")))
    return JobOutput(data={"results": results})


# ---------------------------------------------------------------------------- driver (parent)

def default_layer_threshold(tolerance: Tolerance | None, quantized: bool) -> float:
    """Relative L2 error above which a layer counts as diverged."""
    if quantized:
        return 0.2
    if tolerance is not None and tolerance.min_cosine is not None:
        return 0.05
    return 1e-3


@job("accuracy.layer_prepare")
def layer_prepare_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Copy a model into the work folder with every weight in one external-data file, so each
    chunk's model is a small graph file beside it: a chunk then never parses or copies the
    weights again (inline weights would be read, rewritten and re-read for every chunk)."""
    ctx.set_stage("layer-wise: preparing a working copy")
    model = onnx.load_model(args["model"])
    folder = Path(args["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    save_scratch(model, folder / "model.onnx", external=True)     # the working copy in the layer-wise work folder
    return JobOutput(data={"path": str(folder / "model.onnx")})


def _prepare(model_path: Path, parent: Path, side: str, limits: Limits | None, pool_key: str,
             on_tick: Callable[[float], None] | None) -> Path:
    load(model_path)            # validated (external-data paths, sizes) before a worker reads it
    res = run_job("accuracy.layer_prepare", {"model": str(model_path), "folder": str(parent / side)},
                  stage="layer-wise preparation", limits=limits, pool_key=pool_key, on_tick=on_tick)
    return Path(res.data["path"])


def chunk_items(items: list[dict], budget: int, itemsize: Mapping[int, int]) -> list[list[dict]]:
    known = [it["numel"] for it in items if it["numel"]]
    default = int(np.median(known)) if known else 1 << 16
    out: list[list[dict]] = []
    current: list[dict] = []
    used = 0
    for it in items:
        size = (it["numel"] or default) * itemsize.get(it["ref_type"], 4) \
            + (it["numel"] or default) * itemsize.get(it["cand_type"], 4)
        if current and used + size > budget:
            out.append(current)
            current, used = [], 0
        current.append(it)
        used += size
    if current:
        out.append(current)
    return out


def compare_layers(reference: Path, candidate: Path, *, feeds: Feeds, engine: str = "onnxruntime",
                   engine_b: str | None = None, options: RunOptions | None = None,
                   options_b: RunOptions | None = None, tolerance: Tolerance | None = None, quantized: bool = False,
                   layer_threshold: float | None = None, chunk_bytes: int | None = None, max_tensors: int = 4000, work_dir: Path | None = None,
                   limits: Limits | None = None, pool_key: str = "default",
                   on_tick: Callable[[float], None] | None = None,
                   on_progress: Callable[[int, int], None] | None = None) -> LayerwiseResult:
    """Compare every matchable intermediate tensor of ``reference`` (on ``engine``) with
    ``candidate`` (on ``engine_b``) on one input set, chunk by chunk.

    A layer diverges when its relative L2 error exceeds ``layer_threshold`` (default
    from the comparison: 1e-3 for float32 runs, 0.05 for reduced precision, 0.2 for
    quantized models, about cosine 0.98) or when its shape differs. Elementwise
    tolerances suit final outputs, not every activation of a deep network.

    ``chunk_bytes`` bounds the tensors held per chunk, both sides together (default:
    half the model's weights, between 32 MiB and 512 MiB), so peak memory stays near
    one plain inference run."""
    started = time.perf_counter()
    engine_a = resolve_engine_name(engine)
    engine_b = resolve_engine_name(engine_b or engine)
    for name in (engine_a, engine_b):
        if engine_row(name).kind == "table":
            raise StudioError("layer-wise comparison runs on ONNX Runtime and OpenVINO; TensorRT marks outputs "
                              "at build time (use Polygraphy with --trt-outputs on a GPU machine)",
                              code=ErrorCode.UNSUPPORTED)
        require_available(get_engine(name))
    ref_path, cand_path = check_model_file(reference), check_model_file(candidate)
    options_a = options or RunOptions()
    options_b = options_b or options_a
    feed_shapes = {k: list(np.shape(v)) for k, v in feeds.items() if not isinstance(v, list)}
    plan = run_job("accuracy.layer_plan", {"reference": str(ref_path), "candidate": str(cand_path),
                                           "feed_shapes": feed_shapes, "engine_b": engine_b},
                   stage="layer-wise plan", limits=limits, pool_key=pool_key, on_tick=on_tick).data
    items = plan["items"]
    skipped = int(plan["untyped"])
    notes = []
    if skipped:
        notes.append(f"{skipped} tensor(s) skipped: not float, or of a type shape inference cannot tell")
    if plan.get("typed_from_reference"):
        notes.append(f"{plan['typed_from_reference']} candidate tensor(s) of ops ONNX shape inference does not know "
                     "(com.microsoft...) take the reference's dtype")
    if len(items) > max_tensors:
        stride = math.ceil(len(items) / max_tensors)
        notes.append(f"{len(items)} tensors: every {stride}th compared, the rest skipped (max_tensors={max_tensors})")
        skipped += len(items) - len(items[::stride])
        items = items[::stride]
    if chunk_bytes is None:
        chunk_bytes = int(min(512 * 2**20, max(32 * 2**20, model_weight_bytes(ref_path) // 2)))
    threshold = layer_threshold if layer_threshold is not None else default_layer_threshold(tolerance, quantized)
    itemsize = {t: np_dtype(t).itemsize for t in _FLOAT_TYPES}
    chunks = chunk_items(items, chunk_bytes, itemsize)
    tol_args = tolerance.to_dict() if tolerance is not None else None
    layers: list[LayerError] = []
    peak = None
    work = Path(tempfile.mkdtemp(prefix="onnx-studio-layerwise-", dir=work_dir))
    try:
        work_a = _prepare(ref_path, work, "a", limits, pool_key, on_tick)
        work_b = work_a if cand_path == ref_path else _prepare(cand_path, work, "b", limits, pool_key, on_tick)
        dir_a, dir_b = work_a.parent, work_b.parent
        packed = pack_sets([feeds])
        for c, chunk in enumerate(chunks):
            if on_progress:
                on_progress(c, len(chunks))
            args = {"reference": str(work_a), "candidate": str(work_b), "engine_a": engine_a,
                    "engine_b": engine_b, "options_a": options_a.to_args(), "options_b": options_b.to_args(),
                    "dir_a": str(dir_a), "dir_b": str(dir_b), "items": chunk, "chunk": c, "tolerance": tol_args,
                    "quantized": quantized}
            res = run_job("accuracy.layer_chunk", args, packed, stage=f"layer-wise chunk {c + 1}/{len(chunks)}",
                          limits=limits, pool_key=pool_key, on_tick=on_tick)
            if res.peak_rss_bytes:
                peak = max(peak or 0, res.peak_rss_bytes)
            results = res.data["results"]
            for it in chunk:
                r = results.get(it["tensor"])
                if r is None:
                    continue
                layers.append(LayerError(
                    it["index"], it["node"], it["op"], it["tensor"], it["target"], it["cand_node"], it["by"],
                    tuple(r["shape"]), r["max_abs"], r["rel_l2"], r["cosine"],
                    r["rel_l2"] is None or r["rel_l2"] > threshold, r["note"]))
        if on_progress:
            on_progress(len(chunks), len(chunks))
    finally:
        shutil.rmtree(work, ignore_errors=True)  # scratch: the layer-wise work folder made by this run
    layers.sort(key=lambda x: x.index)
    first = next((x for x in layers if x.exceeds), None)
    tol_text = f"relative L2 error > {threshold:g} per layer"
    return LayerwiseResult(tuple(layers), first, tol_text, len(layers), int(plan["unmatched"]), skipped,
                           len(chunks), chunk_bytes, peak, time.perf_counter() - started, tuple(notes),
                           tuple(plan.get("unmatched_examples", ())))
