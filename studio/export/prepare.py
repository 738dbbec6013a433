"""The deploy model: the user's model, after the preset and the precision pass.

Passes plug in by name through the verifying pipeline, so a precision feature
only has to register its pass:

* ``--preset NAME``: the preset's passes (``safe``, ``ort``...), verified pass by pass;
* ``--precision int8``: the ``quantize-int8-static`` pass (QDQ, with ``--calibration``);
  a model that is already QDQ is used as it is;
* ``--precision fp16``: the ``convert-fp16`` pass gives an FP16 ONNX when it is
  registered; without it ONNX artifacts stay FP32 (OpenVINO still compresses
  weights to FP16 and TensorRT still builds with ``--fp16``), and a note says so.

A pass that fails verification is undone (``on_failure="revert"``) and named in
the notes; the export continues from the last verified model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from passes.presets import FP16_FOLDS
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError
from studio.core.model import ModelHandle
from studio.core.model import load as load_model
from studio.core.paths import safe_name, user_data_path
from studio.core.requests import PRESET_ENGINES, OptimizeRequest
from studio.export.facts import ModelFacts, model_facts
from studio.export.options import ExportOptions

INT8_PASS = "quantize-int8-static"
FP16_PASS = "convert-fp16"
LEGACY_INPUTS_PASS = "remove-initializers-from-inputs"


@dataclass(frozen=True)
class Deploy:
    path: Path
    handle: ModelHandle
    facts: ModelFacts
    precision: str                   # fp32 | fp16 | int8: what the deploy model computes in
    records: tuple[dict, ...]        # pipeline records (lineage) of every pass run on it
    notes: tuple[str, ...]
    passes: tuple[str, ...]


def pass_registered(name: str) -> bool:
    from passes.registry import PASS_MODULES, known_passes  # heavy: passes import onnx_ir (~0.3 s)

    return name in PASS_MODULES or name in known_passes()


def _pass_options(name: str, options: ExportOptions) -> dict:
    if name != INT8_PASS:
        return {}
    # Deployment INT8 is explicit quantization (Q/DQ pairs): the only form OpenVINO and TensorRT
    # take; QOperator models would run on ONNX Runtime alone.
    opts: dict = {"qdq_only": True, "method": options.calibration_method}
    if options.calibration is not None:
        # Absolute: the pass runs in a worker whose cwd is its own scratch folder.
        opts["calibration"] = str(user_data_path(options.calibration, label="calibration data"))
    return opts


def choose_passes(options: ExportOptions, facts: ModelFacts) -> tuple[list[str], str, list[str]]:
    """(pass names, resulting precision, notes) for the preset and the precision."""
    from passes.registry import preset  # heavy: passes import onnx_ir (~0.3 s)

    names: list[str] = list(preset(options.preset).passes) if options.preset else []
    notes: list[str] = []
    sets = [f"{p}.{k}={v}" for p, k, v in preset(options.preset).options] if options.preset else []
    engine = PRESET_ENGINES.get(options.preset or "")
    others = [t for t in options.targets if t in PRESET_ENGINES.values() and t != engine]
    if sets and engine and others:
        # one deploy model serves every target: the preset's options are its engine's choices
        other = next(k for k, v in PRESET_ENGINES.items() if v == others[0])
        notes.append(f"the {options.preset} preset's options ({', '.join(sets)}) are chosen for {engine}; the "
                     f"{others[0]} artifact is built from the same model (export it with --preset {other})")
    if facts.initializers_as_inputs and LEGACY_INPUTS_PASS not in names and pass_registered(LEGACY_INPUTS_PASS):
        # ORT's optimized save folds such an initializer away but keeps its graph input: the artifact then asks
        # for it as a feed (onnx_light_inception_v2: 'missing feed(s) ..._SHAPE')
        names.insert(0, LEGACY_INPUTS_PASS)
        notes.append(f"{facts.initializers_as_inputs} initializer(s) were also graph inputs (old IR style): "
                     f"{LEGACY_INPUTS_PASS} ran first, so the artifacts take only the model's real inputs")
    precision = "int8" if facts.quantized else "fp32"
    if options.precision == "int8":
        if facts.quantized:
            notes.append("the model is already quantized (QDQ): used as it is for INT8")
        elif not pass_registered(INT8_PASS):
            raise StudioError(f"INT8 export needs the {INT8_PASS} pass (not available in this build)",
                              code=ErrorCode.PASS_UNAVAILABLE)
        else:
            names.append(INT8_PASS)
            precision = "int8"
    elif options.precision == "fp16":
        if facts.quantized:
            notes.append("the model is quantized (QDQ): FP16 applies to OpenVINO weights and TensorRT only")
        elif pass_registered(FP16_PASS):
            names += [n for n in FP16_FOLDS if n not in names] + [FP16_PASS]    # BN folded in float32 first
            precision = "fp16"
        else:
            notes.append(f"FP16 ONNX needs the {FP16_PASS} pass (not available in this build): ONNX artifacts "
                         "stay FP32; OpenVINO compresses weights to FP16 and TensorRT builds with --fp16")
    if options.calibration is not None and INT8_PASS not in names:
        notes.append("--calibration is only used for INT8 quantization; ignored")
    return names, precision, notes


def prepare_deploy(handle: ModelHandle, options: ExportOptions, work: Path, *, pool_key: str = "default") -> Deploy:
    """Run the chosen passes on a copy (never the user's file) and load the result."""
    facts = model_facts(handle.proto)
    names, precision, notes = choose_passes(options, facts)
    if not names:
        return Deploy(handle.path, handle, facts, precision, (), tuple(notes), ())
    from passes.pipeline import preset_pass_options, run_pipeline  # heavy: passes import onnx_ir (~0.3 s)

    # the preset's own pass options (its engine's choices) as optimize reads them, the export's own over them
    chosen = preset_pass_options(options.preset, {n: _pass_options(n, options) for n in names})
    request = OptimizeRequest(passes=list(names), pass_options={n: chosen.get(n, {}) for n in names},
                              on_failure="revert")
    out = work / "deploy" / f"{safe_name(handle.name, default='model', max_len=60)}.onnx"
    result = run_pipeline(handle.path, request, out, pool_key=pool_key)
    if result.output is None or not result.output.exists():
        raise StudioError(f"the passes before export produced no model: {result.summary()}", code=ErrorCode.NO_RESULT)
    failed = [r for r in result.records if r.status in ("reverted", "failed", "error", "skipped")]
    for r in failed:
        notes.append(f"pass '{r.name}' {r.status} (not in the exported model): {r.message}"[:300])
    int8 = next((r for r in failed if r.name == INT8_PASS), None)
    if INT8_PASS in names and int8 is not None:
        # "reverted" = the quantized model was made but did not verify; "error" = quantization itself failed.
        why = (f"the {INT8_PASS} pass did not verify ({int8.message})" if int8.status == "reverted"
               else int8.message or f"the {INT8_PASS} pass {int8.status}")
        raise StudioError(f"INT8 export failed: {why}"[:400], code=ErrorCode.QUANTIZE_FAILED)
    if precision == "fp16" and any(r.name == FP16_PASS for r in failed):
        precision = "fp32"     # the FP16 pass was undone: the exported ONNX is float32, and says so
        notes.append(f"the ONNX artifacts stay FP32: the {FP16_PASS} pass did not verify (see above)")
    deployed = load_model(result.output)
    return Deploy(result.output, deployed, model_facts(deployed.proto), precision, tuple(result.lineage()),
                  tuple(notes), tuple(names))
