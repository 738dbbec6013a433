"""convert-fp16: float32 weights and compute  ⇒  float16, model inputs/outputs kept float32.

Uses ONNX Runtime's copy of the onnxconverter-common converter
(``onnxruntime.transformers.float16.convert_float_to_float16``: keep-io-types,
op and node block lists, the ops that must stay float32 by default), then
``fix-cast-types``' repair for Casts the converter leaves mistyped, then checks
the result loads in ONNX Runtime and computes no inf/NaN where float32 is finite.

Nodes whose float32 values, measured on the pass's feeds (``inputs``: the sets the
result is verified on), leave float16's range stay float32 with Casts around them
(``passes.fp16_ranges``: a hand-written LayerNorm's sum of squares, an attention
mask of -1e9); the result's details name each node and the value that kept it.

Whether fp16 is *faster* is measured, not assumed: ONNX Runtime's CPU provider
has fp16 kernels for few ops and runs the rest through Casts, so on most CPUs
fp16 is slower than fp32 (measured here: 1.3-2.5x slower on a 2-core Zen 4).
The pass says so; fp16 pays off on GPUs (TensorRT, ORT CUDA), and on CPUs with
bf16 units OpenVINO's bf16 inference precision is the fast reduced precision.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import ClassVar

import onnx
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass
from passes.fix_cast_types import repair_cast_types
from passes.fp16_ranges import (DEFAULT_LIMIT, KeptFp32, fp32_nodes, join_fp32_islands, nonfinite_outputs,
                                relocate_casts)
from passes.normalize import sort_graph
from passes.quant_tools import job_context
from passes.base import register
from studio.core.compare import REDUCED_PRECISION, Tolerance
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, engine_message
from passes import quant_tools as qt
from studio.core.model_io import save_result
from studio.core.save import save_scratch
from studio.core.feeds import cast_to_inputs, make_feeds

log = logging.getLogger(__name__)


def convert_model(model: onnx.ModelProto, *, op_block_list: list[str] | None = None,
                  node_block_list: list[str] | None = None, keep_io_types: bool = True) -> tuple[onnx.ModelProto, list]:
    """fp16 copy of ``model`` and the Cast repairs it needed."""
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    # Ops outside ai.onnx (com.microsoft contrib ops, custom ops) have type constraints the converter does
    # not know (DynamicQuantizeLSTM takes float only): they stay float32 behind Casts.
    foreign = [n.op_type for n in model.graph.node if n.domain not in ("", "ai.onnx")]
    blocked = list(dict.fromkeys(list(DEFAULT_OP_BLOCK_LIST) + list(op_block_list or []) + foreign
                                 + sorted(float32_only_ops(model)) + sorted(NON_TENSOR_OPS)))
    big = model.ByteSize() > 1_800_000_000
    converted = convert_float_to_float16(model, keep_io_types=keep_io_types, op_block_list=blocked,
                                         node_block_list=list(node_block_list or []), disable_shape_infer=big)
    # Casts around a blocked node inside an If body are appended to the top graph: moved into that body
    relocate_casts(converted)
    join_fp32_islands(converted)
    # the converter appends input Casts at the end, and If/Loop bodies may read their outputs from the outer
    # scope (corpus silero_vad): sorted by what each node and its subgraphs read
    sort_graph(converted.graph)
    drop_stale_constant_types(converted.graph)
    fixes = repair_cast_types(converted)
    return converted, fixes


# Ops that make or read sequences/optionals: the converter only retypes tensors, so a sequence of
# float32 built from converted float16 tensors would contradict its declared type. They stay float32.
NON_TENSOR_OPS = frozenset({"SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceErase", "SequenceLength",
                            "SequenceEmpty", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
                            "OptionalGetElement", "OptionalHasElement"})


def float32_only_ops(model: onnx.ModelProto) -> set[str]:
    """ai.onnx ops in the model whose schema takes float32 but not float16 on some input
    (DynamicQuantizeLinear, older-opset ops): converting their inputs makes the model invalid."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        return set()
    out: set[str] = set()
    for op in {n.op_type for n in model.graph.node if n.domain in ("", "ai.onnx")}:
        try:
            schema = onnx.defs.get_schema(op, opset, "")
        except onnx.defs.SchemaError:
            continue
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
        for formal in schema.inputs:
            types = allowed.get(formal.type_str, {formal.type_str})
            if "tensor(float)" in types and "tensor(float16)" not in types:
                out.add(op)
                break
    return out


def drop_stale_constant_types(graph: onnx.GraphProto) -> int:
    """Remove value_info entries that name an initializer or a Constant output.

    The converter turns every float value_info to float16, also for constants it
    kept float32 (Resize scales, block-listed inputs): the full checker then
    fails with "Inferred elem type differs" (YOLOv8, magika). The type of a
    constant is its tensor's; the entry adds nothing."""
    constants = {t.name for t in graph.initializer}
    constants |= {n.output[0] for n in graph.node if n.op_type == "Constant" and n.output}
    keep = [vi for vi in graph.value_info if vi.name not in constants]
    dropped = len(graph.value_info) - len(keep)
    if dropped:
        del graph.value_info[:]
        graph.value_info.extend(keep)
    return dropped
def _flag(value: object) -> bool:
    """An option given as JSON or text (``--set convert-fp16.keep_io_types=false``)."""
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "0", "no", "off", "")
    return bool(value)


@register
class ConvertFp16(StudioPass):
    """float32 weights and compute  ⇒  float16 (inputs/outputs stay float32; block-listed ops stay float32)."""

    name = "convert-fp16"
    summary = ("Convert to float16 with float32 inputs/outputs and an op/node block list; nodes whose measured "
               "float32 values leave float16's range stay float32; repairs mistyped Casts and measures whether fp16 "
               "is faster on ONNX Runtime CPU here.")
    calls_engines = True
    verify_tolerance: ClassVar[Tolerance | None] = REDUCED_PRECISION
    # Judged like quantization, by cosine: through 50 layers fp16 moves many elements by more than
    # any elementwise tolerance that would still catch a real bug, while the direction holds.
    verify_quantized: ClassVar[bool] = True
    path_options: ClassVar[tuple[str, ...]] = ("inputs",)

    # Options: op_block_list, node_block_list, keep_io_types (True), measure (True), dims (symbolic dims),
    # inputs (.npz: the sets it measures ranges and judges on), keep_out_of_range (True), fp32_limit (16376).
    def changes_io_dtypes(self) -> bool:
        # keep_io_types=false makes float inputs/outputs float16: an interface change asked for.
        return not _flag(self.options.get("keep_io_types", True))

    def call(self, model: ir.Model) -> PassResult:
        ctx = job_context(self)
        opts = self.options
        with tempfile.TemporaryDirectory(prefix="fp16-", dir=".") as tmp:
            workdir = Path(tmp).resolve()
            src = save_result(model, workdir / "src" / "model.onnx")
            proto = onnx.load_model(str(src))
            if not any(t.data_type == onnx.TensorProto.FLOAT for t in proto.graph.initializer) and not any(
                    vi.type.tensor_type.elem_type == onnx.TensorProto.FLOAT for vi in proto.graph.input):
                return PassResult(model, False)
            inputs = {vi.name for vi in proto.graph.input}
            seq_io = [vi.name for vi in (*proto.graph.input, *proto.graph.output)
                      if vi.type.WhichOneof("value") == "sequence_type"]
            if seq_io:      # the converter casts graph I/O as tensors: a sequence output would break
                role = "input" if seq_io[0] in inputs else "output"
                return PassResult(model, False, (), {}, (
                    f"not applied: '{seq_io[0][:60]}' is a sequence {role}, which the fp16 converter cannot "
                    "keep float32; the model is left as it is",))
            header = onnx.load_model(str(src), load_external_data=False)
            if opts.get("inputs"):
                sets = list(make_feeds(header, inputs=Path(str(opts["inputs"]))).sets)[:4]
            else:
                sets = list(make_feeds(header, count=2, seed=1000, dims=opts.get("dims")).sets)
            ctx.set_stage("fp16: running the original in ONNX Runtime, measuring its float32 ranges")
            limit = float(opts.get("fp32_limit", DEFAULT_LIMIT))
            measured = _flag(opts.get("keep_out_of_range", True))
            warnings: list[str] = []

            def run(tapped: onnx.ModelProto, feed_sets) -> list[dict]:
                path = workdir / "ranges.onnx"
                save_scratch(tapped, path)
                return qt.ort_outputs(path, feed_sets, ctx, level="disable")

            try:
                reference = qt.ort_outputs(src, sets, ctx)
            except Exception as exc:  # noqa: BLE001
                # the original refuses these inputs (sizes guessed for free dims): no op of the fp16 model is
                # to blame, so the block list is not the remedy (corpus oww_melspectrogram said it was)
                ctx.set_stage("fp16: the reference run")        # not the runner's "session creation"
                raise StudioError("the original model does not run in ONNX Runtime on the inputs the fp16 result is "
                                  "judged on: set its input sizes with --dim NAME=VALUE "
                                  f"({type(exc).__name__}: {engine_message(exc, 200)})",
                                  code=ErrorCode.REFERENCE_FAILED) from None
            kept: tuple[KeptFp32, ...] = ()
            if measured:
                try:
                    kept = fp32_nodes(proto, sets, run, limit)
                except Exception as exc:  # noqa: BLE001 - the tapped copy failed: convert without ranges, and say so
                    log.info("fp16 range measurement failed: %s", exc)
                    warnings.append(f"float32 ranges not measured ({type(exc).__name__}: {engine_message(exc, 120)})"
                                    ": no node is kept float32 for its range")
            if kept:
                warnings.append(f"{len(kept)} node(s) kept float32, their float32 values beyond float16's range "
                                f"(measured |x| > {limit:g}): " + "; ".join(k.describe() for k in kept[:3])
                                + ("; ..." if len(kept) > 3 else "") + " (all in details.kept_fp32)")
            ctx.set_stage("fp16: converting (onnxruntime.transformers.float16)")
            converted, fixes = convert_model(proto, op_block_list=opts.get("op_block_list"),
                                             node_block_list=[*(opts.get("node_block_list") or []),
                                                              *(k.node for k in kept)],
                                             keep_io_types=_flag(opts.get("keep_io_types", True)))
            del proto
            out = workdir / "fp16.onnx"
            save_scratch(converted, out)
            casts = sum(1 for n in converted.graph.node if n.op_type == "Cast")
            del converted
            if self.changes_io_dtypes():
                warnings.append("keep_io_types=false: the model's float inputs and outputs are float16 now; "
                                "feed it float16 arrays")
            details: dict = {"cast_fixes": [f.describe() for f in fixes], "casts": casts,
                             "blocked_ops": list(opts.get("op_block_list") or []),
                             "blocked_nodes": list(opts.get("node_block_list") or []),
                             "kept_fp32": [k.describe() for k in kept], "fp32_limit": limit}
            try:
                ctx.set_stage("fp16: loading the result in ONNX Runtime")
                # keep_io_types=false: the fp16 model takes float16 inputs; feed it the same values.
                out_header = onnx.load_model(str(out), load_external_data=False)
                fp16_sets = [cast_to_inputs(f, out_header) for f in sets]
                got = qt.ort_outputs(out, fp16_sets, ctx)
            except Exception as exc:  # noqa: BLE001
                raise StudioError(f"the fp16 model does not load in ONNX Runtime ({type(exc).__name__}: "
                                  f"{engine_message(exc, 200)}); add the failing op to the block list") from None
            bad = nonfinite_outputs(reference, got)
            if bad:
                raise StudioError(
                    f"the fp16 model computes inf/NaN where float32 is finite ({bad}) with {len(kept)} node(s) kept "
                    "float32 for their measured ranges: give real inputs (inputs=X.npz), lower fp32_limit, or add "
                    "the overflowing nodes to node_block_list")
            cos, _ = qt.accuracy(reference, got)
            details["cosine"] = round(cos, 6)
            if opts.get("measure", True):
                ctx.set_stage("fp16: measuring latency against fp32 (ONNX Runtime CPU)")
                lat = qt.measure_latencies({"fp32": src, "fp16": out}, sets[0], ctx,
                                           budget_s=float(opts.get("budget_s", 30)),
                                           feeds_for={"fp16": fp16_sets[0]})
                ratio = lat["fp16"] / lat["fp32"]
                details.update(fp32_latency_ms=round(lat["fp32"], 3), fp16_latency_ms=round(lat["fp16"], 3),
                               ratio=round(ratio, 4))
                if ratio >= 1.0:
                    warnings.append(
                        f"fp16 is {ratio:.2f}x the fp32 latency on ONNX Runtime CPU here: its CPU provider has "
                        "fp16 kernels for few ops and casts the rest, so there is no fast fp16 path on this "
                        "CPU. Use fp16 for GPU targets (TensorRT, ORT CUDA); on CPUs prefer OpenVINO bf16 or INT8")
            result = qt.load_result(out)
        changes = [Change("changed", (), f"float32 -> float16 weights and compute; {casts} Cast nodes at the "
                                         "float32 boundaries")]
        if kept:
            changes.append(Change("changed", tuple(k.node for k in kept),
                                  f"{len(kept)} node(s) kept float32 (measured |x| above {limit:g}): " + "; ".join(
                                      k.describe() for k in kept[:5])))
        if fixes:
            changes.append(Change("changed", tuple(f.node for f in fixes),
                                  f"{len(fixes)} mistyped Cast(s) repaired: " + "; ".join(
                                      f.describe() for f in fixes[:5])))
        return PassResult(result, True, tuple(changes), {"casts": casts, "casts_repaired": len(fixes)},
                          warnings=tuple(warnings), details=details)
