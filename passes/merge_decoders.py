"""Merge a decoder (no past) and its decoder-with-past into one model under an ``If`` on
``use_cache_branch``, optimum's ``decoder_model_merged.onnx`` convention: the with-past graph is the
then-branch, the no-past graph the else-branch, the weights (deduplicated by content) in the outer graph,
so a runtime loads one file and one copy of the weights for prefill and decode.

Every value and node inside a branch gets the branch's prefix (``with_past/``, ``no_past/``): the merged
graph is in SSA form across its subgraphs (no branch value shadows an outer one). The merge is verified:
ONNX Runtime runs the pair and the merged model on a prefill step (``use_cache_branch`` False, empty
past, against the decoder) and a decode step (True, a past of 8, against the decoder-with-past), and
every output must be equal, or the merge is refused before anything is written. Two decoders whose
inputs, outputs or cache do not fit together, or that come from two exports (vocabulary, hidden size,
cache layout, weights that are not the same), are a one-line error naming both sides.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import GraphProto, ModelProto, TensorProto, helper

from studio.core.compare import Comparison, Tolerance, compare_outputs
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.types import value_info
from studio.inspect.decoder import DecoderError, DecoderSpec, recognize
from studio.inspect.decoder_cache import graph_inputs, short
from studio.verification.verifier import run_sets
from studio.inspect.decoder_feeds import decoder_steps
from studio.core.model import load
from studio.core.outputs import shown_path
from studio.core.save import save_model

__all__ = ["MergeResult", "MergeStep", "merge_decoder_protos", "merge_decoders"]

BRANCH_INPUT = "use_cache_branch"
WITH_PAST, NO_PAST = "with_past/", "no_past/"
# The merged model computes what the pair computes, node for node: only float rounding may differ.
TOLERANCE = Tolerance(rtol=1e-5, atol=1e-6)


@dataclass(frozen=True)
class MergeStep:
    """One verification step: the merged model against one of the pair on the same inputs."""

    name: str                      # prefill | decode
    against: str                   # which of the pair: "decoder" | "decoder with past"
    label: str                     # "prefill step (past length 0, 8 new token(s))"
    ok: bool
    max_abs: float
    summary: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class MergeResult:
    """The merged model written to ``output``, what was shared, and the verification per step."""

    output: str
    convention: str                    # the merged model's, as ``recognize`` reads it (merged-if)
    initializers: int                  # in the merged model
    initializers_before: int           # in the two models together
    bytes_saved: int                   # weight bytes the deduplication saved
    steps: tuple[MergeStep, ...] = ()
    verified: bool = False
    seconds: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.verified and all(s.ok for s in self.steps)

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "steps"}
        d.update(steps=[s.to_dict() for s in self.steps], ok=self.ok)
        return d


# ------------------------------------------------------------------------------ checks


def _roles(a: ModelProto, b: ModelProto) -> tuple[ModelProto, ModelProto, DecoderSpec]:
    """(decoder, decoder with past, the with-past spec) whichever order they came in."""
    specs = []
    for which, m in (("first", a), ("second", b)):
        spec = recognize(m)
        if spec is None:
            raise DecoderError(f"the {which} model is not a KV-cache decoder (no present.N.key/value outputs): give a "
                               "decoder and its decoder-with-past", code=ErrorCode.MERGE_NOT_DECODER)
        if spec.convention == "merged-if":
            raise DecoderError(f"the {which} model is already merged (an If on {spec.use_cache_branch}): give the "
                               "decoder and the decoder-with-past it was made of", code=ErrorCode.MERGE_ALREADY)
        specs.append(spec)
    if specs[0].has_past == specs[1].has_past:
        kind = "past inputs" if specs[0].has_past else "no past inputs"
        raise DecoderError(f"both models have {kind}: a merge needs one decoder without past_key_values inputs and "
                           "one with them", code=ErrorCode.MERGE_ROLES)
    return (a, b, specs[1]) if specs[1].has_past else (b, a, specs[0])


def _check_pair(decoder: ModelProto, with_past: ModelProto) -> None:
    """The decoder's inputs must be the with-past model's minus the cache, its outputs the same list."""
    d_in = {vi.name: value_info(vi) for vi in graph_inputs(decoder)}
    p_in = {vi.name: value_info(vi) for vi in graph_inputs(with_past)}
    if BRANCH_INPUT in p_in or BRANCH_INPUT in d_in:
        raise DecoderError(f"an input is already named {BRANCH_INPUT}: the models look merged already",
                           code=ErrorCode.MERGE_ALREADY)
    missing = [n for n in d_in if n not in p_in]
    if missing:
        raise DecoderError(f"decoder input {short(missing[0])} is not an input of the decoder with past "
                           f"({', '.join(short(n, 30) for n in list(p_in)[:6])}): the two must come from one export",
                           code=ErrorCode.MERGE_INPUTS)
    for name, info in d_in.items():
        if info.dtype != p_in[name].dtype or (info.shape and p_in[name].shape and
                                              len(info.shape) != len(p_in[name].shape)):
            raise DecoderError(f"input {short(name)} is {info.dtype}[rank {len(info.shape or ())}] in the decoder but "
                               f"{p_in[name].dtype}[rank {len(p_in[name].shape or ())}] in the decoder with past",
                               code=ErrorCode.MERGE_INPUTS)
    d_out = [value_info(vi) for vi in decoder.graph.output]
    p_out = [value_info(vi) for vi in with_past.graph.output]
    if [o.name for o in d_out] != [o.name for o in p_out]:
        only = next((o.name for o in d_out if o.name not in {p.name for p in p_out}), None)
        side = (f"decoder output {short(only)} is not an output of the decoder with past" if only else
                f"the decoder with past has {len(p_out)} outputs, the decoder {len(d_out)}" if len(p_out) != len(d_out)
                else "the outputs come in another order")
        raise DecoderError(f"the decoder's outputs ({', '.join(short(o.name, 30) for o in d_out[:4])}...) do not match "
                           f"the decoder with past's ({', '.join(short(o.name, 30) for o in p_out[:4])}...): {side}",
                           code=ErrorCode.MERGE_OUTPUTS)
    for a, b in zip(d_out, p_out):
        if a.dtype != b.dtype:
            raise DecoderError(f"output {short(a.name)} is {a.dtype} in the decoder but {b.dtype} in the decoder with "
                               "past", code=ErrorCode.MERGE_OUTPUTS)


def _opsets(a: ModelProto, b: ModelProto) -> list:
    versions: dict[str, int] = {}
    for m, which in ((a, "decoder"), (b, "decoder with past")):
        for o in m.opset_import:
            dom = "" if o.domain == "ai.onnx" else o.domain
            if dom in versions and versions[dom] != o.version:
                raise DecoderError(f"opset {dom or 'ai.onnx'} is {versions[dom]} in the decoder but {o.version} in the "
                                   f"{which}: convert one to the other's opset first (optimize --passes convert-opset)",
                                   code=ErrorCode.MERGE_OPSET)
            versions[dom] = o.version
    return [helper.make_opsetid(d, v) for d, v in versions.items()]


# Facts two halves of one export share (DecoderSpec fields): a difference means two exports.
_SAME_EXPORT = (("vocab", "vocabulary"), ("hidden", "hidden size"), ("layers", "layers"), ("heads", "attention heads"),
                ("kv_heads", "KV heads"), ("head_dim", "head dim"), ("value_head_dim", "value head dim"),
                ("kv_dtype", "cache dtype"), ("cache_layout", "cache layout"), ("positions", "positions"),
                ("norm", "norm"))
# Weights of at least this many bytes are the model's (matrices, embeddings, norms of real sizes); smaller
# tensors are shape constants an exporter may fold differently in the two graphs.
SHARED_WEIGHT_BYTES = 1024


def _same_export(decoder: ModelProto, with_past: ModelProto) -> None:
    """The two must be halves of one export: the same architecture facts (vocabulary, hidden size, cache
    layout...) and the same weights, each weight of the one found by content in the other. Verification
    alone cannot see this: each branch is compared with its own half, so two unrelated decoders pass it."""
    d_spec, p_spec = recognize(decoder), recognize(with_past)
    for attr, label in _SAME_EXPORT:
        a, b = getattr(d_spec, attr, None), getattr(p_spec, attr, None)
        if a is not None and b is not None and a != b:
            raise DecoderError(f"the decoder and the decoder with past come from different exports: {label} {a} in "
                               f"the decoder but {b} in the decoder with past; give the two files of one export",
                               code=ErrorCode.MERGE_EXPORTS)
    logits = [(value_info(vi).shape or (None,))[-1] for m in (decoder, with_past) for vi in m.graph.output
              if vi.name == (p_spec.logits or "logits")]
    if len(logits) == 2 and all(isinstance(x, int) for x in logits) and logits[0] != logits[1]:
        raise DecoderError(f"the decoder and the decoder with past come from different exports: logits of size "
                           f"{logits[0]} in the decoder but {logits[1]} in the decoder with past",
                           code=ErrorCode.MERGE_EXPORTS)
    for one, other, which, where in ((decoder, with_past, "decoder", "decoder with past"),
                                     (with_past, decoder, "decoder with past", "decoder")):
        have = {_content_key(t) for t in other.graph.initializer}
        for t in one.graph.initializer:
            size = len(t.raw_data) or t.ByteSize()
            if size >= SHARED_WEIGHT_BYTES and _content_key(t) not in have:
                raise DecoderError(f"the decoder and the decoder with past come from different exports: weight "
                                   f"{short(t.name)} ({size} bytes) of the {which} is not in the {where} (the two "
                                   "halves of one export share every weight)", code=ErrorCode.MERGE_EXPORTS)


def _functions(decoder: ModelProto, with_past: ModelProto) -> list[onnx.FunctionProto]:
    """The local functions both branches call, once: the same (domain, name, overload) must be the same
    function in the two halves of one export, or the merged model would run one body for both."""
    found: dict[tuple[str, str, str], onnx.FunctionProto] = {}
    for m, which in ((with_past, "decoder with past"), (decoder, "decoder")):
        for f in m.functions:
            key = (f.domain, f.name, getattr(f, "overload", ""))
            if key in found:
                a, b = onnx.FunctionProto(), onnx.FunctionProto()
                a.CopyFrom(found[key])
                b.CopyFrom(f)
                a.doc_string = b.doc_string = ""
                if a.SerializeToString(deterministic=True) != b.SerializeToString(deterministic=True):
                    raise DecoderError(f"the decoder and the decoder with past come from different exports: local "
                                       f"function {short(f.domain + '.' + f.name)} has another body in the {which}",
                                       code=ErrorCode.MERGE_EXPORTS)
                continue
            found[key] = f
    return list(found.values())


# ------------------------------------------------------------------------------ the merge


def _content_key(t: TensorProto) -> tuple:
    if t.data_location == TensorProto.EXTERNAL:
        raise StudioError(f"initializer {short(t.name)} is still in external data: load the models with their "
                          "weights before merging", code=ErrorCode.MERGE_EXTERNAL)
    body = TensorProto()
    body.CopyFrom(t)
    body.name = ""
    body.doc_string = ""
    return t.data_type, tuple(t.dims), hashlib.sha256(body.SerializeToString(deterministic=True)).hexdigest()


def _rename_inputs(graph: GraphProto, names: Mapping[str, str]) -> None:
    """Point every reference to an initializer at its shared name (subgraphs included)."""
    for node in graph.node:
        for i, x in enumerate(node.input):
            if x in names:
                node.input[i] = names[x]
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_inputs(a.g, names)
            for g in a.graphs:
                _rename_inputs(g, names)


def _branch(model: ModelProto, prefix: str, shared: Mapping[str, str], name: str) -> GraphProto:
    """The model's graph as an If branch: no inputs, no initializers, every produced value prefixed."""
    g = GraphProto()
    g.CopyFrom(model.graph)
    del g.initializer[:]
    produced = {o for n in g.node for o in n.output}
    for out in g.output:              # an output that is an input or a weight needs a node to produce it
        if out.name not in produced:
            g.node.append(helper.make_node("Identity", [out.name], [out.name + "/merged"], name=f"{out.name}/Identity"))
            out.name = out.name + "/merged"
    del g.input[:]
    _rename_inputs(g, shared)
    g = onnx.compose.add_prefix_graph(g, prefix, rename_inputs=False, rename_initializers=False)
    g.name = name
    return g


def merge_decoder_protos(decoder: ModelProto, with_past: ModelProto) -> tuple[ModelProto, dict]:
    """The merged model of two loaded decoders (either order) and what the merge shared:
    ``{"initializers": n, "initializers_before": n, "bytes_saved": b}``."""
    decoder, with_past, spec = _roles(decoder, with_past)
    _check_pair(decoder, with_past)
    _same_export(decoder, with_past)
    opsets = _opsets(with_past, decoder)
    merged_inits: list[TensorProto] = []
    by_content: dict[tuple, str] = {}
    taken: set[str] = set()
    saved = 0
    renames: list[dict[str, str]] = []
    outer_names = {vi.name for vi in with_past.graph.input} | {BRANCH_INPUT}
    for model, prefix in ((with_past, WITH_PAST), (decoder, NO_PAST)):
        names: dict[str, str] = {}
        for t in model.graph.initializer:
            key = _content_key(t)
            if key in by_content:
                names[t.name] = by_content[key]
                saved += len(t.raw_data) or t.ByteSize()
                continue
            new = t.name if t.name not in taken and t.name not in outer_names else prefix + t.name
            copy = TensorProto()
            copy.CopyFrom(t)
            copy.name = new
            merged_inits.append(copy)
            by_content[key] = new
            taken.add(new)
            names[t.name] = new
        renames.append(names)
    then_branch = _branch(with_past, WITH_PAST, renames[0], "with_past")
    else_branch = _branch(decoder, NO_PAST, renames[1], "no_past")
    outputs = [o.name for o in with_past.graph.output]
    if_node = helper.make_node("If", [BRANCH_INPUT], outputs, name="optimum::if", then_branch=then_branch,
                               else_branch=else_branch)
    inputs = [*graph_inputs(with_past), helper.make_tensor_value_info(BRANCH_INPUT, TensorProto.BOOL, [1])]
    graph = helper.make_graph([if_node], with_past.graph.name or "main_graph", inputs, list(with_past.graph.output),
                              merged_inits)
    merged = helper.make_model(graph, opset_imports=opsets, producer_name="onnx-studio merge-decoders",
                               ir_version=max(decoder.ir_version, with_past.ir_version))
    merged.functions.extend(_functions(decoder, with_past))
    merged.doc_string = (f"decoder and decoder-with-past merged under If({BRANCH_INPUT}) ({spec.layers} layers): "
                         "with past = then-branch, without = else-branch")
    for p in with_past.metadata_props:
        merged.metadata_props.add(key=p.key, value=p.value)
    before = len(decoder.graph.initializer) + len(with_past.graph.initializer)
    return merged, {"initializers": len(merged_inits), "initializers_before": before, "bytes_saved": saved}


# ------------------------------------------------------------------------------ verification


def _verify(merged_path: Path, decoder_path: Path, with_past_path: Path, merged: ModelProto, decoder: ModelProto,
            *, pool_key: str, dims: Mapping[str, int] | None) -> tuple[MergeStep, ...]:
    """Prefill against the decoder, decode against the decoder with past, on ONNX Runtime (sandboxed)."""
    spec = recognize(merged)
    steps = decoder_steps(merged, spec, dims=dims)
    d_inputs = {vi.name for vi in graph_inputs(decoder)}
    out = []
    runs = run_sets(merged_path, [s.feeds for s in steps], full=False, limits=None, pool_key=pool_key,
                    stage="merged decoder (ORT)")
    for step, got, err in zip(steps, runs.outputs, runs.errors):
        if step.name == "prefill":
            path, against, feeds = decoder_path, "decoder", {k: v for k, v in step.feeds.items() if k in d_inputs}
        else:
            path, against, feeds = with_past_path, "decoder with past", {k: v for k, v in step.feeds.items()
                                                                           if k != BRANCH_INPUT}
        ref = run_sets(path, [feeds], full=False, limits=None, pool_key=pool_key, stage=f"{against} (ORT)")
        want, ref_err = ref.outputs[0], ref.errors[0]
        if got is None or want is None:
            why = f"the merged model failed: {err}" if got is None else f"the {against} failed: {ref_err}"
            out.append(MergeStep(step.name, against, step.label, False, float("inf"), why))
            continue
        cmp: Comparison = compare_outputs(want, got, TOLERANCE)
        worst = max((d.max_abs for d in cmp.outputs.values()), default=0.0)
        out.append(MergeStep(step.name, against, step.label, bool(cmp), float(worst), cmp.summary()))
    return tuple(out)


_IN_MEMORY_CHECK_BYTES = 1 << 30


def _checked(model: ModelProto | str) -> None:
    try:
        onnx.checker.check_model(model, full_check=False)
    except onnx.checker.ValidationError as exc:
        raise StudioError(f"the merged model does not pass the ONNX checker: {str(exc).splitlines()[0][:300]}",
                          code=ErrorCode.MERGE_INVALID) from None


def merge_decoders(decoder_path: str | Path, with_past_path: str | Path, output: str | Path, *,
                   verify: bool = True, pool_key: str = "default",
                   dims: Mapping[str, int] | None = None) -> MergeResult:
    """Merge the two decoder files (either order) into ``output`` and verify the merged model on a prefill
    and a decode step (``verify``). Neither input is modified; only ``output`` (and its .data when the
    weights exceed the protobuf limit) is written."""
    start = time.monotonic()
    a, b = load(decoder_path), load(with_past_path)
    proto_a = onnx.load_model(str(a.path), load_external_data=True)
    proto_b = onnx.load_model(str(b.path), load_external_data=True)
    merged, counts = merge_decoder_protos(proto_a, proto_b)
    decoder, _with_past, _spec = _roles(proto_a, proto_b)
    d_path, p_path = (a.path, b.path) if decoder is proto_a else (b.path, a.path)
    small = merged.ByteSize() < _IN_MEMORY_CHECK_BYTES
    if small:
        _checked(merged)
    steps: tuple[MergeStep, ...] = ()
    if verify:          # verified in a scratch copy first: a merge that differs from the pair is never written
        with tempfile.TemporaryDirectory(prefix="studio-merge-decoders-") as tmp:
            scratch = save_model(merged, Path(tmp) / "merged.onnx",   # named as the user's output: the same
                                 shown=f"{shown_path(Path(output))} (its verification copy)")  # limits apply
            if not small:
                _checked(str(scratch))   # by path: a model over 2 GiB cannot be checked as one protobuf
            steps = _verify(scratch, d_path, p_path, merged, decoder, pool_key=pool_key, dims=dims)
        bad = next((s for s in steps if not s.ok), None)
        if bad is not None:
            raise StudioError(f"the merged model differs from the {bad.against} on the {bad.label} "
                              f"({bad.summary[:200]}); refused, nothing was written", code=ErrorCode.MERGE_MISMATCH)
    written = save_model(merged, Path(output))
    if not small and not verify:
        _checked(str(written))
    spec = recognize(merged)
    return MergeResult(str(written), spec.convention if spec else "?", counts["initializers"],
                       counts["initializers_before"], counts["bytes_saved"], steps, bool(verify),
                       round(time.monotonic() - start, 3))
