"""OpenVINO Python conversion extensions, run for real in a one-off, confined worker.

The user's ``convert(node)`` (a file named in the job's arguments) is added to OpenVINO's ONNX frontend as
``ConversionExtension(op_type, domain, convert)``; every captured sample runs through a one-node model, and
the whole model is converted and run when asked. Failures inside ``convert`` are caught and reported with
the op's name; outputs are checked against the declared dtypes and shapes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import onnx

from studio.core.jobs import JobContext, JobOutput, job
from studio.plugins.opgraph import find_nodes, single_node_model
from studio.plugins.usercode import CallGuard, UserCodeError, short_error
from studio.plugins.confine import load_confined
from studio.plugins.usercode import user_line

__all__ = ["ov_python_job"]


def _frontend(domain: str, op_type: str, convert: Any) -> Any:
    from openvino.frontend import FrontEndManager
    from openvino.frontend.onnx import ConversionExtension

    fe = FrontEndManager().load_by_framework("onnx")
    fe.add_extension(ConversionExtension(op_type, domain, convert) if domain else ConversionExtension(op_type, convert))
    return fe


def _outputs_of(result: Any) -> list[Any]:
    """Accept a Node, an Output, or a list of either."""
    items = list(result) if isinstance(result, (list, tuple)) else [result]
    out = []
    for item in items:
        if hasattr(item, "outputs") and callable(item.outputs) and not hasattr(item, "get_node"):
            out.extend(item.outputs())
        else:
            out.append(item)
    return out


def _compile_run(fe: Any, path: str, feeds: list[np.ndarray], threads: int | None) -> tuple[Any, list[np.ndarray]]:
    import openvino as ov

    model = fe.convert(fe.load(path))
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = ov.Core().compile_model(model, "CPU", config)
    request = compiled.create_infer_request()
    request.infer({i: a for i, a in enumerate(feeds)})
    return compiled, [np.array(request.get_output_tensor(i).data, copy=True) for i in range(len(compiled.outputs))]


def _import_openvino() -> None:
    """Loaded before the fence."""
    import openvino  # noqa: F401
    import openvino.frontend.onnx  # noqa: F401


@job("plugins.ov_python")
def ov_python_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:
    domain, op_type = str(args["domain"]), str(args["op_type"])
    label = f"conversion extension for `{op_type}`"
    loaded = load_confined(ctx, args, label, "convert", _import_openvino)
    if isinstance(loaded, JobOutput):
        return loaded
    fn, fence = loaded
    out_dtypes = [o.get("dtype") or "float32" for o in args["outputs"]]
    # Only the output checks of the guard are used here: convert() runs once per node at conversion time.
    guard = CallGuard(fn, label, out_dtypes, [o.get("shapes") or [] for o in args["outputs"]],
                      filename=str(args["code_path"]))
    failure: dict[str, str | None] = {"error": None}

    def convert(node: Any) -> Any:
        guard.calls += 1
        try:
            return _outputs_of(fn(node))
        except BaseException as exc:  # noqa: BLE001 - reported with the op's name, never through OpenVINO's text

            line = user_line(exc, str(args["code_path"]))
            failure["error"] = failure["error"] or (f"{label} raised {short_error(exc)}"
                                                    + (f" (line {line})" if line else ""))
            raise RuntimeError(failure["error"]) from None

    fe = _frontend(domain, op_type, convert)
    model = onnx.load_model(str(args["model_path"]))
    nodes = {nid: n for nid, n, _ in find_nodes(model, domain, op_type)}
    data: dict[str, Any] = {"samples": [], "model": None, "confinement": fence}
    out_arrays: dict[str, np.ndarray] = {}

    def checked(values: list[np.ndarray]) -> str | None:
        try:
            guard.check(tuple(values) if len(values) != 1 else values[0])
        except UserCodeError as exc:
            return str(exc).replace(" returned ", " produced ").replace(" output 0 produced", " produced")
        return None

    for i, sample in enumerate(args.get("samples") or []):
        ctx.set_stage(f"{label}: sample {i + 1}")
        node = nodes.get(sample["node"])
        entry: dict[str, Any] = {"node": sample["node"], "error": None}
        if node is None:
            entry["error"] = "node not found in the model"
            data["samples"].append(entry)
            continue
        feeds = [arrays.get(f"s{i}.in{j}") for j in range(len(node.input))]
        specs = [None if a is None else (a.dtype.name, list(a.shape)) for a in feeds]
        path = ctx.scratch / f"sample_{i}.onnx"
        # scratch: worker: its scratch folder
        onnx.save_model(single_node_model(model, node, specs, out_dtypes), str(path))
        started = time.perf_counter()
        try:
            _, values = _compile_run(fe, str(path), [a for a in feeds if a is not None], ctx.cpu_threads)
        except Exception as exc:  # noqa: BLE001
            entry["error"] = failure["error"] or f"{label}: OpenVINO failed: {short_error(exc)}"
        else:
            entry["error"] = checked(values)
            if entry["error"] is None:
                for j, v in enumerate(values):
                    out_arrays[f"s{i}.out{j}"] = v
        entry["seconds"] = round(time.perf_counter() - started, 4)
        data["samples"].append(entry)
        if entry["error"]:
            break
    if args.get("run_model") and not any(s.get("error") for s in data["samples"]):
        ctx.set_stage(f"{label}: whole model")
        names = [o.name for o in model.graph.output]
        inits = {t.name for t in model.graph.initializer}
        order = [vi.name for vi in model.graph.input if vi.name not in inits]
        feeds = [arrays[f"feed:{n}"] for n in order]
        entry = {"error": None, "outputs": names}
        started = time.perf_counter()
        try:
            compiled, values = _compile_run(fe, str(args["model_path"]), feeds, ctx.cpu_threads)
            by_name = {}
            for idx, port in enumerate(compiled.outputs):
                for n in port.get_names():
                    by_name.setdefault(n, idx)
            for pos, name in enumerate(names):
                out_arrays[f"model:{name}"] = values[by_name.get(name, pos)]
        except Exception as exc:  # noqa: BLE001
            entry["error"] = failure["error"] or f"whole model on OpenVINO failed: {short_error(exc)}"
        entry["seconds"] = round(time.perf_counter() - started, 4)
        data["model"] = entry
    data["calls"] = guard.calls
    return JobOutput(data=data, arrays=out_arrays)
