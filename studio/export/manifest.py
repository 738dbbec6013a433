"""``manifest.json``: what the bundle holds and how each file was made and checked.

Layout (``format: onnx-studio-export/1``)::

    source        name, sha256, bytes, ir_version, opsets, producer, inputs, outputs
    options       the export options (targets, preset, precision, shapes...)
    deploy        the model the targets started from: precision, passes, pipeline records
    verification  reference, criteria, input shapes used
    targets       per target: status, message, notes, artifacts (path, sha256, precision, verification)
    benchmarks    per target/artifact: session creation and latency figures, with a note
    tools         versions of the studio, Python, onnx, engines, tritonclient
    files         every file in the bundle: path, bytes, sha256
    ok, failures  the verdict; failures are listed worst first

No absolute paths: everything is relative to the bundle folder.
"""

from __future__ import annotations

import platform
import time
from typing import Any

from studio.core.engines.base import package_version
from studio.export.context import ExportContext
from studio.export.results import TargetResult, json_safe
from studio import __version__
from studio.core.engines import ENGINES, get_engine
from studio.export.facts import model_facts

FORMAT = "onnx-studio-export/1"
BENCH_NOTE = ("Measured by the export's verification runs on this machine (CPU, one sandbox worker), each artifact "
              "opened by its engine's runner as `onnx-studio profile` opens it: session creation is the median of "
              "3 sessions (ONNX Runtime), latency the median of the timed runs of the studio's one latency loop "
              "after one warm-up run. Indicative only; `onnx-studio profile` gives full latency profiles.")


# The manifest's key for an engine's version where it is not the row's name (the package it ships as).
_TOOL_KEYS = {"litert": "ai-edge-litert"}


def tool_versions() -> dict[str, str | None]:
    """The studio's, Python's and every engine's version (the engine table's rows: what each adapter reports
    installed; TensorRT's status too, as it needs a GPU), and the converters' and libraries' the export used."""
    engines: dict[str, str | None] = {}
    for row in ENGINES:
        found = get_engine(row.name).available()
        engines[_TOOL_KEYS.get(row.name, row.name)] = found.version if found.version else None
        if row.kind == "table":
            engines[f"{row.name}_status"] = "available" if found.ok else f"not available: {found.reason}"
    return {"onnx-studio": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "onnx": package_version("onnx"), "onnx-ir": package_version("onnx-ir"),
            **engines, "onnx2tf": package_version("onnx2tf"), "pnnx": package_version("pnnx"),
            "tritonclient": package_version("tritonclient"), "protobuf": package_version("protobuf"),
            "numpy": package_version("numpy")}


def build_manifest(ctx: ExportContext, targets: tuple[TargetResult, ...], files: list[dict],
                   failures: tuple[str, ...], *, bundle_name: str, notes: tuple[str, ...], graph: str | None,
                   reports: dict[str, str]) -> dict[str, Any]:
    src, facts = ctx.source, ctx.deploy_facts

    source_facts = model_facts(src.proto)
    return json_safe({
        "format": FORMAT,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "bundle": bundle_name,
        "ok": not failures,
        "failures": list(failures),
        "source": {"name": src.path.name, "sha256": src.sha256, "bytes": src.total_bytes,
                   "external_files": len(src.external_files), **source_facts.to_dict()},
        "options": ctx.options.to_dict(),
        "request": dict(ctx.options.request) if ctx.options.request is not None else None,
        "deploy": {"same_as_source": ctx.deploy == src.path, "precision": ctx.deploy_precision,
                   "quantized": facts.quantized, "hardware_specific": list(facts.hardware_specific),
                   "custom_ops": list(facts.custom_ops), "pipeline": ctx.pipeline_records, "notes": list(notes),
                   "tensorrt_pipeline": ctx.shared.get("tensorrt_pipeline", [])},
        "verification": {"reference": ctx.reference.label, "reference_error": ctx.reference.error,
                         "criteria": ctx.criteria.text,
                         "input_shapes": {k: list(v) for k, v in ctx.input_shapes.items()}},
        "targets": {t.target: t.to_dict() for t in targets},
        "benchmarks": {"note": BENCH_NOTE, **{t.target: t.benchmarks for t in targets if t.benchmarks}},
        "tools": tool_versions(),
        "graph": graph,
        "reports": reports,
        "files": files,
    })
