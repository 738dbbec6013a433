"""OpenVINO check: convert with the ONNX frontend, ``Core.query_model`` per
device, compile and run once -- all in a sandbox worker.

* Conversion errors name the op and the node ("GridSample-20 ... <Node(GridSample):
  output> ... only supported for 4D input tensors", "No conversion rule found
  for operations: mmdeploy.grid_sampler"); they are parsed into per-node
  findings, and ``convert_partially`` pinpoints the nodes left unconverted.
* ``query_model`` results (OpenVINO op friendly names) are mapped back to ONNX
  nodes by node name, output tensor names, or a ``<node name>/...`` prefix.
* The CPU plugin computes in bf16 by default on CPUs with avx512_bf16/AMX: reported as
  OV-PRECISION, with the difference from f32 measured on the inputs the check ran (a second
  run at the default precision; files up to 512 MiB). The studio's OpenVINO runs pin f32.
* OpenVINO 2026.4 truncates an input-dependent ``Loop`` trip count to 32 bits
  (2^62 runs zero iterations with no error): OV-LOOP-TRIP-COUNT.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from diagnostics.base import (EngineCheck, OutputInfo, first_line, needs_inputs_finding, recorded_limit, run_candidates,
                             seeded_size_finding, verdict_from)
from diagnostics.custom_ops import lookup
from diagnostics.node_context import NodeCtx
from studio.core.errors import WorkerError
from studio.core.findings import Finding, NodeVerdict
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.mapped_pages import released_pages
from studio.core.sandbox import Limits, run_job
from diagnostics.input_search import validate_inputs
from studio.core.engines.openvino_io import UNKNOWN_RANK, openvino_inputs
from studio.core.nontensor import tensor_only_refusal

ENGINE = "openvino"

__all__ = ["ENGINE", "check_openvino"]


@job("diagnostics.ov_check")
def ov_check_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Convert, query, compile (default precision, then f32) and run once. The weight files' mapped pages
    OpenVINO reads while its plugin repacks them are dropped as it goes (else held twice: 1.84x the
    weights of a 1.48 GiB decoder; large weights only, studio.core.mapped_pages.MIN_WEIGHT_BYTES)."""
    with released_pages(args["model_path"]):
        return _ov_check(args, arrays, ctx)


def _ov_check(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    import onnx

    ctx.set_stage("OpenVINO model read")
    import openvino as ov
    from openvino.frontend import FrontEndManager

    path = str(args["model_path"])
    device = str(args.get("device") or "CPU")
    data: dict[str, Any] = {"version": ov.get_version(), "convert_error": None, "unconverted": [],
                            "query": None, "ops": [], "compile_error": None, "run_error": None,
                            "default_precision": None, "outputs": None, "feeds_error": None, "feeds_note": None}
    fe = FrontEndManager().load_by_framework("onnx")
    if fe is None or not fe.supported(path):
        data["convert_error"] = "OpenVINO's ONNX frontend does not accept this file"
        return JobOutput(data=data)
    try:
        model = fe.convert(fe.load(path))
    except Exception as exc:  # noqa: BLE001 - the message is the finding
        data["convert_error"] = str(exc)[:4000]
        ctx.set_stage("OpenVINO partial conversion")
        try:
            partial = fe.convert_partially(fe.load(path))
            # ONNXFrameworkNode: no conversion rule for the op; NotSupportedONNXNode: its converter failed.
            data["unconverted"] = [[op.get_friendly_name(), sorted(n for o in op.outputs() for n in o.get_names()),
                                    "failed" if "NotSupported" in op.get_type_name() else "no-rule"]
                                   for op in partial.get_ops() if "FrameworkNode" in op.get_type_name()
                                   or "NotSupported" in op.get_type_name()]
        except Exception as exc:  # noqa: BLE001 - kept: the report says the unconverted-op list is missing
            data["partial_error"] = str(exc)[:1000]
        return JobOutput(data=data)
    ctx.set_stage("OpenVINO query_model")
    core = ov.Core()
    try:
        data["query"] = dict(core.query_model(model, device))
    except Exception as exc:  # noqa: BLE001
        data["compile_error"] = f"query_model: {exc}"[:2000]
    data["ops"] = [[op.get_type_name(), op.get_friendly_name(), sorted(n for o in op.outputs() for n in o.get_names())]
                   for op in model.get_ops() if op.get_type_name() not in ("Parameter", "Result", "Constant")]
    ctx.set_stage("OpenVINO compile")
    try:
        default = core.compile_model(model, device)
        try:
            data["default_precision"] = str(default.get_property("INFERENCE_PRECISION_HINT"))
        except Exception as exc:  # noqa: BLE001 - kept: the report says the default precision is unknown
            data["precision_error"] = str(exc)[:500]
        if not (args.get("run", True) and _lowered(data["default_precision"])
                and Path(path).stat().st_size <= _MEASURED_MAX_BYTES):
            default = None          # the difference is measured on small models only (two compiled copies held)
        compiled = core.compile_model(model, device, {"INFERENCE_PRECISION_HINT": "f32"})
    except Exception as exc:  # noqa: BLE001
        data["compile_error"] = str(exc)[:2000]
        return JobOutput(data=data)
    if not args.get("run", True):
        return JobOutput(data=data)
    try:
        onnx_model = onnx.load_model(path, load_external_data=False)
        validate_inputs(onnx_model, args.get("dims"), args.get("inputs"))
    except Exception as exc:  # noqa: BLE001
        data["feeds_error"] = str(exc)[:500]
        return JobOutput(data=data)
    ctx.set_stage("OpenVINO inference")
    ran: list = []          # the feeds and f32 outputs of the set that ran

    def infer(feeds):
        values = _infer_values(compiled, onnx_model, feeds)
        ran[:] = [feeds, values]
        return [[n, None, None, "tensor"] if v is None else [n, str(v.dtype), list(v.shape), "tensor"]
                for n, v in values]

    run_candidates(onnx_model, infer, data, dims=args.get("dims"), inputs=args.get("inputs"))
    if default is not None and ran:
        ctx.set_stage("OpenVINO inference at its default precision")
        try:
            data["precision_diff"] = _largest_difference(ran[1], _infer_values(default, onnx_model, ran[0]))
        except Exception as exc:  # noqa: BLE001 - kept: the finding then says the difference was not measured
            data["precision_diff_error"] = str(exc)[:300]
    return JobOutput(data=data)


# Files up to this size are run a second time at OpenVINO's default precision to measure its difference.
_MEASURED_MAX_BYTES = 512 * 2**20


def _lowered(precision: str | None) -> bool:
    """Whether OpenVINO's reported default inference precision is below float32 (bf16, f16)."""
    shown = (re.findall(r"'([^']+)'", precision or "") or [precision or ""])[0].lower()
    return "bf16" in shown or "bfloat16" in shown or "f16" in shown.replace("bf16", "")


def _infer_values(compiled, onnx_model, feeds) -> list[tuple[str, np.ndarray | None]]:
    """One inference; each ONNX output (in ONNX order) with its value, None where OpenVINO has no such output."""
    request = compiled.create_infer_request()
    request.infer(openvino_inputs(list(compiled.inputs), feeds))
    by_name: dict[str, int] = {}
    for i, port in enumerate(compiled.outputs):
        for n in port.get_names():
            by_name.setdefault(n, i)
    return [(o.name, None if by_name.get(o.name) is None
             else np.array(request.get_output_tensor(by_name[o.name]).data, copy=True))
            for o in onnx_model.graph.output]


def _largest_difference(f32: list, lowered: list) -> list | None:
    """[output, max abs difference, max abs value of the f32 output] for the float output whose difference
    is largest relative to its values; None when no float output can be compared."""
    best = None
    for (name, a), (_, b) in zip(f32, lowered):
        if a is None or b is None or a.dtype.kind != "f" or a.shape != b.shape or a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        finite = np.isfinite(a64) & np.isfinite(b64)
        if not finite.any():
            continue
        diff = float(np.abs(a64 - b64)[finite].max())
        scale = float(np.abs(a64[finite]).max())
        key = diff / scale if scale > 0 else diff
        if best is None or key > best[0]:
            best = (key, [name, diff, scale])
    return None if best is None else best[1]


_NODE_IN_MESSAGE = re.compile(r"<Node\((?P<op>[\w.]+)\): (?P<node>[^>]*)>")
_FAILED_OP = re.compile(r"-- (?P<op>[\w.]+)-(?P<ver>\d+) with a message:(?P<msg>.*?)(?=-- |Summary:|$)", re.S)
_NO_RULE = re.compile(r"No conversion rule found for operations: (?P<ops>[^\n|]+)")


def _difference_text(data: dict) -> str:
    """The measured difference of OpenVINO's default precision from f32, or why it was not measured."""
    diff = data.get("precision_diff")
    if "precision_diff" in data and diff is None:
        return "not measured: no float output to compare; bf16 keeps 8 significant bits, about 0.4 % of each value"
    if diff:
        name, max_abs, scale = diff
        return (f"measured on the inputs it ran: max abs {max_abs:.3g} on output '{name[:60]}', whose values "
                f"reach {scale:.3g}")
    return "not measured here; bf16 keeps 8 significant bits, about 0.4 % of each value"


def _find_node(nodes: Sequence[NodeCtx], name_or_output: str) -> NodeCtx | None:
    name_or_output = name_or_output.strip()
    hit = next((n for n in nodes if n.name and n.name == name_or_output), None)
    if hit is None:
        hit = next((n for n in nodes if name_or_output in n.outputs), None)
    return hit


def _map_op(nodes: Sequence[NodeCtx], friendly: str, tensor_names: Sequence[str]) -> NodeCtx | None:
    hit = _find_node(nodes, friendly)
    if hit is None:
        for t in tensor_names:
            hit = next((n for n in nodes if t in n.outputs), None)
            if hit:
                break
    if hit is None and "/" in friendly:
        prefix = friendly
        while "/" in prefix and hit is None:
            prefix = prefix.rsplit("/", 1)[0]
            hit = next((n for n in nodes if n.name and n.name == prefix), None)
    return hit


def _conversion_findings(data: dict, nodes: Sequence[NodeCtx], target: str) -> list[Finding]:
    raw = data["convert_error"] or ""
    out: list[Finding] = []
    flagged: set[str] = set()
    for m in _FAILED_OP.finditer(raw):
        detail = first_line(m.group("msg"))
        nm = _NODE_IN_MESSAGE.search(m.group("msg"))
        node = _find_node(nodes, nm.group("node")) if nm else None
        reason = re.split(r"(?<=>)':?\s*", detail, maxsplit=1)[-1] if "<Node(" in detail else detail
        reason = re.sub(r"^.*?failed at [^:]+:\d+:\s*", "", reason)
        fix, hint = None, "rewrite the op into a form OpenVINO supports, or use another engine"
        if node is not None:
            flagged.add(node.id)
            if node.op_type == "GridSample" and "4D" in reason:
                hint = "OpenVINO's GridSample is 4-D only: reshape the volumetric sampling into 2-D, or use ONNX Runtime"
        if UNKNOWN_RANK.search(m.group("msg")):
            # the verdict stays "fails" (the model as it is does not convert); compare, profile and precision convert
            # a copy at their run's input shapes (studio.core.engines.openvino.OvRunner)
            fix, hint = "fix-input-shapes", ("OpenVINO needs this tensor's rank known (compare, profile and precision "
                                             "convert it at their input shapes); to deploy, fix the shapes (check --fix "
                                             "fix-input-shapes --dim NAME=VALUE, or export --target openvino --shapes "
                                             "NAME=SHAPE)")
        out.append(Finding("OV-CONVERT-ERROR", "error",
                           f"OpenVINO cannot convert {m.group('op')} (opset {m.group('ver')})"
                           + (f" at node {node.id}" if node else "") + f": {reason}", ENGINE,
                           node.id if node else None, node.op_type if node else m.group("op"),
                           node.domain if node else None, target, hint, fix, "OpenVINO ONNX frontend"))
    no_rule = _NO_RULE.search(raw)
    if no_rule:
        for qualified in (q.strip() for q in no_rule.group("ops").split(",") if q.strip()):
            dom, _, op = re.sub(r"-\d+$", "", qualified).rpartition(".")
            matches = [n for n in nodes if n.op_type == op and (n.domain == dom or (not dom and not n.domain))]
            for n in matches or [None]:
                known = lookup(n.domain if n else dom, op)
                fix = known.fix_pass if known else None
                hint = (f"apply '{fix}' ({known.standard_equivalent})" if fix and known else
                        "provide a custom op (an OpenVINO extension) or replace the op by standard ONNX ops")
                if n is not None:
                    flagged.add(n.id)
                out.append(Finding("OV-UNSUPPORTED", "error",
                                   f"operator {op} (domain {dom or 'ai.onnx'}) not supported by OpenVINO; provide a "
                                   "custom op (the ONNX frontend has no conversion rule)", ENGINE, n.id if n else None, op,
                                   n.domain if n else dom, target, hint, fix, "OpenVINO ONNX frontend"))
    for friendly, names, *kind in data.get("unconverted", []):
        n = _map_op(nodes, friendly, names)
        if n is not None and n.id not in flagged:
            flagged.add(n.id)
            known = lookup(n.domain, n.op_type)
            if kind and kind[0] == "failed":
                out.append(Finding("OV-CONVERT-ERROR", "error", f"OpenVINO cannot convert node {n.id} "
                                   f"({n.op_type}): its converter fails on this node", ENGINE, n.id, n.op_type,
                                   n.domain, target, "rewrite the op into a form OpenVINO supports, or use another "
                                   "engine", known.fix_pass if known else None, "OpenVINO partial conversion"))
                continue
            out.append(Finding("OV-UNSUPPORTED", "error", f"operator {n.op_type} (domain {n.domain or 'ai.onnx'}) "
                               "not supported by OpenVINO; provide a custom op", ENGINE, n.id, n.op_type, n.domain,
                               target, None, known.fix_pass if known else None, "OpenVINO partial conversion"))
    if not out:
        out.append(Finding("OV-CONVERT-ERROR", "error", f"OpenVINO cannot convert the model: {first_line(raw)}",
                           ENGINE, target=target, source="OpenVINO ONNX frontend"))
    if data.get("partial_error"):
        out.append(Finding("OV-PARTIAL-CONVERT", "info",
                           "OpenVINO's partial conversion failed too, so the list of every unconverted node is "
                           f"missing: {first_line(data['partial_error'])}", ENGINE, target=target,
                           fix_hint="fix the first conversion error, then check again: nodes after it were not "
                           "examined", source="OpenVINO partial conversion"))
    return out


def _loop_trip_count_findings(nodes: Sequence[NodeCtx], target: str) -> list[Finding]:
    out = []
    for n in nodes:
        if n.op_type == "Loop" and not n.domain and n.has_input(0) and not n.is_const(0):
            out.append(Finding(
                "OV-LOOP-TRIP-COUNT", "warning",
                f"Loop {n.id} takes its trip count from a computed value; OpenVINO 2026.4 truncates it to 32 bits "
                "(a count of 2^62 runs zero iterations and returns a wrong result without error)", ENGINE, n.id,
                "Loop", "", target, "keep trip counts below 2^31, or compare with ONNX Runtime", None,
                "known OpenVINO behaviour (measured)"))
    return out


def _tensor_only(model_path: Path) -> str | None:
    import onnx

    try:
        return tensor_only_refusal(onnx.load_model(str(model_path), load_external_data=False), "OpenVINO")
    except Exception:  # noqa: BLE001 - the converter's findings still say what failed
        return None


def check_openvino(model_path: Path, nodes: Sequence[NodeCtx], *, device: str = "CPU", run: bool = True,
                   dims: dict[str, int] | None = None, inputs: Path | None = None, pool_key: str = "default",
                   limits: Limits | None = None) -> EngineCheck:
    result = EngineCheck()
    target = device
    checked = [n for n in nodes if not n.is_function_call]
    try:
        res = run_job("diagnostics.ov_check", {"model_path": str(model_path), "device": device, "run": run,
                                               "dims": dims or {}, "inputs": str(inputs) if inputs else None},
                      stage="OpenVINO check", pool_key=pool_key, limits=limits)
    except WorkerError as exc:
        if recorded_limit(result, exc, ENGINE, "OpenVINO", "OV", target):
            return result
        result.findings.append(Finding("OV-CRASH", "error", f"OpenVINO {exc.kind}: {first_line(exc)}", ENGINE,
                                       target=target, fix_hint="the engine process died on this model; see the "
                                       "lint findings for the likely cause", source="real session"))
        result.verdicts.append(verdict_from(ENGINE, target, result.findings, "real session", ran=False))
        return result
    data = res.data
    result.version = data.get("version")
    ran: bool | None = True
    needs_inputs = False
    if data["convert_error"]:
        ran = False
        nontensor = _tensor_only(model_path)
        if nontensor:      # the converter's own words name internal ops (util::SequenceMark)
            result.findings.append(Finding("OV-NON-TENSOR", "error", nontensor, ENGINE, target=target,
                                           fix_hint="deploy with ONNX Runtime, or export the model with tensor "
                                           "inputs and outputs", source="model interface"))
        result.findings.extend(_conversion_findings(data, checked, target))
        bad = {f.node for f in result.findings if f.node}
        for n in checked:
            status = "unsupported" if n.id in bad else "unknown"
            reason = next((f.message for f in result.findings if f.node == n.id), "conversion stopped earlier")
            result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, target, status, reason,
                                            "OpenVINO ONNX frontend"))
    else:
        query = data.get("query") or {}
        per_node: dict[str, list[bool]] = {}
        for op_type, friendly, names in data.get("ops", []):
            n = _map_op(checked, friendly, names)
            if n is not None:
                per_node.setdefault(n.id, []).append(friendly in query)
        for n in checked:
            marks = per_node.get(n.id)
            if marks is None:
                status, reason = "supported", "converted (folded or merged into other ops)"
            elif all(marks):
                status, reason = "supported", f"query_model: {device}"
            else:
                status, reason = "unsupported", f"query_model: not supported on {device}"
                result.findings.append(Finding("OV-UNSUPPORTED", "error", f"node {n.id} ({n.qualified}) is not "
                                               f"supported on OpenVINO {device}", ENGINE, n.id, n.op_type, n.domain,
                                               target, "use another device or engine for this op", None,
                                               "OpenVINO query_model"))
            result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, target, status, reason,
                                            "OpenVINO query_model"))
        for key, code, stage in (("compile_error", "OV-COMPILE-ERROR", "compile"),
                                 ("run_error", "OV-RUN-ERROR", "inference")):
            if data.get(key) and not (key == "run_error" and data.get("needs_inputs")):
                ran = False
                hint = data.get("feeds_note") if key == "run_error" else None
                result.findings.append(Finding(code, "error", f"OpenVINO {stage} fails: {first_line(data[key])}",
                                               ENGINE, target=target, fix_hint=hint, source="real session"))
        for extra in (seeded_size_finding(ENGINE, "OpenVINO", data, target),
                      needs_inputs_finding(ENGINE, "OpenVINO", data, target)):
            if extra is not None:
                result.findings.append(extra)
        # Compiled, but no input the studio could make ran it (or none could be made): "not run".
        needs_inputs = bool(data.get("needs_inputs") or data.get("feeds_error")) and not data.get("compile_error")
        if needs_inputs:
            ran = None
        if data.get("feeds_error"):
            result.findings.append(Finding("OV-NOT-RUN", "info", "the model compiled but was not run: "
                                           f"{first_line(data['feeds_error'])}", ENGINE, target=target,
                                           source="real session"))
        if data.get("precision_error"):
            result.findings.append(Finding(
                "OV-PRECISION", "info", f"OpenVINO {device} did not report its default inference precision "
                f"({first_line(data['precision_error'])}); it may compute in bf16 on this CPU", ENGINE, target=target,
                fix_hint="set INFERENCE_PRECISION_HINT=f32 (the studio's OpenVINO runs do) when accuracy matters",
                source="OpenVINO compile"))
        shown = data.get("default_precision") or ""
        shown = (re.findall(r"'([^']+)'", shown) or [shown])[0]
        if _lowered(shown):
            result.findings.append(Finding(
                "OV-PRECISION", "warning",
                f"OpenVINO {device} computes in {shown} by default on this CPU; outputs differ "
                f"from float32 ({_difference_text(data)})", ENGINE, target=target,
                fix_hint="set INFERENCE_PRECISION_HINT=f32 (the studio's OpenVINO runs do) when accuracy matters",
                source="OpenVINO compile"))
        result.findings.extend(_loop_trip_count_findings(checked, target))
        if data.get("outputs") is not None:
            result.outputs = tuple(OutputInfo(n, d, None if s is None else tuple(s), k) for n, d, s, k in data["outputs"])
    result.verdicts.append(verdict_from(ENGINE, target, result.findings, "real session", version=result.version,
                                        ran=ran, needs_inputs=needs_inputs, ran_on=data.get("ran_on")))
    return result
