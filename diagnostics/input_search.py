"""Input search: before a failed run on the studio's own seeded inputs becomes a verdict,
try the sizes and values real models are made for.

A voice-activity model fed 16 seeded samples fails in its reflect Pad, a framing Reshape
needs a multiple of 80 samples, a sample-rate input must equal the 16000 its If compares
it with: none of that is the engine's fault. When an engine loads and compiles a model
but the seeded run fails with an input-dependent error (:func:`input_dependent`), the
studio tries a bounded list of other inputs (:func:`search_recipes`): larger sizes for
free sequence/audio and image dims, batch 2, and the constants integer inputs are
compared with in the graph. The first set that runs decides (and is reported); when none
does, the model "compiles; not run: needs inputs", never "fails".

One mechanism for the ONNX Runtime and OpenVINO checks (in their workers, with the compiled
model reused), export's reference run and optimize's verification.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from onnx import ModelProto

from studio.core.engines.conversion import RUNTIME_LACKS_OPS
from studio.core.feeds import (
    SEQ_NAMES,
    Feeds,
    InputSpec,
    check_feeds,
    feeds_text,
    image_axes,
    input_specs,
    random_feeds,
    unnamed_dim_key,
)
from studio.core.dim_hints import derived_dims
from studio.core.protowalk import iter_nodes
from studio.core.feeds import scalar_int_constants, value_uses, small_image_dims
from studio.core.errors import StudioError, engine_message
from studio.inspect.decoder import recognize, DecoderError
from studio.inspect.decoder_feeds import decoder_steps, check_step

__all__ = ["NEEDS_INPUTS", "InputRecipe", "SearchOutcome", "candidate_feeds", "check_user_inputs", "compared_constants",
           "decoder_candidates", "describe_inputs", "free_axes", "input_dependent", "recipe_feeds", "run_search",
           "search_recipes", "search_runs", "studio_chosen", "validate_inputs"]

# What a model that compiles but ran on no input the studio tried is (verdict summary).
NEEDS_INPUTS = "compiles; not run: needs inputs (give --inputs or --dim)"

# Sizes tried, in order, after the seeded ones (16 for sequences, 224 then 48 for images, batch 1).
# 512: a 32 ms window at 16 kHz (Silero VAD's), 1024/4096: STFT frames, 16000: one second of audio
# (a multiple of 80, 160, 320, 400 and 640 that frame-based models reshape to).
SEQUENCE_SIZES = (512, 1024, 4096, 16000)
IMAGE_SIZES = (320, 640)
BATCH_SIZES = (2,)
MAX_TRIES = 24
BUDGET_S = 30.0
MAX_CANDIDATE_BYTES = 64 * 2**20       # one input set; larger candidates are skipped, not generated

_COMPARE_OPS = {"Equal": 0, "Greater": 1, "Less": 1, "GreaterOrEqual": 1, "LessOrEqual": 1}

# Run-time errors that depend on the inputs' shapes or values (ONNX Runtime and OpenVINO
# wordings of Pad/Reshape/Slice/Gather/Conv/Split/Expand/Tile/STFT/Range... failures).
_INPUT_DEPENDENT = re.compile(
    r"shape|dimension|\bdims?\b|size|index|indices|out of (range|bounds)|bounds|exceed|broadcast|mismatch|"
    r"cannot be reshaped|conflicts with|incompatible|invalid (input|expand|argument|pad|value)|must be (within|less|"
    r"greater|positive|non-negative|in|at least|smaller|larger)|greater than|less than|negative|axis|\bpad|split|"
    r"kernel.*(larger|exceed)|overflow|allocate|too (small|large|short|long)|not divisible|multiple of|"
    r"INVALID_ARGUMENT|Check '.*' failed", re.I)
# Errors no other input can fix: the engine lacks something, or the model is refused whatever it gets.
_ENGINE_LIMIT = re.compile(
    r"NOT_IMPLEMENTED|not implemented|not supported|unsupported|no kernel|Could not find an implementation|"
    r"is not a registered|locale|custom op|NO_SUCHFILE|NO_MODEL|INVALID_GRAPH|ENGINE_ERROR|EP_FAIL|"
    + re.escape(RUNTIME_LACKS_OPS), re.I)      # a converted file's ops its runtime lacks (LiteRT: Flex SplitV)


# Out of memory: larger sizes can only make it worse, so the search stops.
_OUT_OF_MEMORY = re.compile(r"MemoryError|bad_alloc|out of memory|Failed to allocate|cannot allocate", re.I)


def input_dependent(message: object) -> bool:
    """Whether a run failure (after a successful load/compile) can come from the inputs' sizes or
    values rather than from the engine or the model's structure."""
    text = str(message or "")
    return bool(text.strip()) and not _ENGINE_LIMIT.search(text) and bool(_INPUT_DEPENDENT.search(text))


@dataclass(frozen=True)
class InputRecipe:
    """How one input set is made: dim values (symbolic names or ``INPUT[AXIS]`` keys) and the
    value of searched integer inputs; the rest is :func:`studio.core.feeds.random_feeds`, seed 0."""

    dims: Mapping[str, int] = field(default_factory=dict)
    values: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"dims": dict(self.dims), "values": dict(self.values)}


def recipe_feeds(specs: tuple[InputSpec, ...], recipe: InputRecipe, *, seed: int = 0) -> Feeds:
    """The feeds of ``recipe`` (reproducible: the same recipe gives the same arrays)."""
    fixed = tuple(replace(s, low=recipe.values[s.name], high=recipe.values[s.name] + 1, role="compared")
                  if s.name in recipe.values else s for s in specs)
    return random_feeds(fixed, recipe.dims, seed=seed, max_bytes=MAX_CANDIDATE_BYTES)


def free_axes(specs: tuple[InputSpec, ...], user_dims: Mapping[str, int] | None = None) -> dict[str, str]:
    """``{dim key: kind}`` of every free dim the user did not set; kind is batch (a leading dim
    that is not sequence-named, or any free dim of a recurrent state input), image (a float image's height/width) or sequence (the rest)."""
    user = dict(user_dims or {})
    derived = {d.key for d in derived_dims([x for s in specs for x in (s.shape or ())])}
    out: dict[str, str] = {}
    for s in specs:
        spatial = image_axes(s)
        for i, d in enumerate(s.shape or ()):
            if isinstance(d, int):
                continue
            key = d if isinstance(d, str) else unnamed_dim_key(s.name, i)
            if key in user or key in out or key in derived:
                continue      # a formula of other dims (past + sequence) follows from them
            named_seq = isinstance(d, str) and bool(SEQ_NAMES.search(d))
            batch = (i == 0 and not named_seq) or s.role == "recurrent_state"   # an RNN state's free dims
            out[key] = ("batch" if batch else "image" if i in spatial else "sequence")
    return out


def compared_constants(model: ModelProto) -> dict[str, tuple[int, ...]]:
    """For integer inputs compared (Equal/Greater/Less..., directly or through Cast/Reshape...,
    in any graph) with integer constants: the values that take each side of the comparison
    (``c`` for Equal; ``c``, ``c + 1``, ``c - 1`` for ordering comparisons), in graph order."""
    consts = scalar_int_constants(model)
    consumers: dict[str, list] = {}
    for ref in iter_nodes(model):
        for i, name in enumerate(ref.node.input):
            consumers.setdefault(name, []).append((ref.node, i))
    init = {t.name for t in model.graph.initializer}
    found: dict[str, list[int]] = {}
    for vi in model.graph.input:
        if vi.name in init or vi.type.tensor_type.elem_type not in (2, 3, 4, 5, 6, 7, 12, 13):
            continue
        values: list[int] = []
        for n, i in value_uses(vi.name, consumers):
            other = n.input[1 - i] if len(n.input) == 2 and i in (0, 1) else None
            if n.op_type in _COMPARE_OPS and other in consts:
                c = consts[other]
                for v in (c,) if not _COMPARE_OPS[n.op_type] else (c, c + 1, c - 1):
                    if v not in values:
                        values.append(v)
        if values:
            found[vi.name] = values
    return {k: tuple(v) for k, v in found.items()}


def studio_chosen(model: ModelProto, dims: Mapping[str, int] | None = None, inputs: object = None) -> bool:
    """Whether the studio chose something about the inputs a run failed on: a free dim, or the
    values of an integer/bool input. A fixed-shape float-only model's failure is its own."""
    if inputs:
        return False
    specs = input_specs(model)
    return bool(free_axes(specs, dims)) or any(s.dtype.startswith(("int", "uint", "bool")) for s in specs)


def search_recipes(model: ModelProto, dims: Mapping[str, int] | None = None) -> list[InputRecipe]:
    """The input sets tried after the seeded ones, most likely first: for each size level
    (seeded, then SEQUENCE_SIZES / IMAGE_SIZES for free dims) every combination of compared
    values, then batch 2; at most MAX_TRIES, none equal to the seeded set."""
    user = dict(dims or {})
    specs = input_specs(model)
    axes = free_axes(specs, user)
    compared = compared_constants(model)
    keys = sorted(compared)
    combos = list(itertools.islice(itertools.product(*(compared[k] for k in keys)), 8)) if keys else [()]
    levels: list[dict[str, int]] = [{}]
    for i in range(max(len(SEQUENCE_SIZES), len(IMAGE_SIZES))):
        seq = SEQUENCE_SIZES[min(i, len(SEQUENCE_SIZES) - 1)]
        img = IMAGE_SIZES[min(i, len(IMAGE_SIZES) - 1)]
        level = {k: seq if kind == "sequence" else img for k, kind in axes.items() if kind != "batch"}
        if level and level not in levels:
            levels.append(level)
    batch = [k for k, kind in axes.items() if kind == "batch"]
    out: list[InputRecipe] = []
    seen = {(tuple(sorted(user.items())), ())}
    plans = [(lv, combo, {}) for lv in levels for combo in combos]
    plans += [(lv, combos[0], {k: b for k in batch}) for b in BATCH_SIZES for lv in levels] if batch else []
    for level, combo, batch_dims in plans:
        chosen = {**level, **batch_dims, **user}
        values = dict(zip(keys, combo))
        key = (tuple(sorted(chosen.items())), tuple(sorted(values.items())))
        if key in seen:
            continue
        seen.add(key)
        out.append(InputRecipe(chosen, values))
        if len(out) >= MAX_TRIES:
            break
    return out


def describe_inputs(feeds: Feeds) -> dict[str, str]:
    """``{input: "float32[1, 512]" | "int64=16000"}``: which inputs a run used (shown and in JSON)."""
    return {part.split(" ", 1)[0]: part.split(" ", 1)[1] if " " in part else part
            for part in (feeds_text({k: v}, 1) for k, v in feeds.items())}


@dataclass(frozen=True)
class Candidate:
    feeds: Feeds
    note: str                          # the hint shown when a run fails on these feeds
    recipe: InputRecipe | None              # None: the user's .npz
    before: tuple[tuple[str, Feeds], ...] = ()   # (label, feeds) that must run first: a decoder's prefill step
    label: str | None = None           # what ``feeds`` are ("decode step (past length 8, 1 new token(s))")


def decoder_candidates(model: ModelProto, dims: Mapping[str, int] | None = None) -> list[Candidate] | None:
    """A KV-cache decoder's seeded set: its prefill step (past 0) run before its decode step (past > 0),
    both keeping the cache contract (``studio.inspect.decoder_feeds``); None for a model that is no
    decoder, or whose cache does not fit together (then the plain seeded feeds are used)."""
    try:
        spec = recognize(model)
        steps = decoder_steps(model, spec, dims=dims) if spec is not None else None
    except StudioError:              # a cache that does not fit, sizes too large: the plain seeded feeds
        return None
    if not steps:
        return None
    note = ("run on the decoder's " + " and ".join(s.label for s in steps) +
            "; for other sizes set --dim NAME=VALUE, or give real inputs with --inputs X.npz")
    last = steps[-1]
    return [Candidate(last.feeds, note, InputRecipe(dict(dims or {})), tuple((s.label, s.feeds) for s in steps[:-1]),
                      last.label)]


def check_user_inputs(model: ModelProto, feeds: Feeds) -> None:
    """Raise one ``DecoderError`` line when a user's inputs for a decoder break its cache contract."""
    try:
        spec = recognize(model)
    except DecoderError:
        return
    if spec is not None:
        check_step(spec, feeds)


def validate_inputs(model: ModelProto, dims: Mapping[str, int] | None = None,
                    inputs: str | Path | None = None) -> None:
    """What the check jobs run before any inference: the seeded (or the user's) feeds can be made,
    and a user's inputs for a decoder keep its cache contract; raises with the one-line reason."""
    for feeds, _note in check_feeds(model, dims, inputs):
        if inputs:
            check_user_inputs(model, feeds)


def candidate_feeds(model: ModelProto, dims: Mapping[str, int] | None = None,
                    inputs: str | Path | None = None) -> tuple[list[Candidate], Callable[[], Iterator[Candidate]]]:
    """(the seeded sets, a generator of search sets). The seeded sets are
    :func:`studio.core.feeds.check_feeds`' (user .npz, or seeded inputs and a small image size);
    search sets come only when the seeded ones fail and the studio chose the inputs."""
    specs = input_specs(model)
    user = dict(dims or {})
    decoder = None if inputs else decoder_candidates(model, user)
    if decoder is not None:              # its steps decide: other sizes would break the cache contract
        return decoder, lambda: iter(())
    first = check_feeds(model, user, inputs)
    recipes: list[InputRecipe | None] = [None] if inputs else [InputRecipe(user)]
    if not inputs and len(first) > 1:
        recipes.append(InputRecipe({**user, **small_image_dims(specs, user)}))
    seeded = [Candidate(f, note, r) for (f, note), r in zip(first, recipes)]

    def more() -> Iterator[Candidate]:
        if inputs:
            return
        tail = "; give real inputs with --inputs X.npz or sizes with --dim NAME=VALUE"
        for recipe in search_recipes(model, user):
            try:
                feeds = recipe_feeds(specs, recipe)
            except Exception:  # noqa: BLE001 - a size too large to generate is skipped
                continue
            yield Candidate(feeds, f"tried other input sizes and values{tail}", recipe)

    return seeded, more


@dataclass
class SearchOutcome:
    """What a search found: the outputs of the first set that ran (and which set), or the first error."""

    outputs: Any = None
    ran_on: dict[str, Any] | None = None          # {"inputs": {name: text}, "dims": ..., "values": ..., "tries": n}
    first_error: str | None = None
    first_note: str | None = None
    tries: int = 0
    tried: list[str] = field(default_factory=list)
    searched: bool = False
    needs_inputs: bool = False

    def to_data(self) -> dict[str, Any]:
        """The keys the check jobs return (see diagnostics.base)."""
        data: dict[str, Any] = {"ran_on": self.ran_on, "tries": self.tries, "searched": self.searched}
        if self.ran_on is not None:
            data["outputs"] = self.outputs
            if self.first_error is not None:
                data["retried"] = (f"ran on {', '.join(f'{k} {v}' for k, v in self.ran_on['inputs'].items())} "
                                   f"after failing on the seeded inputs ({self.tried[0] if self.tried else '?'}: "
                                   f"{_short(self.first_error, 160)}); {self.tries} input set(s) tried")
        elif self.first_error is not None:
            data["run_error"], data["feeds_note"] = self.first_error, self.first_note
            data["needs_inputs"] = self.needs_inputs
            data["tried"] = self.tried[:6]
        return data


def _short(message: str, limit: int = 200) -> str:
    return engine_message(message, limit)


def run_search(model: ModelProto, infer: Callable[[Feeds], Any], *, dims: Mapping[str, int] | None = None,
               inputs: str | Path | None = None, budget_s: float = BUDGET_S) -> SearchOutcome:
    """Run ``infer(feeds)`` on the seeded sets, then (after an input-dependent failure, when the
    studio chose the inputs) on the search sets, until one works; bounded by MAX_TRIES sets and
    ``budget_s`` seconds of search."""
    seeded, more = candidate_feeds(model, dims, inputs)
    out = SearchOutcome()
    chosen = studio_chosen(model, dims, inputs)

    last_error = ""

    def attempt(c: Candidate) -> bool:
        nonlocal last_error
        out.tries += 1
        out.tried.append(feeds_text(c.feeds))
        step = None
        try:
            for step, feeds in (*c.before, (c.label, c.feeds)):
                out.outputs = infer(feeds)
        except Exception as exc:  # noqa: BLE001 - the engine's message is the finding
            last_error = (f"{step}: " if c.before and step else "") + f"{type(exc).__name__}: {exc}"[:2000]
            if out.first_error is None:
                out.first_error, out.first_note = last_error, c.note
            return False
        out.ran_on = {"inputs": describe_inputs(c.feeds), **(c.recipe.to_dict() if c.recipe else {}),
                      "tries": out.tries}
        if c.before:
            out.ran_on["steps"] = [label for label, _ in c.before] + [c.label]
        return True

    for c in seeded:
        if attempt(c):
            return out
        if _ENGINE_LIMIT.search(last_error):
            # no other input set can fix it: a second seeded set (the small image size) would only run the
            # engine again, and a converted one converts again (sample yolo_detector on LiteRT: a second
            # 35 s onnx2tf conversion whose file lacked the same Flex SplitV)
            return out
    if seeded and seeded[0].label:       # a decoder's steps keep its cache contract: their failure is the verdict
        return out
    if out.first_error is None or not chosen or not input_dependent(out.first_error):
        return out
    out.searched = True
    deadline = time.monotonic() + budget_s
    for c in more():
        if attempt(c):
            return out
        if time.monotonic() > deadline or _OUT_OF_MEMORY.search(last_error):
            break
    out.needs_inputs = True
    return out


@dataclass(frozen=True)
class WorkingInputs:
    """The first searched input set the original ran on, with its outputs."""

    feeds: Feeds
    outputs: Any
    recipe: InputRecipe
    tries: int

    @property
    def text(self) -> str:
        return feeds_text(self.feeds)


def search_runs(model: ModelProto, run: Callable[[list[Feeds]], Sequence[Any]], first_error: str | None, *,
                dims: Mapping[str, int] | None = None, chunk: int = 4, budget_s: float = BUDGET_S) -> WorkingInputs | None:
    """The host-side search of export's reference, optimize's verification and compare: when the seeded
    run failed with an input-dependent ``first_error`` and the studio chose the inputs, run the
    search sets ``chunk`` at a time (``run(sets)`` gives one output per set, None where it failed)
    and return the first that ran; None when none did or no search applies."""
    if not first_error or not input_dependent(first_error) or not studio_chosen(model, dims):
        return None
    specs = input_specs(model)
    deadline = time.monotonic() + budget_s
    tries = 0
    pending: list[tuple[InputRecipe, Feeds]] = []
    # check's second seeded set (a free image side at 48: a text recogniser's height) comes first, so optimize,
    # export and compare try every set check does
    small = small_image_dims(specs, dict(dims or {}))
    recipes = ([InputRecipe({**small, **dict(dims or {})})] if small else []) + search_recipes(model, dims)
    for i, recipe in enumerate(recipes):
        try:
            pending.append((recipe, recipe_feeds(specs, recipe)))
        except Exception:  # noqa: BLE001 - a size too large to generate is skipped
            pass
        if pending and (len(pending) == chunk or i == len(recipes) - 1):
            outputs = list(run([f for _, f in pending]))
            for (rec, feeds), out in zip(pending, outputs):
                tries += 1
                if out is not None:
                    return WorkingInputs(feeds, out, rec, tries)
            pending = []
            if time.monotonic() > deadline:
                break
    return None
