"""Seeded feeds that keep a decoder's KV-cache contract: a prefill step (past length 0, the whole prompt)
and a decode step (past length > 0, one new token), each with a mask of ones over past + new positions,
position ids that continue after the past, token ids within the vocabulary and, for optimum's merged
model, ``use_cache_branch`` False at prefill and True at decode.

Random feeds drawn dim by dim break that contract (a mask of 16 beside a past of 16 and 16 new tokens,
``use_cache_branch`` False beside a non-empty past): engines then fail, or crash, on inputs no
generation loop ever gives them. The check and the verification run both steps; ``check_step`` says in
one line where a user's inputs break the contract (a mask of the wrong length names both sides).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from onnx import ModelProto

from studio.core.error_codes import ErrorCode
from studio.core.feeds import Feeds, InputSpec, input_specs, random_feeds, unnamed_dim_key
from studio.inspect.decoder import DecoderError, DecoderSpec, recognize
from studio.inspect.decoder_cache import short
from studio.inspect.decoder_contract import GenerationContract, describe_contract

__all__ = ["DecoderStep", "check_step", "decoder_steps", "past_length_of", "verification_steps"]

DEFAULT_PROMPT = 8          # prefill tokens when no sequence-length dim is given


@dataclass(frozen=True)
class DecoderStep:
    """One generation step's feeds: ``prefill`` (past 0) or ``decode`` (past > 0)."""

    name: str
    batch: int
    past_length: int
    sequence_length: int
    feeds: Feeds

    @property
    def label(self) -> str:
        return f"{self.name} step (past length {self.past_length}, {self.sequence_length} new token(s))"


def _dim_key(spec: InputSpec | None, axis: int) -> str | None:
    """The dims-mapping key of ``spec``'s axis (its name, or ``input[axis]`` when unnamed); None when fixed."""
    if spec is None or spec.shape is None or len(spec.shape) <= axis:
        return None
    d = spec.shape[axis]
    if isinstance(d, int):
        return None
    return d if isinstance(d, str) else unnamed_dim_key(spec.name, axis)


def _fixed(spec: InputSpec | None, axis: int) -> int | None:
    if spec is None or spec.shape is None or len(spec.shape) <= axis:
        return None
    d = spec.shape[axis]
    return d if isinstance(d, int) else None


def _past_axis(spec: DecoderSpec) -> int:
    return 2 if spec.cache_layout == "bnsh" else 1


def decoder_steps(model: ModelProto, spec: DecoderSpec | None = None, *, dims: Mapping[str, int] | None = None,
                  seed: int = 0) -> tuple[DecoderStep, ...]:
    """The prefill and decode steps of ``model`` (prefill only for a decoder without past inputs).

    ``dims``: the user's values; the input ids' sequence dim sets the prompt length (default
    DEFAULT_PROMPT), the past dim the decode step's past length (default: the prompt's length),
    the batch dim the batch (default 1). Raises ``DecoderError`` when the model is no decoder."""
    spec = spec or recognize(model)
    if spec is None:
        raise DecoderError("the model has no KV cache (no past_key_values.N / present.N inputs and outputs)",
                           code=ErrorCode.DECODER_NONE)
    user = dict(dims or {})
    specs = input_specs(model)
    by_name = {s.name: s for s in specs}
    ids = by_name.get(spec.input_ids or "")
    past_specs = [by_name[c.input] for c in spec.cache if c.input in by_name]
    axis = _past_axis(spec)
    batch_key = _dim_key(ids, 0) or next((k for p in past_specs if (k := _dim_key(p, 0))), None)
    seq_key = _dim_key(ids, 1)
    past_key = next((k for p in past_specs if (k := _dim_key(p, axis))), None)
    batch = user.get(batch_key, None) if batch_key else _fixed(ids, 0)
    batch = int(batch if batch is not None else 1)
    fixed_seq = _fixed(ids, 1)
    prompt = fixed_seq or int(user.get(seq_key, DEFAULT_PROMPT) if seq_key else DEFAULT_PROMPT)
    fixed_past = next((v for p in past_specs if (v := _fixed(p, axis)) is not None), None)
    if fixed_past is not None:            # a static cache buffer: every step sees the whole buffer
        plan = [("decode", fixed_past, fixed_seq or 1)]
    elif not past_specs:
        plan = [("prefill", 0, prompt)]
    else:
        past = int(user.get(past_key, prompt)) if past_key else prompt
        plan = [("prefill", 0, prompt), ("decode", max(past, 1), fixed_seq or 1)]
    contract = describe_contract(model, spec)
    return tuple(_step(spec, contract, specs, user, name, batch, past, seq, batch_key, seq_key, past_key, seed + i)
                 for i, (name, past, seq) in enumerate(plan))


def _step(spec: DecoderSpec, contract: GenerationContract, specs: tuple[InputSpec, ...], user: Mapping[str, int],
          name: str, batch: int, past: int, seq: int, batch_key: str | None, seq_key: str | None,
          past_key: str | None, seed: int) -> DecoderStep:
    """Random feeds for the step's dims, then its token ids drawn in the vocabulary and the rest of the step
    (mask, positions, branch flag) from the contract's one builder of step feeds."""
    by_name = {s.name: s for s in specs}
    mask = by_name.get(spec.attention_mask or "")
    chosen = dict(user)
    for key, value in ((batch_key, batch), (seq_key, seq), (past_key, past)):
        if key:
            chosen[key] = value
    total_key = _dim_key(mask, 1)
    if total_key:
        chosen[total_key] = past + seq
    pos = by_name.get(spec.position_ids or "")
    if pos is not None and (k := _dim_key(pos, (pos.shape and len(pos.shape) or 1) - 1)) and k not in chosen:
        chosen[k] = seq
    feeds = random_feeds(specs, chosen, seed=seed)
    rng = np.random.default_rng(seed + 7919)
    ids = by_name.get(spec.input_ids or "")
    if ids is not None:
        arr = np.asarray(feeds[ids.name])
        tokens = rng.integers(0, spec.vocab, size=arr.shape).astype(arr.dtype) if spec.vocab else arr
    else:
        tokens = np.zeros((batch, seq), np.int64)      # no token ids: only their batch and length count
    feeds.update(contract.step_feeds(tokens, past))
    step = DecoderStep(name, batch, past, seq, feeds)
    check_step(spec, feeds)
    return step


def verification_steps(model: ModelProto, spec: DecoderSpec, dims: Mapping[str, int] | None = None
                       ) -> tuple[DecoderStep, ...]:
    """The steps a verification compares on: prefill and decode, plus the last step again at batch 2 and another
    length (past, or prompt without past) when the user fixed neither (a pass that bakes batch 1 or one cache
    length is caught there)."""
    steps = decoder_steps(model, spec, dims=dims)
    user = dict(dims or {})
    by_name = {s.name: s for s in input_specs(model)}
    ids = by_name.get(spec.input_ids or "")
    past = next((by_name[c.input] for c in spec.cache if c.input in by_name), None)
    length_key = _dim_key(past, _past_axis(spec)) if steps[-1].name == "decode" else _dim_key(ids, 1)
    other = {k: v for k, v in ((_dim_key(ids, 0), 2), (length_key, 3)) if k and k not in user}
    if not other:
        return steps
    return (*steps, decoder_steps(model, spec, dims={**user, **other}, seed=len(steps))[-1])


def past_length_of(spec: DecoderSpec, feeds: Mapping[str, object]) -> int | None:
    """The past length ``feeds`` give (the first cache input's length axis), None without past inputs."""
    axis = _past_axis(spec)
    for c in spec.cache:
        v = feeds.get(c.input) if c.input else None
        if isinstance(v, np.ndarray) and v.ndim > axis:
            return int(v.shape[axis])
    return None


def check_step(spec: DecoderSpec, feeds: Mapping[str, object]) -> None:
    """Raise one ``DecoderError`` line when ``feeds`` break the cache contract: cache inputs of different
    lengths, a mask whose length is not past + new tokens, position ids not as long as the input ids,
    or token ids outside the vocabulary. With ``use_cache_branch`` False (a merged model's no-past branch) the
    past counts as empty whatever its length."""
    axis = _past_axis(spec)
    lengths = {c.input: int(v.shape[axis]) for c in spec.cache
               if c.input and isinstance(v := feeds.get(c.input), np.ndarray) and v.ndim > axis}
    if len(set(lengths.values())) > 1:
        (a, la), (b, lb) = next(iter(lengths.items())), next((k, v) for k, v in lengths.items()
                                                             if v != next(iter(lengths.values())))
        raise DecoderError(f"cache input {short(a)} has past length {la} but {short(b)} has {lb}: every layer's "
                           "past must hold the same positions", code=ErrorCode.DECODER_FEEDS)
    past = next(iter(lengths.values()), 0)
    past_name = next(iter(lengths), None)
    flag = feeds.get(spec.use_cache_branch or "")
    if isinstance(flag, np.ndarray) and flag.size == 1 and not bool(flag.reshape(-1)[0]):
        past, past_name = 0, None      # the no-past branch reads no past (optimum feeds a dummy one)
    ids = feeds.get(spec.input_ids or "")
    seq = int(ids.shape[-1]) if isinstance(ids, np.ndarray) and ids.ndim else None
    mask = feeds.get(spec.attention_mask or "")
    if seq is not None and isinstance(mask, np.ndarray) and mask.ndim >= 2 and mask.shape[-1] != past + seq:
        held = (f"{short(past_name, 50)} holds {past} past position(s) and " if past_name
                else f"{short(spec.use_cache_branch, 40)} is False (no past) and " if spec.use_cache_branch
                else "")
        raise DecoderError(f"attention mask {short(spec.attention_mask or '', 40)} has length {mask.shape[-1]}, "
                           f"but {held}{short(spec.input_ids or '', 40)} has {seq} new token(s): it must be "
                           f"{past + seq} (past + new), ones where a position may be attended",
                           code=ErrorCode.DECODER_MASK)
    pos = feeds.get(spec.position_ids or "")
    if seq is not None and isinstance(pos, np.ndarray) and pos.ndim and pos.shape[-1] != seq:
        raise DecoderError(f"position ids {short(spec.position_ids or '', 40)} have length {pos.shape[-1]}, but "
                           f"{short(spec.input_ids or '', 40)} {seq} token(s): one position per new token",
                           code=ErrorCode.DECODER_POSITIONS)
    if isinstance(ids, np.ndarray) and ids.size and spec.vocab and ids.dtype.kind in "iu":
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= spec.vocab:
            bad = high if high >= spec.vocab else low
            raise DecoderError(f"token ids {short(spec.input_ids or '', 40)} reach {bad}, "
                               f"outside the vocabulary of {spec.vocab} (ids 0..{spec.vocab - 1})",
                               code=ErrorCode.DECODER_TOKENS)
