"""Engine-independent lint: the full ONNX check (in a worker: it runs shape
inference on an untrusted graph), shape-inference errors, dynamic dims,
declared outputs that differ from what the model really produces, unused
initializers and opset domains, duplicate names, initializers listed as graph
inputs, custom ops and opsets older than engines' kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from onnx import ModelProto

from diagnostics.base import OutputInfo, first_line
from diagnostics.custom_ops import CustomOpInfo
from studio.core.errors import WorkerError
from studio.core.findings import Finding
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.protowalk import iter_graphs, subgraphs_of
from studio.core.sandbox import Limits, run_job
from studio.core.types import TensorInfo, value_info

__all__ = ["full_check_finding", "lint_model", "output_shape_findings"]

# Below this ai.onnx opset, engines' kernels thin out (ORT's start at 7 for most ops, TensorRT's parser at 9).
OLDEST_COMMON_OPSET = 7
# What the opset fix converts to: LayerNormalization's opset, parsed by every engine we target.
FIX_TARGET_OPSET = 17


@job("diagnostics.full_check")
def full_check_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    import onnx

    ctx.set_stage("onnx.checker full check")
    try:
        onnx.checker.check_model(str(args["model_path"]), full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError, C++ errors
        return JobOutput(data={"error": f"{type(exc).__name__}: {exc}"[:2000]})
    return JobOutput(data={"error": None})


def full_check_finding(model_path: Path, *, pool_key: str = "default", limits: Limits | None = None) -> Finding | None:
    try:
        res = run_job("diagnostics.full_check", {"model_path": str(model_path)}, stage="onnx.checker full check",
                      pool_key=pool_key, limits=limits)
    except WorkerError as exc:
        return Finding("CHECKER-CRASH", "error", f"onnx.checker full check {exc.kind}: {first_line(exc)}",
                       fix_hint="the model trips the checker itself; look for zero strides/groups, huge kernels "
                       "or malformed attributes", source="onnx.checker")
    err = res.data.get("error")
    if not err:
        return None
    return Finding("CHECKER-ERROR", "error", f"onnx.checker full check fails: {first_line(err)}",
                   fix_hint="fix the model (or re-export it); engines may reject or mis-run it", source="onnx.checker")


def lint_model(model: ModelProto, *, custom_ops: Sequence[CustomOpInfo] = (), shape_error: str | None = None,
               inferred: dict[str, TensorInfo] | None = None,
               engines: Sequence[str] | None = None) -> list[Finding]:
    """Static lint of the proto (no engine). ``engines``: the engines being checked (None: all); a
    fact only one engine refuses (duplicate node names: ONNX Runtime) is an error for that engine."""
    out: list[Finding] = []
    g = model.graph
    init_names = [t.name for t in g.initializer]
    init_set = set(init_names)

    if shape_error:
        out.append(Finding("SHAPE-INFERENCE", "warning", f"ONNX shape inference failed: {first_line(shape_error)}",
                           fix_hint="engines that need static shapes (TensorRT, OpenVINO for some ops) may fail too",
                           source="onnx shape inference"))

    # Dynamic dims on the real inputs.
    dynamic = []
    for vi in g.input:
        if vi.name in init_set:
            continue
        info = value_info(vi)
        if info.shape is None:
            dynamic.append(f"{info.name} (unknown rank)")
        elif not info.is_static:
            dims = ", ".join(str(d) if d is not None else "?" for d in info.shape)
            dynamic.append(f"{info.name} [{dims}]")
    if dynamic:
        out.append(Finding("DYNAMIC-SHAPE", "warning",
                           f"{len(dynamic)} input(s) with dynamic dims: {', '.join(dynamic[:5])}"
                           + (" ..." if len(dynamic) > 5 else ""),
                           fix_hint="TensorRT needs an optimization profile (min/opt/max) per dynamic input; OpenVINO "
                           "and some ops need static shapes: fix the dims if the deployment has one shape",
                           fix_pass="fix-input-shapes", source="model inputs"))

    # Initializers listed as graph inputs (IR < 4 habit): engines treat them as overridable inputs.
    as_inputs = [vi.name for vi in g.input if vi.name in init_set]
    if as_inputs:
        out.append(Finding("INITIALIZER-AS-INPUT", "warning",
                           f"{len(as_inputs)} initializer(s) are also listed as graph inputs (old IR style), e.g. "
                           f"{as_inputs[0]!r}: constant folding and fusions treat them as run-time inputs",
                           fix_hint="remove them from the graph inputs", fix_pass="remove-initializers-from-inputs",
                           source="graph inputs"))

    # Unused initializers (any graph may use a main-graph initializer by outer scope).
    used: set[str] = set()
    for ref in iter_graphs(model):
        for n in ref.graph.node:
            used.update(n.input)
        used.update(o.name for o in ref.graph.output)
    unused = [n for n in init_names if n not in used]
    if unused:
        out.append(Finding("UNUSED-INITIALIZER", "info",
                           f"{len(unused)} initializer(s) are never used, e.g. {unused[0]!r}",
                           fix_hint="remove them to shrink the file", fix_pass="eliminate-dead-code",
                           source="graph"))

    # Declared-but-unused opset domains.
    used_domains = {("" if n.domain == "ai.onnx" else n.domain) for ref in iter_graphs(model) for n in ref.graph.node}
    for o in model.opset_import:
        dom = "" if o.domain == "ai.onnx" else o.domain
        if dom and dom not in used_domains and dom not in {f.domain for f in model.functions}:
            out.append(Finding("UNUSED-OPSET", "info", f"opset domain {dom!r} (version {o.version}) is declared but "
                               "no node uses it", fix_hint="harmless; some converters refuse unknown domains",
                               fix_pass="remove-unused-opsets", source="opset_import"))

    # Duplicate names.
    node_names: Counter[str] = Counter()
    # ONNX Runtime turns Constant nodes into initializers before it checks node names: only the other
    # nodes' repeats make it refuse the model (a spox export's fifteen Constants named 'F0::anon' load).
    ort_names: Counter[str] = Counter()
    for ref in iter_graphs(model):
        for n in ref.graph.node:
            if n.name:
                node_names[(ref.scope, n.name)] += 1
                if not (n.op_type == "Constant" and n.domain in ("", "ai.onnx")):
                    ort_names[(ref.scope, n.name)] += 1
    dup_values = _non_ssa_names(model)
    if dup_values:
        out.append(Finding("DUPLICATE-NAME", "error", f"{len(dup_values)} value name(s) are produced more than once, "
                           f"e.g. {dup_values[0]!r} (the graph is not in SSA form)",
                           fix_hint="re-export the model; engines reject or silently mis-wire such graphs",
                           source="graph"))
    dup_nodes = [name for (_, name), c in node_names.items() if c > 1]
    refused = [name for (_, name), c in ort_names.items() if c > 1]
    if dup_nodes:
        if refused and (engines is None or "onnxruntime" in engines):
            # ONNX Runtime refuses the model at load ("two nodes with same node name"); OpenVINO and
            # TensorRT do not care, so the error is ONNX Runtime's (all its EPs).
            out.append(Finding("DUPLICATE-NODE-NAME", "error", f"{len(dup_nodes)} node name(s) repeat within a graph, "
                               f"e.g. {refused[0]!r}: ONNX Runtime refuses the model (\"two nodes with same node "
                               "name\")", engine="onnxruntime", fix_hint="give nodes unique names",
                               fix_pass="rename-duplicate-nodes", source="graph"))
        else:
            why = ("ONNX Runtime would refuse the model" if refused else
                   "Constant nodes only: ONNX Runtime folds them into initializers and loads the model")
            out.append(Finding("DUPLICATE-NODE-NAME", "info", f"{len(dup_nodes)} node name(s) repeat within a graph, "
                               f"e.g. {dup_nodes[0]!r}: findings and profiles name nodes ambiguously ({why})",
                               fix_hint="give nodes unique names",
                               fix_pass="rename-duplicate-nodes", source="graph"))

    # Opset age.
    default = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if default is not None and default < OLDEST_COMMON_OPSET:
        out.append(Finding("OPSET-TOO-OLD", "warning", f"ai.onnx opset {default} is older than {OLDEST_COMMON_OPSET}: "
                           "many engine kernels start later", fix_hint=f"convert the model to opset {FIX_TARGET_OPSET}",
                           fix_pass="convert-opset", source="opset_import", fix_options={"target": FIX_TARGET_OPSET}))

    # Custom ops (engine-specific findings come from each engine's check).
    for info in custom_ops:
        known = info.known
        if info.reason == "custom domain":
            msg = f"custom op {info.qualified} on {info.count} node(s)"
        elif info.reason == "op not in this opset":
            msg = f"{info.op_type} does not exist at ai.onnx opset {info.opset} ({info.count} node(s))"
        else:
            msg = f"operator {info.op_type} (domain {info.domain or 'ai.onnx'}) is not an ONNX operator " \
                  f"({info.count} node(s))"
        if known is not None:
            msg += f": {known.origin}"
        hint = (f"apply '{known.fix_pass}' ({known.standard_equivalent})" if known and known.fix_pass else
                f"standard equivalent: {known.standard_equivalent}" if known and known.standard_equivalent else
                # a known family (ORT's contrib ops): some engines run it, so say which, not "implement it"
                f"{known.note}: each engine's verdict says whether it runs this op; replace it by standard ops "
                "for the others" if known and known.note else
                "provide a custom op implementation for each engine, or replace it by standard ops")
        out.append(Finding("CUSTOM-OP", "warning", msg, None, info.nodes[0] if info.count == 1 else None,
                           info.op_type, info.domain, None, hint, known.fix_pass if known else None,
                           "custom-op knowledge base" if known else "ONNX schemas"))
    return out


def output_shape_findings(model: ModelProto, outputs: Sequence[OutputInfo], engine: str) -> list[Finding]:
    """Declared graph outputs vs what a real run produced (dtype, rank, static dims)."""
    out: list[Finding] = []
    declared = {vi.name: value_info(vi) for vi in model.graph.output}
    for got in outputs:
        d = declared.get(got.name)
        if d is None or got.kind != "tensor" or got.shape is None or d.kind != "tensor":
            continue
        problems = []
        if d.dtype and got.dtype and d.dtype not in ("?", "undefined") and d.dtype != got.dtype:
            problems.append(f"dtype {d.dtype} declared, {got.dtype} produced")
        if d.shape is not None:
            if len(d.shape) != len(got.shape):
                problems.append(f"rank {len(d.shape)} declared, {len(got.shape)} produced")
            else:
                bad = [(i, a, b) for i, (a, b) in enumerate(zip(d.shape, got.shape)) if isinstance(a, int) and a != b]
                if bad:
                    i, a, b = bad[0]
                    problems.append(f"dim {i} declared {a}, produced {b}")
        if problems:
            out.append(Finding("OUTPUT-SHAPE-MISMATCH", "warning",
                               f"output {got.name!r}: {'; '.join(problems)} (seeded run on {engine})",
                               fix_hint="fix the declared output type/shape: engines that trust declared shapes "
                               "(TensorRT, OpenVINO, Triton configs) will misbehave", source=f"real run ({engine})"))
    return out


def _non_ssa_names(model: ModelProto) -> list[str]:
    """Value names that break ONNX's single assignment: made twice in one graph, or made in a subgraph while
    an outer scope's name of the same spelling is visible there. The owning node's own outputs are not
    visible in its bodies: an Optimum merged decoder's If branches name their values 'logits', 'present.0.key'
    as the If's outputs (valid: onnx.checker, ONNX Runtime and OpenVINO accept it), which the flat count over
    every graph called 127 duplicates. Each local function body is its own scope."""
    dups: list[str] = []

    def walk(graph, made_first: list[str], visible: frozenset[str], depth: int) -> None:
        local = Counter(made_first)
        for n in graph.node:
            local.update(o for o in n.output if o)
        dups.extend(name for name, c in local.items() if c > 1 or name in visible)
        if depth >= 32:
            return
        for n in graph.node:
            for _, sub in subgraphs_of(n):
                inner = [vi.name for vi in sub.input] + [t.name for t in sub.initializer]
                walk(sub, inner, visible | (frozenset(local) - set(n.output)), depth + 1)

    g = model.graph
    inits = {t.name for t in g.initializer}
    walk(g, [t.name for t in g.initializer] + [vi.name for vi in g.input if vi.name not in inits], frozenset(), 0)
    for fn in model.functions:
        walk(fn, list(fn.input), frozenset(), 1)
    return list(dict.fromkeys(dups))
