"""OpenVINO target: IR (``model.xml`` + ``model.bin``) through ``openvino.convert_model``
and ``openvino.save_model``, FP32 and/or with FP16-compressed weights (one conversion,
one IR per precision, each verified), from FP32 or
QDQ INT8 models, with input shapes left dynamic or set (static, or bounded
ranges ``[min..max]`` from ``--shapes``).

Conversion runs in a sandbox worker: OpenVINO's ONNX reader can segfault on a
hostile model (``tests/hostile_models.py::conv_without_weight``), which then
becomes this target's error message, not a dead studio. The IR is read back,
compiled for CPU with ``INFERENCE_PRECISION_HINT=f32`` and ``DYNAMIC_QUANTIZATION_GROUP_SIZE=0`` (so the
comparison measures the IR, not a bf16 CPU default, nor the activation quantization the CPU plugin applies
to MatMuls with compressed int8 weights) and compared with the original.
The IR cannot carry those pins (OpenVINO 2026 ignores an IR's rt_info
``runtime_options``), so where a plain ``compile_model`` and Triton's OpenVINO backend
(no precision in its config) compute otherwise -- the CPU's default below f32 (bf16
with AVX512-BF16/AMX), or MatMuls with int8-stored weights, whose activations the
plugin quantizes by default at any precision (:func:`compressed_weight_matmuls`) --
the same feeds also run on that default compile and a note gives its max abs beside
the pinned one (:func:`default_precision_note`); an f32 default and no such MatMul: no note.
Note ``save_model`` compresses weights to FP16 by default; FP32 export passes
``compress_to_fp16=False`` explicitly.
"""

from __future__ import annotations

import re

import time
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.errors import StudioError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import run_job
from studio.export.context import ExportContext
from studio.core.compare import Verification
from studio.export.artifact_run import ArtifactRun, run_artifact_file
from studio.export.reference import Criteria, criteria_for, verify_outputs
from studio.export.results import ERROR, TargetResult, target_result, unless_refused
from studio.export.reference import bound_shapes
from studio.core.nontensor import tensor_only_refusal
from studio.export.customops import ship
from studio.core.engines.openvino_io import check_onnx_for_openvino

XML_NAME = "model.xml"
BIN_NAME = "model.bin"


def ov_input_shapes(ctx: ExportContext) -> dict[str, list[list[int] | None]]:
    """Per constrained input, per axis [min, max] (equal: static; None: dynamic)."""
    bounds = bound_shapes(ctx.source.proto, ctx.options.shapes)
    return {name: [None if b is None else [b[0], b[1]] for b in axes] for name, axes in bounds.items()}


def refusal(ctx: ExportContext) -> str | None:
    """Why the deploy model must not go to OpenVINO, or None."""
    nontensor = tensor_only_refusal(ctx.source.proto, "OpenVINO")
    if nontensor:
        return f"refused for OpenVINO: {nontensor}"
    reason = ctx.deploy_facts.hardware_specific_reason
    if reason:
        return (f"refused for OpenVINO: {reason}. Such a model comes from ONNX Runtime's ORT_ENABLE_ALL "
                "optimization and only ONNX Runtime on the same kind of CPU can run it; export the original "
                "(un-optimized) model instead")
    return None


def ir_name(precision: str, main: bool) -> str:
    """``model.xml`` for the main IR, ``model_fp16.xml`` / ``model_fp32.xml`` for the others."""
    return XML_NAME if main else f"model_{precision}.xml"


def convert(ctx: ExportContext, model: Path, folder: Path, *, compress_to_fp16: bool | None = None,
            saves: list[tuple[str, bool]] | None = None) -> dict:
    """Convert ``model`` once and save it as each ``(xml name, FP16-compressed)`` of ``saves`` in ``folder``
    (default: ``model.xml``), in a worker; raises StudioError."""
    saves = saves or [(XML_NAME, bool(compress_to_fp16))]
    args = {"model_path": str(model), "saves": [[name, bool(c)] for name, c in saves],
            "input_shapes": ov_input_shapes(ctx), "extensions": ov_extensions(ctx)}
    res = run_job("export.ov_convert", args, stage="OpenVINO conversion", out_dir=folder, pool_key=ctx.pool_key,
                  on_tick=ctx.on_tick, fresh=ctx.fresh)
    return res.data


def ov_extensions(ctx: ExportContext) -> list[str]:
    """OpenVINO extension libraries (``core.add_extension``) the export loads for custom ops."""
    return [str(Path(p).resolve()) for p in ctx.options.ov_extensions]


def run_ir(ctx: ExportContext, xml: Path, *, runs: int, stage: str, precision: str = "f32",
           dynamic_quantization: bool | None = None) -> ArtifactRun:
    """Read the IR back in a worker with OpenVINO's runner (compiled for CPU in f32, as ``profile`` compiles it;
    "default": the plugin's own choice), run the feeds, time it in the one latency loop
    (:mod:`studio.export.artifact_run`). ``dynamic_quantization``: the CPU plugin's activation quantization of
    compressed-weight MatMuls (default: off at f32, where the IR's own numbers are wanted, on otherwise)."""
    args = {"openvino_ir": True, "onnx_path": str(ctx.deploy), "precision": precision,
            "output_names": [o.name for o in ctx.source.proto.graph.output], "extensions": ov_extensions(ctx),
            # pinned f32 is the IR's own numbers: without this the CPU plugin quantizes the activations of every
            # MatMul with compressed (int8 -> Convert -> Multiply) weights (ov_config)
            "dynamic_quantization": precision != "f32" if dynamic_quantization is None else dynamic_quantization}
    return run_artifact_file(ctx, "openvino", xml, args, runs=runs, stage=stage)


_INT_WEIGHTS = frozenset({"i8", "u8", "i4", "u4"})
_DECOMPRESSION = frozenset({"Convert", "Subtract", "Multiply", "Reshape", "Transpose", "Squeeze", "Unsqueeze"})


def compressed_weight_matmuls(xml: Path) -> int:
    """How many MatMuls of the IR take weights stored as integers and decompressed in the graph (an i8/u8/i4/u4
    Const -> Convert -> [Subtract] -> Multiply, from ONNX's Cast -> Mul or a weight DequantizeLinear): OpenVINO's CPU
    plugin quantizes those MatMuls' activations on the fly by default (DYNAMIC_QUANTIZATION_GROUP_SIZE), at any
    precision; a MatMul whose other input is FakeQuantized (a QDQ model's int8 MatMul) is not counted. Read from
    ``model.xml``'s text: top-level layers and edges."""
    import xml.etree.ElementTree as ET

    root = ET.parse(xml).getroot()
    found, edges = root.find("layers"), root.find("edges")
    layers = {layer.get("id"): layer for layer in (found if found is not None else ())}
    inputs: dict[str | None, list[str | None]] = {}
    for edge in sorted(edges if edges is not None else (), key=lambda e: int(e.get("to-port") or 0)):
        inputs.setdefault(edge.get("to-layer"), []).append(edge.get("from-layer"))
    kind = {i: layer.get("type") for i, layer in layers.items()}
    memo: dict[str | None, tuple[bool, bool]] = {}

    def weights(i: str | None) -> tuple[bool, bool]:
        """(computed from constants only, an integer Const decompressed on the way)."""
        if i not in memo:
            memo[i] = (False, False)          # a cycle (none in an IR) reads as not constant
            if kind.get(i) == "Const":
                memo[i] = (True, False)
            elif kind.get(i) in _DECOMPRESSION:
                parts = [weights(p) for p in inputs.get(i, [])]
                const = bool(parts) and all(c for c, _ in parts)
                integer = any(n for _, n in parts) or (kind[i] == "Convert" and any(
                    kind.get(p) == "Const" and (layers[p].find("data") is not None)
                    and layers[p].find("data").get("element_type") in _INT_WEIGHTS for p in inputs.get(i, [])))
                memo[i] = (const, const and integer)
        return memo[i]

    try:
        return sum(1 for i, t in kind.items() if t == "MatMul"
                   and not any(kind.get(p) == "FakeQuantize" for p in inputs.get(i, []))
                   and any(weights(p) == (True, True) for p in inputs.get(i, [])))
    except RecursionError:        # a decompression chain thousands of layers long: not the pattern
        return 0


def default_precision_note(ctx: ExportContext, xml: Path, pinned: ArtifactRun, verified: Verification,
                           criteria: Criteria, *, default: str | None = None) -> str | None:
    """What the IR gives compiled as a plain ``compile_model`` and Triton's OpenVINO backend compile it (no
    INFERENCE_PRECISION_HINT, no DYNAMIC_QUANTIZATION_GROUP_SIZE) on the verification feeds, beside the verified
    figure; None where that is the verified compile here (f32 default, no compressed-weight MatMul) or the pinned run
    was not compared. The verification pins f32 with the activation quantization off, so without this a bf16
    default's error (3.4e-4 vs 1.5e-8 on corpus oww_timer) and, on any CPU, the quantized activations of MatMuls
    with int8-stored weights (0.15 vs 0 on the int8-weights test model at f32) went unsaid. ``default``: the CPU's
    default precision (the pinned run's report unless given); the plain compile is run as that precision pinned
    with the activation quantization on, which is what the plugin's defaults are."""
    default = default or pinned.details.get("precision_default")
    lower = default not in (None, "f32")
    compressed = compressed_weight_matmuls(xml) if xml.exists() else 0
    if verified.comparison is None or not (lower or compressed):
        return None
    done = run_ir(ctx, xml, runs=0, stage=f"OpenVINO (default compile, {xml.name})", precision=default or "default",
                  dynamic_quantization=True)
    got = verify_outputs(ctx.reference, done.outputs, criteria, engine=verified.engine or "", error=done.error)
    if not compressed:
        head = (f"OpenVINO's default precision on this CPU is {default}: compiled without INFERENCE_PRECISION_HINT=f32 "
                f"(plain compile_model, Triton's OpenVINO backend, which cannot pin f32) {xml.name} ")
        pinned_as, pin = "pinned f32", "pin it in your compile_model config for the verified numbers"
    else:
        pins = ("INFERENCE_PRECISION_HINT=f32 and " if lower else "") + "DYNAMIC_QUANTIZATION_GROUP_SIZE=0"
        said = (f"OpenVINO's default precision on this CPU is {default}" + (" and its" if lower else ", but its")
                if default else "OpenVINO's")
        head = (f"{said} CPU plugin quantizes on the fly the activations of the {compressed} MatMul(s) whose weights "
                f"{xml.name} stores as integers (int8 -> Convert -> Multiply; DYNAMIC_QUANTIZATION_GROUP_SIZE's "
                f"default, at any precision): compiled without {pins} (plain compile_model, Triton's OpenVINO "
                f"backend) {xml.name} ")
        pinned_as = "with f32 and DYNAMIC_QUANTIZATION_GROUP_SIZE=0 pinned"
        pin = f"set {pins} in your compile_model config for the verified numbers"
    if got.comparison is None:
        return f"{head}could not be run here ({got.message[:150]}); {pin}"
    outside = "" if got.ok else ", outside the verification's tolerance"
    return (f"{head}gives max abs {got.comparison.max_abs:.3g} vs the original "
            f"({verified.comparison.max_abs:.3g} {pinned_as}{outside}); {pin}")


@unless_refused("openvino", refusal)
def export_openvino(ctx: ExportContext) -> TargetResult:
    started = time.perf_counter()
    folder = ctx.bundle / "openvino"
    folder.mkdir(parents=True, exist_ok=True)
    opts = ctx.options
    wanted = opts.openvino_precisions
    notes: list[str] = []
    if opts.shapes:
        bounds = ov_input_shapes(ctx)
        notes.append("input shapes from --shapes: " + ", ".join(
            f"{n[:40]}=[{', '.join('?' if b is None else str(b[0]) if b[0] == b[1] else f'{b[0]}..{b[1]}' for b in axes)}]"
            for n, axes in bounds.items()))
    else:
        notes.append("input shapes left as the model declares them (dynamic dims stay dynamic)")
    if len(wanted) > 1:
        notes.append(f"IRs written: {', '.join(wanted)} ({ir_name(wanted[0], True)} is the {wanted[0]} one, served "
                     "by Triton)")
    saves = [(ir_name(p, i == 0), p == "fp16") for i, p in enumerate(wanted)]
    ctx.progress("openvino", "converting to IR (" + ", ".join(
        "FP16-compressed weights" if p == "fp16" else "FP32" for p in wanted) + ")")
    try:
        info = convert(ctx, ctx.deploy, folder, saves=saves)
    except StudioError as exc:
        static = not opts.shapes and re.search(r"rank has to be known|rank\(\)\.is_static|Unsupported input type "
                                               r"dynamic", str(exc))
        hint = (" at its declared dynamic shapes (its frontend may convert it at static ones: give them with "
                "--shapes NAME=SHAPE)" if static else "")
        return TargetResult("openvino", ERROR, f"OpenVINO could not convert the model{hint}: {exc}",
                            notes=tuple(notes), seconds=time.perf_counter() - started)
    artifacts, bench = [], {}
    for (xml_name, compress), wanted_precision in zip(saves, wanted):
        xml, bin_ = folder / xml_name, folder / (Path(xml_name).stem + ".bin")
        ctx.progress("openvino", f"verifying the IR {xml_name}")
        pinned = run_ir(ctx, xml, runs=opts.bench_runs, stage=f"OpenVINO (verify {xml_name})")
        outputs, timing, error = pinned.outputs, pinned.timing, pinned.error
        precision = "int8" if ctx.deploy_precision == "int8" else ("fp16" if compress else ctx.deploy_precision)
        criteria = criteria_for(precision, quantized_model=ctx.deploy_facts.quantized)
        v = verify_outputs(ctx.reference, outputs, criteria, engine=f"openvino {info.get('version', '')}".strip(),
                           error=None if error is None else f"OpenVINO cannot run the IR: {error}")
        label = {"fp16": "OpenVINO IR, FP16-compressed weights (computed in FP32 on CPU)",
                 "int8": "OpenVINO IR from a QDQ model (INT8 via FakeQuantize)"}.get(precision, "OpenVINO IR, FP32")
        if compress and precision == "int8":
            label += ", FP16-compressed float weights"
        said = default_precision_note(ctx, xml, pinned, v, criteria)
        if said:
            notes.append(said)
        art = ctx.artifact(xml, "openvino-ir", label, companions=(bin_,) if bin_.exists() else (),
                           precision=precision, portable=True, verification=v,
                           notes=(f"inputs: {', '.join(i['name'] + ' ' + i['shape'] for i in info.get('inputs', []))}"[:300],)
                           + ((said,) if said else ()))
        artifacts.append(art)
        if timing:
            bench[xml_name] = {k: timing.get(k) for k in ("read_ms", "compile_ms", "session_ms", "first_inference_ms",
                                                          "latency_ms_median", "runs") if timing.get(k) is not None}
        if not ctx.shared.get("openvino"):     # the main IR: Triton serves it
            ctx.shared["openvino"] = {"xml": xml, "bin": bin_, "precision": precision,
                                      "inputs": info.get("inputs", []), "ok": v.ok, "default_note": said}
    if opts.ov_extensions:
        names, libs = ship(ctx, opts.ov_extensions, folder / "extensions", "openvino-extension",
                           "OpenVINO extension (core.add_extension before read_model)")
        artifacts.extend(libs)
        notes.append(f"OpenVINO extensions used for conversion and verification, shipped in extensions/: "
                     f"{', '.join(names)}; load each with core.add_extension(path) before core.read_model")
    return target_result("openvino", artifacts, notes, bench, started)


# ============================================================================ jobs (worker side)

_NOISE = ("Check '", "Exception from", "Traceback", "  File ")


def _reraise(exc: Exception) -> None:
    """OpenVINO's errors with the informative lines only; its allocation failures ("can't alloc")
    as MemoryError, so the sandbox reports the worker's memory limit."""
    text = condense_error(str(exc))
    if "alloc" in text.lower():
        raise MemoryError(text) from None
    raise RuntimeError(text) from None


def condense_error(text: str) -> str:
    """OpenVINO's messages start with C++ source locations; keep the lines that say what is wrong
    (the worker passes on only the first line of an exception)."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.startswith(_NOISE) and not ln.startswith("src/")]
    return " ".join(useful or lines)[:400]


def _partial_shape(ov: Any, dims: Any) -> Any:
    """OpenVINO's PartialShape of one input's --shapes bounds ([min, max] per axis; None: any size)."""
    return ov.PartialShape([ov.Dimension() if b is None else ov.Dimension(int(b[0])) if b[0] == b[1]
                            else ov.Dimension(int(b[0]), int(b[1])) for b in dims])


def _names(port: Any) -> list[str]:
    try:
        return sorted(port.get_names())
    except Exception:  # noqa: BLE001 - a port without names
        return []


@job("export.ov_convert")
def ov_convert_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """``convert_model`` (ONNX frontend only) -> optional reshape -> ``save_model`` into ``ctx.out_dir``."""
    ctx.set_stage("OpenVINO model read")
    import openvino as ov


    path = str(args["model_path"])
    check_onnx_for_openvino(path)            # ONNX frontend only: convert_model must not pick another
    ctx.set_stage("OpenVINO conversion")
    extensions = [str(e) for e in args.get("extensions") or []]
    shapes = args.get("input_shapes") or {}
    try:
        model = ov.convert_model(path, extension=extensions) if extensions else ov.convert_model(path)
    except Exception as exc:  # noqa: BLE001 - re-raised with the informative lines only
        if not shapes:
            _reraise(exc)
        # Some graphs convert only at static shapes (Silero's If exports: "rank has to be known (static)"):
        # the shapes the user gave go into the conversion itself.
        try:
            model = ov.convert_model(path, input={n: _partial_shape(ov, d) for n, d in shapes.items()},
                                     **({"extension": extensions} if extensions else {}))
        except Exception:  # noqa: BLE001 - the first failure is the one to show
            _reraise(exc)
    if shapes:
        by_name = {}
        for port in model.inputs:
            for n in _names(port):
                by_name[n] = port
        new = {}
        for name, dims in shapes.items():
            if name not in by_name:
                raise KeyError(f"input {name[:60]!r} is not an input of the converted model")
            new[by_name[name]] = _partial_shape(ov, dims)
        ctx.set_stage("OpenVINO reshape")
        model.reshape(new)
    saves = args.get("saves") or [[args.get("xml_name") or XML_NAME, bool(args.get("compress_to_fp16"))]]
    for xml_name, compress in saves:     # one conversion, one IR per precision
        ctx.set_stage(f"OpenVINO save_model ({'FP16-compressed' if compress else 'FP32'})")
        # scratch: worker: into the bundle's staging folder
        ov.save_model(model, str(ctx.out_dir / Path(str(xml_name)).name), compress_to_fp16=bool(compress))
    ports = [{"name": (_names(p) or [f"#{i}"])[0], "shape": str(p.get_partial_shape()),
              "type": str(p.get_element_type())} for i, p in enumerate(model.inputs)]
    outs = [{"name": (_names(p) or [f"#{i}"])[0], "shape": str(p.get_partial_shape()),
             "type": str(p.get_element_type())} for i, p in enumerate(model.outputs)]
    return JobOutput(data={"version": ov.get_version(), "inputs": ports, "outputs": outs})
