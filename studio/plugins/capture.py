"""Capture what an op really receives in the model, and what its reference returns (worker job).

ONNX Runtime runs the model cut just before the op (its inputs exposed as
outputs; see :func:`~studio.plugins.opgraph.truncate_before`) on seeded
feeds; the reference implementation, when one is registered, computes the
expected outputs from those inputs; and the whole model runs once with the
reference registered as an ORT Python op, which gives model-level expected
outputs for any model whose other ops ONNX Runtime knows. Runs in a one-off
worker (the Python-op registration must not leak into a warm one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from studio.core.jobs import JobContext, JobOutput, job
from studio.plugins.opgraph import attr_values, find_nodes, truncate_before
from studio.plugins.reference import get_reference
from studio.plugins.ort_python import run_with_pyop

__all__ = ["capture_job"]


def _spec(a: np.ndarray | None) -> list[Any] | None:
    return None if a is None else [a.dtype.name if a.dtype.kind not in "OUS" else "string", list(a.shape)]


@job("plugins.capture")
def capture_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    domain, op_type = str(args["domain"]), str(args["op_type"])
    max_nodes = int(args.get("max_nodes", 4))
    max_bytes = int(args.get("max_sample_bytes", 64 * 2**20))
    ctx.set_stage("capture: loading the model")
    model = onnx.load_model(str(args["model_path"]))     # by path: external data next to the model
    found = list(find_nodes(model, domain, op_type))
    notes: list[str] = []
    main = [(nid, n) for nid, n, in_main in found if in_main]
    if len(main) < len(found):
        notes.append(f"{len(found) - len(main)} node(s) inside subgraphs or functions: their inputs are not captured")
    if len(main) > max_nodes:
        notes.append(f"inputs captured for the first {max_nodes} of {len(main)} nodes")
        main = main[:max_nodes]
    feeds = {k[5:]: v for k, v in arrays.items() if k.startswith("feed:")}
    truncated, exposed, cut_notes = truncate_before(model, [n for _, n in main])
    notes.extend(cut_notes)
    values: dict[str, np.ndarray] = dict(feeds)
    for t in model.graph.initializer:
        if t.name in exposed and t.name not in values:
            values[t.name] = numpy_helper.to_array(t)
    wanted = [o.name for o in truncated.graph.output]
    if wanted:
        ctx.set_stage("capture: ONNX Runtime up to the op")
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        if ctx.cpu_threads:
            so.intra_op_num_threads = int(ctx.cpu_threads)
        session = ort.InferenceSession(truncated.SerializeToString(), so, providers=["CPUExecutionProvider"])
        needed = [i.name for i in session.get_inputs()]
        got = session.run(wanted, {n: feeds[n] for n in needed if n in feeds})
        values.update(zip(wanted, (np.asarray(v) for v in got)))

    reference = get_reference(domain, op_type)
    out_arrays: dict[str, np.ndarray] = {}
    samples = []
    for nid, node in main:
        if any(x and x not in values for x in node.input):
            continue   # left out by the cut (a note says why)
        inputs = [values[x] if x else None for x in node.input]
        size = sum(a.nbytes for a in inputs if a is not None)
        entry: dict[str, Any] = {"node": nid, "attrs": attr_values(node), "inputs": [_spec(a) for a in inputs],
                                 "outputs": None, "error": None, "kept": size <= max_bytes}
        if reference is not None:
            ctx.set_stage(f"capture: reference {reference.qualified}")
            try:
                outs = reference([a for a in inputs if a is not None], entry["attrs"])
                entry["outputs"] = [_spec(o) for o in outs]
                size += sum(o.nbytes for o in outs)
                entry["kept"] = size <= max_bytes
                if entry["kept"]:
                    for j, o in enumerate(outs):
                        out_arrays[f"s{len(samples)}.out{j}"] = o
            except Exception as exc:  # noqa: BLE001 - a reference that rejects the inputs is a finding
                entry["error"] = f"reference raised {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if entry["kept"]:
            for j, a in enumerate(inputs):
                if a is not None:
                    out_arrays[f"s{len(samples)}.in{j}"] = a
        else:
            notes.append(f"node {nid[:60]}: sample of {size / 2**20:.0f} MiB not kept (limit "
                         f"{max_bytes / 2**20:.0f} MiB); shapes recorded")
        samples.append(entry)

    data: dict[str, Any] = {"samples": samples, "notes": notes, "model": None, "found": len(found)}
    if args.get("run_model") and reference is not None and samples and samples[0]["outputs"]:
        out_specs = samples[0]["outputs"]

        def ref_fn(*inputs: np.ndarray, **attrs: Any) -> Any:
            outs = reference(inputs, attrs)
            return outs[0] if len(outs) == 1 else outs

        run_args = {"domain": domain, "op_type": op_type, "model_path": args["model_path"],
                    "inputs": [{"dtype": s[0] if s else None} for s in samples[0]["inputs"]],
                    "outputs": [{"dtype": s[0], "shapes": []} for s in out_specs],
                    "attr_defaults": dict(reference.attr_defaults),
                    "samples": [], "run_model": True}
        res = run_with_pyop(run_args, {f"feed:{k}": v for k, v in feeds.items()}, ctx, ref_fn,
                            f"reference {reference.qualified}")
        data["model"] = res.data.get("model")
        out_arrays.update({k: v for k, v in res.arrays.items() if k.startswith("model:")})
    return JobOutput(data=data, arrays=out_arrays)
