"""A KV-cache decoder's I/O contract for one generation step, and the one builder of a step's feeds.

:class:`GenerationContract` names what a step feeds and reads (token ids, mask, positions, the merged model's
``use_cache_branch``, the caches, the logits) with their dtypes and ranks, derived once from the model and its
``DecoderSpec``; it is JSON-able so a sandbox worker never re-reads the graph. :meth:`GenerationContract.step_feeds`
is the only place a step's non-cache feeds are built (the seeded check/verify steps of
:mod:`studio.inspect.decoder_feeds`, the generation loop of :mod:`profilers.generation` and the generation
agreement of :mod:`studio.precision.generation_agreement` all call it): a mask of ones over past + new positions,
position ids continuing after the past (rank 1 ``cache_position`` or rank 2 ``position_ids``) and
``use_cache_branch`` = past > 0 with the rank the model declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from onnx import ModelProto

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.types import dtype_name
from studio.inspect.decoder import DecoderSpec
from studio.inspect.decoder_cache import graph_inputs, short

__all__ = ["GenerationContract", "contract_of", "describe_contract"]


@dataclass(frozen=True)
class GenerationContract:
    """What a generation step feeds and reads, by name (JSON-able: :meth:`to_args` / :meth:`from_args`).

    ``cache``: (past input, present output, KV heads, head dim) per cache tensor; ``seq_axis``: the
    cache's length axis (2 for [batch, heads, length, head_dim], 1 for [batch, length, heads, head_dim]);
    ``positions_rank``: 2 for ``position_ids`` [batch, length], 1 for ``cache_position`` [length].
    ``input_ids`` and ``logits`` are never None in a contract from :func:`contract_of` (the generation loop's)."""

    input_ids: str | None
    ids_dtype: str
    logits: str | None
    cache: tuple[tuple[str, str, int, int], ...]
    cache_dtype: str
    seq_axis: int
    attention_mask: str | None = None
    mask_dtype: str = "int64"
    position_ids: str | None = None
    positions_dtype: str = "int64"
    positions_rank: int = 2
    use_cache_branch: str | None = None
    branch_rank: int = 1                # use_cache_branch: [1] in optimum's exports, a scalar in some others
    vocab: int | None = None
    context: int | None = None

    def to_args(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_args(cls, data: Mapping[str, Any]) -> GenerationContract:
        d = dict(data)
        d["cache"] = tuple(tuple(c) for c in d["cache"])
        return cls(**d)

    def positions_needed(self, prompt_length: int, new_tokens: int) -> int:
        """Positions a generation of ``new_tokens`` after a prompt of ``prompt_length`` addresses."""
        return prompt_length + new_tokens - 1

    def step_feeds(self, ids: Any, past: int, *, mask: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """One step's feeds besides the caches: ``ids`` [batch, new] token ids after ``past`` cached positions,
        the mask of ones over past + new, their positions and the branch flag (past > 0).

        ``mask``: a preallocated [batch, >= past + new] mask of ones to slice (a loop's, for speed)."""
        ids = np.asarray(ids, dtype=self.ids_dtype)
        batch, n = int(ids.shape[0]), int(ids.shape[-1])
        feeds: dict[str, np.ndarray] = {self.input_ids: ids} if self.input_ids else {}
        if self.attention_mask:
            feeds[self.attention_mask] = (np.ones((batch, past + n), dtype=self.mask_dtype) if mask is None
                                          else np.ascontiguousarray(mask[:batch, :past + n]))
        if self.position_ids:
            positions = np.arange(past, past + n, dtype=self.positions_dtype)
            if self.positions_rank != 1:
                lead = (1,) * max(self.positions_rank - 2, 0)
                positions = np.ascontiguousarray(np.broadcast_to(positions, (*lead, batch, n)))
            feeds[self.position_ids] = positions
        if self.use_cache_branch:
            feeds[self.use_cache_branch] = np.full((1,) * self.branch_rank, past > 0)
        return feeds


def describe_contract(model: ModelProto, spec: DecoderSpec) -> GenerationContract:
    """The contract of ``model`` as recognized, without the generation loop's checks (token ids and logits
    may be None, the cache empty): what the seeded check/verify steps feed."""
    inputs = {vi.name: vi for vi in graph_inputs(model)}

    def dtype(name: str | None, default: str) -> str:
        vi = inputs.get(name or "")
        return dtype_name(vi.type.tensor_type.elem_type) if vi is not None else default

    def rank(name: str | None, default: int) -> int:
        vi = inputs.get(name or "")
        return len(vi.type.tensor_type.shape.dim) if vi is not None else default

    def fed(name: str | None) -> str | None:
        return name if name in inputs else None         # only graph inputs are fed

    cache = tuple((c.input, c.output, int(c.heads or spec.kv_heads), int(c.head_dim or spec.head_dim))
                  for c in spec.cache if c.input)
    ids, mask, pos, flag = (fed(n) for n in (spec.input_ids, spec.attention_mask, spec.position_ids,
                                             spec.use_cache_branch))
    return GenerationContract(
        input_ids=ids, ids_dtype=dtype(ids, "int64"), logits=spec.logits, cache=cache,
        cache_dtype=dtype(cache[0][0] if cache else None, spec.kv_dtype),
        seq_axis=2 if spec.cache_layout == "bnsh" else 1,
        attention_mask=mask, mask_dtype=dtype(mask, "int64"), position_ids=pos, positions_dtype=dtype(pos, "int64"),
        positions_rank=rank(pos, 2), use_cache_branch=flag, branch_rank=rank(flag, 1), vocab=spec.vocab,
        context=spec.context)


def contract_of(model: ModelProto, spec: DecoderSpec, name: str = "the model") -> GenerationContract:
    """The generation loop's contract of a recognized decoder; one ``StudioError`` line naming what is missing
    (no past inputs, no token ids, no logits, an input the loop has no value for)."""
    label = short(name, 80)
    if spec.input_ids is None:
        raise StudioError(f"{label} is a KV-cache model without token ids (no input_ids input): the generation "
                          "loop needs a token decoder", code=ErrorCode.GENERATE_NOT_DECODER)
    if spec.logits is None:
        raise StudioError(f"{label} has no logits output: the generation loop picks each token from the logits",
                          code=ErrorCode.GENERATE_NOT_DECODER)
    if not spec.has_past:
        raise StudioError(f"{label} has present.N outputs but no past_key_values.N inputs (the first model of a "
                          "decoder pair): generate with the decoder-with-past or the merged model",
                          code=ErrorCode.GENERATE_NO_PAST)
    known = {spec.input_ids, spec.attention_mask, spec.position_ids, spec.use_cache_branch,
             *(c.input for c in spec.cache)}
    unknown = [vi.name for vi in graph_inputs(model) if vi.name not in known]
    if unknown:
        raise StudioError(f"{label} has input {short(unknown[0], 60)} the generation loop has no value for (it feeds "
                          "input_ids, attention_mask, position_ids, use_cache_branch and the past caches)",
                          code=ErrorCode.GENERATE_UNKNOWN_INPUT)
    return describe_contract(model, spec)
