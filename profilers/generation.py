"""The generation loop: greedy decoding of a KV-cache decoder, prefill once, then one token per step
with every ``present.N.key/value`` fed back as ``past_key_values.N.key/value`` (DESIGN.md section 12).

Why a loop and not one timed call: a decoder's cost is two different things. The prefill reads the
whole prompt (time to first token, TTFT); each decode step reads one token beside a cache that grows
by one position per step, so its latency depends on the position. Random feeds drawn dim by dim time
neither.

Pieces, smallest first:

* :class:`~studio.inspect.decoder_contract.GenerationContract`: the names, dtypes and cache layout the
  loop needs, read once from the model's ``DecoderSpec`` in the parent and sent to the worker as JSON (the
  worker never re-reads the graph); its ``step_feeds`` builds each step's feeds besides the cache;
* a *stepper* per engine holds the cache between steps: :class:`BoundOrtStepper` keeps the presents as
  ONNX Runtime ``OrtValue``s and binds them as the next step's past through ``session.io_binding()``
  (no copy of the cache per step); :class:`PlainStepper` works with any runner of the one runner
  protocol (:mod:`studio.core.engines.sessions`): ``runner.infer`` with the presents as numpy arrays
  (OpenVINO: the request's outputs copied, as an application gets them);
* :class:`GreedyGeneration` is one generation as a bare call for :func:`profilers.latency.timed_rounds`:
  it stamps ``perf_counter_ns`` after every token (prefill included), records the step times of the
  calls the timed rounds mark (their per-call hooks, so warm-ups are left out), the tokens and the past
  lengths it fed.

``new_tokens`` N means N generated tokens per sequence: the first from the prefill, the other N - 1
from decode steps whose past lengths are P, P + 1, ..., P + N - 2 (P: the prompt length), so the
model must address P + N - 1 positions.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from studio.inspect.decoder_contract import GenerationContract
from profilers.memory import rss_reader  # the memory profiler's /proc/self/statm reader

__all__ = ["BoundOrtStepper", "GreedyGeneration", "PlainStepper", "make_stepper", "prompt_ids"]


def prompt_ids(vocab: int, batch: int, length: int, seed: int = 0) -> np.ndarray:
    """The seeded prompt of one case: ``batch`` x ``length`` token ids in [0, vocab) (int64)."""
    rng = np.random.default_rng([seed, batch, length])
    return rng.integers(0, vocab, size=(batch, length), dtype=np.int64)


# ============================================================================ steppers (hold the cache)

def _empty_past(contract: GenerationContract, batch: int) -> dict[str, np.ndarray]:
    """Past length 0 for every cache input (the prefill: nothing cached yet)."""
    out = {}
    for past, _present, heads, head_dim in contract.cache:
        shape = [batch, heads, 0, head_dim] if contract.seq_axis == 2 else [batch, 0, heads, head_dim]
        out[past] = np.zeros(shape, dtype=contract.cache_dtype)
    return out


class PlainStepper:
    """Any runner of the one runner protocol: ``runner.infer(feeds)``; the presents come back as
    host arrays and are the next step's past."""

    io_binding = False

    def __init__(self, runner: Any, contract: GenerationContract) -> None:
        self.runner, self.contract = runner, contract
        self.past: dict[str, np.ndarray] = {}
        self._names = [contract.logits, *(c[1] for c in contract.cache)]

    def past_length(self) -> int:
        first = self.contract.cache[0][0]
        return int(self.past[first].shape[self.contract.seq_axis])

    def step(self, feeds: dict[str, np.ndarray], first: bool, batch: int) -> np.ndarray:
        """One model call; the logits (the presents are kept as the next past)."""
        if first:
            self.past = _empty_past(self.contract, batch)
        out = self.runner.infer({**feeds, **self.past}, self._names)
        self.past = {past: out[present] for past, present, _h, _d in self.contract.cache}
        return out[self.contract.logits]


class BoundOrtStepper:
    """ONNX Runtime with I/O binding: each present stays an ``OrtValue`` and is bound as the next
    step's past (``bind_ortvalue_input``), so the cache is never copied to numpy between steps."""

    io_binding = True

    def __init__(self, session: Any, contract: GenerationContract) -> None:
        self.session, self.contract = session, contract
        self.io = session.io_binding()
        self.past: dict[str, Any] = {}
        self._outputs = [contract.logits, *(c[1] for c in contract.cache)]

    def past_length(self) -> int:
        first = self.contract.cache[0][0]
        value = self.past[first]
        shape = value.shape if isinstance(value, np.ndarray) else value.shape()
        return int(shape[self.contract.seq_axis])

    def step(self, feeds: dict[str, np.ndarray], first: bool, batch: int) -> np.ndarray:
        io = self.io
        io.clear_binding_inputs()
        io.clear_binding_outputs()
        for name, value in feeds.items():
            io.bind_cpu_input(name, value)
        if first:
            self.past = _empty_past(self.contract, batch)
        for past, value in self.past.items():
            if isinstance(value, np.ndarray):
                io.bind_cpu_input(past, value)
            else:
                io.bind_ortvalue_input(past, value)
        for name in self._outputs:
            io.bind_output(name, "cpu")
        self.session.run_with_iobinding(io)
        values = io.get_outputs()
        self.past = {c[0]: values[i + 1] for i, c in enumerate(self.contract.cache)}
        return values[0].numpy()


def make_stepper(runner: Any, contract: GenerationContract, *, io_binding: bool = True) -> PlainStepper | BoundOrtStepper:
    """I/O binding where the engine offers it (ONNX Runtime's session has ``io_binding``), else the runner's
    plain ``infer``."""
    if io_binding and callable(getattr(getattr(runner, "session", None), "io_binding", None)):
        return BoundOrtStepper(runner.session, contract)
    return PlainStepper(runner, contract)


# ============================================================================ one generation

class GreedyGeneration:
    """One greedy generation of ``new_tokens`` tokens after ``prompt`` ([batch, length] ids), as a bare
    call (``gen()``) for the timing loop. After each call: :attr:`tokens` [batch, new_tokens],
    :attr:`past_lengths` (the past length fed at each model call: 0 for the prefill), :attr:`steps_ns`
    (per token: the prefill, then each decode step; feeds, model call and argmax included).

    :meth:`start` / :meth:`stop` (the timed rounds' per-call hooks) mark the calls whose step times are
    kept in :attr:`recorded`, in call order; ``rss`` records resident memory after every step (the
    memory pass, never the timed one)."""

    def __init__(self, stepper: PlainStepper | BoundOrtStepper, contract: GenerationContract, prompt: np.ndarray,
                 new_tokens: int, *, rss: bool = False) -> None:
        if new_tokens < 1:
            raise ValueError("new_tokens must be at least 1")
        self.stepper, self.contract = stepper, contract
        self.prompt = np.ascontiguousarray(prompt, dtype=contract.ids_dtype)
        self.batch, self.length = (int(d) for d in self.prompt.shape)
        self.new_tokens = int(new_tokens)
        self.tokens = np.zeros((self.batch, self.new_tokens), dtype=np.int64)
        self.steps_ns = np.zeros(self.new_tokens, dtype=np.int64)
        self.past_lengths: list[int] = []
        self.recorded: list[np.ndarray] = []
        self.recorded_tokens: list[np.ndarray] = []
        self.rss_bytes = np.zeros(self.new_tokens, dtype=np.int64) if rss else None
        self._rss = rss_reader() if rss else None
        self._recording = False
        total = self.length + self.new_tokens
        self._mask = np.ones((self.batch, total), dtype=contract.mask_dtype) if contract.attention_mask else None

    def start(self) -> None:
        self._recording = True

    def stop(self) -> None:
        self._recording = False

    def _feeds(self, ids: np.ndarray, past: int) -> dict[str, np.ndarray]:
        return self.contract.step_feeds(ids, past, mask=self._mask)

    def __call__(self) -> None:
        clock = time.perf_counter_ns
        step, stamps, tokens = self.stepper.step, self.steps_ns, self.tokens
        self.past_lengths = [0]
        t0 = clock()
        logits = step(self._feeds(self.prompt, 0), True, self.batch)
        token = np.argmax(logits[:, -1, :], axis=-1)
        t1 = clock()
        stamps[0] = t1 - t0
        tokens[:, 0] = token
        if self._rss is not None:
            self.rss_bytes[0] = self._rss()
        ids_dtype = self.contract.ids_dtype
        for i in range(1, self.new_tokens):
            past = self.length + i - 1
            self.past_lengths.append(self.stepper.past_length())
            ids = token.astype(ids_dtype).reshape(self.batch, 1)
            logits = step(self._feeds(ids, past), False, self.batch)
            token = np.argmax(logits[:, -1, :], axis=-1)
            t2 = clock()
            stamps[i] = t2 - t1
            t1 = t2
            tokens[:, i] = token
            if self._rss is not None:
                self.rss_bytes[i] = self._rss()
        if self._recording:
            self.recorded.append(stamps.copy())
            self.recorded_tokens.append(tokens.copy())
