"""ONNX Runtime target: a pre-optimized model, the ``.ort`` format, and the
session options they were verified with.

ONNX Runtime saves its own optimized graph (``SessionOptions.optimized_model_filepath``;
``session.save_model_format=ORT`` for the ``.ort`` format), in a sandbox worker,
into the target folder. Levels ``basic`` and ``extended`` give a portable model
(standard ops plus ORT's CPU contrib fusions); ``all`` adds NCHWc layout ops
tuned to this CPU, so the artifact is labelled hardware-specific.

Why it starts faster (measured on a ResNet-50, ``make bench``): the graph is
already optimized, so the ``fast-start`` profile loads it with optimizations
off; and the weights sit in ``model.onnx.data`` at 64 KiB-aligned offsets (ORT's
own external-initializer writer), which ORT memory-maps instead of copying out
of a protobuf. Weights over 2 GiB must be external anyway (protobuf limit).
Loading with optimizations off also skips the NCHWc layout that ORT_ENABLE_ALL
adds for the local CPU, so the ``fast-inference`` profile (same files, ALL at
load) is shipped too, for servers where latency matters more than start-up.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core import jsonsafe
from studio.core.engines.sessions import open_runner
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.model import model_weight_bytes
from studio.core.paths import atomic_write_text
from studio.core.sandbox import run_job
from studio.core.save import EXTERNAL_DATA_THRESHOLD
from studio.export.artifact_run import run_artifact_file
from studio.export.context import ExportContext
from studio.export.files import has_external_tensors
from studio.export.reference import verify_outputs
from studio.export.results import ERROR, Artifact, TargetResult, Verification, target_result
from studio.verification.verifier import full_check_in_worker
from studio.export.customops import ship

MODEL_NAME = "model.onnx"
ORT_NAME = "model.ort"
OPTIONS_NAME = "session_options.json"
# Weights at least this big go to model.onnx.data (memory-mapped at load); smaller models stay one file.
EXTERNAL_MIN_BYTES = 1 * 2**20
EXTERNAL_MIN_TENSOR_BYTES = 1024
# The ORT format is a flatbuffer: it cannot hold more than 2 GiB.
ORT_FORMAT_LIMIT = EXTERNAL_DATA_THRESHOLD
SESSION_RUNS = 3                       # sessions created per artifact for the timing (median)

LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
          "all": "ORT_ENABLE_ALL"}
PROVIDERS = ("CPUExecutionProvider",)


# Load profiles of the ONNX Runtime artifacts (each verified, and timed, by the export):
#   fast-start      the pre-optimized graph as is: no optimization at load (cold starts, CLIs, serverless)
#   fast-inference  ORT_ENABLE_ALL at load adds the layout optimizations (NCHWc) of the CPU it runs on,
#                   on top of the portable graph: slower to load, faster per inference (long-running servers)
#   ort-format      the .ort file, no optimization at load
# Measured on a ResNet-50 (make bench): session 186 ms (original, ORT defaults) vs 7 ms fast-start / 58 ms
# fast-inference; latency 44 ms vs 51 ms fast-start / 39 ms fast-inference.
PROFILES: dict[str, tuple[str, str, dict[str, str]]] = {
    "fast-start": (MODEL_NAME, "disable", {}),
    "fast-inference": (MODEL_NAME, "all", {}),
    "ort-format": (ORT_NAME, "disable", {"session.load_model_format": "ORT"}),
}
DEFAULT_PROFILE = "fast-start"


def session_options_doc(level: str, external: bool, profiles: list[str], portable: bool,
                        measured: dict[str, dict] | None = None) -> dict[str, Any]:
    """The ``session_options.json`` a deployment loads the artifacts with (and that they were verified with)."""
    measured = measured or {}
    sessions = {}
    for name in profiles:
        file, load_level, entries = PROFILES[name]
        sessions[name] = {"file": file, "graph_optimization_level": LEVELS[load_level], "providers": list(PROVIDERS),
                          "session_config_entries": dict(entries), "verified": True,
                          "measured_here": measured.get(name, {})}
    return {
        "format": "onnx-studio-ort-session/2",
        "optimized_at": LEVELS[level],
        "portable": portable,
        "external_data": "model.onnx.data" if external else None,
        "default": DEFAULT_PROFILE,
        "sessions": sessions,
        "intra_op_num_threads": 0,
        "note": ("Pre-optimized at " + LEVELS[level] + " for the CPU execution provider. fast-start loads it with "
                 "graph optimizations off (the graph is already optimized; re-optimizing only costs session time); "
                 "fast-inference lets ONNX Runtime add the layout optimizations of the CPU it runs on at load "
                 "(slower to load, faster per inference)." + ("" if portable else " Hardware-specific (NCHWc "
                                                              "layout for the CPU it was optimized on): use it on "
                                                              "that CPU only.")),
        "usage": ("cfg = json.load(open('session_options.json'))['sessions']['fast-start']; so = "
                  "onnxruntime.SessionOptions(); so.graph_optimization_level = getattr(onnxruntime."
                  "GraphOptimizationLevel, cfg['graph_optimization_level']); [so.add_session_config_entry(k, v) for "
                  "k, v in cfg['session_config_entries'].items()]; onnxruntime.InferenceSession(cfg['file'], so, "
                  "providers=cfg['providers'])"),
    }


def external_decision(size: int, *, requested: bool | None, source_external: bool,
                      ort_format: bool = True) -> tuple[bool, bool, list[str]]:
    """(weights external?, write .ort?, notes) for a model of ``size`` bytes (model + data files).

    External when asked, when the weights are big enough to gain from memory-mapping
    (>= 1 MiB), when the source keeps them external (ORT would otherwise point back at
    the source's data file), and always above the 2 GiB protobuf limit (R26)."""
    notes: list[str] = []
    external = requested if requested is not None else (size >= EXTERNAL_MIN_BYTES or source_external)
    if size > EXTERNAL_DATA_THRESHOLD:
        external = True
        notes.append(f"weights are {size / 2**30:.2f} GiB: over the 2 GiB protobuf limit, so they are stored in "
                     "model.onnx.data (external data) next to model.onnx; ship both files")
    elif source_external and not external:
        external = True
        notes.append("the model's weights are external: the optimized model keeps them external too")
    elif external:
        notes.append(f"weights ({size / 2**20:.1f} MiB) are in model.onnx.data at aligned offsets: ONNX Runtime "
                     "memory-maps them at session creation instead of copying them")
    if ort_format and size > ORT_FORMAT_LIMIT:
        ort_format = False
        notes.append("no .ort file: the ORT format (a flatbuffer) cannot hold models over 2 GiB")
    return external, ort_format, notes


def run_artifact(ctx: ExportContext, path: Path, *, level: str, config: dict[str, str] | None = None,
                 runs: int = 1, session_runs: int = 1, stage: str) -> tuple[dict | None, dict, str | None]:
    """Load ``path`` in ORT in a worker (the engine's runner, :mod:`studio.export.artifact_run`), run the
    reference feeds, time it in the one latency loop. Returns (outputs or None, timing, error message or None)."""
    done = run_artifact_file(ctx, "onnxruntime", path, ort_runner_args(ctx, level, config), runs=runs,
                             session_runs=session_runs, stage=stage)
    return done.outputs, done.timing, done.error


def ort_runner_args(ctx: ExportContext, level: str, config: dict[str, str] | None = None) -> dict[str, Any]:
    """The ORT runner's arguments for a load profile: its optimization level and session config entries,
    the CPU provider, the custom-op libraries (what ``session_options.json`` tells a deployment)."""
    return {"graph_optimization_level": level, "providers": list(PROVIDERS), "extra_session_options": dict(config or {}),
            "custom_op_libraries": custom_op_libraries(ctx), "log_severity_level": 3}


def export_onnxruntime(ctx: ExportContext) -> TargetResult:
    started = time.perf_counter()
    opts = ctx.options
    folder = ctx.bundle / "onnxruntime"
    folder.mkdir(parents=True, exist_ok=True)
    facts = ctx.deploy_facts
    notes: list[str] = []
    portable = opts.ort_portable and not facts.hardware_specific
    if facts.hardware_specific:
        notes.append(f"hardware-specific input: {facts.hardware_specific_reason}; the artifacts run only on a "
                     "CPU like the one it was optimized on")
    if opts.ort_level == "all":
        notes.append("level 'all' adds NCHWc layout ops for this CPU's vector width: hardware-specific, not "
                     "portable (use 'extended' for a portable model)")
    size = model_weight_bytes(ctx.deploy)
    source_external = has_external_tensors(onnx.load_model(str(ctx.deploy), load_external_data=False))
    external, ort_format, size_notes = external_decision(size, requested=opts.external_data,
                                                         source_external=source_external, ort_format=opts.ort_format)
    notes.extend(size_notes)

    level = opts.ort_level
    model_file = folder / MODEL_NAME
    while True:
        ctx.progress("onnxruntime", f"optimizing at level '{level}'")
        try:
            run_job("export.ort_save", {"model_path": str(ctx.deploy), "level": level, "onnx_name": MODEL_NAME,
                                        "external": external, "min_external_bytes": EXTERNAL_MIN_TENSOR_BYTES,
                                        "custom_ops": custom_op_libraries(ctx)},
                    stage="ONNX Runtime optimization", out_dir=folder, pool_key=ctx.pool_key, on_tick=ctx.on_tick,
                    fresh=ctx.fresh)
        except StudioError as exc:
            return TargetResult("onnxruntime", ERROR, f"ONNX Runtime could not optimize the model: {exc}",
                                notes=tuple(notes), seconds=time.perf_counter() - started)
        checker = full_check_in_worker(model_file, pool_key=ctx.pool_key) or "passed"
        if checker == "passed" or level != "extended":     # 'all' is hardware-specific by choice: reported as is
            break
        # ORT's fusions can write ops that ONNX does not define at the model's opset (LayerNormalization at
        # opset 12): ORT loads them, nothing else does. The portable artifact is the basic-level one.
        notes.append(f"level '{level}' wrote a graph onnx.checker rejects ({checker[:160]}): valid for ONNX "
                     "Runtime only; the artifact is optimized at level 'basic' instead")
        level = "basic"
    if ort_format:
        # Optional extra in its own job: the flatbuffer is built in memory (about 2-3x the weights), so a
        # large model can exceed the worker's limit; the ONNX artifact does not depend on it.
        ctx.progress("onnxruntime", "writing the .ort format")
        try:
            run_job("export.ort_save", {"model_path": str(ctx.deploy), "level": level, "ort_name": ORT_NAME,
                                        "custom_ops": custom_op_libraries(ctx)},
                    stage="ONNX Runtime .ort conversion", out_dir=folder, pool_key=ctx.pool_key,
                    on_tick=ctx.on_tick, fresh=ctx.fresh)
        except StudioError as exc:
            ort_format = False
            (folder / ORT_NAME).unlink(missing_ok=True)  # scratch: inside the bundle's staging folder
            optional = [vi.name for vi in (*ctx.source.proto.graph.input, *ctx.source.proto.graph.output,
                                           *ctx.source.proto.graph.value_info)
                        if vi.type.WhichOneof("value") == "optional_type"]
            notes.append(f"no .ort file: the ORT format has no optional types ('{optional[0][:60]}' is one); "
                         "the .onnx artifact serves" if optional and "type [9]" in str(exc)
                         else f"no .ort file: {exc}")
    artifacts: list[Artifact] = []
    bench: dict[str, Any] = {}
    data_file = folder / f"{MODEL_NAME}.data"
    companions = (data_file,) if data_file.exists() else ()
    precision = ctx.deploy_precision
    engine = "onnxruntime"
    verified: dict[str, Any] = {}
    profiles = [p for p in PROFILES if p != "ort-format" or (ort_format and (folder / ORT_NAME).exists())]
    for name in profiles:
        file, load_level, entries = PROFILES[name]
        ctx.progress("onnxruntime", f"verifying {file} ({name})")
        outputs, timing, error = run_artifact(ctx, folder / file, level=load_level, config=entries,
                                              runs=opts.bench_runs, session_runs=SESSION_RUNS,
                                              stage=f"ONNX Runtime (verify {file}, {name})")
        engine = f"onnxruntime {timing.get('version', '')}".strip()
        verified[name] = verify_outputs(ctx.reference, outputs, ctx.criteria, engine=engine,
                                        checker=checker if file == MODEL_NAME else None,
                                        error=None if error is None else f"ONNX Runtime cannot run {file} "
                                                                         f"({name}): {error}")
        bench[name] = _bench(timing)
    v = _worst(verified["fast-start"], verified["fast-inference"])
    artifacts.append(ctx.artifact(model_file, "onnx", f"ONNX optimized by ONNX Runtime at level '{level}'"
                                  + ("" if portable else " (hardware-specific)"), companions=companions,
                                  precision=precision, portable=portable, verification=v,
                                  notes=("verified with both load profiles: fast-start and fast-inference",)))
    if "ort-format" in verified:
        artifacts.append(ctx.artifact(folder / ORT_NAME, "ort", "ORT format (flatbuffer) of the same optimized graph",
                                      precision=precision, portable=portable, verification=verified["ort-format"]))
    ctx.progress("onnxruntime", "timing the original for comparison")
    _, timing, error = run_artifact(ctx, ctx.source.path, level="all", runs=opts.bench_runs,
                                    session_runs=SESSION_RUNS, stage="ONNX Runtime (original, for timing)")
    if error is None:
        bench["original (ORT defaults)"] = _bench(timing)
        base = bench["original (ORT defaults)"].get("session_ms")
        mine = bench[DEFAULT_PROFILE].get("session_ms")
        if base and mine:
            bench["session_speedup"] = round(base / mine, 2)
    doc = session_options_doc(level, bool(companions), profiles, portable,
                              {name: figures for name, figures in bench.items() if name in PROFILES})
    if opts.ort_custom_ops:
        names, libs = ship(ctx, opts.ort_custom_ops, folder / "custom_ops", "ort-custom-ops",
                           "ONNX Runtime custom-op library (register_custom_ops_library before loading)")
        artifacts.extend(libs)
        doc["custom_ops_libraries"] = [f"custom_ops/{n}" for n in names]
        doc["usage"] += ("; custom ops: so.register_custom_ops_library(lib) for each of custom_ops_libraries, "
                         "before creating the session")
        notes.append(f"custom-op libraries registered in every session and shipped: {', '.join(names)}")
    atomic_write_text(folder / OPTIONS_NAME, jsonsafe.dumps(doc, indent=2))
    artifacts.append(ctx.artifact(folder / OPTIONS_NAME, "session-options",
                                  "load profiles the models were verified with (fast-start, fast-inference, "
                                  ".ort), CPU EP"))
    ctx.shared["onnxruntime"] = {"model": model_file, "portable": portable}
    return target_result("onnxruntime", artifacts, notes, bench, started)


def _worst(*verifications: Verification) -> Verification:
    """The first failed verification, else the first one."""
    return next((v for v in verifications if not v.ok), verifications[0])


def _bench(timing: dict) -> dict:
    return {k: timing.get(k) for k in ("session_ms", "first_inference_ms", "latency_ms_median", "runs")
            if timing.get(k) is not None}


# ============================================================================ jobs (worker side)

def custom_op_libraries(ctx: ExportContext) -> list[str]:
    """ONNX Runtime custom-op libraries the export registers in every session (``--ort-custom-ops``)."""
    return [str(Path(p).resolve()) for p in ctx.options.ort_custom_ops]


@job("export.ort_save")
def ort_save_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Let ONNX Runtime write its optimized graph (and the .ort format) into ``ctx.out_dir`` only: an ORT
    runner opened with ``save_optimized_model`` (the one runner protocol), closed at once."""
    source = str(args["model_path"])
    written, version = [], None
    base = {"graph_optimization_level": str(args["level"]), "providers": list(PROVIDERS), "log_severity_level": 3,
            "custom_op_libraries": list(args.get("custom_ops") or [])}
    if args.get("onnx_name"):
        name = Path(str(args["onnx_name"])).name
        config = {}
        if args.get("external"):
            config["session.optimized_model_external_initializers_file_name"] = f"{name}.data"
            config["session.optimized_model_external_initializers_min_size_in_bytes"] = str(
                int(args.get("min_external_bytes") or 1024))
        version = _save(source, {**base, "extra_session_options": config, "save_optimized_model": name}, ctx)
        written.append(name)
    if args.get("ort_name"):
        ctx.set_stage("ONNX Runtime .ort conversion")
        name = Path(str(args["ort_name"])).name
        version = _save(source, {**base, "extra_session_options": {"session.save_model_format": "ORT"},
                                 "save_optimized_model": name}, ctx)
        written.append(name)
    return JobOutput(data={"version": version, "written": written})


def _save(source: str, runner_args: dict[str, Any], ctx: JobContext) -> str | None:
    """Open (and so optimize and save) ``source`` once; ORT's version."""
    runner = open_runner("onnxruntime", source, runner_args, ctx)
    runner.close()
    return runner.details.get("engine_version")


__all__ = ["export_onnxruntime", "ort_runner_args", "ort_save_job", "run_artifact", "session_options_doc"]
