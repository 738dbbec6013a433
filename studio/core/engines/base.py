"""Shared shapes of the engine adapters (DESIGN.md §4).

An adapter's ``run`` never imports its engine in the calling process: it sends
a job (:mod:`studio.core.jobs`) to a sandbox worker (:mod:`studio.core.sandbox`)
and rebuilds a :class:`RunOutput` from the data and arrays that come back.

Output values (``RunOutput.outputs``), keyed by ONNX output name in model order:

* tensor            -> ``np.ndarray`` (string tensors as fixed-width ``<U`` arrays)
* sequence          -> ``list`` of values (ORT ``seq(tensor)`` -> ``list[np.ndarray]``)
* map               -> ``dict`` of key -> value (ORT ``map(int64|string, T)``)
* optional, absent  -> ``None``
* scalar (map items)-> Python ``int``/``float``/``str``/``bool``

Across the process boundary each value is encoded as JSON
(``{"t": "tensor", "a": "<array key>"}``, ``{"t": "seq", "items": [...]}``,
``{"t": "map", "items": [[key, value], ...]}``, ``{"t": "scalar", "v": 1.5}``,
``{"t": "none"}``) and the arrays travel as ``.npy`` files under generated keys,
so model-supplied names are never file names and nothing is ever unpickled.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from studio.core.engines.table import engine_row
from studio.core.error_codes import ErrorCode
from studio.core.errors import EngineUnavailable, StudioError
from studio.core.paths import check_regular_file
from studio.core.sandbox import Limits

__all__ = [
    "Availability",
    "EngineAdapter",
    "OutputValue",
    "RunOptions",
    "RunOutput",
    "check_model_file",
    "decode_value",
    "elapsed_ms",
    "encode_value",
    "rekey_arrays",
    "require_available",
    "require_feeds",
    "require_outputs",
    "unpack_feeds",
]

OutputValue = Any  # np.ndarray | list[OutputValue] | dict[Any, OutputValue] | int | float | str | bool | None

_GRAPH_OPT_LEVELS = ("disable", "basic", "extended", "all")
_OV_PRECISIONS = ("f32", "bf16", "f16", "default", "int8")   # int8: MNN weight quantization


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run here; ``reason`` says why not, one line."""

    ok: bool
    version: str | None
    reason: str | None
    devices: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok


@dataclass(frozen=True)
class RunOptions:
    """Options of one inference run. Each engine reads the fields it knows.

    ONNX Runtime: ``providers``, ``graph_optimization_level`` ("disable" for the
    verification reference, "all" by default), ``intra_op_threads``,
    ``inter_op_threads``, ``extra_session_options`` (session config entries),
    ``use_extensions`` (register onnxruntime-extensions' custom ops),
    ``custom_op_libraries`` (paths of shared libraries), ``save_optimized_model``
    (a file *name* written inside the job's ``out_dir``), ``enable_profiling``
    (ORT profile JSON inside ``out_dir``).

    OpenVINO: ``device`` ("CPU"), ``precision`` ("f32" pinned through
    ``INFERENCE_PRECISION_HINT`` by default; "bf16", "f16", or "default" for the
    plugin's choice; the effective precision is reported in ``details``),
    ``performance_hint`` ("LATENCY", "THROUGHPUT"), ``intra_op_threads``
    (``INFERENCE_NUM_THREADS``), ``dynamic_quantization`` (the CPU plugin quantizes the activations of every
    MatMul whose weights are stored compressed, int8 -> Convert -> Multiply: None leaves it off with f32 pinned,
    so a run gives the model's own numbers (corpus minilm_l6_v2_int8: max abs 0.052 from ORT with it, 2.9e-6
    without), and to the plugin otherwise; True asks for it: NNCF weight-compressed variants, timed as OpenVINO
    runs them by default).

    TensorRT: ``precision`` ("f32" or "f16"/"bf16" builder flags),
    ``workspace_bytes``, ``trt_profile`` (input name -> (min, opt, max) shapes;
    default: exactly the feed shapes).

    MNN / LiteRT: ``precision`` of the conversion ("f32"; "f16" weights; "int8": MNN weight-only,
    LiteRT full integer), ``intra_op_threads``, ``source_model`` (the ONNX file a ``.mnn`` /
    ``.tflite`` was converted from).

    All: ``output_names`` (a subset, in the order wanted).
    """

    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    graph_optimization_level: str = "all"
    intra_op_threads: int | None = None
    inter_op_threads: int | None = None
    output_names: tuple[str, ...] | None = None
    extra_session_options: tuple[tuple[str, str], ...] = ()
    use_extensions: bool = False
    custom_op_libraries: tuple[str, ...] = ()
    save_optimized_model: str | None = None
    enable_profiling: bool = False
    device: str = "CPU"
    precision: str = "f32"
    performance_hint: str | None = None
    workspace_bytes: int | None = None
    trt_profile: tuple[tuple[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]], ...] = ()
    openvino_ir: bool = False       # the file is an OpenVINO IR the studio wrote (NNCF, export), not an upload
    dynamic_quantization: bool | None = None     # OpenVINO CPU: activations of compressed-weight MatMuls
    # a converted artifact (.mnn, .tflite) is run bound to the ONNX model it came from: names, layout, types
    source_model: str | None = None

    def __post_init__(self) -> None:
        # Accept friendlier inputs (lists, dicts) and store hashable tuples.
        def setf(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if isinstance(self.providers, str):
            setf("providers", (self.providers,))
        else:
            setf("providers", tuple(self.providers))
        if self.output_names is not None:
            setf("output_names", tuple(self.output_names))
        extra = self.extra_session_options
        if isinstance(extra, Mapping):
            extra = tuple(extra.items())
        setf("extra_session_options", tuple((str(k), str(v)) for k, v in extra))
        setf("custom_op_libraries", tuple(str(p) for p in self.custom_op_libraries))
        profile = self.trt_profile
        if isinstance(profile, Mapping):
            profile = tuple(profile.items())
        setf("trt_profile", tuple((str(name), tuple(tuple(int(d) for d in s) for s in shapes))
                                  for name, shapes in profile))
        if self.graph_optimization_level not in _GRAPH_OPT_LEVELS:
            raise StudioError(f"graph_optimization_level must be one of {', '.join(_GRAPH_OPT_LEVELS)}, "
                              f"got {self.graph_optimization_level!r}", code=ErrorCode.BAD_OPTION)
        if self.precision not in _OV_PRECISIONS:
            raise StudioError(f"precision must be one of {', '.join(_OV_PRECISIONS)}, got {self.precision!r}",
                              code=ErrorCode.BAD_OPTION)
        for name in ("intra_op_threads", "inter_op_threads", "workspace_bytes"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise StudioError(f"{name} must be a positive integer, got {value!r}", code=ErrorCode.BAD_OPTION)
        if self.save_optimized_model is not None:
            name = self.save_optimized_model
            if not name or "/" in name or "\\" in name or name in (".", "..") or "\x00" in name:
                raise StudioError("save_optimized_model must be a plain file name (it is written in the "
                                  "output folder)", code=ErrorCode.BAD_OPTION)

    @classmethod
    def reference(cls) -> RunOptions:
        """The verification reference: ORT CPU with graph optimizations off."""
        return cls(graph_optimization_level="disable")

    def needs_fresh_worker(self) -> bool:
        """Custom-op registration must not leak into a shared warm worker."""
        return bool(self.use_extensions or self.custom_op_libraries)

    def to_args(self) -> dict[str, Any]:
        return {
            "providers": list(self.providers),
            "graph_optimization_level": self.graph_optimization_level,
            "intra_op_threads": self.intra_op_threads,
            "inter_op_threads": self.inter_op_threads,
            "output_names": list(self.output_names) if self.output_names is not None else None,
            "extra_session_options": dict(self.extra_session_options),
            "use_extensions": self.use_extensions,
            "custom_op_libraries": list(self.custom_op_libraries),
            "save_optimized_model": self.save_optimized_model,
            "enable_profiling": self.enable_profiling,
            "device": self.device,
            "precision": self.precision,
            "performance_hint": self.performance_hint,
            "workspace_bytes": self.workspace_bytes,
            "openvino_ir": self.openvino_ir,
            "dynamic_quantization": self.dynamic_quantization,
            "onnx_path": self.source_model,
            "trt_profile": {name: [list(s) for s in shapes] for name, shapes in self.trt_profile},
        }


@dataclass(frozen=True)
class RunOutput:
    """Outputs of one run, in model output order (or ``output_names`` order)."""

    outputs: dict[str, OutputValue]
    engine: str
    engine_version: str | None
    details: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class EngineAdapter(Protocol):
    name: str      # a canonical name of studio.core.engines.table ("onnxruntime", "mnn", ...)
    label: str     # "ONNX Runtime"

    def available(self) -> Availability: ...

    def run(self, model_path: Path, feeds: Mapping[str, np.ndarray], *, options: RunOptions | None = None,
            limits: Limits | None = None, pool_key: str = "default", out_dir: Path | None = None,
            on_tick: Callable[[float], None] | None = None) -> RunOutput: ...


# ---------------------------------------------------------------------------- helpers

def require_available(adapter: EngineAdapter) -> Availability:
    availability = adapter.available()
    if not availability.ok:
        raise EngineUnavailable(availability.reason or f"{adapter.label} is not available")
    return availability


def check_model_file(model_path: Path | str) -> Path:
    """The model path the worker will open: an existing regular file, absolute."""
    path = Path(model_path)
    check_regular_file(path, max_bytes=None, label="model")
    return path.resolve()


def _feed_array(name: str, value: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.hasobject:
        try:  # string tensors: fixed-width unicode crosses the process boundary safely
            array = array.astype(str)
        except (TypeError, ValueError):
            raise StudioError(f"feed {name[:80]!r} is an object array that is not strings",
                              code=ErrorCode.BAD_FEEDS) from None
    return array


def is_sequence_feed(value: Any) -> bool:
    """A feed for a ``seq(tensor)`` input: a list/tuple of arrays (a nested list of numbers is a tensor)."""
    return isinstance(value, (list, tuple)) and all(isinstance(v, np.ndarray) for v in value) and (
        len(value) > 0 or isinstance(value, list))


def check_feeds(feeds: Mapping[str, Any] | None) -> dict[str, np.ndarray]:
    """Feeds as arrays that can cross the process boundary; a sequence feed becomes
    ``name\x00<i>`` items and a ``name\x00n`` length (:func:`unpack_feeds` rebuilds it)."""
    out: dict[str, np.ndarray] = {}
    for name, value in (feeds or {}).items():
        if not isinstance(name, str):
            raise StudioError(f"feed names must be strings, got {type(name).__name__}", code=ErrorCode.BAD_FEEDS)
        if is_sequence_feed(value):
            out[f"{name}\x00n"] = np.asarray(len(value), dtype=np.int64)
            for i, item in enumerate(value):
                out[f"{name}\x00{i}"] = _feed_array(name, item)
            continue
        out[name] = _feed_array(name, value)
    return out


def unpack_feeds(arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Worker side of :func:`check_feeds`: sequence feeds as lists again."""
    out: dict[str, Any] = {}
    items: dict[str, dict[int, np.ndarray]] = {}
    for key, value in arrays.items():
        name, sep, part = key.rpartition("\x00")
        if not sep or not (part == "n" or part.isdigit()):
            out[key] = value
        elif part == "n":
            items.setdefault(name, {})
        else:
            items.setdefault(name, {})[int(part)] = value
    for name, parts in items.items():
        out[name] = [parts[i] for i in sorted(parts)]
    return out


def pack_feed_sets(feed_sets: list[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """Several feed sets as one array dict for a worker job (``"<set>\x00<input>"`` keys; sequence
    inputs travel item by item, see :func:`check_feeds`)."""
    return {f"{i}\x00{k}": v for i, feeds in enumerate(feed_sets) for k, v in check_feeds(feeds).items()}


def unpack_feed_sets(arrays: Mapping[str, np.ndarray], count: int) -> list[dict[str, Any]]:
    """Worker side of :func:`pack_feed_sets`: ``count`` feed sets again."""
    sets: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for key, value in arrays.items():
        i, _, name = key.partition("\x00")
        sets[int(i)][name] = value
    return [unpack_feeds(s) for s in sets]


def package_version(*dist_names: str) -> str | None:
    from importlib import metadata

    for dist in dist_names:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def module_present(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# ---------------------------------------------------------------------------- value transport

def _plain_array(value: np.ndarray) -> np.ndarray:
    if value.dtype.hasobject:
        flat = value.ravel().tolist()
        if all(isinstance(x, str) for x in flat):
            return np.array(flat, dtype=str).reshape(value.shape) if flat else value.astype(str)
        if all(isinstance(x, bytes) for x in flat):
            return np.array(flat, dtype=bytes).reshape(value.shape) if flat else value.astype(bytes)
        raise TypeError("an object array that is not strings cannot leave the worker")
    return value


def encode_value(value: Any, key: str, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Worker side: turn an engine output into JSON + arrays (see module docs)."""
    if isinstance(value, np.ndarray):
        arrays[key] = _plain_array(value)
        return {"t": "tensor", "a": key}
    if value is None:
        return {"t": "none"}
    if isinstance(value, (list, tuple)):
        return {"t": "seq", "items": [encode_value(v, f"{key}.{i}", arrays) for i, v in enumerate(value)]}
    if isinstance(value, Mapping):
        items = []
        for i, (k, v) in enumerate(value.items()):
            if isinstance(k, np.generic):
                k = k.item()
            if not isinstance(k, (int, str)):
                raise TypeError(f"map keys must be int or str, got {type(k).__name__}")
            items.append([k, encode_value(v, f"{key}.{i}", arrays)])
        return {"t": "map", "items": items}
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, str)):
        return {"t": "scalar", "v": value}
    raise TypeError(f"cannot return an output of type {type(value).__name__}")


def decode_value(encoded: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> Any:
    """Parent side: rebuild what :func:`encode_value` encoded."""
    kind = encoded.get("t")
    if kind == "tensor":
        return arrays[encoded["a"]]
    if kind == "none":
        return None
    if kind == "seq":
        return [decode_value(v, arrays) for v in encoded["items"]]
    if kind == "map":
        return {k: decode_value(v, arrays) for k, v in encoded["items"]}
    if kind == "scalar":
        return encoded["v"]
    raise StudioError(f"unknown encoded output kind {kind!r}")


def decode_outputs(data: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> dict[str, Any]:
    return {name: decode_value(enc, arrays) for name, enc in data["outputs"]}


def decode_output_sets(sets: list[Mapping[str, Any]], arrays: Mapping[str, np.ndarray]
                       ) -> tuple[tuple[dict[str, Any] | None, ...], tuple[str | None, ...]]:
    """Parent side of a job that ran several feed sets: (outputs or None, error or None) per set."""
    outs: list[dict[str, Any] | None] = []
    errs: list[str | None] = []
    for s in sets:
        if "error" in s:
            outs.append(None)
            errs.append(s["error"])
        else:
            outs.append(decode_outputs(s, arrays))
            errs.append(None)
    return tuple(outs), tuple(errs)


def encode_outputs(names: list[str], values: list[Any]) -> tuple[list[list[Any]], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    encoded = [[name, encode_value(value, f"o{i}", arrays)] for i, (name, value) in enumerate(zip(names, values))]
    return encoded, arrays


def rekey_arrays(encoded: dict, prefix: str, src: dict, dst: dict) -> None:
    """Move an encoded value's arrays from ``src`` to ``dst`` under ``prefix``, so the outputs
    of several feed sets can travel back in one job result without their names colliding."""
    if encoded.get("t") == "tensor":
        new = prefix + encoded["a"]
        dst[new] = src[encoded["a"]]
        encoded["a"] = new
    for item in encoded.get("items", []):
        rekey_arrays(item[1] if isinstance(item, list) else item, prefix, src, dst)


def cpu_count() -> int:
    """CPUs this process may run on (its affinity mask: a container's or ``taskset``'s share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


CONVERTED_THREADS_CAP = 4   # MNN's, ncnn's and LiteRT's own default thread count


def default_cpu_threads() -> int:
    """The thread count a converted CPU engine (MNN, ncnn, LiteRT) uses when none was asked for: one
    per usable CPU, at most 4 -- ONNX Runtime's "one per core", capped at those engines' own default.

    Why not a fixed 4: their thread pools spin between ops, so 4 threads on a 2-core machine fought
    each other and the timed thread; the profile then reported MNN at 4 threads (0.31 ms on
    mobilenet_like) where a deployment tuned to the machine's 2 cores runs it in 0.19 ms."""
    return max(1, min(CONVERTED_THREADS_CAP, cpu_count()))


# ---------------------------------------------------------------------------- what every runner shares
# (here, below the runner factory studio.core.engines.sessions, so an engine's runner module never imports
# the factory that imports it by name)

def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started`` (a ``time.perf_counter()`` reading)."""
    return (time.perf_counter() - started) * 1000


def require_feeds(input_names: Iterable[str], feeds: Mapping[str, Any]) -> None:
    missing = [n for n in input_names if n not in feeds]
    if missing:
        raise KeyError(f"missing feed(s) {', '.join(map(repr, missing[:5]))}")


def require_outputs(wanted: Iterable[str], known: Iterable[str]) -> None:
    known = list(known)
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise KeyError(f"unknown output name(s) {', '.join(map(repr, unknown[:5]))}; the model's outputs are "
                       f"{', '.join(map(repr, known[:10]))}")


# ---------------------------------------------------------------------------- shared adapter body

class WorkerEngine:
    """What every adapter shares: cached availability, one job per run whose result
    becomes a :class:`RunOutput`, and a worker-side probe. An adapter names its row of
    :mod:`studio.core.engines.table` in its class line, ``class MnnEngine(WorkerEngine,
    engine="mnn")``, and reads who it is from there: label, run job (and probe job), the
    Python module whose presence is read from package metadata, what to install when it
    is missing, its worker pool; it implements ``_probe_installed()`` (version, devices,
    other requirements); ``_prepare`` may adjust the options/limits/worker freshness of a
    run."""

    name: str = ""
    label: str = ""
    run_job_name: str = ""
    info_job_name: str = ""
    stage: str = ""          # the user-facing stage name of a run (the label)
    pool_suffix: str = ""    # engines with heavy imports (TensorFlow) keep warm workers of their own
    module: str = ""
    install: str = ""

    def __init_subclass__(cls, *, engine: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if engine:
            row = engine_row(engine)
            if row is None or row.name != engine:
                raise ValueError(f"no row {engine!r} in studio.core.engines.table")
            cls.name, cls.label, cls.stage, cls.module, cls.install = row.name, row.label, row.label, row.module, \
                row.install
            cls.run_job_name, cls.info_job_name, cls.pool_suffix = row.run_job, row.info_job, row.pool

    def __init__(self) -> None:
        self._availability: Availability | None = None

    def _probe(self) -> Availability:
        if self.module and not module_present(self.module):
            return Availability(False, None, f"{self.label} is not installed ({self.install})")
        return self._probe_installed()

    def _probe_installed(self) -> Availability:  # pragma: no cover - abstract
        raise NotImplementedError

    def available(self, *, refresh: bool = False) -> Availability:
        if self._availability is None or refresh:
            self._availability = self._probe()
        return self._availability

    def _prepare(self, options: RunOptions, limits: Limits | None,
                 out_dir: Path | None) -> tuple[Limits | None, bool]:
        """(limits, fresh worker?) for one run; raise StudioError for bad combinations. A shared warm
        worker by default (ONNX Runtime asks a fresh one when a run registers custom ops)."""
        return limits, False

    def probe(self, *, limits: Limits | None = None, pool_key: str = "default") -> dict[str, Any]:
        """Version and devices (ORT: execution providers), asked of a worker."""
        from studio.core.sandbox import run_job  # cycle: studio.core.sandbox imports this module

        require_available(self)
        if not self.info_job_name:
            raise StudioError(f"{self.label} has no probe job", code=ErrorCode.BAD_OPTION)
        return run_job(self.info_job_name, {}, stage=f"{self.label} probe", limits=limits,
                       pool_key=pool_key + self.pool_suffix).data

    def run(self, model_path: Path, feeds: Mapping[str, np.ndarray], *, options: RunOptions | None = None,
            limits: Limits | None = None, pool_key: str = "default", out_dir: Path | None = None,
            on_tick: Callable[[float], None] | None = None) -> RunOutput:
        from studio.core.sandbox import run_job  # cycle: studio.core.sandbox imports this module

        require_available(self)
        options = options or RunOptions()
        path = check_model_file(model_path)
        limits, fresh = self._prepare(options, limits, out_dir)
        args = {"engine": self.name, "model_path": str(path), **options.to_args()}
        result = run_job(self.run_job_name, args, check_feeds(feeds), stage=self.stage, limits=limits,
                         out_dir=out_dir, fresh=fresh, pool_key=pool_key + self.pool_suffix, on_tick=on_tick)
        details = dict(result.data.get("details", {}))
        details.update(worker_seconds=round(result.seconds, 4), worker_reused=result.worker_reused,
                       peak_rss_bytes=result.peak_rss_bytes, worker_pid=result.worker_pid)
        return RunOutput(outputs=decode_outputs(result.data, result.arrays), engine=self.name,
                         engine_version=result.data.get("version"), details=details)
