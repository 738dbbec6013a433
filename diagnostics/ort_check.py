"""ONNX Runtime check: per-node kernel matching, then a real session as the final word.

1. The installed build's kernel registry
   (``onnxruntime.capi.onnxruntime_pybind11_state.get_all_opkernel_def()``: op,
   domain, opset range, provider, type constraints) is fetched in a sandbox job
   and cached on disk per ORT version (``<workspace root>/cache/``).
2. Each node is matched against it for every EP the user selects: op, domain,
   the schema since-version at the model's opset, and the node's input dtypes
   (from shape inference) against the kernel's type constraints. An op with no
   kernel but a function body is expanded by ORT (supported). EPs that are not
   installed (CUDA, TensorRT) use the shipped tables, labelled "table only";
   a node the CUDA EP cannot take falls back to CPU (ORT-CPU-FALLBACK). The
   TensorRT EP's nodes are decided by the TensorRT table of the requested
   version; a node TensorRT lacks goes to the CUDA EP when the user selected it
   too (ORT-EP-FALLBACK), else to the CPU EP, as ORT assigns providers.
3. The model is then loaded and run once on seeded feeds in a worker (CPU EP,
   default session options, the same as ``get_engine("ort").run``): its
   outcome decides the model-level verdict, and its error is mapped back to the
   node it names.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from diagnostics.base import (EngineCheck, OutputInfo, first_line, limit_reached, needs_inputs_finding,
                             recorded_limit, run_candidates, seeded_size_finding, verdict_from)
from diagnostics.custom_ops import lookup
from diagnostics.node_context import NodeCtx
from diagnostics.support_tables import ort_cuda_table
from studio.core import jsonsafe
from studio.core.engines.base import package_version
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError
from studio.core.findings import Finding, NodeVerdict
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.paths import atomic_write_text
from studio.core.sandbox import Limits, run_job, session_limits
from studio.core.workspace import user_cache_dir
from diagnostics.input_search import validate_inputs
from diagnostics.support_tables import normalize_trt_version
from diagnostics.tensorrt_check import node_status as trt_status

log = logging.getLogger(__name__)

ENGINE = "onnxruntime"
EP_NAMES = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
_OPEN = 2**31 - 1
_ORT_DISTS = ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino", "onnxruntime-directml")
# Ops ORT handles without a kernel (turned into initializers or handled by the graph).
_NO_KERNEL_NEEDED = {("", "Constant")}

__all__ = ["ENGINE", "EP_NAMES", "KernelRegistry", "check_onnxruntime", "kernel_registry", "normalize_eps"]


def normalize_eps(eps: Iterable[str]) -> tuple[str, ...]:
    out = ["cpu"]
    for ep in eps:
        key = str(ep).strip().lower().removesuffix("executionprovider").replace("-", "").replace("_", "")
        key = {"trt": "tensorrt", "gpu": "cuda"}.get(key, key)
        if key not in EP_NAMES:
            raise StudioError(f"unknown execution provider {str(ep)[:30]!r}; choose from cpu, cuda, tensorrt",
                              code=ErrorCode.BAD_OPTION)
        if key not in out:
            out.append(key)
    return tuple(out)


# ============================================================================ kernel registry

@dataclass(frozen=True)
class Kernel:
    since: int
    until: int
    types: dict[str, tuple[str, ...]]     # constraint -> ("float", "int64"...)


class KernelRegistry:
    """Kernels per (provider, domain, op)."""

    def __init__(self, version: str, rows: list[list[Any]]) -> None:
        self.version = version
        self._by: dict[tuple[str, str, str], list[Kernel]] = defaultdict(list)
        for op, domain, since, until, provider, constraints in rows:
            types = {k: tuple(_strip_tensor(t) for t in v) for k, v in constraints.items()}
            self._by[(provider, domain, op)].append(Kernel(int(since), int(until), types))

    @property
    def providers(self) -> set[str]:
        return {p for p, _, _ in self._by}

    def kernels(self, provider: str, domain: str, op: str) -> list[Kernel]:
        return self._by.get((provider, domain, op), [])


def _strip_tensor(t: str) -> str:
    m = re.fullmatch(r"tensor\((\w+)\)", t)
    return m.group(1) if m else t


@job("diagnostics.ort_kernels")
def ort_kernels_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    rows = [[k.op_name, k.domain, int(k.version_range[0]), int(k.version_range[1]), k.provider,
             {name: list(types) for name, types in k.type_constraints.items()}] for k in C.get_all_opkernel_def()]
    return JobOutput(data={"version": ort.__version__, "rows": rows,
                           "providers": ort.get_available_providers()})


_registry_lock = threading.Lock()
_registry_memo: dict[str, tuple[KernelRegistry, list[str]]] = {}


def _cache_file(version: str) -> Path:
    return user_cache_dir() / f"ort-kernels-{re.sub(r'[^0-9A-Za-z.+-]', '_', version)}.json"


def kernel_registry(*, pool_key: str = "default", limits: Limits | None = None) -> tuple[KernelRegistry, list[str]]:
    """(registry, available providers) of the installed ORT, cached per version (memory, disk)."""
    version = package_version(*_ORT_DISTS) or "unknown"
    with _registry_lock:
        if version in _registry_memo:
            return _registry_memo[version]
        path = _cache_file(version)
        data = None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            pass
        if not data or data.get("version") != version:
            res = run_job("diagnostics.ort_kernels", {}, stage="ONNX Runtime kernel registry", pool_key=pool_key,
                          limits=limits)
            data = res.data
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(path, jsonsafe.dumps(data))
            except OSError as exc:  # a read-only workspace only costs speed
                log.info("cannot cache the ORT kernel registry: %s", exc)
        entry = (KernelRegistry(data["version"], data["rows"]), list(data.get("providers", [])))
        _registry_memo[version] = entry
        return entry


# ============================================================================ matching

def _formal_constraints(ctx: NodeCtx) -> list[str] | None:
    """Type-constraint name of each input position (from the ONNX schema), or None."""
    if ctx.since is None:
        return None
    import onnx

    try:
        schema = onnx.defs.get_schema(ctx.op_type, ctx.opset, ctx.domain)
    except Exception:  # noqa: BLE001
        return None
    names: list[str] = []
    formal = list(schema.inputs)
    for i in range(len(ctx.inputs)):
        if not formal:
            break
        p = formal[min(i, len(formal) - 1)]
        if i >= len(formal) and p.option != p.option.Variadic:
            break
        names.append(p.type_str)
    return names


def _has_function_body(ctx: NodeCtx) -> bool:
    import onnx

    try:
        schema = onnx.defs.get_schema(ctx.op_type, ctx.opset, ctx.domain)
    except Exception:  # noqa: BLE001
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def match_kernel(registry: KernelRegistry, provider: str, ctx: NodeCtx) -> tuple[str, str]:
    """(status, reason) of a node on one provider: supported | unsupported | unknown."""
    if (ctx.domain, ctx.op_type) in _NO_KERNEL_NEEDED:
        return "supported", "handled by the graph (no kernel needed)"
    kernels = registry.kernels(provider, ctx.domain, ctx.op_type)
    version = ctx.since if ctx.since is not None else max(ctx.opset, 1)
    in_range = [k for k in kernels if k.since <= version <= k.until] if ctx.since is not None else \
        [k for k in kernels if k.since <= version]
    if not in_range:
        if ctx.since is not None and _has_function_body(ctx):
            return "supported", f"no {ctx.op_type} kernel; ONNX Runtime expands its function body"
        if kernels:
            ranges = ", ".join(f"{k.since}" + (f"-{k.until}" if k.until < _OPEN else "+")
                               for k in sorted({(k.since, k.until): k for k in kernels}.values(), key=lambda k: k.since))
            return "unsupported", (f"no kernel for {ctx.qualified} at opset version {version} "
                                   f"(kernels exist for versions {ranges})")
        return "unsupported", f"no kernel for {ctx.qualified} on {provider}"
    constraints = _formal_constraints(ctx)
    if not constraints:
        return "supported", "kernel found"
    wanted = defaultdict(set)
    for name, dtype in zip(constraints, ctx.input_types):
        if dtype is not None:
            wanted[name].add(dtype)
    if not wanted:
        return "supported", "kernel found (input types unknown)"
    for k in in_range:
        if all(not k.types.get(name) or all(t in k.types[name] for t in types) for name, types in wanted.items()):
            return "supported", "kernel found"
    shown = ", ".join(f"{n}={'/'.join(sorted(t))}" for n, t in sorted(wanted.items()))
    offered = sorted({t for k in in_range for ts in k.types.values() for t in ts})
    return "unsupported", (f"no {ctx.qualified} kernel for types {shown} on {provider} "
                           f"(kernels take {', '.join(offered[:8])})")


def _cuda_table_status(ctx: NodeCtx, ort_version: str | None) -> tuple[str, str]:
    table = ort_cuda_table()["kernels"]
    row = table.get(f"{ctx.domain}::{ctx.op_type}")
    if (ctx.domain, ctx.op_type) in _NO_KERNEL_NEEDED:
        return "supported", "handled by the graph"
    if row is None:
        return "unsupported", f"no CUDA kernel for {ctx.qualified} in the shipped table"
    version = ctx.since if ctx.since is not None else max(ctx.opset, 1)
    if version < row["since"] or (row["until"] is not None and version > row["until"]):
        return "unsupported", f"CUDA kernel for {ctx.qualified} covers opset {row['since']}+, node is {version}"
    if row.get("min_ort") and ort_version and _version_tuple(ort_version) < _version_tuple(row["min_ort"]):
        return "unsupported", f"the CUDA kernel for {ctx.qualified} arrived in ONNX Runtime {row['min_ort']}"
    if row.get("types"):
        bad = [t for t in ctx.input_types[:1] if t is not None and t not in row["types"]]
        if bad:
            return "unsupported", f"CUDA kernel for {ctx.qualified} takes {', '.join(row['types'])}, not {bad[0]}"
    if row.get("rank") and ctx.input_ranks and ctx.input_ranks[0] is not None and ctx.input_ranks[0] != row["rank"]:
        return "unsupported", f"CUDA kernel for {ctx.qualified} handles rank {row['rank']}, input has rank " \
                              f"{ctx.input_ranks[0]}"
    if not row.get("types") and ctx.input_types and ctx.input_types[0] is not None:
        return "supported", f"CUDA kernel in the shipped table (op and opset; input type {ctx.input_types[0]} " \
                            "not in the table)"
    return "supported", "CUDA kernel in the shipped table"


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


# ============================================================================ the real session

@job("diagnostics.ort_session")
def ort_session_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Create a session (CPU EP, default options) and run it once on seeded feeds."""
    import onnx

    ctx.set_stage("ONNX Runtime session creation")
    import onnxruntime as ort

    data: dict[str, Any] = {"version": ort.__version__, "session_error": None, "run_error": None,
                            "feeds_error": None, "outputs": None, "feeds_note": None}
    so = ort.SessionOptions()
    if ctx.cpu_threads:
        so.intra_op_num_threads = ctx.cpu_threads
    try:
        session = ort.InferenceSession(str(args["model_path"]), sess_options=so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the message is the finding
        data["session_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        return JobOutput(data=data)
    if not args.get("run", True):
        return JobOutput(data=data)
    model = onnx.load_model(str(args["model_path"]), load_external_data=False)
    try:
        validate_inputs(model, args.get("dims"), args.get("inputs"))
    except Exception as exc:  # noqa: BLE001
        data["feeds_error"] = str(exc)[:500]
        return JobOutput(data=data)
    ctx.set_stage("ONNX Runtime inference")
    run_candidates(model, lambda feeds: [_describe(o.name, v) for o, v in zip(
        session.get_outputs(), session.run(None, dict(feeds)))], data, dims=args.get("dims"),
        inputs=args.get("inputs"))
    return JobOutput(data=data)


def _describe(name: str, value: Any) -> list:
    if isinstance(value, np.ndarray):
        dtype = "string" if value.dtype.kind in "OUS" else str(value.dtype)
        return [name, dtype, list(value.shape), "tensor"]
    if isinstance(value, list):
        return [name, None, None, "sequence"]
    if isinstance(value, dict):
        return [name, None, None, "map"]
    return [name, None, None, "none" if value is None else "tensor"]


_NODE_PATTERNS = (
    re.compile(r"implementation for (?P<op>[\w.]+)\((?P<ver>-?\d+)\) node with name '(?P<node>[^']*)'"),
    re.compile(r"Node \((?P<node>[^)]*)\) Op \((?P<op>[^)]*)\)"),
    re.compile(r"running (?P<op>[\w.]+) node\. Name:'(?P<node>[^']*)'"),
    re.compile(r"Node:(?P<node>[^ ]+) Output:"),
    re.compile(r'In Node, \("(?P<node>[^"]*)", (?P<op>[\w.]+),'),
)
_UNREGISTERED = re.compile(r"(?P<domain>[\w.]*):(?P<op>\w+)\((?P<ver>-?\d+)\) is not a registered function/op")


def _node_of(message: str, nodes: Sequence[NodeCtx]) -> NodeCtx | None:
    for pattern in _NODE_PATTERNS:
        m = pattern.search(message)
        if m:
            name = m.groupdict().get("node") or ""
            hit = next((n for n in nodes if n.name and n.name == name), None)
            if hit is None and name:
                hit = next((n for n in nodes if name in n.outputs), None)
            if hit is not None:
                return hit
    m = _UNREGISTERED.search(message)
    if m:
        dom = m.group("domain")
        return next((n for n in nodes if n.op_type == m.group("op") and n.domain == dom), None)
    return None


def _session_findings(data: dict, nodes: Sequence[NodeCtx], target: str) -> list[Finding]:
    out: list[Finding] = []
    for key, code, stage in (("session_error", "ORT-SESSION-ERROR", "session creation"),
                             ("run_error", "ORT-RUN-ERROR", "inference")):
        raw = data.get(key)
        if not raw or (key == "run_error" and data.get("needs_inputs")):
            continue
        msg = first_line(raw)
        node = _node_of(raw, nodes)
        unregistered = _UNREGISTERED.search(raw)
        if unregistered or "Could not find an implementation" in raw:
            code = "ORT-NO-KERNEL"
        hint = ("register a custom-op library (mmdeploy, onnxruntime-extensions...) or replace the op"
                if unregistered else "see the node's findings; fix the model or its inputs")
        if key == "run_error" and data.get("feeds_note") and not unregistered:
            hint = str(data["feeds_note"])
        fix = None
        if node is not None:
            known = lookup(node.domain, node.op_type)
            if known and known.fix_pass:
                fix, hint = known.fix_pass, f"apply '{known.fix_pass}' ({known.standard_equivalent})"
        out.append(Finding(code, "error", f"ONNX Runtime {stage} fails: {msg}", ENGINE,
                           node.id if node else None, node.op_type if node else None,
                           node.domain if node else None, target, hint, fix, "real session"))
    for extra in (seeded_size_finding(ENGINE, "ONNX Runtime", data, target),
                  needs_inputs_finding(ENGINE, "ONNX Runtime", data, target)):
        if extra is not None:
            out.append(extra)
    if data.get("feeds_error"):
        out.append(Finding("ORT-NOT-RUN", "info", f"the model was loaded but not run: {first_line(data['feeds_error'])}",
                           ENGINE, target=target, source="real session"))
    return out


# ============================================================================ the check

def _node_finding(ctx: NodeCtx, target: str, status: str, reason: str, *, table: bool) -> Finding | None:
    if status != "unsupported":
        return None
    known = lookup(ctx.domain, ctx.op_type)
    fix_pass = known.fix_pass if known else None
    hint = (f"apply '{fix_pass}' ({known.standard_equivalent})" if fix_pass and known else
            f"provide a custom op ({known.note})" if known and known.note else
            "provide a custom op, or replace the op by standard ONNX ops")
    if not ctx.domain or ctx.domain in ("ai.onnx.ml",):
        if known is None:
            hint = "use an opset/type the kernels support (convert-opset, or a Cast), or another engine"
    source = "shipped table" if table else "kernel registry"
    standard = ctx.since is not None
    tail = f": {reason}" if standard else f"; provide a custom op ({reason})"
    return Finding("ORT-NO-KERNEL", "error",
                   f"operator {ctx.op_type} (domain {ctx.domain or 'ai.onnx'}) not supported by ONNX Runtime "
                   f"({target}){tail}", ENGINE, ctx.id, ctx.op_type, ctx.domain, target, hint, fix_pass, source)


def check_onnxruntime(model_path: Path, nodes: Sequence[NodeCtx], *, eps: Sequence[str] = ("cpu",),
                      run: bool = True, dims: dict[str, int] | None = None, inputs: Path | None = None,
                      pool_key: str = "default", limits: Limits | None = None, trt_version: str | int = "10") -> EngineCheck:
    """``trt_version``: the TensorRT major whose table decides the TensorRT EP's nodes."""
    result = EngineCheck()
    eps = normalize_eps(eps)
    trt_version = normalize_trt_version(trt_version)
    try:
        registry, available = kernel_registry(pool_key=pool_key, limits=limits)
    except (WorkerError, StudioError) as exc:
        if recorded_limit(result, exc, ENGINE, "ONNX Runtime", "ORT", EP_NAMES["cpu"]):
            return result
        result.findings.append(Finding("ORT-UNAVAILABLE", "error", f"ONNX Runtime cannot be asked: {exc}", ENGINE,
                                       target=EP_NAMES["cpu"], source="kernel registry"))
        result.verdicts.append(verdict_from(ENGINE, EP_NAMES["cpu"], result.findings, "not checked"))
        return result
    result.version = registry.version
    checked = [n for n in nodes if not n.is_function_call]
    cpu = EP_NAMES["cpu"]
    cpu_status: dict[str, tuple[str, str]] = {}
    for n in checked:
        cpu_status[n.id] = match_kernel(registry, cpu, n)
        status, reason = cpu_status[n.id]
        result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, cpu, status, reason, "kernel registry"))
        f = _node_finding(n, cpu, status, reason, table=False)
        if f:
            result.findings.append(f)

    # The real session: the final word for the CPU EP.
    ran: bool | None = None
    limit = None
    try:
        res = run_job("diagnostics.ort_session", {"model_path": str(model_path), "run": run, "dims": dims or {},
                                                  "inputs": str(inputs) if inputs else None},
                      stage="ONNX Runtime session", pool_key=pool_key, limits=session_limits(limits, model_path))
        data = res.data
        # Compiled, but no input the studio could make ran it (or none could be made): "not run".
        needs_inputs = bool(data.get("needs_inputs") or data.get("feeds_error")) and not data.get("session_error")
        ran = None if needs_inputs else not (data.get("session_error") or data.get("run_error"))
        known_nodes = {f.node for f in result.findings if f.code == "ORT-NO-KERNEL" and f.node}
        result.findings.extend(f for f in _session_findings(data, nodes, cpu)
                               if not (f.code == "ORT-NO-KERNEL" and f.node in known_nodes))
        if ran or needs_inputs:
            # The engine accepted every node: registry-only "unsupported" were wrong (e.g. fused/handled).
            result.findings = [f for f in result.findings if not (f.code == "ORT-NO-KERNEL" and f.target == cpu
                                                                  and f.source == "kernel registry")]
            said = " (the real session ran it)" if ran else " (the real session accepted it)"
            result.nodes = [NodeVerdict(v.node, v.op_type, v.domain, v.engine, v.target, "supported",
                                        v.reason + said, v.source)
                            if v.target == cpu and v.status == "unsupported" else v for v in result.nodes]
        if data.get("outputs") is not None:
            result.outputs = tuple(OutputInfo(n, d, None if s is None else tuple(s), k) for n, d, s, k in data["outputs"])
        decided = "real session"
    except WorkerError as exc:
        ran, needs_inputs, data = False, False, {}
        limit = limit_reached(exc, ENGINE, "ONNX Runtime", "ORT", cpu)
        if limit is not None:       # the kernel registry's own errors still decide; the session says nothing
            ran = None
            result.findings.append(limit[0])
        else:
            result.findings.append(Finding("ORT-CRASH", "error", f"ONNX Runtime {exc.kind}: {first_line(exc)}",
                                           ENGINE, target=cpu, fix_hint="the engine process died on this model; see "
                                           "the node findings and the lint for the likely cause",
                                           source="real session"))
        decided = "real session"
    if limit is not None:
        registry_errors = any(f.is_error and f.engine == ENGINE for f in result.findings)
        result.verdicts.append(verdict_from(ENGINE, cpu, result.findings, "not checked", version=registry.version,
                                            summary=None if registry_errors else limit[1].summary))
    else:
        result.verdicts.append(verdict_from(ENGINE, cpu, result.findings, decided, version=registry.version, ran=ran,
                                            needs_inputs=needs_inputs, ran_on=data.get("ran_on")))

    # Other EPs: real registry when the build has them, else the shipped tables.
    def ep_status(ep: str, n: NodeCtx) -> tuple[str, str, bool]:
        """(status, reason, from the shipped table) of ``n`` on one non-CPU EP alone."""
        provider = EP_NAMES[ep]
        in_table = provider not in registry.providers
        if ep == "cuda":
            status, reason = (_cuda_table_status(n, registry.version) if in_table
                              else match_kernel(registry, provider, n))
            return status, reason, in_table

        status, reason = trt_status(n, trt_version)
        return ("supported" if status in ("supported", "restricted") else "unsupported"), reason, True

    for ep in eps[1:]:
        provider = EP_NAMES[ep]
        table = provider not in registry.providers
        source = "shipped table" if table else "kernel registry"
        fallbacks = 0
        # ORT assigns a node the first selected provider that takes it: TensorRT EP -> CUDA EP -> CPU EP.
        next_eps = ["cuda"] if ep == "tensorrt" and "cuda" in eps else []
        for n in checked:
            status, reason, _ = ep_status(ep, n)
            taken_by = None
            if status == "unsupported":
                for other in next_eps:
                    o_status = ep_status(other, n)[0]
                    if o_status == "supported":
                        taken_by = other
                        break
            if status == "unsupported" and taken_by is not None:
                other = EP_NAMES[taken_by]
                result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, provider, "restricted",
                                                f"falls back to {other}: {reason}", source))
                result.findings.append(Finding(
                    "ORT-EP-FALLBACK", "warning",
                    f"node {n.id} ({n.qualified}) would run on {other} under {provider}: {reason}", ENGINE, n.id,
                    n.op_type, n.domain, provider,
                    "the node runs outside the TensorRT engine (the engine is split around it); "
                    "use an op/opset/type TensorRT supports", None, source))
            elif status == "unsupported" and cpu_status[n.id][0] == "supported":
                fallbacks += 1
                result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, provider, "restricted",
                                                f"falls back to CPU: {reason}", source))
                chain = " (no CUDA kernel either)" if next_eps else ""
                result.findings.append(Finding(
                    "ORT-CPU-FALLBACK", "warning",
                    f"node {n.id} ({n.qualified}) would run on the CPU under {provider}{chain}: {reason}", ENGINE,
                    n.id, n.op_type, n.domain, provider,
                    "expect host-device copies around this node; "
                    + ("apply 'gridsample-to-contrib' on ONNX Runtime < 1.18" if n.op_type == "GridSample" and not n.domain
                       else "use an op/opset/type the EP supports"),
                    "gridsample-to-contrib" if n.op_type == "GridSample" and not n.domain and "1.18" in reason else None,
                    source))
            else:
                result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, ENGINE, provider,
                                                status if status != "unsupported" else "unsupported", reason,
                                                source))
                if status == "unsupported":
                    f = _node_finding(n, provider, status, reason, table=table)
                    if f:
                        result.findings.append(f)
        if table:
            result.notes.append(f"ONNX Runtime {provider}: not installed here; table only "
                                f"({'ONNX Runtime OperatorKernels.md' if ep == 'cuda' else f'TensorRT {trt_version}.x support table'})")
        # A CPU-level failure fails every EP (the CPU EP is the fallback of all of them).
        inherited = [f for f in result.findings if f.target == cpu and f.is_error]
        inherited_here = [Finding(f.code, f.severity, f.message, ENGINE, f.node, f.op_type, f.domain, provider,
                                  f.fix_hint, f.fix_pass, f.source) for f in inherited]
        summary = f"{fallbacks} node(s) fall back to the CPU EP" if fallbacks and not inherited else None
        verdict = verdict_from(ENGINE, provider, result.findings + inherited_here,
                               "table only" if table else "kernel registry", version=registry.version,
                               summary=summary)
        result.verdicts.append(verdict)
    return result
