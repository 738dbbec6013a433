"""The compatibility check: lint + custom ops + one check per engine, joined
into one :class:`~studio.core.findings.Report` (``api.check`` calls this).

Per node and engine target the report holds a status (supported / restricted
/ unsupported / unknown) and per engine target a model-level verdict with how
it was decided: ONNX Runtime and OpenVINO by a real session in a sandbox
worker (the kernel registry and ``query_model`` explain *which* node),
every converted engine of the table (MNN, LiteRT, ...) by a real conversion and run (``converted_check``), TensorRT by the support table (or the real parser where installed), other ORT
EPs by their tables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from diagnostics.base import EngineCheck
from diagnostics.custom_ops import detect_custom_ops
from diagnostics.lint import full_check_finding, lint_model, output_shape_findings
from diagnostics.node_context import collect_nodes
from studio.core.engines import ENGINE_NAMES, ENGINES, engine_row, resolve_engine_name
from studio.core.engines.table import engine_rows
from studio.core.engines.base import package_version
from studio.core.findings import Finding, Report, dedupe
from studio.core.model import ModelHandle
from studio.core.protowalk import cycle_nodes, cycle_text
from studio.core.sandbox import Limits, require_memory
from studio.inspect.shapes import sandboxed_shapes
from studio.core.engines import get_engine
from diagnostics.ort_check import check_onnxruntime, normalize_eps
from diagnostics.openvino_check import check_openvino
from diagnostics.converted_check import check_converted
from diagnostics.tensorrt_check import check_tensorrt
from studio.data.tasks import check_overrides
from studio.core.paths import check_regular_file
from studio.core.feeds import input_specs, load_npz
from diagnostics.support_tables import normalize_trt_version

log = logging.getLogger(__name__)

__all__ = ["check_model", "default_engines", "normalize_engines"]


def default_engines() -> tuple[str, ...]:
    """What ``check`` checks when no engine is named: the engine table's rows marked ``default_check``,
    native ones always (TensorRT by table where not installed), converted ones (MNN, LiteRT) wherever
    their stack (runtime and converter) is installed."""
    rows = [r for r in ENGINES if r.default_check]
    return tuple(r.name for r in rows if not r.converted) + tuple(
        r.name for r in rows if r.converted and get_engine(r.name).available().ok)


def normalize_engines(engines: Sequence[str] | str | None) -> tuple[str, ...]:
    """Canonical engine names; None (or nothing) is :func:`default_engines`, "all" every engine."""
    if engines is None:
        return default_engines()
    if isinstance(engines, str):
        engines = [e for e in engines.split(",") if e.strip()]
    if any(str(e).strip().lower() == "all" for e in engines):
        return ENGINE_NAMES
    out: list[str] = []
    for e in engines:
        name = resolve_engine_name(e)
        if name not in out:
            out.append(name)
    return tuple(out) or default_engines()


@dataclass(frozen=True)
class _CheckArgs:
    """What every engine's check may use (each takes its part)."""

    nodes: Any
    opsets: dict[str, int]
    eps: Sequence[str]
    run: bool
    dims: dict[str, int]
    inputs: str | Path | None
    pool_key: str
    limits: Limits | None
    trt_major: str
    ov_device: str
    tasks: dict[str, str]


def _check_ort(engine: str, path: Path, a: _CheckArgs) -> EngineCheck:
    return check_onnxruntime(path, a.nodes, eps=a.eps, run=a.run, dims=a.dims, inputs=a.inputs, pool_key=a.pool_key,
                             limits=a.limits, trt_version=a.trt_major)


def _check_ov(engine: str, path: Path, a: _CheckArgs) -> EngineCheck:
    return check_openvino(path, a.nodes, device=a.ov_device, run=a.run, dims=a.dims, inputs=a.inputs,
                          pool_key=a.pool_key, limits=a.limits)


def _check_converted(engine: str, path: Path, a: _CheckArgs) -> EngineCheck:
    """Every converted row: a real conversion and run."""
    return check_converted(engine, path, a.nodes, run=a.run, dims=a.dims, inputs=a.inputs, pool_key=a.pool_key,
                           limits=a.limits, tasks=a.tasks)


def _check_by_table(engine: str, path: Path, a: _CheckArgs) -> EngineCheck:
    """A "table" row (TensorRT without a GPU): its support table, or its real parser where installed."""
    return check_tensorrt(path, a.nodes, a.opsets, version=a.trt_major, pool_key=a.pool_key, limits=a.limits)


CheckFn = Callable[[str, Path, _CheckArgs], EngineCheck]
# This layer's per-engine table: a native engine's own check (its session, kernel registry, query_model) ...
ENGINE_CHECKS: dict[str, CheckFn] = {"onnxruntime": _check_ort, "openvino": _check_ov}
# ... else the check of its row's kind.
KIND_CHECKS: dict[str, CheckFn] = {"converted": _check_converted, "table": _check_by_table}


def engine_check(engine: str) -> CheckFn:
    """The check of ``engine`` (a canonical name): its own, else its kind's."""
    row = engine_row(engine)
    found = ENGINE_CHECKS.get(engine) or KIND_CHECKS.get(row.kind if row is not None else "")
    if found is None:
        raise ValueError(f"no compatibility check for engine {engine!r} (kind "
                         f"{row.kind if row is not None else '?'}): add one to ENGINE_CHECKS")
    return found


def check_model(handle: ModelHandle, engines: Sequence[str] | str | None = None, *, eps: Sequence[str] = ("cpu",),
                trt_version: str | int = "10", ov_device: str = "CPU", run: bool = True,
                dims: Mapping[str, int] | None = None, inputs: str | Path | None = None, pool_key: str = "default",
                limits: Limits | None = None, tasks: Mapping[str, str] | None = None) -> Report:
    """Check ``handle`` for the requested engines. Nothing is written but the
    kernel-registry cache; the model file is only read (by path, in workers).
    ``inputs``: an .npz whose first sample the real runs use instead of seeded inputs.
    ``tasks``: the user's {output: kind} (``studio.data.tasks``): how the converted engines'
    outputs are compared with ONNX Runtime's."""
    if tasks:
        check_overrides(handle.proto, tasks)
    if inputs is not None:
        inputs = Path(inputs).resolve()        # workers run in their own folder
        check_regular_file(inputs, max_bytes=8 * 2**30, label="inputs file")
        load_npz(inputs, input_specs(handle.proto))   # names, dtypes, ranks: a clear error before any run
    started = time.perf_counter()
    chosen = normalize_engines(engines)
    if {"onnxruntime", "openvino"} & set(chosen):      # a real session of the model in a worker
        require_memory(handle.path, "check", limits=limits)
    model = handle.proto
    path = handle.path.resolve()   # workers run in their own scratch folder

    trt_major = normalize_trt_version(trt_version)
    eps = normalize_eps(eps)
    table, _ = sandboxed_shapes(path, model, None, pool_key=pool_key)
    nodes = collect_nodes(model, table.values)
    customs = detect_custom_ops(model)
    findings: list[Finding] = list(lint_model(model, custom_ops=customs, shape_error=table.error,
                                              inferred=table.values, engines=chosen))
    cyclic = cycle_nodes(model.graph)
    if cyclic:      # the checker says 'not topologically sorted' and OpenVINO 'missing feed': neither names a cycle
        findings.append(Finding("GRAPH-CYCLE", "error",
                                f"{cycle_text(cyclic)}; no engine can run it",
                                fix_hint="re-export the model: an exporter or a graph edit wired a node's output "
                                         "back into its own inputs", source="graph"))
    if not handle.check.ok:
        findings.append(Finding("CHECKER-ERROR", "error", f"onnx.checker fails: {handle.check.message}",
                                fix_hint="fix the model (or re-export it)", source="onnx.checker"))
    else:
        full = full_check_finding(path, pool_key=pool_key, limits=limits)
        if full is not None:
            findings.append(full)

    checks: dict[str, EngineCheck] = {}
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    how = _CheckArgs(nodes, opsets, eps, run, dict(dims or {}), inputs, pool_key, limits, trt_major, ov_device,
                     dict(tasks or {}))
    for engine in chosen:
        checks[engine] = engine_check(engine)(engine, path, how)
    # Declared outputs vs a real run (the first native engine that ran the model).
    for engine in (r.name for r in engine_rows("native")):
        c = checks.get(engine)
        if c is not None and c.outputs:
            findings.extend(output_shape_findings(model, c.outputs, engine))
            break

    all_findings = list(findings)
    verdicts, node_verdicts, notes = [], [], []
    for engine in chosen:
        c = checks[engine]
        all_findings.extend(c.findings)
        verdicts.extend(c.verdicts)
        node_verdicts.extend(c.nodes)
        notes.extend(c.notes)
    # A table cannot see an invalid graph; engines that really load the model decide for themselves.
    broken = next((f for f in findings if f.is_error and f.code.startswith("CHECKER")), None)
    if broken is not None:
        verdicts = [replace(v, verdict="fails", summary=f"the model is invalid: {broken.message}",
                            errors=v.errors + 1) if v.decided_by == "table only" else v for v in verdicts]
    versions = {"onnx": package_version("onnx") or "?"}
    for engine in chosen:
        if checks[engine].version:
            versions[engine] = str(checks[engine].version)
    return Report(model=handle.name, sha256=handle.sha256, findings=dedupe(all_findings), verdicts=tuple(verdicts),
                  nodes=tuple(node_verdicts), engines=chosen, seconds=time.perf_counter() - started,
                  notes=tuple(notes), tool_versions=versions)
