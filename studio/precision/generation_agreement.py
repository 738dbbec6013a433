"""How a reduced-precision decoder agrees with fp32 over a short greedy generation.

For each prompt, fp32 (ONNX Runtime, the original model) generates ``steps`` tokens greedily
with its KV cache (prefill once, then one token per step feeding present -> past); the
candidate is fed the *same* tokens on the same schedule with its own cache (teacher forcing,
so one early difference does not make every later position differ). At every position both
predict the next token: **next-token agreement** is the share of positions where the
candidate's argmax equals fp32's, **KL** the mean of KL(p_fp32 || p_candidate) in nats.
**Perplexity** (fp32's and the candidate's, over the prompt's own next tokens) is computed only
for prompts from a text dataset, and is labelled meaningless when the model carries random
weights (the sample decoders say so in their doc string; a perplexity near the vocabulary size
means the same). Both models run in one sandbox worker through the runner protocol, stepped by the
decoder's contract (:mod:`studio.inspect.decoder_contract`: names, dtypes, each step's feeds) and
the generation profiler's stepper (:mod:`profilers.generation`: present -> past); only
per-position figures come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from studio.core.engines import RunOptions, sessions
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.inspect.decoder import DecoderSpec
from studio.data.datasets import text_token_ids
from profilers.generation import PlainStepper
from studio.inspect.decoder_contract import GenerationContract
from studio.inspect.decoder_contract import contract_of

__all__ = ["GenerationAgreement", "Prompts", "decoder_prompts", "generation_agreement", "has_random_weights"]

MAX_PROMPT_TOKENS = 32


@dataclass(frozen=True)
class Prompts:
    """The prompts a decoder is judged on and where they came from."""

    ids: tuple[tuple[int, ...], ...]
    source: str
    real_text: bool                  # from a text dataset (perplexity means something), not seeded ids


@dataclass(frozen=True)
class GenerationAgreement:
    """A candidate decoder against fp32 over the same greedy generation (see module docs)."""

    next_token_agreement: float
    mean_kl: float
    max_kl: float
    positions: int
    prompts: int
    steps: int
    source: str
    random_weights: bool
    perplexity_fp32: float | None = None
    perplexity: float | None = None
    fp32_tokens: tuple[tuple[int, ...], ...] = ()    # fp32's greedy continuation of each prompt
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        head = "on random weights: " if self.random_weights else ""
        ppl = ""
        if self.perplexity is not None and self.perplexity_fp32 is not None:
            ppl = f", perplexity {self.perplexity:.4g} (fp32 {self.perplexity_fp32:.4g})"
        return (f"{head}next-token agreement {self.next_token_agreement:.4f} over {self.positions} positions "
                f"({self.prompts} prompt(s), {self.steps} greedy steps), mean KL {self.mean_kl:.3g} nats{ppl}")

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "next_token_agreement": round(self.next_token_agreement, 6),
                "mean_kl": float(self.mean_kl), "max_kl": float(self.max_kl), "positions": self.positions,
                "prompts": self.prompts, "steps": self.steps, "source": self.source,
                "random_weights": self.random_weights, "perplexity_fp32": self.perplexity_fp32,
                "perplexity": self.perplexity, "notes": list(self.notes)}


def has_random_weights(model: onnx.ModelProto) -> bool:
    """The model says it carries random weights (the studio's sample decoders do, in their doc string)."""
    text = " ".join([model.doc_string, *(p.value for p in model.metadata_props)]).lower()
    return "random weights" in text or "random-weights" in text


def decoder_prompts(spec: DecoderSpec, *, dataset=None, count: int = 4, length: int = 8, seed: int = 0) -> Prompts:
    """Prompts from a text dataset's evaluation part (token ids, or raw text through its tokenizer.json;
    each cut to ``MAX_PROMPT_TOKENS``), else ``count`` seeded random prompts of ``length`` ids. Ids the
    model's vocabulary cannot hold are refused with both sizes named."""
    if dataset is not None:
        ids = text_token_ids(dataset, part="evaluation", limit=count, key=spec.input_ids or "input_ids")
        if not ids:
            raise StudioError(f"dataset {dataset.name[:40]} has no non-empty text in its evaluation part",
                              code=ErrorCode.BAD_INPUT)
        ids = [p[:MAX_PROMPT_TOKENS] for p in ids]
        top = max(max(p) for p in ids)
        if spec.vocab is not None and (top >= spec.vocab or min(min(p) for p in ids) < 0):
            raise StudioError(f"the dataset's token ids do not fit the model: id {top} but the model's vocabulary "
                              f"has {spec.vocab} entries (logits width); use the model's own tokenizer",
                              code=ErrorCode.BAD_INPUT)
        return Prompts(tuple(tuple(p) for p in ids), f"dataset {dataset.name[:40]}: {len(ids)} prompt(s)", True)
    vocab = spec.vocab or 100
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(count, length))
    return Prompts(tuple(tuple(int(i) for i in p) for p in ids),
                   f"{count} seeded random prompt(s) of {length} tokens (seed {seed})", False)


# ---------------------------------------------------------------------------- the loop (worker)

class _Teacher:
    """One model's cached decoding (the generation profiler's stepper): feed tokens, get their logits rows."""

    def __init__(self, runner, contract) -> None:
        self.stepper, self.contract, self.seen = PlainStepper(runner, contract), contract, 0

    def feed(self, tokens: Sequence[int]) -> np.ndarray:
        logits = self.stepper.step(self.contract.step_feeds([tokens], self.seen), self.seen == 0, 1)
        self.seen += len(tokens)
        return _log_softmax(np.asarray(logits, np.float64)[0, -len(tokens):])


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


@job("precision.generation_agreement")
def generation_agreement_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:

    contract = GenerationContract.from_args(args["contract"])
    steps = int(args["steps"])
    ctx.set_stage("fp32 decoder (ONNX Runtime) for generation agreement")
    ref = sessions.open_runner("onnxruntime", args["reference"], {"graph_optimization_level": "all"}, ctx)
    ctx.set_stage(f"candidate decoder ({args['engine']}) for generation agreement")
    cand = sessions.open_runner(args["engine"], args["candidate"], args["options"], ctx)
    rows: dict[str, list] = {"ref_top": [], "cand_top": [], "kl": [], "ref_nll": [], "cand_nll": []}
    generated = []
    try:
        for prompt in args["prompts"]:
            a, b = _Teacher(ref, contract), _Teacher(cand, contract)
            ctx.set_stage("generation agreement: prefill")
            la, lb = a.feed(prompt), b.feed(prompt)
            nxt = np.asarray(prompt[1:], np.int64)          # the prompt's own next tokens (perplexity)
            rows["ref_nll"].extend((-la[np.arange(len(nxt)), nxt]).tolist())
            rows["cand_nll"].extend((-lb[np.arange(len(nxt)), nxt]).tolist())
            tokens = []
            for step in range(steps):
                rows["ref_top"].extend(la.argmax(-1).tolist())
                rows["cand_top"].extend(lb.argmax(-1).tolist())
                rows["kl"].extend((np.exp(la) * (la - lb)).sum(-1).tolist())
                tok = int(la[-1].argmax())                  # fp32's greedy token, fed to both
                tokens.append(tok)
                if step == steps - 1:
                    break
                ctx.set_stage(f"generation agreement: decode step {step + 1}")
                la, lb = a.feed([tok]), b.feed([tok])
            generated.append(tokens)
    finally:
        ref.close()
        cand.close()
    return JobOutput(data={"generated": generated}, arrays={k: np.asarray(v) for k, v in rows.items()})


def generation_agreement(reference: Path, candidate: Path, spec: DecoderSpec, prompts: Prompts, *,
                         engine: str = "onnxruntime", options: RunOptions | None = None, steps: int = 8,
                         random_weights: bool = False, limits: Limits | None = None,
                         pool_key: str = "default") -> GenerationAgreement:
    """Next-token agreement and KL of ``candidate`` (on ``engine``) against fp32 ``reference`` on ONNX Runtime
    over ``steps`` greedy tokens after each prompt (see module docs)."""
    if spec.logits is None or spec.input_ids is None:
        raise StudioError("generation agreement needs a decoder with input ids and logits", code=ErrorCode.BAD_INPUT)
    if steps < 1:
        raise StudioError(f"steps must be at least 1, got {steps}", code=ErrorCode.BAD_OPTION)
    longest = max(len(p) for p in prompts.ids)
    if spec.context and longest + steps > spec.context:
        raise StudioError(f"prompt ({longest} tokens) plus {steps} steps exceeds the model's context of "
                          f"{spec.context} positions", code=ErrorCode.BAD_OPTION)

    contract = contract_of(onnx.load_model(str(reference), load_external_data=False), spec, Path(reference).name)
    args = {"reference": str(Path(reference).resolve()), "candidate": str(Path(candidate).resolve()),
            "engine": engine, "options": (options or RunOptions()).to_args(), "contract": contract.to_args(),
            "prompts": [list(p) for p in prompts.ids], "steps": int(steps)}
    res = run_job("precision.generation_agreement", args, stage="generation agreement", limits=limits,
                  pool_key=pool_key)
    a = res.arrays
    agree = float(np.mean(a["ref_top"] == a["cand_top"]))
    kl = np.maximum(np.asarray(a["kl"], np.float64), 0.0)
    notes = []
    ppl_ref = ppl = None
    if prompts.real_text and len(a["ref_nll"]):
        ppl_ref, ppl = float(np.exp(np.mean(a["ref_nll"]))), float(np.exp(np.mean(a["cand_nll"])))
        if random_weights or (spec.vocab and ppl_ref > 0.5 * spec.vocab):
            notes.append(f"perplexity {ppl_ref:.4g} on {spec.vocab} tokens: the model is untrained (random "
                         "weights), so perplexity says nothing about quality; agreement with fp32 still does")
    if random_weights:
        notes.append("random weights: agreement and KL measure the quantization error, not a model's quality")
    return GenerationAgreement(agree, float(kl.mean()), float(kl.max()), int(len(kl)), len(prompts.ids), steps,
                               prompts.source, random_weights, ppl_ref, ppl,
                               tuple(tuple(int(t) for t in g) for g in res.data["generated"]), tuple(notes))
