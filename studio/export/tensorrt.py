"""TensorRT target: a TensorRT-ready ONNX, a ``build_engine.py`` written against
TensorRT's Python API, the equivalent ``trtexec`` command, and -- where TensorRT
and an NVIDIA GPU are present -- the built engine (``model.plan``) verified
against the original.

NOT VERIFIED HERE: the development machine has neither TensorRT nor a GPU. What
is tested here: the TensorRT-ready ONNX (the ``tensorrt`` preset, verified pass
by pass on ONNX Runtime), the optimization profiles derived from the model's
dynamic dims and ``--shapes``, the precision flags (``--fp16``; INT8 only as
explicit quantization: a QDQ model built ``--stronglyTyped``), plugin loading,
and that the build script imports TensorRT lazily and says what it needs when
TensorRT is absent. Engine building and the plan's verification follow
TensorRT 10's documented API and are labelled "not verified here" until run
on a GPU machine.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

from studio.core import jsonsafe
from studio.core.engines.tensorrt import TensorRtEngine
from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.paths import atomic_write_text, safe_name
from studio.core.requests import OptimizeRequest
from studio.core.sandbox import default_limits, run_job
from studio.core.types import TensorInfo
from studio.export.context import ExportContext
from studio.export.files import copy_file
from studio.export.options import ShapeRange
from studio.export.reference import criteria_for, verify_outputs
from studio.export.results import ERROR, NOT_VERIFIED, Artifact, TargetResult, Verification, unless_refused
from studio.core.dim_hints import image_axes
from studio.core.error_codes import ErrorCode
from diagnostics.node_context import collect_nodes
from diagnostics.tensorrt_check import node_status
from studio.export.onnxruntime import run_artifact
from studio.export.artifact_run import run_artifact_file
from studio.export.results import target_result

MODEL_NAME = "model.onnx"
PLAN_NAME = "model.plan"
SCRIPT_NAME = "build_engine.py"
TRTEXEC_NAME = "build_with_trtexec.sh"
PROFILES_NAME = "profiles.json"
SEQUENCE_MAX_FACTOR = 4          # derived max of a non-batch dynamic dim: 4 x its opt value


# ---------------------------------------------------------------------------- profiles

def _batch_symbols(inputs: Sequence[TensorInfo]) -> set[str]:
    """Symbolic dims that lead an input and never appear elsewhere: batch dims."""
    leading = {i.shape[0] for i in inputs if i.shape and isinstance(i.shape[0], str)}
    inner = {d for i in inputs if i.shape for d in i.shape[1:] if isinstance(d, str)}
    return leading - inner


IMAGE_MAX_FACTOR = 2


def _image_axes(info: TensorInfo) -> tuple[int, ...]:
    """Spatial axes of a float NCHW/NHWC image input (1, 3 or 4 channels), else () (the one rule:
    ``studio.core.dim_hints.image_axes``)."""
    return image_axes(info.name, tuple(info.shape or ()), info.dtype.startswith(("float", "bfloat"))) or ()


def derive_profiles(inputs: Sequence[TensorInfo], shapes: Mapping[str, ShapeRange],
                    opt_shapes: Mapping[str, Sequence[int]], max_batch: int) -> tuple[dict[str, ShapeRange], list[str]]:
    """One optimization profile: (min, opt, max) for every input with a dynamic dim.

    A user's ``--shapes`` wins. Otherwise each dynamic dim gets opt = the verification
    value (the model's own size when it says, see ``dim_hints``), min 1 and max =
    ``max_batch`` for a batch dim (a leading dim that appears nowhere else), opt/2 to
    2 x opt for an image's height and width, min 1 and 4 x opt for others; a dim name shared by several inputs gets
    the same range everywhere (TensorRT requires consistent shapes). Returns the
    profiles and notes saying what was derived."""
    batch = _batch_symbols(inputs)
    by_dim: dict[str, tuple[int, int, int]] = {}
    for i in inputs:                        # dims named in a user's shapes bind other inputs too
        if i.name in shapes and i.shape:
            rng = shapes[i.name]
            for axis, d in enumerate(i.shape):
                if isinstance(d, str):
                    by_dim.setdefault(d, (rng.min[axis], rng.opt[axis], rng.max[axis]))
    profiles: dict[str, ShapeRange] = {}
    notes: list[str] = []
    for i in inputs:
        if i.shape is None or all(isinstance(d, int) for d in i.shape):
            continue
        if i.name in shapes:
            profiles[i.name] = shapes[i.name]
            continue
        opt = tuple(int(v) for v in opt_shapes[i.name])
        lo, hi = [], []
        derived = False
        for axis, d in enumerate(i.shape):
            if isinstance(d, int):
                lo.append(d)
                hi.append(d)
            elif isinstance(d, str) and d in by_dim:
                a, _, c = by_dim[d]
                lo.append(a)
                hi.append(c)
            else:
                derived = True
                low = 1
                if axis == 0 and (d in batch or d is None):
                    top = max(max_batch, opt[axis])
                elif axis in _image_axes(i):
                    # A detector made for 320 breaks at 1x1 (pooling, FPN Resize/Concat): half to twice opt.
                    low, top = max(1, opt[axis] // 2), IMAGE_MAX_FACTOR * opt[axis]
                else:
                    top = max(opt[axis], SEQUENCE_MAX_FACTOR * opt[axis])
                lo.append(low)
                hi.append(top)
                if isinstance(d, str):
                    by_dim[d] = (low, opt[axis], top)
        profiles[i.name] = ShapeRange(tuple(lo), opt, tuple(hi))
        if derived:
            notes.append(f"profile for {i.name[:60]} derived from its dynamic dims: {profiles[i.name].text()} "
                         "(set --shapes NAME=MIN:OPT:MAX for your traffic)")
        else:
            notes.append(f"profile for {i.name[:60]} follows the --shapes of the dims it shares: "
                         f"{profiles[i.name].text()}")
    return profiles, notes


# ---------------------------------------------------------------------------- generated files

def build_config(ctx: ExportContext, profiles: Mapping[str, ShapeRange], plugins: Sequence[str]) -> dict:
    """What build_engine.py and trtexec are told (also written as profiles.json)."""
    facts = ctx.deploy_facts
    return {
        "onnx": MODEL_NAME,
        "plan": PLAN_NAME,
        "inputs": [{"name": i.name, "shape": [d if isinstance(d, int) else -1 for d in (i.shape or ())]}
                   for i in facts.inputs],
        "profiles": {n: r.to_dict() for n, r in profiles.items()},
        "fp16": ctx.options.precision == "fp16" and not facts.quantized,
        "strongly_typed": bool(facts.quantized),
        "plugins": list(plugins),
        "custom_ops": list(facts.custom_ops),
        "workspace_mib": ctx.options.workspace_mib,
        "source_sha256": ctx.source.sha256,
    }


def render_build_script(config: Mapping) -> str:
    """build_engine.py with ``config`` embedded as a JSON string literal (``repr`` of a str
    is always a plain literal, so model-supplied names cannot inject code)."""
    template = resources.files("studio.export").joinpath("build_engine.py.tmpl").read_text()
    return template.replace("__CONFIG_LITERAL__", repr(json.dumps(config, sort_keys=True)))


def _trtexec_name(name: str) -> str:
    """trtexec reads ``name:dims``; names with ':' or ',' go in single quotes (trtexec's own rule)."""
    if "'" in name:
        raise StudioError(f"input name {name[:40]!r} contains a single quote, which trtexec cannot express; "
                          "use build_engine.py", code=ErrorCode.TRTEXEC_NAME)
    return f"'{name}'" if any(c in name for c in ":,") else name


def trtexec_args(config: Mapping) -> list[str]:
    """The trtexec arguments equivalent to build_engine.py's settings."""
    args = [f"--onnx={config['onnx']}", f"--saveEngine={config['plan']}"]
    profiles = config["profiles"]
    if profiles:
        for key, flag in (("min", "--minShapes"), ("opt", "--optShapes"), ("max", "--maxShapes")):
            spec = ",".join(f"{_trtexec_name(n)}:{'x'.join(map(str, r[key]))}" for n, r in profiles.items())
            args.append(f"{flag}={spec}")
    if config["strongly_typed"]:
        args.append("--stronglyTyped")
    elif config["fp16"]:
        args.append("--fp16")
    for lib in config["plugins"]:
        args.append(f"--dynamicPlugins={lib}")
    args.append(f"--memPoolSize=workspace:{int(config['workspace_mib'])}")
    return args


def trtexec_command(config: Mapping) -> str:
    return "trtexec " + " ".join(shlex.quote(a) for a in trtexec_args(config))


def trtexec_script(config: Mapping) -> str:
    return ("#!/bin/sh\n# Generated by onnx-studio: build the TensorRT engine with trtexec (TensorRT >= 10, NVIDIA GPU).\n"
            "cd \"$(dirname \"$0\")\" || exit 1\nexec " + trtexec_command(config) + " \"$@\"\n")


# ---------------------------------------------------------------------------- the target

def refusal(ctx: ExportContext) -> str | None:
    reason = ctx.deploy_facts.hardware_specific_reason
    if reason:
        return (f"refused for TensorRT: {reason}; TensorRT's ONNX parser does not know them. Export the original "
                "(un-optimized) model instead")
    facts = ctx.deploy_facts
    odd = next((t for t in (*facts.inputs, *facts.outputs) if t.kind != "tensor"), None)
    if odd is not None:
        return (f"refused for TensorRT: {odd.name[:60]!r} is a {odd.dtype} ({odd.kind}); TensorRT networks take and "
                "return tensors only")
    return None


def table_unsupported_ops(model_path: Path, version: str | int = "10") -> list[str]:
    """Ops of the model that TensorRT's support table says its ONNX parser cannot import
    (``ai.onnx.ml`` trees and classifiers, ConvInteger/DynamicQuantizeLinear from ORT's
    dynamic quantization...), as 'Op' or 'domain::Op', once each. Where TensorRT is not
    installed this is the only warning the export can give that the build will fail:
    ONNX Runtime runs these ops, so the verification on ONNX Runtime passes."""
    import onnx


    proto = onnx.load_model(str(model_path), load_external_data=False)
    found: list[str] = []
    for node in collect_nodes(proto):
        status, _ = node_status(node, version)
        label = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
        if status == "unsupported" and label not in found:
            found.append(label)
    return found


def _trt_ready_onnx(ctx: ExportContext, folder: Path) -> tuple[Path, list[dict], str]:
    """The ``tensorrt`` preset on the deploy model, verified pass by pass (a failing pass is undone)."""
    from passes.pipeline import run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    static_dims: dict[str, int] = {}
    for i in ctx.deploy_facts.inputs:
        rng = ctx.options.shapes.get(i.name)
        if rng is not None and rng.static and i.shape:
            static_dims.update({d: v for d, v in zip(i.shape, rng.opt) if isinstance(d, str)})
    # the request routes static_dims to fix-input-shapes
    request = OptimizeRequest(preset="tensorrt", dims=static_dims, on_failure="revert")
    result = run_pipeline(ctx.deploy, request, folder / MODEL_NAME, pool_key=ctx.pool_key)
    return result.output or folder / MODEL_NAME, result.lineage(), result.summary()


@unless_refused("tensorrt", refusal)
def export_tensorrt(ctx: ExportContext) -> TargetResult:
    started = time.perf_counter()
    folder = ctx.bundle / "tensorrt"
    folder.mkdir(parents=True, exist_ok=True)
    opts, facts = ctx.options, ctx.deploy_facts
    notes: list[str] = []
    ctx.progress("tensorrt", "TensorRT-ready ONNX (tensorrt preset)")
    try:
        model, lineage, summary = _trt_ready_onnx(ctx, folder)
    except StudioError as exc:
        return TargetResult("tensorrt", ERROR, f"the tensorrt preset failed: {exc}", seconds=time.perf_counter() - started)
    ctx.shared["tensorrt_pipeline"] = lineage
    notes.append(f"tensorrt preset: {summary}")
    ctx.progress("tensorrt", "verifying the TensorRT-ready ONNX on ONNX Runtime")

    outputs, timing, error = run_artifact(ctx, model, level="disable", stage="ONNX Runtime (verify TensorRT ONNX)")
    if error is not None and facts.custom_ops:
        # TensorRT runs these through plugins; ONNX Runtime has no kernel for them, so no numbers here.
        v_onnx = Verification(NOT_VERIFIED, f"ONNX Runtime cannot run custom ops {', '.join(facts.custom_ops[:3])} "
                                            "(TensorRT needs plugins for them); structure verified by the pipeline",
                              "onnxruntime", ctx.criteria.text,
                              reason=f"ONNX Runtime cannot run custom ops {', '.join(facts.custom_ops[:3])}")
    else:
        v_onnx = verify_outputs(ctx.reference, outputs, ctx.criteria,
                                engine=f"onnxruntime {timing.get('version', '')}",
                                error=None if error is None else f"ONNX Runtime cannot run it: {error}")
    data = folder / f"{MODEL_NAME}.data"
    unsupported = table_unsupported_ops(model)
    blocked = ""
    if unsupported:
        blocked = (f"TensorRT's parser cannot import {len(unsupported)} op type(s) of it per the support table "
                   f"({', '.join(unsupported[:4])}{'...' if len(unsupported) > 4 else ''}): the engine build will "
                   "fail unless a plugin provides them")
        notes.append(blocked)
    label = ("ONNX for TensorRT (tensorrt preset; ops TensorRT cannot import, see notes)" if unsupported else
             "TensorRT-ready ONNX (tensorrt preset; verified on ONNX Runtime CPU)")
    artifacts: list[Artifact] = [ctx.artifact(
        model, "tensorrt-onnx", label,
        companions=(data,) if data.exists() else (), precision=ctx.deploy_precision, portable=True,
        verification=v_onnx)]

    plugins = []
    for lib in opts.plugins:
        name = f"plugins/{safe_name(lib.name, default='plugin.so')}"
        copy_file(Path(lib), folder / name)
        plugins.append(name)
    if facts.custom_ops and not plugins:
        notes.append(f"custom ops {', '.join(facts.custom_ops[:5])}: TensorRT needs a plugin for each; build with "
                     "--plugin LIB (build_engine.py) or --dynamicPlugins (trtexec)")
    if opts.precision == "int8" or facts.quantized:
        notes.append("INT8 as explicit quantization: the QDQ model is built strongly typed (--stronglyTyped); "
                     "implicit INT8 calibration is not used (removed in TensorRT 11)")
    elif opts.precision == "fp16":
        notes.append("FP16: builder flag --fp16 (TensorRT 10); with TensorRT 11 build an FP16 ONNX strongly typed")
    profiles, profile_notes = derive_profiles(facts.inputs, opts.shapes, ctx.input_shapes, opts.max_batch)
    notes.extend(profile_notes)
    config = build_config(ctx, profiles, plugins)
    ctx.shared["tensorrt"] = {"profiles": profiles, "config": config}
    atomic_write_text(folder / PROFILES_NAME, jsonsafe.dumps(config, indent=2))
    atomic_write_text(folder / SCRIPT_NAME, render_build_script(config))
    (folder / SCRIPT_NAME).chmod(0o755)
    artifacts.append(ctx.artifact(folder / PROFILES_NAME, "tensorrt-config", "profiles, precision and plugins"))
    try:
        atomic_write_text(folder / TRTEXEC_NAME, trtexec_script(config))
        (folder / TRTEXEC_NAME).chmod(0o755)
        artifacts.append(ctx.artifact(folder / TRTEXEC_NAME, "trtexec", "the equivalent trtexec command"))
    except StudioError as exc:
        notes.append(str(exc))

    availability = TensorRtEngine().available()
    if not availability.ok:
        reason = f"not verified here: {availability.reason}"
        artifacts.append(ctx.artifact(folder / SCRIPT_NAME, "build-script",
                                      "build_engine.py (TensorRT Python API): builds model.plan on a GPU machine",
                                      verification=Verification(NOT_VERIFIED, f"engine not built: {reason}",
                                                                "tensorrt", criteria_for(opts.precision).text,
                                                                reason=str(availability.reason)),
                                      notes=("run: python build_engine.py (needs TensorRT >= 10 and an NVIDIA GPU)",)))
        status = ERROR if v_onnx.failed else NOT_VERIFIED
        onnx_state = "failed" if v_onnx.failed else "verified on ONNX Runtime" if v_onnx.ok else "not verified"
        message = (f"TensorRT engine not built or verified here ({availability.reason}); "
                   f"{'ONNX for TensorRT' if blocked else 'TensorRT-ready ONNX'} {onnx_state}: {v_onnx.message}")
        if blocked:
            message = f"{blocked}; {message}"
        return TargetResult("tensorrt", status, message, tuple(artifacts), tuple(notes), {},
                            time.perf_counter() - started)
    return _build_and_verify(ctx, folder, config, artifacts, notes, started)  # pragma: no cover - needs a GPU


def _build_and_verify(ctx: ExportContext, folder: Path, config: dict, artifacts: list[Artifact],
                      notes: list[str], started: float) -> TargetResult:  # pragma: no cover - needs a GPU
    """NOT VERIFIED HERE: build the plan with build_engine.py in a worker, then run it
    with the TensorRT adapter and compare with the original."""
    from dataclasses import replace


    ctx.progress("tensorrt", "building the engine (build_engine.py)")
    limits = replace(default_limits(), address_space_limit=False, timeout_s=max(default_limits().timeout_s, 1800))
    plan = folder / PLAN_NAME
    try:
        res = run_job("export.trt_build", {"script": str(folder / SCRIPT_NAME), "plan": str(plan)},
                      stage="TensorRT build", limits=limits, pool_key=ctx.pool_key, on_tick=ctx.on_tick)
    except StudioError as exc:
        res = None
        build_error = str(exc)
    else:
        build_error = None if res.data.get("rc") == 0 else (res.data.get("stderr") or "build failed")[-400:]
    criteria = criteria_for(ctx.options.precision, quantized_model=ctx.deploy_facts.quantized)
    if build_error or not plan.exists():
        v = Verification(ERROR, f"build_engine.py failed: {build_error}", "tensorrt", criteria.text)
        artifacts.append(ctx.artifact(folder / SCRIPT_NAME, "build-script", "build_engine.py (TensorRT Python API)",
                                      verification=v))
        return target_result("tensorrt", artifacts, notes, {}, started)
    artifacts.append(ctx.artifact(folder / SCRIPT_NAME, "build-script", "build_engine.py (TensorRT Python API)"))
    ctx.progress("tensorrt", "verifying the engine")
    libs = tuple(str(folder / p) for p in config["plugins"])
    done = run_artifact_file(ctx, "tensorrt", plan, {"custom_op_libraries": list(libs)}, runs=ctx.options.bench_runs,
                             stage="TensorRT (verify the plan)")
    if done.error is None:
        v = verify_outputs(ctx.reference, done.outputs, criteria, engine=f"tensorrt {done.timing.get('version')}")
        bench = {PLAN_NAME: {k: done.timing.get(k) for k in ("session_ms", "first_inference_ms", "latency_ms_median",
                                                              "runs") if done.timing.get(k) is not None}}
    else:
        v = verify_outputs(ctx.reference, None, criteria, engine="tensorrt",
                           error=f"TensorRT cannot run the plan: {done.error}")
        bench = {}
    precision = "int8" if ctx.deploy_facts.quantized else ctx.options.precision
    artifacts.append(ctx.artifact(plan, "tensorrt-plan", "TensorRT engine (specific to this GPU and TensorRT version)",
                                  precision=precision, portable=False, verification=v))
    ctx.shared["tensorrt"]["plan"] = plan
    return target_result("tensorrt", artifacts, notes, bench, started)


@job("export.trt_build")
def trt_build_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:  # pragma: no cover
    """Run the generated build script (NOT VERIFIED HERE: needs TensorRT and a GPU)."""
    ctx.set_stage("TensorRT build")
    proc = subprocess.run([sys.executable, str(args["script"]), "--plan", str(args["plan"])], capture_output=True,
                          text=True, cwd=str(Path(args["script"]).parent))
    return JobOutput(data={"rc": proc.returncode, "stdout": proc.stdout[-2000:], "stderr": proc.stderr[-2000:]})


__all__ = ["build_config", "derive_profiles", "export_tensorrt", "render_build_script", "trtexec_args",
           "trtexec_command"]
