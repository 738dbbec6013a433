"""Typed requests: what the user asked an operation for, as plain frozen data (issue 34, item 2).

Why one module: every door into an operation (the CLI, a page, a batch stage, a remote target) builds
the same request, so none of them can drop an option the others pass. A request is serializable
(``to_dict``/``from_dict``, JSON-able through the one codec ``studio.core.codec``: it travels to a Dask
worker whole and is stored as the provenance of what it produced) and prints its own command line
(``command()``: every page hint is one).

What is *not* in a request is where and how this process runs it: the output folder, the sandbox pool,
progress callbacks, a dataset already opened from a project (the request names it). Those are arguments
of the call that runs the request, so a request means the same thing on every machine.

A leaf module (stdlib, ``studio.core.errors``, ``studio.core.codec`` and ``studio.core.cli_hints`` only): the front ends may import it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import PurePath
from typing import Any, TypeVar

from studio.core import cli_hints
from studio.core.bounds import MAX_DIM, OutOfRange, bounded_int, number_text
from studio.core.codec import from_json, to_json
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

__all__ = ["DEFAULT_PRESET", "PRESET_ENGINES", "CheckRequest", "OptimizeRequest", "PrecisionRequest", "ProfileOptions", "ProfileRequest",
           "ExportRequest", "BatchRequest", "MemoryRequest",
           "EditRequest", "GenerationRequest", "REQUESTS",
           "JsonRequest", "request_from_dict", "CompareRequest", "PluginRequest", "GraphRequest", "InspectRequest",
           "DatasetAddRequest", "DatasetEvalRequest", "RecipeRequest", "HINT_REQUESTS"]

DEFAULT_PRESET = "safe"         # what optimize runs when neither a preset nor passes are named
# The presets made for one engine (their pass options are that engine's choices) -> that engine: optimize
# checks the result loads and computes the same there too, export builds that target from it.
PRESET_ENGINES = {"ort": "onnxruntime", "openvino": "openvino"}
# Per-layer engine tables (issue 34: engine names live in tables, not in if-ladders). A leaf module cannot
# read the engine table, so the two facts requests need are spelled here once:
DEFAULT_ENGINES = ("ort",)      # what check/profile/generation/compare run on when no engine is named
_HINT_NAMES = {"onnxruntime": "ort"}                  # the name command hints spell for a canonical name
_OV_PRECISION_ENGINES = {"ov": True, "openvino": True}   # engines whose runs take --ov-precision

R = TypeVar("R")

# ImagePreprocess's defaults (studio.core.feeds): only the fields that differ are kept in a request, so the
# page (no preprocessing chosen) and the CLI (the defaults spelled out) build equal requests.
PREPROCESS_DEFAULTS: Mapping[str, Any] = {"size": None, "layout": "auto", "mean": (0.485, 0.456, 0.406),
                                          "std": (0.229, 0.224, 0.225), "scale": 1 / 255.0, "bgr": False}


def _pairs(value: Mapping | Any, cast=None) -> tuple[tuple[str, Any], ...]:
    """A mapping as sorted (key, value) pairs: hashable, comparable, and the same whatever the order given."""
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(k), cast(v) if cast else _frozen(v)) for k, v in items))


def _dims(value: Mapping | Any) -> tuple[tuple[str, int], ...]:
    """Dims as sorted pairs, each value an integer from 1 (as ``--dim`` reads them: R64, from every door)."""
    pairs = _pairs(value)
    for name, size in pairs:
        if isinstance(size, float) and size.is_integer():
            size = int(size)
        bounded_int(size, f"dim {name[:60]}", 1, MAX_DIM)
    return tuple((name, int(size)) for name, size in pairs)


def _frozen(v: Any) -> Any:
    return tuple(_frozen(x) for x in v) if isinstance(v, (list, tuple)) else v


def _plain(v: Any) -> Any:
    """JSON-able: tuples become lists (a pass option's value, as ``--set`` prints it)."""
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


def request_from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
    """A request from its ``to_dict`` form (``studio.core.codec.from_json``: unknown keys and wrong shapes are one
    line, BAD-REQUEST)."""
    return from_json(cls, data)


class JsonRequest:
    """What every request shares: ``to_dict``/``from_dict`` through the one codec (``studio.core.codec``), so
    ``R.from_dict(r.to_dict()) == r`` and the JSON shape of a field follows its type, the same in every request."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the fields by the codec's rules (pairs as objects, tuples as lists)."""
        return to_json(self)

    @classmethod
    def from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
        return from_json(cls, cls._upgraded(data))

    @classmethod
    def _upgraded(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A dict stored by an older version of the request, in today's shape (most requests: as it is)."""
        return data


@dataclass(frozen=True)
class PrecisionRequest(JsonRequest):
    """``precision``: build variants, compare each with fp32, time them side by side, recommend one.

    ``calibration``/``inputs`` are paths as the user gave them (the files travel beside a remote request);
    ``goal`` is the task-metric goal (``top1-agreement>=0.99``) judged on ``dataset`` (a project dataset's
    name); ``target_cosine`` is the goal without one. ``block_size``..``ratio`` shape the weight-only
    variants; ``generation_steps`` is how many greedy tokens a decoder is judged over."""

    variants: tuple[str, ...] | None = None           # None: the model's default set (``auto``)
    calibration: str | None = None
    calibration_method: str = "minmax"
    samples: int = 8
    inputs: str | None = None
    target_cosine: float = 0.99
    goal: str | None = None
    dataset: str | None = None
    tasks: tuple[tuple[str, str], ...] = ()           # output -> task kind, chosen by the user
    dims: tuple[tuple[str, int], ...] = ()
    preprocess: tuple[tuple[str, Any], ...] = ()      # ImagePreprocess fields that differ from its defaults
    latency_budget_s: float = 60.0
    block_size: str = "auto"
    symmetric: bool = True
    accuracy_level: int = 0
    ratio: float = 1.0
    generation_steps: int = 8

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.variants is not None:
            put(self, "variants", tuple(str(v) for v in self.variants))
        for name in ("calibration", "inputs", "goal", "dataset"):
            value = getattr(self, name)
            put(self, name, str(value) if value not in (None, "") else None)
        put(self, "tasks", _pairs(self.tasks, str))
        put(self, "dims", _dims(self.dims))
        put(self, "preprocess", tuple((k, v) for k, v in _pairs(self.preprocess)
                                      if _frozen(PREPROCESS_DEFAULTS.get(k, object())) != v))
        put(self, "block_size", str(self.block_size))
        for name, cast in (("samples", int), ("accuracy_level", int), ("generation_steps", int),
                           ("target_cosine", float), ("latency_budget_s", float), ("ratio", float),
                           ("symmetric", bool)):
            put(self, name, cast(getattr(self, name)))
        # the domains, here so every door (CLI, page, batch stage, a remote request) refuses before any work (R64)
        bounded_int(self.samples, "samples (calibration sets)", 1, 1024)
        bounded_int(self.generation_steps, "generation steps", 1, 65536)
        _seconds(self.latency_budget_s, "the latency budget")
        for name, item in (("target_cosine", "the target cosine"), ("ratio", "ratio (the share of layers in int4)")):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 < value <= 1.0):
                raise OutOfRange(f"{item} must be in (0, 1], got {number_text(value)}")

    @property
    def weight_options(self) -> dict[str, Any]:
        """The weight-only options as ``studio.precision.weight_only`` takes them."""
        return {"block_size": self.block_size, "symmetric": self.symmetric, "accuracy_level": self.accuracy_level,
                "ratio": self.ratio}



    def command(self, model: str, *, files: bool = True, extra: Sequence[tuple[str, object]] = ()) -> str:
        """``onnx-studio precision MODEL ...``: the command line that builds this request (the Precision
        page's hint); ``extra``: options of the call, not of the request (``--project``, ``--out``, the
        page's names for its uploads)."""
        return cli_hints.cli_command("precision", [model], [*self.cli_options(files=files), *extra])

    def cli_options(self, *, files: bool = True) -> list[tuple[str, object]]:
        """The ``onnx-studio precision`` options that build this request (defaults left out), for
        ``command()``. ``files=False`` leaves out ``--calibration``/``--inputs`` (a page names its
        uploads with its own words)."""
        d = PrecisionRequest()
        return [("--variants", list(self.variants) if self.variants else None),
                ("--calibration", self.calibration if files else None),
                ("--calibration-method", self.calibration_method if self.calibration_method != d.calibration_method
                 else None),
                ("--samples", self.samples if self.samples != d.samples else None),
                ("--inputs", self.inputs if files else None),
                ("--target-cosine", self.target_cosine if self.target_cosine != d.target_cosine else None),
                ("--dataset", self.dataset), ("--goal", self.goal), ("--task", dict(self.tasks)),
                ("--dim", dict(self.dims)), *_preprocess_options(self.preprocess),
                ("--budget", self.latency_budget_s if self.latency_budget_s != d.latency_budget_s else None),
                ("--block-size", self.block_size if self.block_size != d.block_size else None),
                ("--asymmetric", not self.symmetric),
                ("--accuracy-level", self.accuracy_level or None),
                ("--ratio", self.ratio if self.ratio != d.ratio else None),
                ("--steps", self.generation_steps if self.generation_steps != d.generation_steps else None)]


MAX_SECONDS = 7 * 86400.0               # a budget or a limit longer than a week is never a real setting


def _seconds(value: float, item: str) -> float:
    """``value`` when it is a positive, finite number of seconds (at most a week); else one line (R64)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= MAX_SECONDS:
        raise OutOfRange(f"{item} must be a positive number of seconds (at most {MAX_SECONDS:,.0f}), "
                         f"got {number_text(value)}")
    return float(value)


def _preprocess_options(preprocess: tuple[tuple[str, Any], ...]) -> list[tuple[str, object]]:
    """The image options (``studio.cli.inputs_args``) of the preprocessing fields that differ from the defaults."""
    pre = dict(preprocess)
    size = pre.get("size")
    return [("--image-size", f"{size[0]}x{size[1]}" if size else None), ("--layout", pre.get("layout")),
            ("--mean", list(pre["mean"]) if "mean" in pre else None),
            ("--std", list(pre["std"]) if "std" in pre else None), ("--bgr", bool(pre.get("bgr")))]


def _number(value: float) -> str:
    """A float as the CLI reads it back exactly (``900`` rather than ``900.0``, all digits when needed)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _frozen_options(value: Mapping | Any) -> tuple[tuple[str, tuple[tuple[str, Any], ...]], ...]:
    """{pass: {key: value}} as sorted pairs of sorted pairs (JSON values, lists as tuples)."""
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(name), _pairs(opts)) for name, opts in items))


@dataclass(frozen=True)
class OptimizeRequest(JsonRequest):
    """``optimize``: run a preset (default ``safe``) or named passes, verifying after every modifying pass.

    ``dims`` fix symbolic dims for the verification feeds and are what ``fix-input-shapes`` specializes;
    ``pass_options`` are ``{pass: {key: value}}`` (``--set PASS.KEY=VALUE``, JSON values); ``on_failure``:
    "stop" keeps the last verified model, "revert" undoes the failing pass and goes on; ``time_budget_s``
    skips passes that would start later; ``inputs`` is an .npz of real verification inputs (a path as the
    user gave it). Where the result goes (``-o``, ``--keep-partial``, ``--dump-dir``) is the call's."""

    preset: str | None = None
    passes: tuple[str, ...] | None = None
    dims: tuple[tuple[str, int], ...] = ()
    pass_options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    on_failure: str = "stop"
    verify: bool = True
    time_budget_s: float | None = None
    inputs: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        if isinstance(self.passes, str):
            raise StudioError("passes must be a list of pass names, not one string", code=ErrorCode.BAD_REQUEST)
        passes = tuple(str(p) for p in self.passes) if self.passes else None
        preset = str(self.preset) if self.preset else None
        if preset and passes:
            raise StudioError("give either a preset or a list of passes", code=ErrorCode.BAD_OPTION)
        put(self, "passes", passes)
        put(self, "preset", preset if preset or passes else DEFAULT_PRESET)
        put(self, "dims", _dims(self.dims))
        put(self, "pass_options", _frozen_options(self.pass_options))
        if self.on_failure not in ("stop", "revert"):
            raise StudioError("on_failure must be 'stop' or 'revert'", code=ErrorCode.BAD_OPTION)
        put(self, "verify", bool(self.verify))
        put(self, "time_budget_s", None if self.time_budget_s is None else
            _seconds(float(self.time_budget_s), "the time budget"))
        put(self, "inputs", str(self.inputs) if self.inputs not in (None, "") else None)

    @property
    def options(self) -> dict[str, dict[str, Any]]:
        """``pass_options`` as ``{pass: {key: value}}`` (``passes.registry.make_pass`` keywords), with
        ``dims`` routed to ``fix-input-shapes`` unless its own ``dims`` option was given."""
        out = {name: {k: _plain(v) for k, v in opts} for name, opts in self.pass_options}
        if self.dims:
            out.setdefault("fix-input-shapes", {}).setdefault("dims", dict(self.dims))
        return out

    @property
    def engine(self) -> str | None:
        """The engine the preset is made for (``PRESET_ENGINES``), whose own load and numbers the result must
        pass too; None for engine-neutral presets and named passes."""
        return PRESET_ENGINES.get(self.preset or "")

    def cli_options(self, *, files: bool = True) -> list[tuple[str, object]]:
        """The ``onnx-studio optimize`` options that build this request (defaults left out but the preset,
        which is always named); ``files=False`` leaves out ``--inputs``."""
        return [("--passes", list(self.passes) if self.passes else None),
                ("--preset", None if self.passes else self.preset),
                ("--dim", dict(self.dims)),
                *(("--set", f"{name}.{key}={json.dumps(_plain(value))}") for name, opts in self.pass_options
                  for key, value in opts),
                ("--on-failure", self.on_failure if self.on_failure != "stop" else None),
                ("--no-verify", not self.verify),
                ("--time-budget", None if self.time_budget_s is None else _number(self.time_budget_s)),
                ("--inputs", self.inputs if files else None)]

    def command(self, model: str, output: str | None = None, *, files: bool = True,
                extra: Sequence[tuple[str, object]] = ()) -> str:
        """``onnx-studio optimize MODEL -o OUT ...``: the command line that builds this request (the
        "equivalent CLI command" of the Optimize page). ``output`` defaults to ``<stem>-<preset>.onnx``;
        ``extra``: options of the call, not of the request (``--keep-partial``, ``--project``)."""
        out = output or f"{PurePath(model).stem}-{self.preset or 'optimized'}.onnx"
        return cli_hints.cli_command("optimize", [model], [("-o", out), *self.cli_options(files=files), *extra])


@dataclass(frozen=True)
class CheckRequest(JsonRequest):
    """``check``: will the model run on these engines? ``engines`` None: the default set (``--engines``
    omitted); ``eps``: ONNX Runtime execution providers; ``run`` False: sessions only (``--no-run``);
    ``dims``/``inputs``: the test run's sizes or real .npz inputs (a path as the user gave it); ``tasks``:
    {output: kind} for comparing the converted engines' outputs. A fix before the check (``--fix``) is an
    ``OptimizeRequest`` of its own."""

    engines: tuple[str, ...] | None = None
    eps: tuple[str, ...] = ("cpu",)
    trt_version: str = "10"
    run: bool = True
    dims: tuple[tuple[str, int], ...] = ()
    inputs: str | None = None
    tasks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        put = object.__setattr__
        for name in ("engines", "eps"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = [v.strip() for v in value.split(",") if v.strip()]
            put(self, name, tuple(str(v) for v in value) if value else (None if name == "engines" else ("cpu",)))
        put(self, "trt_version", str(self.trt_version))
        put(self, "run", bool(self.run))
        put(self, "dims", _dims(self.dims))
        put(self, "inputs", str(self.inputs) if self.inputs not in (None, "") else None)
        put(self, "tasks", _pairs(self.tasks, str))



    def cli_options(self, *, files: bool = True, dims: bool = True) -> list[tuple[str, object]]:
        """The ``onnx-studio check`` options that build this request (defaults left out); ``dims=False``
        leaves ``--dim`` to the caller (a fix's own dims)."""
        return [("--engines", [_HINT_NAMES.get(e, e) for e in self.engines] if self.engines else None),
                ("--ep", list(self.eps)), ("--trt-version", self.trt_version if self.trt_version != "10" else None),
                ("--no-run", not self.run), ("--dim", dict(self.dims) if dims else None),
                ("--inputs", self.inputs if files else None), ("--task", dict(self.tasks))]

    def command(self, model: str, *, files: bool = True, fix: OptimizeRequest | None = None,
                output: str | None = None) -> str:
        """``onnx-studio check MODEL ...``: the command line that builds this request; ``fix`` (its passes and
        their options) is applied first and written to ``output`` (``--fix``/``--set``/``--output``)."""
        fixes = [("--fix", name) for name in (fix.passes or ())] if fix is not None else []
        sets = [("--set", f"{name}.{key}={json.dumps(_plain(value))}") for name, opts in fix.pass_options
                for key, value in opts] if fix is not None else []
        return cli_hints.cli_command("check", [model], [*self.cli_options(files=files), *fixes, *sets,
                                                        ("--output", output if fix is not None else None)])


def _ints(values: Any, name: str) -> tuple[int, ...]:
    """Positive integers (NumPy's too), each once, in the order given."""
    out = []
    for v in values or ():
        if isinstance(v, bool) or not hasattr(v, "__index__") or int(v) < 1:
            raise StudioError(f"{name} must be positive integers, got {v!r}", code=ErrorCode.BAD_OPTION)
        out.append(int(v))
    return tuple(dict.fromkeys(out))


@dataclass(frozen=True)
class ProfileOptions:
    """What ``profile`` measures: ``iterations`` per variant or ``duration_s`` in all (a duration clears the
    iterations), warm-up, interleaved rounds, per-op time, memory, the thread/batch/concurrency sweeps, the
    feeds (``dims``; ``inputs_npz`` an .npz or ``images_dir`` a folder whose first image feeds the image input,
    shaped by ``preprocess``: the ``ImagePreprocess`` fields that differ from its defaults) and the worker's
    limits. One copy of these fields: a ``ProfileRequest`` holds one (paths as the user gave them) and the
    profiler runs one (``profilers.profile.options_of``: the same with the paths located on this machine).
    Its checks are one line each (BAD-OPTION)."""

    warmup: int = 10
    iterations: int | None = 100
    duration_s: float | None = None
    rounds: int = 20
    per_op: bool = False
    per_op_runs: int = 10
    memory: bool = False
    memory_iterations: int = 200
    batch_sizes: tuple[int, ...] = ()
    thread_counts: tuple[int, ...] = ()
    concurrency: tuple[int, ...] = ()
    sweep_iterations: int = 30
    dims: tuple[tuple[str, int], ...] = ()
    inputs_npz: str | None = None
    images_dir: str | None = None
    preprocess: tuple[tuple[str, Any], ...] = ()   # ImagePreprocess fields that differ from its defaults
    seed: int = 0
    timeout_s: float | None = None          # per job; None: the worker default (120 s, configurable)
    memory_gb: float | None = None          # the worker's memory limit; None: default (3 GiB)
    ov_cache: bool = False                  # OpenVINO CACHE_DIR in the job folder; cold start measured twice

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.duration_s is not None:
            put(self, "iterations", None)
        put(self, "dims", _dims(self.dims))
        for name in ("batch_sizes", "thread_counts", "concurrency"):
            put(self, name, _ints(getattr(self, name), name.replace("_", " ")))
        for name in ("warmup", "rounds", "per_op_runs", "memory_iterations", "sweep_iterations", "seed"):
            value, low = getattr(self, name), (0 if name in ("warmup", "seed") else 1)
            if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) < low:
                raise StudioError(f"{name.replace('_', ' ')} must be an integer >= {low}, got {value!r}",
                                  code=ErrorCode.BAD_OPTION)
            put(self, name, int(value))
        if self.iterations is not None:
            if isinstance(self.iterations, bool) or not hasattr(self.iterations, "__index__") or self.iterations < 1:
                raise StudioError(f"iterations must be a positive integer, got {self.iterations!r}",
                                  code=ErrorCode.BAD_OPTION)
            put(self, "iterations", int(self.iterations))
        for name in ("inputs_npz", "images_dir"):
            value = getattr(self, name)
            put(self, name, str(value) if value not in (None, "") else None)
        if self.inputs_npz and self.images_dir:
            raise StudioError("give either an .npz inputs file or an image folder, not both", code=ErrorCode.BAD_OPTION)
        if self.iterations is None and self.duration_s is None:
            raise StudioError("give iterations or a duration", code=ErrorCode.BAD_OPTION)
        for name in ("duration_s", "timeout_s", "memory_gb"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise StudioError("duration must be a positive number of seconds" if name == "duration_s"
                                  else f"{name} must be a positive number", code=ErrorCode.BAD_OPTION)
            put(self, name, float(value))
        pre = self.preprocess.to_dict() if hasattr(self.preprocess, "to_dict") else self.preprocess
        put(self, "preprocess", tuple((k, v) for k, v in _pairs(pre)           # it shapes the image folder only
                                      if self.images_dir and _frozen(PREPROCESS_DEFAULTS.get(k, object())) != v))
        for name in ("per_op", "memory", "ov_cache"):
            put(self, name, bool(getattr(self, name)))

    @property
    def sweeps(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return tuple((kind, values) for kind, values in (("threads", self.thread_counts),
                                                         ("batch", self.batch_sizes),
                                                         ("concurrency", self.concurrency)) if values)


# ProfileRequest's fields before it held a ProfileOptions (stored job rows, batch stage options): its own
# names for the two paths, the rest under the same names.
_OLD_PROFILE_NAMES = {"inputs": "inputs_npz", "images": "images_dir"}


@dataclass(frozen=True)
class ProfileRequest(JsonRequest):
    """``profile``: latency (cold start, interleaved warm percentiles and ratios) of every model version on
    every engine, optionally per-op time, memory and sweeps.

    ``engines`` are engine specs as the CLI reads them (``ort``, ``ov:bf16``, ``all``); ``options`` what is
    measured (a ``ProfileOptions``; its paths as the user gave them, the files travel beside a remote
    request). Which models, where the side files go and the progress callback are the call's. A dict written
    before the options were nested (their fields beside ``engines``, ``inputs``/``images`` for the paths)
    still loads (:meth:`from_dict`)."""

    engines: tuple[str, ...] = DEFAULT_ENGINES
    options: ProfileOptions = ProfileOptions()

    def __post_init__(self) -> None:
        engines = [self.engines] if isinstance(self.engines, str) else list(self.engines or ())
        words = [w.strip() for e in engines for w in str(e).split(",") if w.strip()]
        object.__setattr__(self, "engines", tuple(dict.fromkeys(words)) or DEFAULT_ENGINES)
        if not isinstance(self.options, ProfileOptions):
            raise StudioError("a ProfileRequest's options must be a ProfileOptions", code=ErrorCode.BAD_REQUEST)

    @classmethod
    def of(cls, engines: Sequence[str] | str = DEFAULT_ENGINES, **options: Any) -> ProfileRequest:
        """``ProfileRequest(engines, ProfileOptions(**options))``: a request written in one call."""
        return cls(engines=engines, options=ProfileOptions(**options))

    @classmethod
    def _upgraded(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """A flat dict's option fields (the form stored before the options were nested, and a batch stage's
        overrides) moved under ``options``; unknown keys are still refused by the codec."""
        if isinstance(data, Mapping):
            option_names = {f.name for f in fields(ProfileOptions)}
            flat = {_OLD_PROFILE_NAMES.get(k, k): v for k, v in data.items() if k not in ("engines", "options")}
            moved = {k: v for k, v in flat.items() if k in option_names}
            if moved:
                nested = data.get("options") or {}
                if not isinstance(nested, Mapping):
                    raise StudioError("a ProfileRequest's options must be a mapping", code=ErrorCode.BAD_REQUEST)
                data = {**{k: v for k, v in data.items() if _OLD_PROFILE_NAMES.get(k, k) not in moved},
                        "options": {**nested, **moved}}
        return data

    def cli_options(self, *, full_paths: bool = True) -> list[tuple[str, object]]:
        """The ``onnx-studio profile`` options that build this request (defaults left out, and the per-op,
        memory and sweep counts where their measurement is off); ``full_paths=False`` shows the inputs
        file's and image folder's names only (a page's uploads)."""
        o, d = self.options, ProfileOptions()
        images = (o.images_dir if full_paths else PurePath(o.images_dir).name + "/") if o.images_dir else None
        return [
            ("--engine", ",".join(self.engines)),
            ("--duration", _number(o.duration_s) if o.duration_s is not None else None),
            ("--iterations", o.iterations if o.duration_s is None and o.iterations != d.iterations else None),
            *((flag, value if value != default else None) for flag, value, default in (
                ("--warmup", o.warmup, d.warmup), ("--rounds", o.rounds, d.rounds), ("--seed", o.seed, d.seed))),
            ("--per-op", o.per_op),
            ("--per-op-runs", o.per_op_runs if o.per_op and o.per_op_runs != d.per_op_runs else None),
            ("--memory", o.memory),
            ("--memory-iterations", o.memory_iterations
             if o.memory and o.memory_iterations != d.memory_iterations else None),
            ("--sweep-iterations", o.sweep_iterations
             if o.sweeps and o.sweep_iterations != d.sweep_iterations else None),
            ("--threads", list(o.thread_counts)), ("--batch", list(o.batch_sizes)),
            ("--concurrency", list(o.concurrency)), ("--dim", dict(o.dims)),
            ("--inputs", (o.inputs_npz if full_paths else PurePath(o.inputs_npz).name) if o.inputs_npz else None),
            ("--images", images), *(_preprocess_options(o.preprocess) if images else ()),
            ("--ov-cache", o.ov_cache),
            ("--timeout", _number(o.timeout_s) if o.timeout_s else None),
            ("--memory-gb", _number(o.memory_gb) if o.memory_gb else None)]

    def command(self, models: Sequence[str], *, full_paths: bool = True, target: str | None = None) -> str:
        """``onnx-studio profile MODEL... [options]``: the command line that builds this request (the
        Profile page's hint); ``target``: the remote target it runs on."""
        return cli_hints.cli_command("profile", list(models), [*self.cli_options(full_paths=full_paths),
                                                                ("--target", target)])


@dataclass(frozen=True)
class GenerationRequest(JsonRequest):
    """``profile --generate``: a KV-cache decoder's generation profile on ``engines`` (specs as the CLI reads
    them): seeded prompts of each of ``prompt_lengths`` x ``batch_sizes``, ``new_tokens`` greedy tokens,
    ``generations`` timed generations per case; ``io_binding`` keeps ORT's cache as OrtValues, ``memory``
    measures each case's peak. The fields of ``profilers.generation_results.GenerationOptions`` (its own
    checks apply when it is built from ``options``) that the CLI sets, so it travels to a worker as JSON."""

    engines: tuple[str, ...] = DEFAULT_ENGINES
    prompt_lengths: tuple[int, ...] = (16, 64)
    new_tokens: int = 32
    batch_sizes: tuple[int, ...] = (1,)
    generations: int = 5
    seed: int = 0
    io_binding: bool = True
    memory: bool = True
    timeout_s: float | None = None
    memory_gb: float | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        engines = [self.engines] if isinstance(self.engines, str) else list(self.engines or ())
        words = [w.strip() for e in engines for w in str(e).split(",") if w.strip()]
        put(self, "engines", tuple(dict.fromkeys(words)) or DEFAULT_ENGINES)
        for name in ("prompt_lengths", "batch_sizes"):
            put(self, name, tuple(int(v) for v in getattr(self, name) or ()))
        for name in ("new_tokens", "generations", "seed"):
            put(self, name, int(getattr(self, name)))
        for name in ("io_binding", "memory"):
            put(self, name, bool(getattr(self, name)))
        for name in ("timeout_s", "memory_gb"):
            value = getattr(self, name)
            put(self, name, None if value is None else float(value))

    @property
    def options(self) -> dict[str, Any]:
        """The ``GenerationOptions`` keywords (everything but the engines)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "engines"}



    def command(self, models: Sequence[str], *, target: str | None = None) -> str:
        """``onnx-studio profile MODEL... --generate [options]``: the command line that builds this request."""
        d = GenerationRequest()
        return cli_hints.cli_command("profile", list(models), [
            ("--generate", True), ("--engine", ",".join(self.engines)),
            ("--prompt-lengths", list(self.prompt_lengths) if self.prompt_lengths != d.prompt_lengths else None),
            ("--new-tokens", self.new_tokens if self.new_tokens != d.new_tokens else None),
            ("--batch", list(self.batch_sizes) if self.batch_sizes != d.batch_sizes else None),
            ("--generations", self.generations if self.generations != d.generations else None),
            ("--seed", self.seed if self.seed != d.seed else None),
            ("--no-io-binding", not self.io_binding), ("--no-generation-memory", not self.memory),
            ("--timeout", _number(self.timeout_s) if self.timeout_s else None),
            ("--memory-gb", _number(self.memory_gb) if self.memory_gb else None), ("--target", target)])


@dataclass(frozen=True)
class ExportRequest(JsonRequest):
    """``export``: deployment artifacts per target, each reloaded by its engine and verified, in one bundle.

    ``targets`` as the CLI reads them (``ort``, ``openvino``, ``tensorrt``, ``triton``, the mobile targets or
    ``all``); ``shapes`` are ``NAME=MIN:OPT:MAX`` (or ``NAME=SHAPE``) specs; ``calibration``, ``plugins``,
    ``ort_custom_ops`` and ``ov_extensions`` are paths as the user gave them; ``goal`` is the task-metric goal
    judged on the project dataset ``dataset``. The output folder is the call's. The manifest of the bundle
    keeps ``to_dict()`` under ``request``."""

    targets: tuple[str, ...] = ("all",)
    preset: str | None = None
    precision: str = "fp32"
    ov_precisions: tuple[str, ...] | None = None
    calibration: str | None = None
    calibration_method: str = "minmax"
    shapes: tuple[str, ...] = ()
    dims: tuple[tuple[str, int], ...] = ()
    ort_level: str = "extended"
    ort_format: bool = True
    name: str | None = None
    max_batch: int = 8
    plugins: tuple[str, ...] = ()
    ort_custom_ops: tuple[str, ...] = ()
    ov_extensions: tuple[str, ...] = ()
    zip: bool = True
    goal: str | None = None
    dataset: str | None = None
    tasks: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        put = object.__setattr__
        for name in ("targets", "ov_precisions"):
            value = getattr(self, name)
            words = [w.strip() for v in ([value] if isinstance(value, str) else value or ())
                     for w in str(v).split(",") if w.strip()]
            words = [_HINT_NAMES.get(w, w) for w in words]
            put(self, name, tuple(dict.fromkeys(words)) or (("all",) if name == "targets" else None))
        for name in ("shapes", "plugins", "ort_custom_ops", "ov_extensions"):
            value = getattr(self, name)
            put(self, name, tuple(str(v) for v in ([value] if isinstance(value, str) else value or ())))
        for name in ("preset", "calibration", "name", "goal", "dataset"):
            value = getattr(self, name)
            put(self, name, str(value) if value not in (None, "") else None)
        put(self, "dims", _dims(self.dims))
        put(self, "tasks", _pairs(self.tasks, str))
        put(self, "max_batch", bounded_int(int(self.max_batch), "max batch"))
        for name in ("ort_format", "zip"):
            put(self, name, bool(getattr(self, name)))



    def cli_options(self) -> list[tuple[str, object]]:
        """The ``onnx-studio export`` options that build this request (defaults left out, ``-o`` aside)."""
        return [("--target", list(self.targets)), ("--preset", self.preset),
                ("--precision", self.precision if self.precision != "fp32" else None),
                ("--ov-precisions", list(self.ov_precisions or ())), ("--calibration", self.calibration),
                ("--calibration-method", self.calibration_method if self.calibration_method != "minmax" else None),
                *(("--shapes", spec) for spec in self.shapes), ("--dim", dict(self.dims)),
                ("--ort-level", self.ort_level if self.ort_level != "extended" else None),
                ("--no-ort-format", not self.ort_format), ("--name", self.name),
                ("--max-batch", self.max_batch if self.max_batch != 8 else None),
                *(("--plugin", lib) for lib in self.plugins), *(("--ort-custom-ops", lib) for lib in self.ort_custom_ops),
                *(("--ov-extension", lib) for lib in self.ov_extensions), ("--no-zip", not self.zip),
                ("--dataset", self.dataset), ("--goal", self.goal), ("--task", dict(self.tasks))]

    def command(self, model: str, output: str = "artifacts") -> str:
        """``onnx-studio export MODEL -o OUT ...``: the command line that builds this request (the Export
        page's hint)."""
        target, *rest = self.cli_options()
        return cli_hints.cli_command("export", [model], [target, ("-o", output), *rest])


@dataclass(frozen=True)
class MemoryRequest(JsonRequest):
    """``memory``: every tensor's lifetime in ORT's execution order at ``dims``, the peak, the best-fit arena;
    ``measure``: what ORT and OpenVINO really allocate (a child each, stopped after ``measure_timeout_s``);
    ``engine_graph``: also the plan over ORT's optimized graph; ``reorder``: the memory-aware order as a
    verified pass, with the peak before and after. Where a reordered model is kept (``-o``) is the call's."""

    dims: tuple[tuple[str, int], ...] = ()
    measure: bool = True
    engine_graph: bool = True
    reorder: bool = False
    measure_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "dims", _dims(self.dims))
        for name in ("measure", "engine_graph", "reorder"):
            put(self, name, bool(getattr(self, name)))
        put(self, "measure_timeout_s", _seconds(float(self.measure_timeout_s), "the measuring time limit"))



    def command(self, model: str, *, output: str | None = None) -> str:
        """``onnx-studio memory MODEL ...``: the command line that builds this request (the Overview's memory
        hint); ``output``: where ``--reorder`` keeps the reordered model."""
        return cli_hints.cli_command("memory", [model], [
            ("--dim", dict(self.dims)), ("--no-measure", not self.measure), ("--reorder", self.reorder),
            ("-o", output if self.reorder else None),
            ("--measure-timeout", _number(self.measure_timeout_s) if self.measure_timeout_s != 120.0 else None),
            ("--no-engine-graph", not self.engine_graph)])


@dataclass(frozen=True)
class EditRequest(JsonRequest):
    """``edit``: a script of graph operations applied, checked, verified against the original (``verify``)
    and written, or only checked (``check_only``). ``operations`` are the script's operations as JSON
    objects (kept as canonical JSON text, so equal scripts are equal requests); the folder the script's
    relative files (.npy, merged models) are read from, the output and the project are the call's. A kept
    version's provenance stores ``to_dict()`` under ``request``."""

    operations: tuple[str, ...] = field(default=(), metadata={"json": "text"})   # JSON text each
    verify: bool = True
    check_only: bool = False

    def __post_init__(self) -> None:
        ops = self.operations
        if isinstance(ops, str) or not isinstance(ops, (list, tuple)):
            raise StudioError("operations must be a list of edit operations", code=ErrorCode.BAD_REQUEST)
        object.__setattr__(self, "operations", tuple(
            op if isinstance(op, str) else json.dumps(op, sort_keys=True, separators=(",", ":")) for op in ops))
        object.__setattr__(self, "verify", bool(self.verify))
        object.__setattr__(self, "check_only", bool(self.check_only))

    @property
    def script(self) -> list[dict[str, Any]]:
        """The operations as ``edit --script`` reads them."""
        return [json.loads(op) for op in self.operations]



    def command(self, model: str, *, script: str = "edits.json", output: str = "edited.onnx",
                project: str | None = None) -> str:
        """``onnx-studio edit MODEL --script SCRIPT -o OUT ...``: the command line that builds this request,
        with ``script`` holding :attr:`script` as JSON (the Graph page's edit hint)."""
        return cli_hints.cli_command("edit", [model], [
            ("--script", script), ("-o", None if self.check_only else output), ("--check-only", self.check_only),
            ("--no-verify", not self.verify), ("--project", project)])


BATCH_STAGES = ("inspect", "check", "optimize", "precision", "profile", "export")
# Each batch stage's request class, and the batch's defaults where they differ from the command's (a shorter
# profile, a shorter precision budget, an ORT-only unzipped export): a stage request is read over them.
BATCH_STAGE_REQUESTS: Mapping[str, type] = {"check": CheckRequest, "optimize": OptimizeRequest,
                                            "precision": PrecisionRequest, "profile": ProfileRequest,
                                            "export": ExportRequest}
# A batch's check stage's default engines, the ones whose versions its machine facts name (studio.batch.stages).
BATCH_ENGINES = ("onnxruntime", "openvino")
BATCH_STAGE_DEFAULTS: Mapping[str, JsonRequest] = {
    "check": CheckRequest(engines=BATCH_ENGINES),
    "optimize": OptimizeRequest(),
    "precision": PrecisionRequest(latency_budget_s=20.0),
    "profile": ProfileRequest(options=ProfileOptions(iterations=50, warmup=5, rounds=5)),
    "export": ExportRequest(targets=("ort",), zip=False),
}
# The fields of a stage request that name files on this machine (a cluster worker cannot read them).
_STAGE_FILE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "check": ("inputs",), "optimize": ("inputs",), "precision": ("calibration", "inputs", "dataset"),
    "profile": ("options.inputs_npz", "options.images_dir"),
    "export": ("calibration", "plugins", "ort_custom_ops", "ov_extensions", "dataset")}


def batch_stage_request(stage: str, value: Mapping[str, Any] | JsonRequest | None = None) -> JsonRequest:
    """Stage ``stage``'s whole request: ``value`` (a request, or its ``to_dict`` keys: any subset, read over
    :data:`BATCH_STAGE_DEFAULTS`, nested options key by key) or the batch's default. Unknown keys are one line."""
    cls = BATCH_STAGE_REQUESTS.get(stage)
    if cls is None:
        raise StudioError(f"stage {str(stage)[:20]!r} takes no request; stages that do: "
                          f"{', '.join(BATCH_STAGE_REQUESTS)}", code=ErrorCode.BAD_REQUEST)
    if isinstance(value, cls):
        return value
    if value is not None and not isinstance(value, Mapping):
        raise StudioError(f"the {stage} stage's request must be a mapping of its options, got "
                          f"{type(value).__name__}", code=ErrorCode.BAD_REQUEST)
    own = _differing(BATCH_STAGE_DEFAULTS[stage].to_dict(), cls().to_dict())
    return cls.from_dict(_merged(own, value or {}))


def _differing(value: Mapping[str, Any], default: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``value`` that differ from ``default`` (nested mappings key by key): the batch's own
    defaults only, so a key they leave alone cannot clash with one a request sets (named passes, a preset)."""
    out = {}
    for key, v in value.items():
        if isinstance(v, Mapping) and isinstance(default.get(key), Mapping):
            inner = _differing(v, default[key])
            if inner:
                out[key] = inner
        elif default.get(key, _UNSET) != v:
            out[key] = v
    return out


_UNSET = object()


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` read over ``base``: a nested mapping in both (a profile's ``options``) key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(base[key], value) if isinstance(value, Mapping) and isinstance(base.get(key), Mapping) \
            else value
    return out


@dataclass(frozen=True)
class BatchRequest(JsonRequest):
    """``batch``: stages over many models. ``engines`` are the check and profile stages' engines (None: each
    stage's own default); ``stage_requests`` are whole stage requests ({stage: ``CheckRequest`` ...
    ``ExportRequest``}, given as requests or as their ``to_dict`` keys over the batch's defaults; ``engines``
    replaces theirs), so a batch stage takes every option its command does. Each stage task carries its
    part of them (``stage_options``), so a page and the CLI asking the same run the same tasks (and resume
    the same ones). Which models, the output folder, the cluster, a remote target, retries and the local
    pool's size are the call's."""

    stages: tuple[str, ...] = ("inspect", "check")
    engines: tuple[str, ...] | None = None
    force: bool = False
    stage_requests: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        put = object.__setattr__
        for name in ("stages", "engines"):
            value = getattr(self, name)
            words = [w.strip() for v in ([value] if isinstance(value, str) else value or ())
                     for w in str(v).split(",") if w.strip()]
            put(self, name, tuple(dict.fromkeys(words)) or (("inspect", "check") if name == "stages" else None))
        unknown = [st for st in self.stages if st not in BATCH_STAGES]
        if unknown:
            raise StudioError(f"unknown stage {unknown[0][:20]!r}; stages: {', '.join(BATCH_STAGES)}",
                              code=ErrorCode.BAD_OPTION)
        put(self, "force", bool(self.force))
        given = self.stage_requests.items() if isinstance(self.stage_requests, Mapping) else self.stage_requests
        requests = {}
        for stage, value in given or ():
            request = batch_stage_request(str(stage), value)
            if stage not in self.stages:
                raise StudioError(f"a request is given for the {stage} stage, but --stages does not run it "
                                  f"(stages: {', '.join(self.stages)})", code=ErrorCode.BAD_OPTION)
            if self.engines and stage in ("check", "profile"):
                request = replace(request, engines=self.engines)
            requests[str(stage)] = request
        put(self, "stage_requests", tuple(sorted(requests.items())))

    def stage_options(self) -> dict[str, dict[str, Any]]:
        """{stage: options} for ``studio.batch``: a stage request's whole ``to_dict`` form, else the part of
        that stage's request this run sets (``engines``)."""
        options = {"check": {"engines": list(self.engines)}, "profile": {"engines": list(self.engines)}} \
            if self.engines else {}
        options.update({stage: request.to_dict() for stage, request in self.stage_requests})
        return options

    def stage_requests_json(self) -> str:
        """The ``--stage-requests`` file's text for these stage requests (each stage's whole request)."""
        return json.dumps({stage: request.to_dict() for stage, request in self.stage_requests}, indent=2)

    def local_files(self) -> list[str]:
        """The stage requests' options that name files on this machine (``stage.field``), which a cluster
        worker cannot read."""
        named = []
        for stage, request in self.stage_requests:
            for dotted in _STAGE_FILE_FIELDS.get(stage, ()):
                value = request
                for part in dotted.split("."):
                    value = getattr(value, part, None)
                if value:
                    named.append(f"{stage}.{dotted}")
        return named

    def command(self, paths: Sequence[str], output: str = "OUT", *, target: str | None = None,
                raw: str = "", requests_file: str = "stage-requests.json") -> str:
        """``onnx-studio batch PATHS -o OUT ...``: the command line that builds this request (the Batch page's
        hint); ``target``/``raw`` are the call's (a remote target, words the shell expands); ``requests_file``
        holds :meth:`stage_requests_json` when stage requests are set."""
        return cli_hints.cli_command("batch", list(paths), [
            ("--stages", list(self.stages)), ("--engines", list(self.engines or ())), ("--force", self.force),
            ("--stage-requests", requests_file if self.stage_requests else None),
            ("-o", output), ("--target", target)], raw=raw)


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class CompareRequest(JsonRequest):
    """``compare``: the outputs of A on ``engine`` against B on ``engine_b`` (None: A's engine), on ``inputs``
    (.npz), ``images`` (a folder), the evaluation samples of ``dataset`` or ``count`` random samples;
    ``layerwise`` finds the first diverging layer. OpenVINO precisions count on OpenVINO only (B's defaults to
    A's). Which two models and the project holding ``dataset`` are the call's."""

    engine: str = DEFAULT_ENGINES[0]
    engine_b: str | None = None
    ov_precision: str = "f32"
    ov_precision_b: str | None = None
    dims: tuple[tuple[str, int], ...] = ()
    count: int = 2
    inputs: str | None = None
    images: str | None = None
    dataset: str | None = None
    layerwise: bool = False
    layer_threshold: float | None = None
    tasks: tuple[tuple[str, str], ...] = ()
    goal: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "engine", str(self.engine))
        if self.engine_b == self.engine:
            put(self, "engine_b", None)
        for name in ("engine_b", "ov_precision_b", "inputs", "images", "dataset", "goal"):
            put(self, name, _text(getattr(self, name)))
        if self.ov_precision_b == self.ov_precision or (self.engine_b or self.engine) not in _OV_PRECISION_ENGINES:
            put(self, "ov_precision_b", None)            # B's precision is A's, and counts on OpenVINO only
        put(self, "dims", _dims(self.dims))
        put(self, "tasks", _pairs(self.tasks, str))
        put(self, "count", bounded_int(int(self.count), "count (random input sets)", 1, 256))
        put(self, "layerwise", bool(self.layerwise))
        put(self, "layer_threshold", float(self.layer_threshold)
            if self.layerwise and self.layer_threshold is not None else None)
        if self.layer_threshold is not None and not (math.isfinite(self.layer_threshold) and self.layer_threshold > 0):
            raise OutOfRange(f"the layer threshold (a relative L2 error) must be a positive number, got "
                             f"{number_text(self.layer_threshold)}")

    def command(self, a: str, b: str, *, files: bool = True, extra: Sequence[tuple[str, object]] = ()) -> str:
        """``onnx-studio compare A B ...``: the command line that builds this request; ``files=False`` leaves
        the inputs (``--inputs``/``--images``/``--dataset``/``--count``) to ``extra``, the page's own names."""
        engine_b = self.engine_b or self.engine
        return cli_hints.cli_command("compare", [a, b], [
            ("--dim", dict(self.dims)), ("--engine", self.engine), ("--engine-b", self.engine_b),
            ("--ov-precision", self.ov_precision if self.engine in _OV_PRECISION_ENGINES and self.ov_precision != "f32"
             else None),
            ("--ov-precision-b", self.ov_precision_b if engine_b in _OV_PRECISION_ENGINES else None),
            ("--layerwise", self.layerwise), ("--layer-threshold", self.layer_threshold),
            ("--task", dict(self.tasks)), ("--goal", self.goal if self.dataset else None),
            *((("--inputs", self.inputs), ("--images", self.images), ("--dataset", self.dataset),
               ("--count", self.count if self.count != 2 and not (self.inputs or self.images or self.dataset)
                else None)) if files else ()), *extra])


@dataclass(frozen=True)
class PluginRequest(JsonRequest):
    """``plugin``: packages for the custom op ``op`` (``DOMAIN::OP_TYPE``) per target, a Python implementation
    ``impl`` (a path as the user gave it) run against the reference unless ``run`` is off, the C++ packages
    compiled and checked with ``build``. The output folder is the call's."""

    op: str = ""
    targets: tuple[str, ...] = ("all",)
    impl: str | None = None
    run: bool = True
    build: bool = False
    dims: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "op", str(self.op))
        words = [w.strip() for v in ([self.targets] if isinstance(self.targets, str) else self.targets or ())
                 for w in str(v).split(",") if w.strip()]
        put(self, "targets", tuple(dict.fromkeys(words)) or ("all",))
        put(self, "impl", _text(self.impl))
        put(self, "run", bool(self.run))
        put(self, "build", bool(self.build))
        put(self, "dims", _dims(self.dims))

    def command(self, model: str, output: str = "plugins") -> str:
        """``onnx-studio plugin MODEL --op OP ... -o OUT``: the command line that builds this request."""
        return cli_hints.cli_command("plugin", [model], [
            ("--op", self.op), ("--target", list(self.targets) if self.targets != ("all",) else None),
            ("--impl", self.impl), ("-o", output), ("--no-run", not self.run), ("--build", self.build),
            ("--dim", dict(self.dims))])


@dataclass(frozen=True)
class GraphRequest(JsonRequest):
    """``graph``: the whole graph (at ``level`` of the hierarchy, ``overlay`` coloured, ``search`` highlighted),
    one region of it (``focus`` and ``hops``, or a hierarchy ``group``), or its diff against another model
    (``diff_mode``); ``dims`` size the shapes; ``renderer`` "boxes" is the interactive viewer (the Graph
    page's Graph view), "echarts" the levelled overview ("auto": boxes unless a level, search or overlay is
    given). Which models and the output file are the call's."""

    dims: tuple[tuple[str, int], ...] = ()
    level: int | None = None
    overlay: str | None = None
    search: str | None = None
    focus: str | None = None
    hops: int | None = None
    group: str | None = None
    diff_mode: str = "overlay"
    renderer: str = "auto"

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "dims", _dims(self.dims))
        for name in ("overlay", "search", "focus", "group"):
            put(self, name, _text(getattr(self, name)))
        put(self, "level", None if self.level in (None, "") else bounded_int(int(self.level), "level", 1, 1000))
        put(self, "hops", None if self.hops is None or not self.focus else bounded_int(int(self.hops), "hops", 0, 1000))
        put(self, "diff_mode", str(self.diff_mode))
        put(self, "renderer", str(self.renderer))

    def command(self, model: str, output: str = "graph.html", *, diff: str | None = None) -> str:
        """``onnx-studio graph MODEL [--diff OTHER] ... -o OUT``: the command line that builds this request."""
        return cli_hints.cli_command("graph", [model], [
            ("--diff", diff), ("--diff-mode", self.diff_mode if diff and self.diff_mode != "overlay" else None),
            ("--focus", self.focus), ("--hops", self.hops), ("--group", self.group), ("--level", self.level),
            ("--overlay", self.overlay), ("--search", self.search), ("--dim", dict(self.dims)),
            ("--renderer", self.renderer if self.renderer != "auto" else None), ("-o", output)])


# ``--kv-dtype``'s words (the request keeps the word the user gave) and the dtype each budgets at.
KV_DTYPES: Mapping[str, str] = {"fp32": "float32", "float32": "float32", "fp16": "float16", "float16": "float16",
                                "bf16": "bfloat16", "bfloat16": "bfloat16", "int8": "int8", "fp8": "float8_e4m3fn",
                                "int4": "int4"}


def _memory_text(gib: float) -> str:
    """``--memory`` as the CLI parses it back to the same value: whole GiB as ``NGiB``, else the byte
    count (a float's repr such as ``9.3e-10GiB`` is not a size the parser reads)."""
    size = gib * 2**30
    if gib == int(gib):
        return f"{int(gib)}GiB"
    if size == round(size):
        return f"{round(size) // 2**20}MiB" if round(size) % 2**20 == 0 else str(round(size))
    return f"{gib!r}GiB"


@dataclass(frozen=True)
class InspectRequest(JsonRequest):
    """``inspect``: the model's summary at ``dims``; with ``decoder``, the KV-cache budget of a decoder at
    ``kv_length`` tokens and ``batch``, within ``memory_gib`` of memory, at ``kv_dtype`` (None: the model's)."""

    dims: tuple[tuple[str, int], ...] = ()
    decoder: bool = False
    kv_length: int | None = None
    batch: int = 1
    memory_gib: float | None = None
    kv_dtype: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "dims", _dims(self.dims))
        put(self, "decoder", bool(self.decoder))
        put(self, "kv_length", None if self.kv_length is None else bounded_int(int(self.kv_length), "KV length"))
        put(self, "batch", bounded_int(int(self.batch), "batch"))
        put(self, "memory_gib", None if self.memory_gib is None else float(self.memory_gib))
        if self.memory_gib is not None and not (math.isfinite(self.memory_gib) and self.memory_gib > 0):
            raise OutOfRange(f"memory must be a positive size, got {number_text(self.memory_gib)} GiB")
        put(self, "kv_dtype", _text(self.kv_dtype))

    def command(self, model: str) -> str:
        """``onnx-studio inspect MODEL ...``: the command line that builds this request."""
        return cli_hints.cli_command("inspect", [model], [
            ("--dim", dict(self.dims)), ("--decoder", self.decoder), ("--kv-length", self.kv_length),
            ("--batch", self.batch if self.decoder else None),
            ("--memory", _memory_text(self.memory_gib) if self.memory_gib is not None else None),
            ("--kv-dtype", self.kv_dtype)])

    @property
    def memory_bytes(self) -> int | None:
        """``memory_gib`` in bytes (exact for a size the CLI read: bytes / 2**30 scales by a power of two)."""
        return None if self.memory_gib is None else round(self.memory_gib * 2**30)

    @property
    def kv_dtype_name(self) -> str | None:
        """The dtype ``kv_dtype`` budgets at (``float16`` for ``fp16``), None for the model's own."""
        return KV_DTYPES.get(self.kv_dtype, self.kv_dtype) if self.kv_dtype else None


def _optional_int(value: Any, item: str = "it", low: int = 1) -> int | None:
    """None for unset; else an integer from ``low`` (R64: one line naming ``item``)."""
    return None if value in (None, "") else bounded_int(int(value), item, low, MAX_DIM)


# ``data recipe``'s flags whose names are not ``--<field>``
RECIPE_FLAGS = {"size": "--image-size", "pad_value": "--pad-value", "crop_ratio": "--crop-ratio"}
RECIPE_FIELDS = ("resize", "size", "scale", "mean", "std", "color", "layout", "dtype", "interpolation",
                 "pad_value", "crop_ratio")


@dataclass(frozen=True)
class RecipeRequest(JsonRequest):
    """``data recipe``: a dataset's preprocessing recipe set field by field, each as ``data recipe`` reads it
    (``fields``: {field: text}, an empty text leaves that field as it is). The dataset and the project are the
    call's. An empty text is dropped: it changes nothing."""

    fields: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        pairs = tuple((k, v) for k, v in _pairs(self.fields, str) if v != "")
        unknown = [k for k, _ in pairs if k not in RECIPE_FIELDS]
        if unknown:
            raise StudioError(f"unknown recipe field {unknown[0][:30]!r}; fields: {', '.join(RECIPE_FIELDS)}",
                              code=ErrorCode.BAD_OPTION)
        object.__setattr__(self, "fields", pairs)

    @property
    def changes(self) -> dict[str, str]:
        """{field: text} in the recipe's field order (the order ``data recipe`` applies and checks them)."""
        texts = dict(self.fields)
        return {name: texts[name] for name in RECIPE_FIELDS if name in texts}

    def command(self, dataset: str, *, project: str | None = None) -> str:
        """``onnx-studio data recipe DATASET --project P --resize ...``: the command line that builds it."""
        return cli_hints.cli_command("data recipe", [dataset], [("--project", project), *self.flags()])

    def flags(self) -> list[tuple[str, str | None]]:
        """(flag, text) of every field in the recipe's order (None: not given), for each command that takes them."""
        texts = dict(self.fields)
        return [(RECIPE_FLAGS.get(name, "--" + name), texts.get(name)) for name in RECIPE_FIELDS]

    def given(self, file: str | None = None) -> str:
        """``--recipe FILE`` and the fields' flags as typed ("" when none): what a recipe's reason quotes."""
        parts = [f"--recipe {file}"] if file else []
        parts += [f"{flag} {text}" for flag, text in self.flags() if text is not None]
        return " ".join(parts)[:200]


def _recipe(value) -> RecipeRequest:
    """A request's recipe flags: a ``RecipeRequest``, or its {field: text} (None: none given)."""
    return value if isinstance(value, RecipeRequest) else RecipeRequest(fields=value or ())


@dataclass(frozen=True)
class DatasetAddRequest(JsonRequest):
    """``data add``: a folder of samples imported as a project dataset named ``name``, read as ``kind``, its
    preprocessing suggested by ``model`` (a path as the user gave it) or set by ``preset``, ``split`` of it kept
    for calibration (drawn with ``seed``); raw text is tokenized by ``tokenizer`` to ``seq_len`` tokens, audio
    cut or padded to ``length`` samples; ``recipe_file`` (a recipe file or preset) and ``recipe`` (the recipe
    flags, field by field) set the preprocessing over the suggestion or preset. The source folder and the
    project are the call's."""

    name: str | None = None
    kind: str = "auto"
    model: str | None = None
    preset: str | None = None
    split: float = 0.5
    seed: int = 0
    tokenizer: str | None = None
    seq_len: int | None = None
    length: int | None = None
    recipe_file: str | None = None                     # --recipe FILE.json|PRESET
    recipe: RecipeRequest = RecipeRequest()            # the recipe flags, field by field, on top of it

    def __post_init__(self) -> None:
        put = object.__setattr__
        for name in ("name", "model", "preset", "tokenizer", "recipe_file"):
            put(self, name, _text(getattr(self, name)))
        put(self, "recipe", _recipe(self.recipe))
        put(self, "kind", str(self.kind))
        put(self, "split", float(self.split))
        put(self, "seed", int(self.seed))
        for name in ("seq_len", "length"):
            put(self, name, _optional_int(getattr(self, name), name.replace("_", " ")))
        if not (math.isfinite(self.split) and 0.0 <= self.split <= 1.0):
            raise OutOfRange(f"the calibration fraction (split) must be from 0 to 1, got {number_text(self.split)}")
        bounded_int(self.seed, "seed", 0, 2**32 - 1)

    @property
    def options(self) -> dict[str, int]:
        """The reader options (``seq_len`` for text, ``length`` for audio) that are set."""
        return {k: v for k, v in (("seq_len", self.seq_len), ("length", self.length)) if v}

    def command(self, source: str, *, project: str | None = None) -> str:
        """``onnx-studio data add SOURCE --project P ...``: the command line that builds this request."""
        return cli_hints.cli_command("data add", [source], [
            ("--project", project), ("--name", self.name), ("--kind", self.kind if self.kind != "auto" else None),
            ("--model", self.model), ("--preset", self.preset),
            ("--split", self.split if self.split != 0.5 else None), ("--seed", self.seed or None),
            ("--tokenizer", self.tokenizer), ("--seq-len", self.seq_len), ("--length", self.length),
            ("--recipe", self.recipe_file), *self.recipe.flags()])


EVAL_PARTS = ("evaluation", "calibration", "all")      # ``data eval --part``


@dataclass(frozen=True)
class DatasetEvalRequest(JsonRequest):
    """``data eval``: ``candidate`` (None: the reference ``model`` itself) on ``engine`` judged against the
    reference's golden outputs on a dataset's ``part`` samples (the first ``limit``), with ``tasks`` ({output:
    kind}, as given) and a ``goal``; ``recipe_file``/``recipe`` preprocess the samples for this run (not saved).
    Models are paths as the user gave them; the dataset, the project (and the task choices it stores) are the
    call's."""

    model: str = ""
    engine: str = "onnxruntime"
    goal: str | None = None
    tasks: tuple[tuple[str, str], ...] = ()
    candidate: str | None = None
    part: str = "evaluation"
    limit: int | None = None
    recipe_file: str | None = None                     # --recipe FILE.json|PRESET, for this run (not saved)
    recipe: RecipeRequest = RecipeRequest()            # the recipe flags for this run, on top of it

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "model", str(self.model))
        put(self, "engine", str(self.engine))
        put(self, "goal", _text(self.goal))
        put(self, "tasks", _pairs(self.tasks, str))
        put(self, "candidate", _text(self.candidate))
        if self.part not in EVAL_PARTS:
            raise StudioError(f"part must be one of {', '.join(EVAL_PARTS)}", code=ErrorCode.BAD_OPTION)
        put(self, "limit", _optional_int(self.limit, "limit"))
        put(self, "recipe_file", _text(self.recipe_file))
        put(self, "recipe", _recipe(self.recipe))

    def command(self, dataset: str, *, project: str | None = None) -> str:
        """``onnx-studio data eval DATASET --project P --model M ...``: the command line that builds this request."""
        return cli_hints.cli_command("data eval", [dataset], [
            ("--project", project), ("--model", self.model), ("--candidate", self.candidate),
            ("--engine", self.engine),
            ("--goal", self.goal), ("--task", dict(self.tasks)),
            ("--part", self.part if self.part != "evaluation" else None), ("--limit", self.limit),
            ("--recipe", self.recipe_file), *self.recipe.flags()])


REQUESTS = (PrecisionRequest, OptimizeRequest, CheckRequest, ProfileRequest, ExportRequest, BatchRequest,
            MemoryRequest, EditRequest, GenerationRequest)   # every request kind (tests walk it)

# The requests of the operations that run on this machine only (no batch stage, no remote target): the pages
# build them and show their ``command()``; tests/ui/test_hint_requests.py reads each command back.
HINT_REQUESTS = (CompareRequest, PluginRequest, GraphRequest, InspectRequest, DatasetAddRequest,
                 DatasetEvalRequest, RecipeRequest)
