"""TensorRT check without a GPU: the versioned support table (built from
onnx-tensorrt's operators.md, see ``support_tables/``) plus restriction checks
evaluated on each node (rank, attribute values, constant-only inputs, dtypes).

When ``tensorrt`` is importable (a GPU machine), the real ONNX parser also
runs in a worker (``supports_model_v2`` then ``parse_from_file``), and nodes
where the table and the parser disagree are reported (TRT-TABLE-DISAGREES).
That path is written against TensorRT 10's documented Python API and is NOT
VERIFIED HERE (no GPU, no wheel); without TensorRT the report says
"TensorRT check: table only".
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from diagnostics.base import EngineCheck, first_line, verdict_from
from diagnostics.custom_ops import STANDARD_DOMAINS, lookup, trt_plugin_available
from diagnostics.lint import FIX_TARGET_OPSET
from diagnostics.node_context import NodeCtx
from diagnostics.support_tables import normalize_trt_version, tensorrt_table
from studio.core.engines.base import module_present
from studio.core.errors import WorkerError
from studio.core.findings import Finding, NodeVerdict
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, default_limits, run_job

ENGINE = "tensorrt"

__all__ = ["ENGINE", "check_tensorrt", "node_status", "restriction_problems"]


def _dtype_ok(dtype: str | None, types: list[str]) -> bool:
    if dtype is None or not types:
        return True
    if dtype == "double":   # TensorRT casts DOUBLE down to FLOAT
        return "float" in types
    return dtype in types


def restriction_problems(ctx: NodeCtx, checks: list[dict]) -> list[str]:
    """Which of the table's structured restrictions this node violates (one text each)."""
    problems: list[str] = []
    for c in checks:
        kind = c["kind"]
        if kind == "input_rank":
            rank = ctx.input_ranks[0] if ctx.input_ranks else None
            if rank is not None and rank not in c["ranks"]:
                problems.append(f"{c['text']} (input rank is {rank})")
        elif kind in ("const_input", "const_input_max", "const_input_zero"):
            i = c["index"]
            if not ctx.has_input(i):
                continue
            if not ctx.is_const(i):
                if not c.get("optional"):
                    problems.append(f"{c['text']} (it is computed at run time)")
                continue
            value = ctx.const_inputs.get(i)
            if value is None:
                continue
            arr = np.asarray(value)
            if kind == "const_input_max" and arr.size and np.any(arr >= c["max"]):
                problems.append(f"{c['text']} (it is {arr.max()})")
            if kind == "const_input_zero" and arr.size and np.any(arr != 0):
                problems.append(c["text"])
        elif kind == "attr_in":
            value = ctx.attr(c["attr"], c.get("default"))
            if value is not None and value not in c["values"]:
                problems.append(f"{c['text']} (it is {value!r})")
        elif kind == "attr_all_ones":
            value = ctx.attr(c["attr"])
            if value and any(v != 1 for v in value):
                problems.append(f"{c['text']} (it is {value})")
        elif kind == "attr_absent":
            present = [a for a in c["attrs"] if a in ctx.attributes]
            if present:
                problems.append(f"{c['text']} ({', '.join(present)})")
        elif kind == "max_outputs":
            used = [o for o in ctx.outputs if o]
            if len(used) > c["count"]:
                problems.append(c["text"])
    return problems


def node_status(ctx: NodeCtx, version: str | int = "10") -> tuple[str, str]:
    """(status, reason): supported | restricted | unsupported | unknown."""
    table = tensorrt_table(version)
    major = table["major"]
    if ctx.domain not in STANDARD_DOMAINS or ctx.op_type not in table["ops"]:
        if trt_plugin_available(ctx.op_type, major):
            return "restricted", f"needs the TensorRT plugin {ctx.op_type} (registered with the plugin library)"
        known = lookup(ctx.domain, ctx.op_type)
        if known is not None and known.engines.get("tensorrt") == "plugin":
            return "restricted", f"needs a TensorRT plugin: {known.note or known.origin}" + (
                "; TensorRT 11 plugins must implement IPluginV3" if major >= 11 else "")
        if ctx.domain in ("ai.onnx.ml",):
            return "unsupported", f"TensorRT's parser has no ai.onnx.ml ops ({ctx.op_type})"
        return "unsupported", f"operator {ctx.op_type} (domain {ctx.domain or 'ai.onnx'}) not supported by TensorRT " \
                              f"{table['version']}; provide a custom op (a TensorRT plugin)"
    row = table["ops"][ctx.op_type]
    if not row["supported"]:
        extra = f" ({row['restrictions']})" if row["restrictions"] else ""
        return "unsupported", f"TensorRT {table['version']} does not support {ctx.op_type}{extra}"
    problems = restriction_problems(ctx, row["checks"])
    first = ctx.input_types[0] if ctx.input_types else None
    if first is not None and not _dtype_ok(first, row["types"]):
        problems.append(f"input type {first} is not among {', '.join(row['types'])}")
    if problems:
        return "unsupported", "; ".join(problems)
    notes = []
    if first == "double":
        notes.append("DOUBLE is cast down to FLOAT")
    if row["restrictions"] and not row["checks"]:
        notes.append(f"documented restriction not checked here: {row['restrictions']}")
    return ("restricted", "; ".join(notes)) if notes else ("supported", "in the support table")


# ============================================================================ the real parser (GPU machines)

@job("diagnostics.trt_parse")
def trt_parse_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:  # pragma: no cover - needs TensorRT
    """NOT VERIFIED HERE. TensorRT 10 Python API: Builder -> network -> OnnxParser."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.ERROR)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    path = str(args["model_path"])
    with open(path, "rb") as fh:
        blob = fh.read()
    data: dict[str, Any] = {"version": trt.__version__, "supported": None, "subgraphs": [], "errors": []}
    if hasattr(parser, "supports_model_v2"):
        data["supported"] = bool(parser.supports_model_v2(blob, path))
        for i in range(parser.num_subgraphs):
            data["subgraphs"].append({"supported": bool(parser.is_subgraph_supported(i)),
                                      "nodes": [int(n) for n in parser.get_subgraph_nodes(i)]})
    ok = parser.parse_from_file(path)
    data["parsed"] = bool(ok)
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        data["errors"].append({"desc": str(err.desc()), "node": int(err.node()),
                               "node_name": str(getattr(err, "node_name", lambda: "")()),
                               "op": str(getattr(err, "node_operator", lambda: "")())})
    return JobOutput(data=data)


def _parser_check(model_path: Path, nodes: Sequence[NodeCtx], table_status: dict[str, str], target: str,
                  pool_key: str, limits: Limits | None, result: EngineCheck) -> bool | None:
    """Run the real parser; returns whether it parsed (None when it could not run)."""
    from dataclasses import replace

    try:
        res = run_job("diagnostics.trt_parse", {"model_path": str(model_path)}, stage="TensorRT parser",
                      pool_key=pool_key, limits=replace(limits or default_limits(), address_space_limit=False))
    except WorkerError as exc:
        result.findings.append(Finding("TRT-PARSER-ERROR", "error", f"TensorRT's parser {exc.kind}: {first_line(exc)}",
                                       ENGINE, target=target, source="real parser"))
        return False
    data = res.data
    result.version = data.get("version")
    main = [n for n in nodes if not n.scope and not n.in_function]
    failed_nodes: set[str] = set()
    for err in data.get("errors", []):
        idx = err.get("node", -1)
        node = main[idx] if 0 <= idx < len(main) else next((n for n in nodes if n.name == err.get("node_name")), None)
        if node is not None:
            failed_nodes.add(node.id)
        result.findings.append(Finding("TRT-UNSUPPORTED", "error", f"TensorRT parser: {first_line(err.get('desc'))}",
                                       ENGINE, node.id if node else None, node.op_type if node else None,
                                       node.domain if node else None, target, source="real parser"))
    for n in main:
        table_ok = table_status.get(n.id) in ("supported", "restricted")
        parser_ok = n.id not in failed_nodes
        if data.get("parsed") is not None and table_ok != parser_ok:
            result.findings.append(Finding(
                "TRT-TABLE-DISAGREES", "info",
                f"support table says {'supported' if table_ok else 'unsupported'} for {n.id} ({n.qualified}); "
                f"the installed parser {'accepts' if parser_ok else 'rejects'} it", ENGINE, n.id, n.op_type, n.domain,
                target, source="real parser"))
    return bool(data.get("parsed"))


# ============================================================================ the check

def check_tensorrt(model_path: Path, nodes: Sequence[NodeCtx], opsets: dict[str, int], *, version: str | int = "10",
                   pool_key: str = "default", limits: Limits | None = None) -> EngineCheck:
    major = normalize_trt_version(version)
    table = tensorrt_table(major)
    target = f"{major}.x"
    result = EngineCheck(version=table["version"])
    status_of: dict[str, str] = {}
    for n in nodes:
        if n.is_function_call:
            continue
        status, reason = node_status(n, major)
        status_of[n.id] = status
        result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, target, status, reason,
                                        f"support table {table['version']}"))
        known = lookup(n.domain, n.op_type)
        if status == "unsupported":
            in_table = n.domain in STANDARD_DOMAINS and n.op_type in table["ops"]
            code = "TRT-RESTRICTION" if in_table and table["ops"][n.op_type]["supported"] else "TRT-UNSUPPORTED"
            fix = known.fix_pass if known else None
            if n.op_type == "GridSample" and not n.domain:
                hint = "GridSample must be 4-D on TensorRT: reshape 3-D sampling into 2-D, or write a plugin"
            elif fix and known:
                hint = f"apply '{fix}' ({known.standard_equivalent})"
            elif code == "TRT-RESTRICTION":
                hint = "make the input a constant (fold constants / fix input shapes) or change the attribute"
            else:
                hint = "provide a TensorRT plugin (IPluginV3) or replace the op"
            result.findings.append(Finding(code, "error", f"node {n.id}: {reason}" if code == "TRT-RESTRICTION" else
                                           reason, ENGINE, n.id, n.op_type, n.domain, target, hint, fix,
                                           f"support table {table['version']}"))
        elif status == "restricted" and "plugin" in reason:
            result.findings.append(Finding("TRT-PLUGIN", "warning", f"node {n.id}: {reason}", ENGINE, n.id, n.op_type,
                                           n.domain, target, "build and register the plugin library before building "
                                           "the engine", known.fix_pass if known else None, "custom-op knowledge base"))
        elif status == "restricted":
            # Supported with a condition the table states but this check cannot prove (or a silent
            # conversion such as DOUBLE -> FLOAT): the user must know before building an engine.
            hint = ("expect float32 precision for this node (TensorRT clamps DOUBLE to +-FLT_MAX)"
                    if "DOUBLE" in reason and "documented restriction" not in reason
                    else "make sure the node meets the documented restriction, or build the engine to confirm")
            result.findings.append(Finding("TRT-RESTRICTED", "warning", f"node {n.id} ({n.qualified}): {reason}",
                                           ENGINE, n.id, n.op_type, n.domain, target, hint, None,
                                           f"support table {table['version']}"))
    default_opset = opsets.get("", 0)
    new_target = max(table["opset_min"], min(FIX_TARGET_OPSET, table["opset_max"] or FIX_TARGET_OPSET))
    if default_opset and default_opset < table["opset_min"]:
        result.findings.append(Finding("OPSET-TOO-OLD", "error", f"TensorRT {table['version']} parses ai.onnx opsets "
                                       f"{table['opset_min']}-{table['opset_max']}; the model uses {default_opset}",
                                       ENGINE, target=target, fix_hint=f"convert the model to opset {new_target}",
                                       fix_pass="convert-opset", source=f"support table {table['version']}",
                                       fix_options={"target": new_target}))
    elif table["opset_max"] and default_opset > table["opset_max"]:
        result.findings.append(Finding("OPSET-TOO-NEW", "warning", f"TensorRT {table['version']} documents ai.onnx "
                                       f"opsets up to {table['opset_max']}; the model uses {default_opset}", ENGINE,
                                       target=target, fix_hint=f"convert the model to opset {table['opset_max']}",
                                       fix_pass="convert-opset", source=f"support table {table['version']}",
                                       fix_options={"target": table["opset_max"]}))
    if major == "11":
        result.notes.append("TensorRT 11: strongly typed networks only (FP16/BF16 from the model's types, INT8/FP8 "
                            "only from Q/DQ nodes; implicit INT8 calibration is gone); plugins should implement "
                            "IPluginV3")
    decided = "table only"
    parsed: bool | None = None
    if module_present("tensorrt"):
        parsed = _parser_check(model_path, nodes, status_of, target, pool_key, limits, result)
        decided = "real parser"
        result.notes.append("TensorRT check: real parser (not verified here) + support table")
    else:
        result.notes.append(f"TensorRT check: table only (TensorRT is not installed here; table "
                            f"{table['version']}, from onnx-tensorrt operators.md)")
    result.verdicts.append(verdict_from(ENGINE, target, result.findings, decided, version=table["version"],
                                        ran=None if parsed is None else parsed))
    return result
