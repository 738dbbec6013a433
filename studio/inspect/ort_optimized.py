"""The memory plan of ONNX Runtime as users run it: default session options (graph optimizations at
ORT_ENABLE_ALL, memory patterns on), planned over the graph ORT itself optimized.

Why this way: ORT's fusions (Conv+activation, QuickGelu, SkipLayerNormalization, Attention...) and, on
x86, its NCHWc layout (blocked Conv, ReorderInput/ReorderOutput) change which tensors exist, their sizes
and which buffers are shared; no rule list here could follow them. So ORT writes its own optimized graph
(``SessionOptions.optimized_model_filepath``, at its default level, in a sandboxed worker) and the studio's
planner (:mod:`studio.inspect.memory_plan`) runs over that graph:

* the order is the one that same session runs its nodes in, read from its profile (one run); the file's
  topological order where the profile does not name every node (on magika v1 the file's order was 33 %
  off ORT's block, the profile's exact);
* the sizes are the shapes ORT produces for every value of that graph in one run at the plan's feeds
  (contrib and NCHWc ops included, which no shape inference here knows);
* the load-time types that decide buffer reuse are what ORT writes as the optimized graph's value_info:
  the source file is given ORT's own load-time inference as value_info first (symbols kept), so every
  value that survives the fusions keeps its type; a value a fusion made (an NCHWc reorder) has none,
  as in ORT's memory, and is not reused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from onnx import ModelProto

from studio.core.jobs import JobContext, JobOutput, job
from studio.core.protowalk import iter_graphs
from studio.inspect.edge_shapes import measure_shapes
from studio.core.errors import StudioError
from studio.core.error_codes import ErrorCode
from studio.core.sandbox import run_job, session_limits, worker_limit_refusal
from studio.inspect.memory_plan import as_ort_loads, file_symbols
from studio.inspect.shapes import sandboxed_shapes
from studio.core.tensor_safety import itemsize_of
from studio.inspect.memory_plan import declared_types, graph_plan

OPTIMIZED_WHAT = ("the plan over the graph ONNX Runtime optimized at its default level (ORT_ENABLE_ALL: fusions, "
                  "NCHWc layout), in its execution order, sizes from one run of that graph")


@dataclass(frozen=True)
class OptimizedGraph:
    """ORT's optimized graph (weights stripped) and what one run of it produced."""

    model: ModelProto                                  # initializers kept by name and dims, no data
    shapes: Mapping[str, tuple[int, ...]]              # every value ORT produced, by name
    dtypes: Mapping[str, str]
    source_nodes: int                                  # nodes of the model as written (main graph)
    order: Sequence[str] = ()                          # node names as that session ran them (its profile)

    @property
    def nodes(self) -> int:
        return len(self.model.graph.node)


def _with_load_types(model: ModelProto, static: Mapping[str, tuple[list, int]]) -> ModelProto:
    """A copy whose value_info is ORT's load-time inference (dims with symbols, element type)."""
    from onnx import helper

    out = ModelProto()
    out.CopyFrom(model)
    named = {vi.name for vi in [*out.graph.input, *out.graph.output]}
    del out.graph.value_info[:]
    for name, (dims, elem) in static.items():
        if name in named or not elem:
            continue
        shape = None if dims is None else [d if isinstance(d, (int, str)) else None for d in dims]
        out.graph.value_info.append(helper.make_tensor_value_info(name, int(elem), shape))
    return out


def _stripped(model: ModelProto) -> ModelProto:
    """The graph without weight data (names, types and dims kept): what planning needs, small to send."""
    out = ModelProto()
    out.CopyFrom(model)
    for ref in iter_graphs(out):
        for t in ref.graph.initializer:
            for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data",
                      "string_data"):
                t.ClearField(f)
            del t.external_data[:]
            t.data_location = 0
        for n in ref.graph.node:
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.t.ByteSize():
                        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data"):
                            a.t.ClearField(f)
    return out


def _without_dangling_inputs(model: ModelProto, fed: set[str]) -> ModelProto:
    """ORT writes an IR 3 model's inputs back even where its folding removed the initializer behind one
    (``conv4_b_0__SHAPE``): an input nothing reads, nothing fills and nobody feeds is dropped."""
    read = {x for ref in iter_graphs(model) for n in ref.graph.node for x in n.input}
    inits = {t.name for t in model.graph.initializer}
    keep = [vi for vi in model.graph.input if vi.name in fed or vi.name in inits or vi.name in read]
    if len(keep) != len(model.graph.input):
        del model.graph.input[:]
        model.graph.input.extend(keep)
    return model


@job("inspect.ort_optimized")
def ort_optimized_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """ORT's optimized graph of ``model_path`` at its default level, and the shapes of every value of
    that graph in one run on ``arrays`` (the plan's feeds)."""
    import onnx
    import onnxruntime as ort


    path = Path(args["model_path"])
    model = onnx.load_model(str(path), load_external_data=False)
    external = bool(args.get("external"))
    typed = _with_load_types(model, {k: (v[0], v[1]) for k, v in args.get("static", {}).items()})
    ctx.set_stage("ONNX Runtime optimizing the graph (ORT_ENABLE_ALL)")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.optimized_model_filepath = str(Path(ctx.scratch) / "optimized.onnx")
    if external:   # the weights stay in files (ORT reads them; it writes its graph's beside it): held once
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
        so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "optimized.onnx.data")
        so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
    so.enable_profiling = True                   # the order this very session runs its nodes in
    so.profile_file_prefix = str(Path(ctx.scratch) / "profile")
    sess = ort.InferenceSession(typed.SerializeToString(), so, providers=["CPUExecutionProvider"])
    order: list[str] = []
    try:
        sess.run(None, dict(arrays))
        events = json.loads(Path(sess.end_profiling()).read_text())
        order = list(dict.fromkeys(e["name"][: -len("_kernel_time")] for e in events
                                   if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")))
    except Exception:  # noqa: BLE001 - no profile: the file's order (ORT's topological order) stands
        order = []
    del sess
    optimized = _without_dangling_inputs(onnx.load_model(so.optimized_model_filepath, load_external_data=False),
                                         set(arrays))
    ctx.set_stage("ONNX Runtime run of its optimized graph for shapes")
    names = [o for n in optimized.graph.node for o in n.output if o]
    shapes = measure_shapes(optimized, dict(arrays), names, weights_folder=Path(ctx.scratch) if external else None)
    blob = np.frombuffer(_stripped(optimized).SerializeToString(), dtype=np.uint8)
    return JobOutput(data={"shapes": {n: list(s) for n, (s, _) in shapes.items()},
                           "dtypes": {n: d for n, (_, d) in shapes.items()}, "source_nodes": len(model.graph.node),
                           "order": order},
                     arrays={"model": blob})


def optimized_graph(model_path: Path, model: ModelProto, feeds: Mapping[str, np.ndarray],
                    static: Mapping[str, tuple[tuple | None, int]], *, pool_key: str = "default",
                    timeout_s: float | None = None) -> OptimizedGraph:
    """ORT's optimized graph of the model and its value shapes at ``feeds`` (a sandboxed worker).
    ``static``: ORT's load-time types (dims with symbols, ONNX element type) by value name. The worker
    holds the session's weights once (:func:`session_limits`, as check's session does; the 3 GiB default
    stopped a 6.36 GiB decoder after the load); where even that limit cannot hold them, the one-line
    reason (TOO-LARGE) comes before any worker starts."""
    from onnx import TensorProto


    _refuse_if_above_limit(model_path)
    limits = session_limits(None, model_path)
    if timeout_s is not None:
        from dataclasses import replace

        limits = replace(limits, timeout_s=float(timeout_s))
    external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    res = run_job("inspect.ort_optimized",
                  {"model_path": str(model_path), "external": external,
                   "static": {k: [list(v[0]) if v[0] is not None else None, int(v[1])] for k, v in static.items()}},
                  {k: np.asarray(v) for k, v in feeds.items()},
                  stage="ONNX Runtime's optimized graph", pool_key=pool_key, limits=limits)
    opt = ModelProto()
    opt.ParseFromString(res.arrays["model"].tobytes())
    return OptimizedGraph(opt, {k: tuple(v) for k, v in res.data["shapes"].items()}, dict(res.data["dtypes"]),
                          int(res.data["source_nodes"]), tuple(res.data.get("order", ())))


def _refuse_if_above_limit(model_path: Path) -> None:
    refusal = worker_limit_refusal(model_path, "ONNX Runtime's optimized graph")
    if refusal is not None:
        raise StudioError(refusal, code=ErrorCode.TOO_LARGE)


def load_types(handle) -> dict[str, tuple[tuple | None, int]]:  # noqa: ANN001 - studio.core.model.ModelHandle
    """ORT's load-time types of the model's values: its shape inference with the file's symbols kept, a
    dim name the inference made up unnamed (:func:`memory_plan.file_symbols`), and no shapes computed
    from values: ORT's load-time inference has no data propagation, so a Reshape whose shape comes from
    Shape -> Gather -> Concat has unknown dims and ORT reuses no buffer for it by shape (a transformer
    planned with the propagated shapes was +65 % over ORT's block: chython rxnmap)."""
    table = sandboxed_shapes(handle.path, handle.proto, None, data_prop=False)[0].values
    symbols = file_symbols(handle.proto)
    return {n: (as_ort_loads(t.shape, symbols), int(t.elem_type)) for n, t in table.items() if t.elem_type}


def _made_types(graph, declared: Mapping[str, tuple], shapes: Mapping[str, tuple[int, ...]]  # noqa: ANN001
                ) -> dict[str, tuple]:
    """Load-time shapes of the 4-D values ORT's NCHWc layout made (``com.microsoft.nchwc`` ops: no
    value_info in the file ORT writes), as its shape inference for those ops gives them: the batch dim
    copied from the node's first input (a symbol stays that symbol), the channels known, the spatial
    dims known where the input's are. Without them every such value was "never the same size": on an
    image model with a symbolic batch the plan reused none of them and was +29 % over ORT's block
    (captcha CRNN)."""
    out: dict[str, tuple] = {}
    for n in graph.node:
        if n.domain != "com.microsoft.nchwc" or not n.input:
            continue
        src = declared[n.input[0]][0] if n.input[0] in declared else out.get(n.input[0])
        for o in n.output:
            run = shapes.get(o)
            if not o or o in declared or run is None or src is None or len(src) != 4 or len(run) != 4:
                continue
            out[o] = (src[0], run[1], *(r if isinstance(d, int) else None for d, r in zip(src[2:], run[2:])))
    return out


def optimized_plan(handle, feeds: Mapping[str, np.ndarray], *, pool_key: str = "default",  # noqa: ANN001
                   timeout_s: float | None = None):
    """(the plan over ORT's optimized graph at ``feeds``, that graph, tensors without a size)."""
    from onnx import helper


    _refuse_if_above_limit(handle.path)       # before load_types' worker too
    og = optimized_graph(handle.path, handle.proto, feeds, load_types(handle), pool_key=pool_key,
                         timeout_s=timeout_s)
    shapes = dict(og.shapes)
    elems: dict[str, int] = {}
    for name, dt in og.dtypes.items():
        try:
            elems[name] = int(helper.np_dtype_to_tensor_dtype(np.dtype(dt)))
        except (TypeError, ValueError, KeyError):
            pass
    for name, value in feeds.items():
        arr = np.asarray(value)
        shapes[name] = tuple(arr.shape)
        elems.setdefault(name, int(helper.np_dtype_to_tensor_dtype(arr.dtype)))
    graph = og.model.graph
    weights = sum((itemsize_of(t.data_type) or 0) * int(np.prod(t.dims, dtype=np.int64)) for t in graph.initializer)
    opset = next((o.version for o in og.model.opset_import if o.domain in ("", "ai.onnx")), None)
    declared = declared_types(graph)
    inits = {t.name for t in graph.initializer}
    fixed = all(declared.get(vi.name, (None, None))[0] is not None
                and all(isinstance(d, int) for d in declared[vi.name][0]) for vi in graph.input if vi.name not in inits)

    # Only where every input dim but the batch is fixed: with symbolic sides the only sides ORT's inference
    # knows are a global pool's 1x1, and typing those alone moved the plan 17 % off ORT's block on a text
    # detector (rapidocr PP-OCRv4 det) while its untyped plan agreed: keep them untyped there.
    sides_fixed = all(declared.get(vi.name, (None, None))[0] is not None
                      and all(isinstance(d, int) for d in declared[vi.name][0][1:])
                      for vi in graph.input if vi.name not in inits)
    made = _made_types(graph, declared, shapes) if sides_fixed else {}

    def static(name: str):
        if name in declared:
            return declared[name][0]
        # a value ORT's fusions made (an NCHWc reorder) has no value_info; with every input dim fixed, ORT
        # knows every shape at load (its folding resolves the shape computations): the run's shape is it
        return shapes.get(name) if fixed else made.get(name)

    plan, unknown = graph_plan(graph, shapes.get, elems.get, int(weights), opset=opset, file_order=True,
                               static_shape=static, run_order=og.order)
    return plan, og, unknown
