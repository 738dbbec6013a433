"""Weight-only variants (int4 / int8 weights) and how decoders are judged in the precision room.

The ONNX Runtime variants come from the ``quantize-weight-only`` pass (MatMulNBits); the OpenVINO
ones from NNCF ``compress_weights`` (:mod:`studio.precision.nncf_weights`), with the same block
(group) size so the two engines' int4 are comparable. ``block_size``/``group_size`` "auto" is the
largest of 128/64/32/16 that divides every quantized MatMul's K (no padded blocks).

A decoder variant is judged by what matters for generation (:mod:`~.generation_agreement`):
next-token agreement and logit KL against fp32 over a greedy generation, perplexity on real text;
and, for weight-only variants on ONNX Runtime, the relative L2 error of every quantized MatMul's
output against fp32 (the layer-wise comparison, on one input set), worst first, so a user sees
which MatMul hurts. The error of a MatMul deep in the model includes what earlier layers added;
its ``added`` figure is its error minus the worst error among the MatMuls before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import onnx

from studio.core.errors import StudioError
from studio.core.model import model_weight_bytes
from studio.core.sandbox import Limits
from studio.precision.nncf_weights import compress_openvino
from studio.accuracy.layerwise import compare_layers
from studio.core.error_codes import ErrorCode
from studio.inspect.decoder import recognize
from studio.precision.generation_agreement import decoder_prompts, generation_agreement, has_random_weights
from studio.core.feeds import FeedSet
from studio.inspect.decoder_feeds import decoder_steps

__all__ = ["NNCF_MODES", "WEIGHT_OPTION_KEYS", "build_nncf_weights", "check_weight_options", "matmul_errors",
           "weight_pass_options"]

WEIGHT_OPTION_KEYS = ("block_size", "symmetric", "accuracy_level", "ratio")
# variant -> NNCF mode (int4-ov follows ``symmetric``: INT4_SYM, or INT4_ASYM when False)
NNCF_MODES = {"int4-ov": "INT4_SYM", "int8-weights-ov": "INT8_ASYM"}


def check_weight_options(opts: Mapping[str, Any] | None) -> dict[str, Any]:
    """The weight-only options, refused before any work when unknown or out of range."""
    from passes.quantize_weight_only import ACCURACY_LEVELS, BLOCK_SIZES  # heavy: passes import onnx_ir (~0.3 s)

    opts = dict(opts or {})
    unknown = [k for k in opts if k not in WEIGHT_OPTION_KEYS]
    if unknown:
        raise StudioError(f"unknown weight-only option(s) {', '.join(unknown)[:60]}; known: "
                          f"{', '.join(WEIGHT_OPTION_KEYS)}", code=ErrorCode.BAD_OPTION)
    block = opts.get("block_size", "auto")
    if block != "auto" and (not str(block).isdigit() or int(block) not in BLOCK_SIZES):
        raise StudioError(f"block size must be auto or one of {', '.join(map(str, BLOCK_SIZES))}, got {block}",
                          code=ErrorCode.BAD_OPTION)
    if int(opts.get("accuracy_level", 0)) not in ACCURACY_LEVELS:
        raise StudioError(f"accuracy level must be one of {', '.join(map(str, ACCURACY_LEVELS))}",
                          code=ErrorCode.BAD_OPTION)
    if not 0.0 < float(opts.get("ratio", 1.0)) <= 1.0:
        raise StudioError("ratio (the share of layers in int4, NNCF) must be in (0, 1]", code=ErrorCode.BAD_OPTION)
    return opts


def weight_pass_options(opts: Mapping[str, Any]) -> dict[str, Any]:
    """``quantize-weight-only``'s options from the run's weight-only options (bits come from the variant)."""
    out: dict[str, Any] = {"block_size": opts.get("block_size", "auto")}
    if "symmetric" in opts:
        out["symmetric"] = bool(opts["symmetric"])
    if "accuracy_level" in opts:
        out["accuracy_level"] = int(opts["accuracy_level"])
    return out


def _block_size(header: onnx.ModelProto, opts: Mapping[str, Any]) -> int:
    from passes.quantize_weight_only import auto_block_size, eligible_matmuls  # heavy: passes import onnx_ir (~0.3 s)

    block = opts.get("block_size", "auto")
    return auto_block_size(k for _, k, _ in eligible_matmuls(header)) if block == "auto" else int(block)


def build_nncf_weights(name: str, model_path: Path, header: onnx.ModelProto, work: Path, opts: Mapping[str, Any],
                       limits: Limits, pool_key: str) -> tuple[Path, tuple[dict, ...], dict, list[str]]:
    """An NNCF weight-compressed OpenVINO IR for variant ``name``: (IR, lineage, details, warnings)."""
    mode = NNCF_MODES[name]
    if mode == "INT4_SYM" and opts.get("symmetric") is False:
        mode = "INT4_ASYM"
    group = _block_size(header, opts)
    r = compress_openvino(model_path, work / name, mode=mode, group_size=group, ratio=float(opts.get("ratio", 1.0)),
                          limits=limits, pool_key=pool_key)
    if not r.constants:
        where = ("its MatMuls sit inside If branches (a merged decoder), which NNCF does not compress: compress the "
                 "decoder and the decoder-with-past separately" if any(n.op_type == "If" for n in header.graph.node)
                 else "no MatMul/Gather with constant weights")
        raise StudioError(f"NNCF {mode} compressed no weight of this model: {where}")
    ratio = round(model_weight_bytes(r.ir_path) / max(1, model_weight_bytes(Path(model_path))), 4)
    details = {"weight_only": {**r.to_dict(), "size_ratio": ratio},
               "nncf_version": r.nncf_version}
    lineage = ({"pass": f"nncf.compress_weights({mode}"
                        + (f", group_size={group}, ratio={r.ratio:g})" if mode.startswith("INT4") else ")"),
                "tool": f"nncf {r.nncf_version}", "seconds": round(r.seconds, 3)},)
    counts = ", ".join(f"{n} {t}" for t, n in sorted(r.constants.items()))
    return r.ir_path, lineage, details, [f"NNCF compressed weight constants: {counts}"]


def matmul_errors(reference: Path, candidate: Path, quantized_outputs: list[str], feeds: Mapping[str, Any], *,
                  limits: Limits, pool_key: str) -> tuple[dict[str, Any], ...]:
    """Each quantized MatMul's output error against fp32 on ``feeds`` (relative L2, cosine, and the error it adds
    over the worst MatMul before it), worst first; outputs the comparison could not match are left out."""
    result = compare_layers(reference, candidate, feeds=dict(feeds), quantized=True, limits=limits,
                            pool_key=pool_key)
    wanted = set(quantized_outputs)
    rows, worst_before = [], 0.0
    for layer in sorted((x for x in result.layers if x.tensor in wanted and x.op_type == "MatMul"),
                        key=lambda x: x.index):     # main-graph MatMuls (If-branch tensors are not markable)
        err = layer.error
        rows.append({"node": layer.node, "tensor": layer.tensor, "rel_l2": err, "cosine": layer.cosine,
                     "added": max(0.0, err - worst_before), "order": layer.index})
        worst_before = max(worst_before, err)
    return tuple(sorted(rows, key=lambda r: -r["rel_l2"]))


def decoder_of(header: onnx.ModelProto, model_path: Path):
    """The model's DecoderSpec when it is a KV-cache decoder with input ids and logits (judged by generation),
    else None; a decoder whose cache contract is broken is judged like any model (its check says why)."""
    try:
        spec = recognize(header, folder=Path(model_path).parent, filename=Path(model_path).name)
    except StudioError:
        return None
    return spec if spec is not None and spec.logits and spec.input_ids else None


def judge_decoder(model_path: Path, header: onnx.ModelProto, spec: Any, prompts_from: Any, feeds: Mapping[str, Any],
                  candidates: Sequence[tuple[str, str, Path, Any, Mapping[str, Any]]], steps: int, *,
                  limits: Limits, pool_key: str) -> tuple[dict[str, tuple], tuple[str, ...]]:
    """Generation agreement (and per-MatMul errors for weight-only ONNX variants) of each candidate
    ``(name, engine, path, run options, pass details)`` on ONNX Runtime or OpenVINO: {name: (generation dict or
    None, per-MatMul errors, notes)}; a candidate whose generation cannot be judged gets a note, not a failure.
    Also the report's notes (where the prompts came from, random weights)."""
    prompts = decoder_prompts(spec, dataset=prompts_from)
    random_weights = has_random_weights(header)
    judged: dict[str, tuple] = {}
    for name, engine, path, options, details in candidates:
        if engine not in ("onnxruntime", "openvino"):
            continue
        notes: list[str] = []
        generation = None
        errors: tuple = ()
        try:
            generation = generation_agreement(model_path, Path(path), spec, prompts, engine=engine, options=options,
                                              steps=steps, random_weights=random_weights, limits=limits,
                                              pool_key=pool_key).to_dict()
            notes.append(generation["summary"])
        except Exception as exc:  # noqa: BLE001 - one variant's generation must not stop the report
            notes.append(f"generation agreement could not be computed: {' '.join(str(exc).split())[:300]}")
        outs = (details.get("weight_only") or {}).get("quantized_outputs")
        if outs and engine == "onnxruntime":
            try:
                errors = matmul_errors(model_path, Path(path), list(outs), feeds, limits=limits, pool_key=pool_key)
                if errors:
                    notes.append(f"worst MatMul: '{errors[0]['node'][:80]}' relative L2 {errors[0]['rel_l2']:.3g} "
                                 f"({len(errors)} quantized MatMuls compared)")
                if len(errors) < len(outs):
                    notes.append(f"per-MatMul error: {len(outs) - len(errors)} of {len(outs)} quantized MatMuls not "
                                 "compared (inside If branches, or fused away): the layer-wise comparison marks "
                                 "main-graph tensors only")
            except Exception as exc:  # noqa: BLE001
                notes.append(f"per-MatMul error could not be computed: {' '.join(str(exc).split())[:300]}")
        judged[name] = (generation, errors, tuple(notes))
    out = [f"decoder ({spec.convention}): judged by next-token agreement and KL with fp32 over {steps} greedy "
           f"steps after {prompts.source}"]
    if random_weights:
        out.append("the model has random weights: generation figures measure quantization error only "
                   "(perplexity not meaningful)")
    return judged, tuple(out)


def decoder_feed_sets(header: onnx.ModelProto, spec: Any, dims: Mapping[str, int] | None, samples: int) -> tuple:
    """Seeded calibration and evaluation sets of a decoder that keep its KV-cache contract (a prefill and a
    decode step per seed, :mod:`studio.inspect.decoder_feeds`): random feeds drawn dim by dim give a mask
    that does not fit the cache (a merged decoder's branch flag beside a non-empty past), which the
    verification refuses and no generation loop ever produces."""
    def sets(seeds) -> tuple:
        return tuple(step.feeds for seed in seeds for step in decoder_steps(header, spec, dims=dims, seed=seed))

    rounds = max(1, (samples + 1) // 2)
    calib = FeedSet(sets(range(0, 10 * rounds, 10)), f"{rounds} seeded prefill + decode step pair(s) (seed 0)")
    evaluation = FeedSet(sets([1000]), "a seeded prefill and decode step (seed 1000): the KV-cache contract kept")
    return calib, evaluation
