"""Converted targets (the engine table's converted rows with an export label: MNN ``.mnn``, LiteRT ``.tflite``, ...):
convert the deploy model with the engine's converter (in a sandbox worker), reload the file in its own runtime, verify it
against the original, and write a README with the snippet that loads it on a device.

The converter command line is recorded in the artifact's notes (and so in
``manifest.json``), with the options the converter needed when its defaults were refused or
gave other numbers than ONNX Runtime on the reference feeds (``engines.conversion.search_options``). A converted file is judged by the converted-engine criterion: every
output's cosine with the original >= 0.9999 (converters refuse or reorder ops, so
elementwise fp32 tolerances would call a faithful conversion broken on a float rounding),
plus the fp32 elementwise tolerance loosened tenfold. ``.tflite`` files have fixed input
shapes (the verification shapes) and NHWC image inputs; the README says which.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studio.core.compare import Tolerance
from studio.core.paths import atomic_write_text
from studio.export.artifact_run import run_artifact_file
from studio.export.context import ExportContext
from studio.export.reference import Criteria, criteria_for, verify_outputs
from studio.export.results import ERROR, TargetResult, target_result
from studio.core.engines.conversion import Conversion
from studio.core.engines.table import EngineRow, engine_row
from studio.core.engines import get_engine

__all__ = ["CONVERTED_CRITERIA", "export_converted"]

CONVERTED = Tolerance(1e-3, 1e-4, 1e-3, min_cosine=0.9999)
CONVERTED_CRITERIA = Criteria(CONVERTED, True, "converted fp32: cosine >= 0.9999 per output "
                                               "(and |a-b| <= 1e-4 + 1e-3*rms + 1e-3*|b|)")

_MNN_README = """# MNN model

`model.mnn` was converted from the ONNX model with:

    {command}

and verified here in MNN {version}: {verification}.

Load it (Python, `pip install MNN`; the C++ API `MNN::Express::Module::load` is the same):

```python
import MNN.nn as nn, MNN.expr as F, numpy as np
rt = nn.create_runtime_manager(({{"backend": "CPU", "numThread": 4, "precision": "high"}},))
net = nn.load_module_from_file("model.mnn", {inputs!r}, {outputs!r}, runtime_manager=rt)
x = np.zeros({shape}, np.float32)   # NCHW, as in ONNX
y = net.forward([F.const(x, list(x.shape), F.NCHW, F.float)])
out = F.convert(y[0], F.NCHW).read()   # MNN may return NC4HW4
```
On Android/iOS use the MNN AAR / framework and the same Module API (`Module::load`).
Integer inputs are int32 in MNN (ONNX int64 is narrowed).
"""

_LITERT_README = """# LiteRT (TFLite) model

`model.tflite` was converted from the ONNX model with onnx2tf:

    {command}

and verified here in LiteRT {version}: {verification}.

Input shapes are fixed at conversion: {shapes}. {layout}

Load it (Python, `pip install ai-edge-litert`; Android: `org.tensorflow.lite.Interpreter`
with the XNNPACK delegate, which is the default on CPU):

```python
import numpy as np
from ai_edge_litert.interpreter import Interpreter
interpreter = Interpreter(model_path="model.tflite", num_threads=4)
run = interpreter.get_signature_runner()          # inputs/outputs by ONNX name
print(run.get_input_details())
outputs = run(**{{name: np.zeros(d["shape"], d["dtype"]) for name, d in run.get_input_details().items()}})
```
"""


_LABELS = {"mnn": "MNN model (fp32)", "litert": "LiteRT / TFLite flatbuffer (fp32, fixed input shapes)"}
_README = """# {label} model

{files} converted from the ONNX model with:

    {command}

and verified here in {label} {version}: {verification}.

Input shapes are fixed at conversion: {shapes}. Install: {install}.

{snippet}"""


def _feeds_layout(ctx: ExportContext, options: tuple[str, ...] = (), measured: Mapping[str, str] | None = None) -> str:
    """How to feed the converted file and read its outputs; ``measured``: the verification run's layout notes
    per input and output (an input the graph reads only through a Reshape takes its values in ONNX order,
    whatever its N..C shape says; an output is said channels-last only where the run restored it), None when
    no verification run says."""
    kept = [n for n in ctx.input_shapes if n in options]     # -kat/-kt NAMES: inputs kept in the ONNX layout
    in_order = [n for n, t in (measured or {}).items() if n in ctx.input_shapes and "values in ONNX order" in t]
    four_d = [n for n, s in ctx.input_shapes.items() if 3 <= len(s) <= 5 and n not in kept and n not in in_order]
    parts = []
    if kept:
        parts.append(f"{', '.join(kept[:4])} keep(s) the ONNX layout (converted with {' '.join(options)}).")
    if in_order:
        parts.append(f"{', '.join(in_order[:4])}: declared channels-last, but the model only reshapes it: give the "
                     "values in ONNX order, reshaped (`x.reshape(shape)`), not transposed (verified that way).")
    if four_d:
        parts.append(f"onnx2tf stores {', '.join(four_d[:4])} channels-last (N..C, e.g. NHWC): transpose NCHW data "
                     "with `np.moveaxis(x, 1, -1)`.")
    return f"{' '.join(parts) or 'No input changes layout.'} {_outputs_layout(ctx, measured)}".strip()


def _outputs_layout(ctx: ExportContext, measured: Mapping[str, str] | None) -> str:
    """How to read the outputs of rank 3-5: channels-last only where the verification run had to restore
    them (onnx2tf often returns a MatMul's or a Transpose's result in the ONNX layout already: corpus
    brainmaze_spindle_ieeg's detection [1, 30, 3] and segmentation [1, 7500, 1])."""
    ranked = [o.name for o in ctx.source.proto.graph.output
              if o.type.HasField("tensor_type") and o.type.tensor_type.HasField("shape")
              and 3 <= len(o.type.tensor_type.shape.dim) <= 5]
    if not ranked:
        return ""
    if measured is None:
        return (f"Outputs {', '.join(ranked[:4])} may come channels-last (`np.moveaxis(y, -1, 1)` gives the ONNX "
                "layout): not verified here.")
    note = {n: measured.get(n, "") for n in ranked}
    restored = [n for n in ranked if note[n].startswith("output N..C")]
    unknown = [n for n in ranked if note[n].startswith("output layout unknown")]
    as_is = [n for n in ranked if n not in restored and n not in unknown]
    parts = []
    if restored:
        parts.append(f"onnx2tf returns {', '.join(restored[:4])} channels-last: `np.moveaxis(y, -1, 1)` gives the "
                     "ONNX layout (verified that way).")
    if as_is:
        parts.append(f"{', '.join(as_is[:4])} come(s) in the ONNX layout: use as returned, not transposed (verified "
                     "that way).")
    if unknown:
        parts.append(f"{', '.join(unknown[:4])}: no static ONNX shape to tell the layout by: returned as LiteRT "
                     "gives it, check it against ONNX Runtime.")
    return " ".join(parts)


def _verify_run(ctx: ExportContext, engine: str, artifact: Path) -> tuple[dict | None, dict, str | None]:
    """The converted file in its own runtime, through the engine's runner and the one latency loop
    (:mod:`studio.export.artifact_run`: the row's pool and limits), bound to the ONNX model it came from."""
    args = {"onnx_path": str(ctx.deploy), "precision": "f32",
            "output_names": [o.name for o in ctx.source.proto.graph.output]}
    done = run_artifact_file(ctx, engine, artifact, args, runs=ctx.options.bench_runs, stage=f"{engine} (verify)")
    return done.outputs, {**done.details, **done.timing}, done.error


def _generic_readme(ctx: ExportContext, adapter: Any, row: EngineRow, conv: Conversion, files: tuple[Path, ...],
                    version: str, verification: str, layout: Mapping[str, str] | None = None) -> str:
    snippet = getattr(adapter, "deploy_snippet", None)
    return _README.format(
        label=row.label, files=", ".join(p.name for p in files), command=conv.command_line, version=version,
        verification=verification, install=row.install,
        shapes=", ".join(f"{n} {list(s)}" for n, s in ctx.input_shapes.items()),
        snippet=snippet(list(ctx.input_shapes), [o.name for o in ctx.source.proto.graph.output]) if snippet else "")


def _mnn_readme(ctx: ExportContext, adapter: Any, row: EngineRow, conv: Conversion, files: tuple[Path, ...],
                version: str, verification: str, layout: Mapping[str, str] | None = None) -> str:
    first = next(iter(ctx.input_shapes.values()), (1,))
    return _MNN_README.format(command=conv.command_line, version=version, verification=verification,
                              inputs=list(ctx.input_shapes), outputs=[o.name for o in ctx.source.proto.graph.output],
                              shape=tuple(first))


def _litert_readme(ctx: ExportContext, adapter: Any, row: EngineRow, conv: Conversion, files: tuple[Path, ...],
                   version: str, verification: str, layout: Mapping[str, str] | None = None) -> str:
    return _LITERT_README.format(command=conv.command_line, version=version, verification=verification,
                                 shapes=", ".join(f"{n} {list(s)}" for n, s in ctx.input_shapes.items()),
                                 layout=_feeds_layout(ctx, conv.options, layout))


# This layer's per-engine table: the converted targets with a README of their own (others: the generic one).
_READMES = {"mnn": _mnn_readme, "litert": _litert_readme}


def _export(ctx: ExportContext, engine: str) -> TargetResult:
    started = time.perf_counter()
    adapter = get_engine(engine)
    availability = adapter.available()
    if not availability.ok:
        return TargetResult(engine, ERROR, availability.reason or f"{adapter.label} is not available",
                            seconds=time.perf_counter() - started)
    if ctx.deploy_facts.hardware_specific_reason:
        return TargetResult(engine, ERROR, f"refused for {adapter.label}: {ctx.deploy_facts.hardware_specific_reason}; "
                            "export the original (un-optimized) model", seconds=time.perf_counter() - started)
    folder = ctx.bundle / engine
    folder.mkdir(parents=True, exist_ok=True)
    row = engine_row(engine)
    name = "model" + row.suffix
    ctx.progress(engine, f"converting to {name}")
    # fp32: a conversion must match ONNX Runtime on the reference feeds (LiteRT: else onnx2tf's options are tried)
    feeds = ctx.reference.feeds if ctx.reference.feeds and all(
        tuple(getattr(ctx.reference.feeds.get(n), "shape", ())) == tuple(s)
        for n, s in ctx.input_shapes.items()) else None
    conv = adapter.export_convert(ctx.deploy, folder, shapes=ctx.input_shapes, pool_key=ctx.pool_key,
                                  reference=feeds if ctx.deploy_precision == "fp32" else None)
    version = f" ({conv.converter_version})" if conv.converter_version else ""
    # a refusal before the converter ran (pnnx and a bool input) has no time: "converted in 0.00 s (?)" said it ran
    notes = [f"converter command: {conv.command_line}", f"converted in {conv.seconds:.2f} s{version}" if conv.ok
             else f"conversion failed after {conv.seconds:.2f} s{version}" if conv.seconds
             else "refused before the converter ran"]
    if conv.search_note:
        notes.append(f"converter options: {conv.search_note}")
    if not conv.ok:
        advice = f"; {conv.converter_label()} advises: {' '.join(conv.advice[:3])}" if conv.advice else ""
        return TargetResult(engine, ERROR, f"{adapter.label} could not convert the model: {conv.error}{advice}",
                            notes=tuple(notes), seconds=time.perf_counter() - started)
    artifact = folder / name
    ctx.progress(engine, f"verifying {name} in {adapter.label}")
    outputs, details, error = _verify_run(ctx, engine, artifact)
    criteria = CONVERTED_CRITERIA if ctx.deploy_precision == "fp32" and not ctx.deploy_facts.quantized else \
        criteria_for(ctx.deploy_precision, quantized_model=ctx.deploy_facts.quantized)
    version = details.get("version") or availability.version or ""
    v = verify_outputs(ctx.reference, outputs, criteria, engine=f"{engine} {version}".strip(),
                       error=None if error is None else f"{adapter.label} cannot run {name}: {error}")
    art_notes = [f"command: {conv.command_line}"]
    if conv.search_note:
        art_notes.append(f"converter options: {conv.search_note}")
    layout = details.get("layout") or {}
    if layout:
        art_notes.append("layout: " + "; ".join(f"{k[:40]}: {t}" for k, t in list(layout.items())[:6]))
    if details.get("names_mapped"):
        art_notes.append(f"names mapped {details['names_mapped']}")
    label = _LABELS.get(engine) or f"{row.export_label} (fp32, fixed input shapes)"
    companions = tuple(p for p in sorted(folder.iterdir()) if p != artifact and p.name != "README.md")
    art = ctx.artifact(artifact, engine, label, companions=companions, precision=ctx.deploy_precision, portable=True,
                       verification=v, notes=tuple(art_notes))
    readme = folder / "README.md"
    verification = f"{v.status} ({v.message})"
    write = _READMES.get(engine, _generic_readme)    # a converted row without a README of its own: the generic one
    atomic_write_text(readme, write(ctx, adapter, row, conv, (artifact, *companions), version, verification,
                                    layout=layout if outputs is not None else None))
    bench = {name: {"convert_ms": round(conv.seconds * 1000, 1), "load_ms": details.get("load_ms"),
                    "first_inference_ms": details.get("first_inference_ms"),
                    "latency_ms_median": details.get("latency_ms_median"), "runs": details.get("runs")}}
    return target_result(engine, [art], notes, bench, started)


def export_converted(ctx: ExportContext, engine: str) -> TargetResult:
    """The export target of a converted row of the engine table."""
    return _export(ctx, engine)
