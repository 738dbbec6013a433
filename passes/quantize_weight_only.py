"""quantize-weight-only: MatMul with a constant [K, N] weight  ⇒  com.microsoft MatMulNBits (int4 or int8 blocks).

Weight-only quantization, the way decoders are served on CPUs: each eligible
MatMul's weight is stored in blocks of ``block_size`` values along K, 4 (or 8)
bits a value with one float scale (and, asymmetric, one zero point) per block;
activations stay float. ONNX Runtime's ``MatMulNBitsQuantizer`` does the
rewrite (Olive and onnxruntime-genai's model builder use the same one), so the
output tensors keep their names and a layer-wise comparison with fp32 lines up
MatMul by MatMul. ``accuracy_level`` is MatMulNBits' compute type (0 unset,
1 fp32, 2 fp16, 3 bf16, 4 int8 activations). The result runs on ONNX Runtime
only (MatMulNBits is a contrib op). OpenVINO's own weight compression is NNCF's
``compress_weights`` on the OpenVINO model (:mod:`studio.precision.nncf_weights`).

Eligible: a MatMul whose second input is a 2-D float initializer (what the
quantizer itself accepts); :func:`eligible_matmuls` counts them without
running anything.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import onnx
import onnx_ir as ir

from passes.base import Change, PassResult, StudioPass, all_nodes
from passes.quant_tools import job_context
from passes.base import register
from studio.core.compare import QUANTIZED, Tolerance
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import model_weight_bytes
from passes import quant_tools as qt

__all__ = ["ACCURACY_LEVELS", "BLOCK_SIZES", "INT4_WEIGHTS", "QuantizeWeightOnly", "auto_block_size", "eligible_matmuls"]

BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)
_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)
# Verification of 4-bit weights: 16 levels a block move small random-weight logits to cosine ~0.98, below
# QUANTIZED's 0.98 floor on some samples; a broken rewrite (a wrong block layout) lands near 0. The
# verification guards the rewrite; how good int4 is, is the precision room's judgement (agreement, KL).
INT4_WEIGHTS = Tolerance(0.1, 1e-2, 0.1, min_cosine=0.95)


def eligible_matmuls(model: onnx.ModelProto) -> list[tuple[str, int, int]]:
    """(node name, K, N) of every MatMul with a 2-D float initializer as its weight, in the main graph and in
    subgraphs (an optimum merged decoder's If branches read the weights of the graph around them), as the
    quantizer walks them."""
    out: list[tuple[str, int, int]] = []

    def walk(graph: onnx.GraphProto, outer: dict[str, onnx.TensorProto]) -> None:
        inits = {**outer, **{t.name: t for t in graph.initializer}}
        for n in graph.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g, inits)
                for g in a.graphs:
                    walk(g, inits)
            if n.op_type != "MatMul" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
                continue
            w = inits.get(n.input[1])
            if w is not None and len(w.dims) == 2 and w.data_type in _FLOATS:
                out.append((n.name, int(w.dims[0]), int(w.dims[1])))

    walk(model.graph, {})
    return out


def auto_block_size(ks: Iterable[int], largest: int = 128) -> int:
    """The largest block (<= ``largest``, >= 16) that divides every K, so no block is padded; 32 when
    none does (the quantizer then pads the last block)."""
    ks = list(ks)
    for b in (b for b in reversed(BLOCK_SIZES) if b <= largest):
        if ks and all(k % b == 0 for k in ks):
            return b
    return 32


@register
class QuantizeWeightOnly(StudioPass):
    """MatMul with a constant [K, N] weight  ⇒  com.microsoft MatMulNBits (int4/int8 blocks, float activations)."""

    name = "quantize-weight-only"
    summary = ("Weight-only int4/int8 (ONNX Runtime MatMulNBitsQuantizer): MatMul weights in blocks of 4 or 8 bits "
               "with a scale per block, activations float; for decoders/LLMs. Runs on ONNX Runtime only.")
    calls_engines = True
    verify_tolerance: ClassVar[Tolerance | None] = QUANTIZED
    verify_quantized: ClassVar[bool] = True

    def __init__(self, **options) -> None:
        super().__init__(**options)
        if str(options.get("bits", 4)) == "4":
            self.verify_tolerance = INT4_WEIGHTS

    # Options: bits (4 | 8), block_size ("auto" | 16..256), symmetric (bool), accuracy_level (0..4),
    # nodes_to_exclude (MatMul names kept float).
    def call(self, model: ir.Model) -> PassResult:
        bits = int(self.options.get("bits", 4))
        if bits not in (4, 8):
            raise StudioError(f"bits must be 4 or 8, got {bits}", code=ErrorCode.BAD_OPTION)
        level = int(self.options.get("accuracy_level", 0))
        if level not in ACCURACY_LEVELS:
            raise StudioError(f"accuracy_level must be one of {', '.join(map(str, ACCURACY_LEVELS))}, got {level}",
                              code=ErrorCode.BAD_OPTION)
        block = self.options.get("block_size", "auto")
        if block != "auto" and int(block) not in BLOCK_SIZES:
            raise StudioError(f"block_size must be auto or one of {', '.join(map(str, BLOCK_SIZES))}, got {block}",
                              code=ErrorCode.BAD_OPTION)
        with tempfile.TemporaryDirectory(prefix="wq-", dir=".") as tmp:
            return _run(model, Path(tmp).resolve(), bits, block, bool(self.options.get("symmetric", True)), level,
                        [str(n) for n in self.options.get("nodes_to_exclude") or []], job_context(self))


def _graphs(graph: onnx.GraphProto) -> Iterable[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _graphs(sub)


def _proto_by_reference(model: ir.Model) -> onnx.ModelProto:
    """The model as a ModelProto whose external weights stay on disk, each located by its absolute path:
    ORT's quantizer reads one MatMul weight at a time (``ir.from_proto(...).numpy()``), so the proto holds
    no weight bytes. Before, the pass saved a full copy and ``onnx.load_model`` read every weight into
    memory beside the model's own mapped weights: the int4 worker passed 1.66x the weights (10.55 GiB) on
    the 6.36 GiB decoder of benchmarks/bench_large.py."""
    proto = ir.serde.serialize_model(model)
    paths = {v.name: str(v.const_value.path) for g in model.graphs() for v in g.initializers.values()
             if isinstance(v.const_value, ir.ExternalTensor)}
    for graph in _graphs(proto.graph):
        for t in graph.initializer:
            if t.data_location == onnx.TensorProto.EXTERNAL and t.name in paths:
                for entry in t.external_data:
                    if entry.key == "location":
                        entry.value = paths[t.name]
    return proto


def _proto_weight_bytes(proto: onnx.ModelProto) -> int:
    """Weight bytes of a proto whose external tensors are references: their declared lengths + the rest."""
    total = proto.ByteSize()
    for graph in _graphs(proto.graph):
        for t in graph.initializer:
            length = next((int(e.value) for e in t.external_data if e.key == "length"), 0)
            total += length
    return total


def _internalize(proto: onnx.ModelProto) -> None:
    """Read the tensors still referenced by absolute path (the ones the quantizer left float) into the
    proto, so the result is saved whole in the pass's folder."""
    for graph in _graphs(proto.graph):
        for t in graph.initializer:
            if t.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in t.external_data}
            with open(info["location"], "rb") as fh:     # an absolute path set by _proto_by_reference
                fh.seek(int(info.get("offset", 0)))
                data = fh.read(int(info["length"])) if "length" in info else fh.read()
            del t.external_data[:]
            t.data_location = onnx.TensorProto.DEFAULT
            t.raw_data = data


def _run(model: ir.Model, work: Path, bits: int, block, symmetric: bool, level: int, exclude: list[str],
         ctx) -> PassResult:
    from onnxruntime.quantization.matmul_nbits_quantizer import (DefaultWeightOnlyQuantConfig,
                                                                 MatMulNBitsQuantizer)

    proto = _proto_by_reference(model)
    src_bytes = _proto_weight_bytes(proto)
    eligible = [e for e in eligible_matmuls(proto) if e[0] not in set(exclude)]
    if not eligible:
        done = sum(1 for n in all_nodes(model) if n.op_type == "MatMulNBits")
        raise StudioError(f"the model's {done} MatMuls already hold N-bit weights (MatMulNBits): nothing left to "
                          "quantize" if done else "no MatMul with a constant 2-D weight to quantize (weight-only "
                          "quantization needs MatMul weights stored as initializers)",
                          code=ErrorCode.NOTHING_TO_QUANTIZE)
    block_size = auto_block_size(k for _, k, _ in eligible) if block == "auto" else int(block)
    ctx.set_stage(f"weight-only int{bits}: MatMulNBitsQuantizer (block {block_size})")
    cfg = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric,
                                       accuracy_level=level or None, bits=bits)
    quantizer = MatMulNBitsQuantizer(proto, bits=bits, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=level or None, nodes_to_exclude=exclude, algo_config=cfg)
    quantizer.process()
    _internalize(quantizer.model.model)  # the weights left float (embedding, norms) into the result
    out = work / "quantized.onnx"
    # scratch: worker: the pass's temporary folder (read back just below)
    quantizer.model.save_model_to_file(str(out), use_external_data_format=quantizer.model.model.ByteSize()
                                       > 1_800_000_000)
    del quantizer, proto
    qt.release_memory()
    result = qt.load_result(out)
    quantized = [n for n in all_nodes(result) if n.op_type == "MatMulNBits"]
    changes = [Change("replaced", tuple(e[0] for e in eligible),
                      f"{len(quantized)} MatMul -> MatMulNBits ({bits}-bit, block {block_size}, "
                      f"{'symmetric' if symmetric else 'asymmetric'}, accuracy level {level})")]
    details = {"weight_only": {"bits": bits, "block_size": block_size, "symmetric": symmetric,
                               "accuracy_level": level, "eligible_matmuls": len(eligible),
                               "quantized_matmuls": len(quantized), "excluded": exclude,
                               "quantized_outputs": [n.outputs[0].name for n in quantized],
                               "size_ratio": round(model_weight_bytes(out) / max(1, src_bytes), 4)},
               "runs_on": ["onnxruntime"]}
    return PassResult(result, bool(quantized), tuple(changes), {"matmulnbits": len(quantized)}, details=details)
