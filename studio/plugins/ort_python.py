"""ONNX Runtime Python custom ops (onnxruntime-extensions ``onnx_op``), run for real in a worker.

onnxruntime-extensions registers Python ops in the ``ai.onnx.contrib`` domain
only, and a process can register an op type once. So each run is a one-off
worker (``fresh=True``) that: loads the op's code from a file named in its
arguments, registers it under job-local aliases
(``ai.onnx.contrib::StudioPyOp_<op>_<k>``, one per distinct attribute set,
attributes bound in Python), rewrites the model's nodes to them in a
job-local copy (the user's file is never touched), runs every
captured sample through a one-node model and, when asked, the whole model.
The user's function is guarded (:class:`~studio.plugins.usercode.CallGuard`):
an exception, ``None`` or a wrong dtype/shape becomes a message, never an
abort of the engine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from studio.core.jobs import JobContext, JobOutput, job
from studio.core.save import SCRATCH_EXTERNAL_BYTES, save_scratch
from studio.plugins.opgraph import find_nodes, ident, retarget_op, single_node_model
from studio.plugins.usercode import CallGuard, short_error
from studio.plugins.opgraph import attr_values
from studio.plugins.confine import load_confined

__all__ = ["PYOP_DOMAIN", "alias_for", "ort_python_job", "run_with_pyop"]

PYOP_DOMAIN = "ai.onnx.contrib"

_DT_NAMES = {"float32": "dt_float", "float64": "dt_double", "float16": "dt_float16", "int64": "dt_int64",
             "int32": "dt_int32", "int16": "dt_int16", "int8": "dt_int8", "uint8": "dt_uint8", "uint16": "dt_uint16",
             "uint32": "dt_uint32", "uint64": "dt_uint64", "bool": "dt_bool", "string": "dt_string",
             "bfloat16": "dt_bfloat16", "complex64": "dt_complex64", "complex128": "dt_complex128"}


def alias_for(op_type: str) -> str:
    """The job-local op type of the Python op (never collides with onnxruntime-extensions' own ops)."""
    return f"StudioPyOp_{ident(op_type)}"


def _register(alias: str, fn: Callable[..., Any], input_dtypes: list[str], output_dtypes: list[str]) -> None:
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    def dt(name: str | None) -> int:
        return getattr(PyCustomOpDef, _DT_NAMES.get(name or "float32", "dt_float"))

    onnx_op(op_type=alias, inputs=[dt(d) for d in input_dtypes], outputs=[dt(d) for d in output_dtypes],
            attrs={})(fn)


class _Aliases:
    """One Python op per distinct attribute set, its attributes bound in Python.

    Python ops then never depend on which attribute types onnxruntime-extensions can pass (lists, tensors
    cannot be), and every node gets exactly its own attribute values, defaults filled in."""

    def __init__(self, op_type: str, guard: Callable[..., Any], defaults: Mapping[str, Any],
                 input_dtypes: list[str], output_dtypes: list[str]) -> None:
        self.base, self.guard, self.defaults = alias_for(op_type), guard, dict(defaults)
        self.input_dtypes, self.output_dtypes = input_dtypes, output_dtypes
        self.by_key: dict[str, str] = {}

    def __call__(self, node: onnx.NodeProto) -> str:
        attrs = {**self.defaults, **{k: v for k, v in attr_values(node).items() if v not in ("<graph>", "<tensor>")}}
        key = json.dumps(attrs, sort_keys=True, default=str)
        alias = self.by_key.get(key)
        if alias is None:
            alias = f"{self.base}_{len(self.by_key)}"
            guard = self.guard
            _register(alias, lambda *inputs: guard(*inputs, **attrs), self.input_dtypes, self.output_dtypes)
            self.by_key[key] = alias
        return alias


def _session(model: onnx.ModelProto, scratch: Path, threads: int | None) -> Any:
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    so = ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = int(threads)
    if model.ByteSize() <= SCRATCH_EXTERNAL_BYTES:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    path = save_scratch(model, scratch / "model_with_pyop.onnx", external=True)     # the worker's scratch folder
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _ort_message(exc: BaseException, alias: str, op_type: str) -> str:
    import re

    return re.sub(re.escape(alias) + r"(_\d+)?", op_type, short_error(exc)).replace(f"{PYOP_DOMAIN}:", "")


def run_with_pyop(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext,
                  fn: Callable[..., Any], label: str) -> JobOutput:
    """Register ``fn`` as the op and run the samples (and the model); shared by user code and references."""
    domain, op_type = str(args["domain"]), str(args["op_type"])
    alias = alias_for(op_type)
    out_dtypes = [o.get("dtype") or "float32" for o in args["outputs"]]
    guard = CallGuard(fn, label, out_dtypes, [o.get("shapes") or [] for o in args["outputs"]],
                      filename=str(args.get("code_path") or ""))
    in_dtypes = [i.get("dtype") or "float32" for i in args["inputs"]]
    ctx.set_stage(f"{label}: registration")
    aliases = _Aliases(op_type, guard, args.get("attr_defaults") or {}, in_dtypes, out_dtypes)
    model = onnx.load_model(str(args["model_path"]))
    nodes = {nid: n for nid, n, _ in find_nodes(model, domain, op_type)}
    # Every alias is registered before the first session: onnxruntime-extensions crashes (SIGSEGV) when Python
    # ops are registered after sessions using earlier ones were created (4+ distinct attribute sets).
    for node in nodes.values():
        aliases(node)
    data: dict[str, Any] = {"samples": [], "model": None, "calls": 0}
    out_arrays: dict[str, np.ndarray] = {}
    for i, sample in enumerate(args.get("samples") or []):
        ctx.set_stage(f"{label}: sample {i + 1}")
        node = nodes.get(sample["node"])
        if node is None:
            data["samples"].append({"node": sample["node"], "error": "node not found in the model"})
            continue
        feeds = [arrays.get(f"s{i}.in{j}") for j in range(len(node.input))]
        specs = [None if a is None else (a.dtype.name, list(a.shape)) for a in feeds]
        one = retarget_op(single_node_model(model, node, specs, out_dtypes), domain, op_type, PYOP_DOMAIN, aliases)
        started = time.perf_counter()
        entry: dict[str, Any] = {"node": sample["node"], "error": None}
        try:
            session = _session(one, ctx.scratch, ctx.cpu_threads)
            values = session.run(None, {f"in{j}": a for j, a in enumerate(feeds) if a is not None})
        except Exception as exc:  # noqa: BLE001 - ORT's own error, unless the guard saw the cause
            entry["error"] = guard.error or f"{label}: ONNX Runtime failed: {_ort_message(exc, alias, op_type)}"
        else:
            entry["error"] = guard.error
            if guard.error is None:
                for j, v in enumerate(values):
                    out_arrays[f"s{i}.out{j}"] = np.asarray(v)
        entry["seconds"] = round(time.perf_counter() - started, 4)
        data["samples"].append(entry)
        if guard.error:
            break
    if args.get("run_model") and guard.error is None:
        ctx.set_stage(f"{label}: whole model")
        full = retarget_op(model, domain, op_type, PYOP_DOMAIN, aliases)
        names = [o.name for o in model.graph.output]
        feeds = {k[5:]: v for k, v in arrays.items() if k.startswith("feed:")}
        started = time.perf_counter()
        entry = {"error": None, "outputs": names}
        try:
            session = _session(full, ctx.scratch, ctx.cpu_threads)
            wanted = [i.name for i in session.get_inputs()]
            values = session.run(names, {n: feeds[n] for n in wanted if n in feeds})
        except Exception as exc:  # noqa: BLE001
            entry["error"] = guard.error or f"whole model on ONNX Runtime failed: {_ort_message(exc, alias, op_type)}"
        else:
            entry["error"] = guard.error
            if guard.error is None:
                for name, v in zip(names, values):
                    out_arrays[f"model:{name}"] = np.asarray(v)
        entry["seconds"] = round(time.perf_counter() - started, 4)
        data["model"] = entry
    data["calls"] = guard.calls
    return JobOutput(data=data, arrays=out_arrays)


def _import_ort() -> None:
    """Loaded before the fence (they read their own files only)."""
    import onnxruntime  # noqa: F401
    import onnxruntime_extensions  # noqa: F401


@job("plugins.ort_python")
def ort_python_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    """Run the op's Python code (a file) as an ORT Python op, confined, in a one-off worker."""
    label = f"custom op `{args['op_type']}`"
    loaded = load_confined(ctx, args, label, "compute", _import_ort)
    if isinstance(loaded, JobOutput):
        return loaded
    fn, fence = loaded
    out = run_with_pyop(args, arrays, ctx, fn, label)
    out.data["confinement"] = fence
    return out
