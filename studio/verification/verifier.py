"""Verification of a transformed model against the original.

Three checks, cheapest first: the interface (input/output names, order, dtypes
and shapes, symbolic dims preserved), ``onnx.checker`` with ``full_check``,
and numerical equality on seeded inputs. Reference outputs come from the
original on ONNX Runtime CPU with graph optimizations off, computed once, in a
sandbox worker (a hostile model cannot take the studio down). When the model
has symbolic dims, a second feed set with other dim values catches passes that
bake one shape into the graph. The reference runs its first feed set twice: outputs
that differ between those runs are the model's own randomness (Bernoulli,
training Dropout...), said once ("the model is nondeterministic: ...") and
left out of the numeric comparison, so no pass is blamed for them.

A verifier made for an engine (``engine``: the engine an engine's preset is made for, e.g. the openvino
preset's) also opens every candidate on that engine's CPU runner, the one runner protocol, and compares its
outputs there with the original's on the same engine: a result ONNX Runtime runs but that engine refuses, or
computes differently, fails. Where the engine cannot load the original either, that is said once
(``engine_note``) and candidates are not judged by it. Such an engine reads external data only beside the
file: its candidates are self-contained checkpoints (``passes.pipeline`` saves them so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from diagnostics.input_search import search_runs
from diagnostics.reference_run import evaluator_model_path_ok
from studio.core.compare import (QUANTIZED, Comparison, Tolerance, Verification, VerifyStatus, compare_outputs,
                                 merge_comparisons)
from studio.core.errors import StudioError, WorkerError, engine_message
from studio.core.dimexpr import evaluate, free_names
from studio.core.engines import sessions
from studio.core.engines.table import engine_row
from studio.core.engines.base import (decode_output_sets, encode_outputs, pack_feed_sets, rekey_arrays,
                                      unpack_feed_sets)
from studio.core.feeds import (Feeds, cast_to_inputs, choose_dims, feeds_text, flipped_flags, input_specs,
                               random_feeds)
from studio.core.pictures import choose_picture, int8_judged, output_scales, quiet_outputs
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.model_io import Checkpoint
from studio.core.order_free import order_free_outputs
from studio.core.sandbox import Limits, run_job, session_limits
from studio.core.types import value_info
from studio.inspect.decoder import DecoderError, recognize
from studio.inspect.decoder_feeds import check_step, verification_steps

log = logging.getLogger(__name__)

# The engine the reference outputs come from (optimizations off): candidates are always judged on it.
REFERENCE_ENGINE = "onnxruntime"

ORT_LABEL = "ONNX Runtime CPU, graph optimizations off"

EVALUATOR_LABEL = "onnx reference evaluator + studio reference ops (ONNX Runtime cannot run the original)"


def _io(model: onnx.ModelProto) -> tuple[list, list]:
    init = {t.name for t in model.graph.initializer}
    return ([value_info(v) for v in model.graph.input if v.name not in init],
            [value_info(v) for v in model.graph.output])


_FLOATS = ("float32", "float16", "bfloat16", "float64")


def interface_problems(original: onnx.ModelProto, candidate: onnx.ModelProto,
                       fixed_dims: Mapping[str, int] | None = None, *, float_dtypes: bool = False) -> list[str]:
    """Differences in the model's interface. ``fixed_dims``: symbolic dims that may
    become these concrete values (shape specialization the user asked for);
    ``float_dtypes``: float inputs/outputs may change float precision (asked for)."""
    fixed = dict(fixed_dims or {})
    problems: list[str] = []
    (a_in, a_out), (b_in, b_out) = _io(original), _io(candidate)
    for kind, a_list, b_list in (("input", a_in, b_in), ("output", a_out, b_out)):
        a_names, b_names = [t.name for t in a_list], [t.name for t in b_list]
        if a_names != b_names:
            problems.append(f"{kind} names/order changed: {a_names[:5]} -> {b_names[:5]}")
            continue
        for a, b in zip(a_list, b_list):
            if a.dtype != b.dtype and not (float_dtypes and a.dtype in _FLOATS and b.dtype in _FLOATS):
                problems.append(f"{kind} '{a.name[:60]}' dtype {a.dtype} -> {b.dtype}")
            if a.shape is None:
                continue
            if b.shape is None or len(a.shape) != len(b.shape):
                problems.append(f"{kind} '{a.name[:60]}' rank changed")
                continue
            for da, db in zip(a.shape, b.shape):
                if da is None or da == db:
                    continue
                if isinstance(da, str) and fixed and isinstance(db, int) and evaluate(da, fixed) == db:
                    continue     # a fixed dim, or an exporter formula over fixed dims, became its value
                if isinstance(da, str) and fixed and isinstance(db, int) and (free_names(da) or set()) & set(fixed):
                    continue     # a formula over fixed dims became a number: checked against the run (produced_problems)
                if kind == "output" and fixed and isinstance(da, str) and isinstance(db, int):
                    continue     # an output dim the exporter named on its own (Silero's stateN 'AddstateN_dim_0')
                    #              that the specialization computed: checked against the run (produced_problems)
                problems.append(f"{kind} '{a.name[:60]}' dim {da} -> {db}")
                break
    return problems


def produced_problems(original: onnx.ModelProto, candidate: onnx.ModelProto, produced: Mapping) -> list[str]:
    """Output dims a specialization made static (the original left them symbolic) that are not the
    size the result produces: an exporter's wrong dim formula written as the static size."""
    (_, a_out), (_, b_out) = _io(original), _io(candidate)
    problems = []
    for a, b in zip(a_out, b_out):
        got = getattr(produced.get(b.name), "shape", None)
        if a.shape is None or b.shape is None or got is None or len(b.shape) != len(got):
            continue
        for axis, (da, db, real) in enumerate(zip(a.shape, b.shape, got)):
            if not isinstance(da, int) and isinstance(db, int) and db != real:
                problems.append(f"output '{b.name[:60]}' declares axis {axis} as {db}, the result produces {real}")
                break
    return problems


def externals_as_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its external initializers turned into typed graph inputs.

    The checker refuses data files with several hard links (a hardlink-attack
    guard), and pipeline checkpoints hard-link unchanged weights on purpose;
    structure and shape inference do not need the weights' bytes. (Where the
    files are and that they stay inside the model's folder is validated by the
    studio's loader before any of this.)"""
    graph = model.graph
    listed = {v.name for v in graph.input}
    # An If/Loop branch's external weights too (ORT's optimized save writes them): the proto checked has no
    # folder to read them from, so each becomes a main-graph input the branch reads from the outer scope.
    for sub in _subgraphs(graph):
        _externals_to_inputs(sub, graph, listed)
    _externals_to_inputs(graph, graph, listed)
    return model


def _subgraphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """Every graph held in a node attribute of ``graph``, nested ones included."""
    found = []
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                found += [g, *_subgraphs(g)]
    return found


def _externals_to_inputs(graph: onnx.GraphProto, main: onnx.GraphProto, listed: set[str]) -> None:
    keep = []
    for t in graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            keep.append(t)
            continue
        if t.name not in listed:
            main.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
            listed.add(t.name)
    del graph.initializer[:]
    graph.initializer.extend(keep)


def full_check(path: Path) -> str | None:
    """``onnx.checker`` full check; the first line of the error, or None."""
    try:
        proto = onnx.load_model(str(path), load_external_data=False)
        if any(t.data_location == onnx.TensorProto.EXTERNAL for g in (proto.graph, *_subgraphs(proto.graph))
               for t in g.initializer):
            onnx.checker.check_model(externals_as_inputs(proto), full_check=True)
        else:
            onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # ValidationError, InferenceError, C++ errors
        return f"{type(exc).__name__}: {engine_message(exc, 300)}"
    return None


# ---------------------------------------------------------------------------- worker jobs

@job("passes.full_check")
def full_check_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("onnx.checker full check")
    return JobOutput(data={"problem": full_check(Path(args["model_path"]))})


def full_check_in_worker(model_path: Path, *, limits: Limits | None = None, pool_key: str = "default") -> str | None:
    """``full_check`` in a sandbox worker; a crash or timeout there is a problem, not a dead studio."""
    try:
        res = run_job("passes.full_check", {"model_path": str(model_path)}, stage="onnx.checker full check",
                      limits=limits, pool_key=pool_key)
    except WorkerError as exc:
        return str(exc)
    problem = res.data.get("problem")
    if problem:
        problem = str(problem).replace(str(Path(model_path).resolve().parent), "<model folder>")
        problem = problem.replace(str(Path(model_path).parent), "<model folder>")
    return problem


@job("passes.reference_outputs")
def reference_outputs_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Full check (optional), then the engine's CPU runner (``args["engine"]``; ORT with optimizations off
    unless named) on every feed set: one session, several runs. Per-set errors are reported, not raised."""

    data: dict = {"check": None, "sets": []}
    if args.get("full_check"):
        ctx.set_stage("onnx.checker full check")
        data["check"] = full_check(Path(args["model_path"]))
    engine = str(args.get("engine") or REFERENCE_ENGINE)
    label = engine_row(engine).label
    ctx.set_stage(f"{label} session creation (verification)")
    # Verification runs a few inferences per session: packing weights for faster
    # GEMMs costs more than it saves (measured: BERT-large session 1.2-1.7 s -> 0.03 s).
    runner = sessions.open_runner(engine, args["model_path"], {
        "graph_optimization_level": args.get("level") or "disable", "log_severity_level": 3,
        "extra_session_options": {"session.disable_prepacking": "1"},
        # a checkpoint whose external data lives in the original's folder
        "external_data_dir": args.get("data_dir") or None}, ctx)
    names = runner.output_names
    out_arrays: dict[str, np.ndarray] = {}
    ctx.set_stage(f"{label} inference (verification)")
    for i, feeds in enumerate(unpack_feed_sets(arrays, int(args["count"]))):
        try:
            values = list(runner.infer(feeds).values())
        except Exception as exc:
            data["sets"].append({"error": f"{type(exc).__name__}: {engine_message(exc, 300)}"})
            continue
        encoded, arrs = encode_outputs(names, values)
        for item in encoded:                # re-key the arrays per set
            rekey_arrays(item[1], f"s{i}.", arrs, out_arrays)
        data["sets"].append({"outputs": encoded})
        if i == 0 and args.get("repeat_first"):
            # One more run on the same inputs: outputs that change are the model's own randomness.
            try:
                again = list(runner.infer(feeds).values())
                data["nondeterministic"] = [n for n, a, b in zip(names, values, again) if not same_values(a, b)]
            except Exception as exc:
                data["nondeterministic_error"] = f"{type(exc).__name__}: {engine_message(exc, 200)}"
    runner.close()
    return JobOutput(data=data, arrays=out_arrays)


def same_values(a, b) -> bool:
    """Whether two runs gave the same value (NaN equals NaN; floats to within rounding noise,
    so a reduction whose thread split changes the last bit is not called random)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_values(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_values(x, y) for x, y in zip(a, b))
    if a is None or b is None:
        return a is None and b is None
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.complexfloating):
        return bool(np.allclose(x, y, rtol=1e-6, atol=1e-7, equal_nan=True))
    return bool(np.array_equal(x, y))


@dataclass(frozen=True)
class RunSets:
    """Outputs per feed set (None where that set failed) and the failures' messages."""

    outputs: tuple[dict | None, ...]
    errors: tuple[str | None, ...]
    check: str | None
    nondeterministic: tuple[str, ...] = ()   # outputs that differed between two runs on the same inputs


def run_sets(model_path: Path, feed_sets: list[Feeds], *, full: bool, limits: Limits | None,
             pool_key: str, stage: str, data_dir: Path | None = None, repeat_first: bool = False,
             level: str = "disable", engine: str = REFERENCE_ENGINE) -> RunSets:
    """``feed_sets`` run in one ONNX Runtime session at optimization ``level`` (disable: the reference
    as written; basic: constant folding over the static shapes, as a user's default session does), or in
    one session of ``engine``'s CPU runner (its defaults, f32)."""
    res = run_job("passes.reference_outputs", {"model_path": str(model_path), "count": len(feed_sets),
                                               "data_dir": str(data_dir) if data_dir else "", "engine": engine,
                                               "full_check": full, "repeat_first": repeat_first, "level": level},
                  pack_feed_sets(feed_sets), stage=stage, limits=session_limits(limits, model_path, data_dir),
                  pool_key=pool_key)
    outs, errs = decode_output_sets(res.data["sets"], res.arrays)
    return RunSets(outs, errs, res.data.get("check"), tuple(str(n) for n in res.data.get("nondeterministic", ())))


def searched_dims(model_path: Path, model: onnx.ModelProto, feeds: Feeds, *, dims: Mapping[str, int] | None,
                  limits: Limits | None, pool_key: str) -> tuple[dict[str, int], str] | None:
    """When the original refuses the studio's seeded ``feeds`` for their sizes (a reflect Pad on 16 samples),
    the dims of the first input-search set it runs (``diagnostics.input_search``) and that set's text;
    None when the seeded feeds run, or no searched set does. For callers that make their own feeds from
    dims (precision's calibration and evaluation sets), as the Verifier searches for its reference."""
    first = run_sets(model_path, [feeds], full=False, limits=limits, pool_key=pool_key,
                     stage="the seeded inputs on the original (ORT)")
    if first.outputs[0] is not None:
        return None

    def run(sets: list[Feeds]) -> tuple:
        return run_sets(model_path, sets, full=False, limits=limits, pool_key=pool_key,
                        stage="the original on searched inputs (ORT)").outputs

    found = search_runs(model, run, first.errors[0], dims=dims)
    return None if found is None else ({**dict(dims or {}), **dict(found.recipe.dims)}, found.text)


def nondeterministic_note(names: tuple[str, ...] | list[str], total: int) -> str:
    """The one line verification says when the original itself is random."""
    listed = ", ".join(f"'{n[:60]}'" for n in list(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    word = "output" if len(names) == 1 else "outputs"
    verb = "differs" if len(names) == 1 else "differ"
    tail = ("no output is deterministic, so numbers are not compared" if len(names) >= total
            else "only the other outputs are compared")
    return f"the model is nondeterministic: {word} {listed} {verb} between two runs of the original; {tail}"


# ---------------------------------------------------------------------------- verifier

def _alternative_dims(dims: Mapping[str, int]) -> dict[str, int]:
    return {k: (2 if v == 1 else max(2, v // 2 + 1)) for k, v in dims.items()}


def _decoder_spec(model: onnx.ModelProto):
    """The model's ``DecoderSpec`` when it is a KV-cache decoder whose cache fits together, else None."""

    try:
        return recognize(model)
    except DecoderError:
        return None


class Verifier:
    """Checks candidates against one original. Reference outputs are computed once."""

    def __init__(self, original_path: Path, *, dims: Mapping[str, int] | None = None,
                 feeds: list[Feeds] | None = None, tolerance: Tolerance | None = None,
                 limits: Limits | None = None, pool_key: str = "default", numeric: bool = True,
                 engine: str | None = None) -> None:
        self.original_path = Path(original_path).resolve()
        # the engine candidates must also load and compute the same on (the reference's own needs no second run)
        self.engine = engine if engine and engine != REFERENCE_ENGINE else None
        self.engine_label = engine_row(self.engine).label if self.engine else ""
        self._engine_reference: RunSets | None = None
        self.engine_error: str | None = None    # why the engine cannot run the original (candidates not judged)
        self.original = onnx.load_model(str(original_path), load_external_data=False)
        self.user_dims = dict(dims or {})
        self.tolerance = tolerance
        self.limits = limits
        self.pool_key = pool_key
        self.numeric = numeric
        specs = input_specs(self.original)
        self.seeded = feeds is None             # the studio chose the inputs (an input search may change them)
        self.run_error: str | None = None       # the original's first ORT error on them, as the engine said it
        decoder = _decoder_spec(self.original)
        if feeds is not None:
            self.feed_sets = list(feeds)
            if decoder is not None:

                for f in self.feed_sets:
                    check_step(decoder, f)      # a user's mask of the wrong length: one line naming both sides
        elif decoder is not None:               # prefill and decode steps that keep the KV-cache contract

            self.feed_sets = [s.feeds for s in verification_steps(self.original, decoder, self.user_dims)]
        else:
            chosen = choose_dims(specs, self.user_dims)
            self.feed_sets = [random_feeds(specs, chosen, seed=0)]
            free = {k: v for k, v in chosen.items() if k not in self.user_dims}
            if free:
                self.feed_sets.append(random_feeds(specs, {**chosen, **_alternative_dims(free)}, seed=1))
            flipped = flipped_flags(self.feed_sets[0])
            if flipped is not None:           # the other side of every If whose condition is an input
                self.feed_sets.append(flipped)
        self._reference: RunSets | None = None
        self.nondeterministic: tuple[str, ...] = ()   # outputs of the original that differ run to run
        self._reference_error: str | None = None
        self._evaluator_error: str | None = None      # why the evaluator fallback failed, when it was tried
        self.reference_label = ORT_LABEL
        self.picture_note: str | None = None          # the synthetic picture added to the reference, said once
        self._scales: tuple[RunSets | None, dict[str, float]] = (None, {})   # output_scales of that reference
        self._decoder = decoder is not None

    @property
    def fixed_dims(self) -> dict[str, int]:
        return self.user_dims

    def reference(self) -> RunSets | None:
        """Reference outputs (once). None, with ``reference_error`` set, when ORT
        cannot run the original (custom ops, hostile model...)."""
        if self._reference is None and self._reference_error is None and self.numeric:
            try:
                ref = run_sets(self.original_path, self.feed_sets, full=False, limits=self.limits,
                               pool_key=self.pool_key, stage="reference outputs (original on ORT)",
                               repeat_first=True)
                self.nondeterministic = ref.nondeterministic
                usable = [i for i, o in enumerate(ref.outputs) if o is not None]
                ort_error = None if usable else (f"ONNX Runtime cannot run the original on the verification inputs "
                                                 f"({feeds_text(self.feed_sets[0])}; --dim NAME=VALUE or "
                                                 f"INPUT[AXIS]=VALUE sets other sizes): {ref.errors[0]}")
            except (WorkerError, StudioError) as exc:
                ref, usable, ort_error = None, [], str(exc)
            if ort_error is not None and ref is not None:
                self.run_error = ref.errors[0]
                if self.seeded and self._searched_reference():
                    return self._reference
            if ort_error is not None:
                # A custom op ORT lacks (mmdeploy::grid_sampler...): the onnx reference evaluator with the
                # studio's reference implementations is the oracle instead, when it covers every custom op.
                ref = self._evaluator_reference()
                usable = [] if ref is None else [i for i, o in enumerate(ref.outputs) if o is not None]
                if not usable:
                    self._reference_error = ort_error + (f"; the onnx reference evaluator failed too: "
                                                         f"{self._evaluator_error}" if self._evaluator_error else "")
                    return None
                self.reference_label = EVALUATOR_LABEL
            # Drop feed sets the original itself cannot run (e.g. a dim it does not really support).
            self.feed_sets = [self.feed_sets[i] for i in usable]
            self._reference = RunSets(tuple(ref.outputs[i] for i in usable), tuple(None for _ in usable), None,
                                      self.nondeterministic)
            if self.seeded and not self._decoder and self.reference_label == ORT_LABEL:
                self._add_picture_set()
        return self._reference

    def _quiet_outputs(self) -> dict[str, float]:
        """Float outputs of the original numerically zero (RMS under float32's tolerance) on every reference
        set, with their largest RMS; nondeterministic outputs are not judged."""
        return quiet_outputs(self._reference.outputs if self._reference else (), skip=self.nondeterministic)

    def _add_picture_set(self) -> None:
        """Seeded inputs leave outputs at zero, or at a sliver of what a picture gives (a text detector's mask):
        one more reference set, the synthetic picture ``studio.core.pictures.choose_picture`` picks (None without
        an image input, before any run); every candidate is then judged on it too. Said in ``picture_note``."""
        if self._reference is None:
            return

        def run(sets: list[Feeds]) -> tuple:
            return run_sets(self.original_path, sets, full=False, limits=self.limits, pool_key=self.pool_key,
                            stage="reference outputs (original on ORT, synthetic pictures)").outputs

        try:
            choice = choose_picture(self.feed_sets[0], self.original, self._reference.outputs, run,
                                    skip=self.nondeterministic)
        except (WorkerError, StudioError) as exc:
            log.info("synthetic pictures not run: %s", exc)
            return
        if choice is None:
            return
        self.feed_sets.append(choice.feeds)
        ref = self._reference
        self._reference = RunSets(ref.outputs + (dict(choice.outputs),), ref.errors + (None,), ref.check,
                                  ref.nondeterministic)
        self.picture_note = (f"outputs {choice.smallness('random inputs')} were also compared on {choice.label} "
                             f"({choice.rms_text()}); real inputs (--inputs X.npz) check more")

    def _searched_reference(self) -> bool:
        """The seeded inputs failed the original: the input search's sets (diagnostics.input_search),
        so a model is not left unverified only because of the studio's own inputs."""

        def run(sets: list[Feeds]) -> tuple:
            return run_sets(self.original_path, sets, full=False, limits=self.limits, pool_key=self.pool_key,
                            stage="reference outputs (original on ORT, searched inputs)").outputs

        try:
            found = search_runs(self.original, run, self.run_error, dims=self.user_dims)
        except (WorkerError, StudioError) as exc:
            log.info("input search for the reference stopped: %s", exc)    # the seeded error stays the message
            found = None
        if found is None:
            return False
        self.feed_sets = [found.feeds]
        self._reference = RunSets((found.outputs,), (None,), None)
        self.reference_label += f", on searched inputs ({found.text})"
        return True
    @property
    def nondeterministic_note(self) -> str | None:
        """"the model is nondeterministic: ..." once the reference showed it, else None."""
        if not self.nondeterministic:
            return None
        return nondeterministic_note(self.nondeterministic, len(self.original.graph.output))

    @property
    def quiet_note(self) -> str | None:
        """When some float outputs of the original are numerically zero on every reference set (RMS under
        float32's tolerance), also after a synthetic picture was tried: the comparison there checks rounding
        noise, not the model, and the run's summary says so. None otherwise."""
        quiet = self._quiet_outputs()
        if not quiet:
            return None
        listed = ", ".join(f"'{n[:60]}' (RMS {r:.2g})" for n, r in list(quiet.items())[:4])
        more = f" and {len(quiet) - 4} more" if len(quiet) > 4 else ""
        return (f"near zero on these inputs: {listed}{more}, so those outputs were compared at float noise level "
                "and prove little; verify on real inputs (--inputs X.npz)")

    def _evaluator_reference(self) -> RunSets | None:

        if not evaluator_model_path_ok(self.original_path):
            return None
        try:
            res = run_job("diagnostics.reference_outputs", {"model_path": str(self.original_path),
                                                            "count": len(self.feed_sets)},
                          pack_feed_sets(self.feed_sets), stage="reference outputs (onnx reference evaluator)",
                          limits=self.limits, pool_key=self.pool_key)
        except (WorkerError, StudioError) as exc:
            self._evaluator_error = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            return None

        return RunSets(*decode_output_sets(res.data["sets"], res.arrays), None)

    def engine_reference(self) -> RunSets | None:
        """The original's outputs on ``engine`` (once, on the reference's feed sets); None, with ``engine_error``
        set, when that engine cannot load or run the original."""
        if self.engine is None or self.engine_error is not None or self._engine_reference is not None:
            return self._engine_reference
        if self.numeric:
            self.reference()         # the feed sets the original runs (an input search may replace them)
        try:
            ref = run_sets(self.original_path, self.feed_sets, full=False, limits=self.limits, pool_key=self.pool_key,
                           stage=f"reference outputs (original on {self.engine_label})", engine=self.engine)
            failed = next((e for e in ref.errors if e is not None), None)
        except (WorkerError, StudioError) as exc:
            ref, failed = None, engine_message(exc, 300) or type(exc).__name__
        if failed is not None:
            self.engine_error = engine_message(failed, 300)
            return None
        self._engine_reference = ref
        return ref

    @property
    def engine_note(self) -> str | None:
        """What the engine said of the original, for the run's summary: None without an engine."""
        if self.engine is None:
            return None
        if self.engine_reference() is None:
            return (f"{self.engine_label} cannot load the original either, so results are not checked on it: "
                    f"{self.engine_error}")
        return (f"{self.engine_label} CPU runs the original; each changed result was compiled and compared "
                "with it there too")

    def _engine_problem(self, path: Path, data_dir: Path | None, sets: list[Feeds], tolerance: Tolerance | None,
                        quantized: bool) -> tuple[str | None, Comparison | None]:
        """(why the candidate fails on ``engine`` where the original runs, or None; the comparison there)."""
        ref = self.engine_reference()
        if ref is None:
            return None, None
        label = self.engine_label
        try:
            got = run_sets(path, sets, full=False, limits=self.limits, data_dir=data_dir, pool_key=self.pool_key,
                           stage=f"verification (result on {label})", engine=self.engine)
        except (WorkerError, StudioError) as exc:
            return (f"{label} cannot compile the result, though it compiles the original "
                    f"(--on-failure revert goes on without this pass): {engine_message(exc, 200)}"), None
        random = set(self.nondeterministic)
        comparison = None
        for i, (r, g, err) in enumerate(zip(ref.outputs, got.outputs, got.errors)):
            if g is None:
                return (f"{label} cannot run the result, though it runs the original (feed set {i + 1}): "
                        f"{engine_message(err, 300)}"), None
            r = {k: v for k, v in r.items() if k not in random}
            g = {k: v for k, v in g.items() if k not in random}
            if not r:
                break
            r, g = self._judged(r, g, tolerance or self.tolerance)
            comparison = compare_outputs(r, g, tolerance or self.tolerance, quantized=quantized,
                                         order_free=order_free_outputs(self.original))
            if not comparison:
                return f"{label} computes the result differently from the original: {comparison.summary()}", comparison
        return None, comparison

    def _judged(self, r: dict, g: dict, tolerance: Tolerance | None) -> tuple[dict, dict]:
        """A set's outputs to compare: an INT8 result (QUANTIZED tolerance) is judged on each output in the sets
        where the original answers (``pictures.int8_judged``: not where it is a sliver of its largest, as a DB
        detector's mask on noise beside the synthetic picture)."""
        if tolerance != QUANTIZED:
            return r, g
        if self._scales[0] is not self._reference:        # once per reference, not per set and verification
            self._scales = (self._reference, output_scales(self._reference.outputs if self._reference else ()))
        return int8_judged(r, g, self._scales[1], True)

    @property
    def computed(self) -> bool:
        """Whether reference outputs were computed (some pass changed the model)."""
        return self._reference is not None

    @property
    def reference_error(self) -> str | None:
        return self._reference_error

    def verify(self, candidate: Path | Checkpoint, *, allow_fixed_dims: bool = False,
               tolerance: Tolerance | None = None, quantized: bool = False,
               allow_io_dtypes: bool = False) -> Verification:
        """The one ``studio.core.compare.Verification``: FAILED when the interface, the checker or the numbers
        fail, PASSED when the numbers match, SKIPPED (structure checked; ``reason`` says why) when they were not
        compared; ``numeric_status`` keeps the optimizer's "passed" | "failed" | "skipped: <why>".

        Check a candidate file (or a pipeline checkpoint, whose unchanged weights are read
        from the original's folder) against the original. ``tolerance``/``quantized`` override
        the verifier's for this candidate (a quantization pass is judged by cosine).
        ``allow_io_dtypes``: float inputs/outputs may change precision on purpose; the candidate
        then gets the same feed values cast to its input dtypes, and its outputs are compared
        with the original's as values."""

        if not isinstance(candidate, Checkpoint):
            candidate = Checkpoint(Path(candidate), Path(candidate).parent)
        candidate_path = candidate.path
        data_dir = candidate.data_dir if candidate.relocated else None
        started = time.perf_counter()
        candidate = onnx.load_model(str(candidate_path), load_external_data=False)
        problems = interface_problems(self.original, candidate, self.user_dims if allow_fixed_dims else None,
                                      float_dtypes=allow_io_dtypes)
        ref = self.reference() if self.numeric else None
        check_msg: str | None
        comparison: Comparison | None = None
        if ref is None:
            check_msg = full_check(candidate_path)
            status = "skipped: " + (self._reference_error or "numeric verification turned off")
        else:
            try:
                sets = ([cast_to_inputs(f, candidate) for f in self.feed_sets] if allow_io_dtypes
                        else self.feed_sets)
                got = run_sets(candidate_path, sets, full=True, limits=self.limits, data_dir=data_dir,
                               pool_key=self.pool_key, stage="verification (result on ORT)")
            except (WorkerError, StudioError) as exc:
                return Verification(VerifyStatus.FAILED, f"the result cannot run in ONNX Runtime: {exc}",
                                    checker="not run: the result cannot run in ONNX Runtime",
                                    interface_ok=not problems, seconds=time.perf_counter() - started)
            check_msg = got.check
            status = "passed"
            random = set(self.nondeterministic)
            per_set: list[Comparison] = []
            for i, (r, g, err) in enumerate(zip(ref.outputs, got.outputs, got.errors)):
                if g is None:
                    status = "failed"
                    comparison = None
                    problems.append(f"the result fails on feed set {i + 1}: {err}")
                    break
                if random:       # the original's own draws: compared structurally only
                    r = {k: v for k, v in r.items() if k not in random}
                    g = {k: v for k, v in g.items() if k not in random}
                    if not r:
                        status = "skipped: " + (self.nondeterministic_note or "")
                        break
                r, g = self._judged(r, g, tolerance or self.tolerance)
                per_set.append(compare_outputs(r, g, tolerance or self.tolerance, quantized=quantized,
                                               order_free=order_free_outputs(self.original)))
                # the figures over every set so far (worst per output), not only the last set's
                comparison = merge_comparisons(per_set)
                if not per_set[-1]:
                    status = "failed"
                    break
                if allow_fixed_dims and i == 0:
                    problems += produced_problems(self.original, candidate, g)
        ok = not problems and check_msg is None and not status.startswith("failed")
        engine_problem = None
        if ok and self.engine is not None:      # ORT passed it: the preset's own engine must load it too
            engine_sets = ([cast_to_inputs(f, candidate) for f in self.feed_sets] if allow_io_dtypes
                           else self.feed_sets)
            engine_problem, _ = self._engine_problem(candidate_path, data_dir, engine_sets, tolerance, quantized)
            ok = engine_problem is None
        if problems:
            message = problems[0]
        elif engine_problem:
            message = engine_problem
        elif check_msg:
            message = f"onnx.checker full check fails: {check_msg}"
        elif comparison is not None and not comparison:
            message = comparison.summary()
        elif status.startswith("skipped"):
            message = f"structure verified; numbers not compared ({status[9:]})"
        else:
            message = comparison.summary() if comparison is not None else "verified"
        note = self.nondeterministic_note
        if note and not problems and not check_msg and not status.startswith("skipped"):
            message = f"{message} ({note})"
        return Verification(VerifyStatus.FAILED if not ok else VerifyStatus.SKIPPED if status.startswith("skipped")
                            else VerifyStatus.PASSED, message, comparison=comparison,
                            checker="passed" if check_msg is None else check_msg,
                            reason=status[9:] or "numbers not compared" if status.startswith("skipped") else "",
                            interface_ok=not problems, seconds=time.perf_counter() - started,
                            nondeterministic=tuple(self.nondeterministic))
