"""Fix what ONNX Runtime silently fixes, before any pass sees the model (R41).

ONNX Runtime sorts nodes that are out of topological order, uses the last of
duplicated opset imports, runs a model whose IR version is older than its
opset needs, and only warns when a declared output shape differs from the
one the graph produces. onnx.checker refuses all four, so the pipeline used
to refuse models every engine runs. Here each is repaired the way ORT reads
the model, and said in one line (the pipeline's lint); nothing else changes
(dead graph inputs stay: the engine still requires them).

Shape inference can crash on hostile models, so ``normalize_in_worker`` runs
this in a sandbox worker; models with external data are left as they are
(the copy would have to carry the weights), and the full check then says why
they are refused.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from studio.core.errors import WorkerError
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.protowalk import iter_tensors, subgraphs_of, topo_order


@dataclass(frozen=True)
class Normalized:
    """The model the pipeline works on (``path``) and what was repaired to get it (one line each)."""

    path: Path
    lint: tuple[str, ...] = ()
    checked: bool = False          # the model at ``path`` passed onnx.checker's full check here


def sort_graph(graph: onnx.GraphProto) -> bool:
    """Sort ``graph``'s nodes (and its subgraphs') topologically, keeping the original order
    among ready nodes, as ORT does (:func:`studio.core.protowalk.topo_order`). Returns whether
    anything moved; a graph with a cycle (a node reading its own output included) is left in
    place for the full check to name."""
    moved = False
    for node in graph.node:
        for _, sub in subgraphs_of(node):
            moved |= sort_graph(sub)
    topo = topo_order(graph)
    if topo.stuck or topo.in_file_order:
        return moved
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(nodes[i] for i in topo.order)
    return True


def _dedupe_opsets(model: onnx.ModelProto) -> list[str]:
    """Duplicated opset imports with different versions: the last one, as ORT (and onnx-ir) read
    them. Identical duplicates change nothing and are left alone."""
    seen: dict[str, list[int]] = {}
    for op in model.opset_import:
        seen.setdefault(op.domain or "", []).append(int(op.version))
    dups = {d: vs for d, vs in seen.items() if len(set(vs)) > 1}
    if not dups:
        return []
    lint = []
    for d, vs in dups.items():
        lint.append(f"opset imports list domain '{d or 'ai.onnx'}' {len(vs)} times ({', '.join(map(str, vs))}); "
                    f"ONNX Runtime uses the last ({vs[-1]}), and so does the result")
    last = {d: vs[-1] for d, vs in seen.items()}
    del model.opset_import[:]
    model.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in last.items())
    return lint


def _raise_ir_version(model: onnx.ModelProto) -> list[str]:
    try:
        needed = onnx.helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    except Exception:
        return []
    if model.ir_version >= needed or needed > onnx.IR_VERSION:
        return []
    old = model.ir_version
    model.ir_version = needed
    return [f"IR version {old} is older than its opsets need ({needed}); ONNX Runtime runs it, the result "
            f"declares IR version {needed}"]


def _dims(t: onnx.TypeProto) -> list | None:
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.tensor_type.shape.dim]


def _fix_output_shapes(model: onnx.ModelProto) -> list[str]:
    """Declared output shapes that contradict what shape inference derives: the real one is declared."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    for out in probe.graph.output:
        if out.type.HasField("tensor_type"):
            out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=False, data_prop=True)
    except Exception:
        return []
    lint = []
    for declared, got in zip(model.graph.output, inferred.graph.output):
        a, b = _dims(declared.type), _dims(got.type)
        if a is None or b is None:
            continue
        clash = len(a) != len(b) or any(isinstance(x, int) and isinstance(y, int) and x != y
                                        for x, y in zip(a, b))
        if not clash:
            continue
        declared.type.tensor_type.shape.CopyFrom(got.type.tensor_type.shape)
        show = lambda dims: "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"  # noqa: E731
        lint.append(f"output '{declared.name[:60]}' is declared {show(a)} but the graph produces {show(b)} "
                    "(ONNX Runtime warns and runs it); the result declares the real shape")
    return lint


def _has_external(model: onnx.ModelProto) -> bool:
    for item in iter_tensors(model):
        t = item[0] if isinstance(item, tuple) else item
        if getattr(t, "data_location", 0) == onnx.TensorProto.EXTERNAL:
            return True
    return False


def normalize_proto(model: onnx.ModelProto) -> tuple[list[str], bool]:
    """Repair ``model`` in place as ONNX Runtime reads it: (one line per repair, whether the
    model passed the full check as it was). A model that passes the full check is left as it
    is (conflicting duplicated opsets aside)."""
    lint = _dedupe_opsets(model)
    if _passes_full_check(model):
        return lint, True
    lint += _raise_ir_version(model)
    if sort_graph(model.graph):
        lint.append("nodes were not in topological order (ONNX Runtime sorts them); the result is sorted")
    for fn in model.functions:
        probe = onnx.GraphProto()
        probe.node.extend(fn.node)
        probe.input.extend(onnx.ValueInfoProto(name=n) for n in fn.input)
        if sort_graph(probe):
            del fn.node[:]
            fn.node.extend(probe.node)
            lint.append(f"nodes of function '{fn.name[:60]}' were not in topological order; sorted")
    lint += _fix_output_shapes(model)
    return lint, False


def _passes_full_check(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception:
        return False
    return True


@job("passes.normalize_input")
def normalize_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    ctx.set_stage("reading the model as ONNX Runtime does")
    model = onnx.load_model(args["model_path"], load_external_data=False)
    if _has_external(model):
        return JobOutput(data={"lint": [], "checked": False})
    lint, checked = normalize_proto(model)
    if lint:
        onnx.save_model(model, str(ctx.out_dir / "model.onnx"))  # scratch: the worker's job folder
    return JobOutput(data={"lint": lint, "checked": checked and not lint})


def normalize_in_worker(model_path: Path, workdir: Path, *, limits: Limits | None = None,
                        pool_key: str = "default") -> Normalized:
    """The model as ORT reads it: ``model_path`` itself when nothing needed repair (or on any
    failure here, so the full check names the problem), else a repaired copy in ``workdir``."""
    out_dir = workdir / "normalized"
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        res = run_job("passes.normalize_input", {"model_path": str(model_path)}, stage="reading the model",
                      limits=limits, pool_key=pool_key, out_dir=out_dir)
    except WorkerError:
        shutil.rmtree(out_dir, ignore_errors=True)  # scratch: the pipeline's own workdir
        return Normalized(Path(model_path))
    lint = tuple(str(x) for x in res.data.get("lint", ()))
    fixed = out_dir / "model.onnx"
    if not lint or not fixed.exists():
        return Normalized(Path(model_path), checked=bool(res.data.get("checked")))
    return Normalized(fixed, lint)
