"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``studio.graphview``, ``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studio.core.dim_hints import DerivedDim, DimHint
from studio.core.dim_hints import dim_hints as _dim_hints
from studio.core.engines.table import ENGINES as _ENGINE_ROWS
from studio.core.errors import StudioError
from studio.core.findings import Finding, Report
from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.uploads import UploadedFile
from studio.core.paths import atomic_write_bytes
from studio.core.workspace import Version, Workspace
from studio.graphview.diff import GraphDiff, diff_graphs
from studio.graphview.diffview import (
    OVERLAY,
    changes_table,
    diff_panels,
    diff_region,
    lineage_table,
    op_count_table,
    summary_line,
)
from studio.graphview.dot import to_dot
from studio.graphview.echarts import echarts_option
from studio.graphview.html import Panel, Table, legend_html, render_html
from studio.graphview.index import GraphIndex, index_model
from studio.graphview.lineage import lineage_between
from studio.graphview.output import Written, format_of, write_graph
from studio.graphview.overlays import Overlay, OverlayContext, available_overlays
from studio.graphview.project import auto_level
from studio.graphview.scene import SceneStats, build_scene
from studio.graphview.viewer import diff_page, graph_page
from studio.graphview.view import (
    DETAIL_BUDGET,
    FAST_PATH_NODES,
    OVERVIEW_BUDGET,
    GraphView,
    group_nodes,
    neighbourhood,
    overview,
    region,
    search,
)
from studio.inspect.summary import ModelSummary, summarize

if TYPE_CHECKING:
    from passes.pipeline import PipelineResult
    from passes.merge_decoders import MergeResult
    from studio.inspect.decoder import DecoderSpec
    from studio.inspect.kv_cache import DecoderReport, KvBudget
    from studio.inspect.memory_report import MemoryReport
    from passes.memory_whatif import MemoryReorder
    from profilers.profile import Profile, ProfileOptions
    from profilers.generation_profile import GenerationOptions, GenerationProfile
    from profilers.variants import EngineSpec, ProfileTarget
    from studio.export.results import ExportResult
    from studio.projects import Artifact, Dataset, Job, ModelInfo, Project, ProjectInfo, ProjectModel

__all__ = ["Finding", "Report", "Version", "apply_fix", "check", "compatibility_overlay_data", "release_session", "export",
           "optimize", "add_optimized_version", "list_passes", "compare_peers",
           "GraphDiff", "GraphIndex", "GraphView", "ModelHandle", "ModelSummary", "Overlay", "Table", "Workspace",
           "diff", "diff_html", "diff_region_view", "diff_tables", "diff_versions", "diff_views",
           "graph_dot", "graph_echarts", "graph_html", "graph_index", "graph_legend_html", "graph_levels",
           "graph_prefers_fast_path", "graph_scene", "graph_viewer_html", "diff_viewer_html", "write_graph_viewer",
           "write_diff_viewer",
           "graph_overlays", "graph_view", "inspect", "load", "search_nodes", "write_diff", "write_graph_view",
           "profile", "profile_generation", "openvino_ir_target", "build_plugin", "plugin_builds_allowed", "plugin_signature", "run_python_op", "scaffold_plugin",
           "compare", "make_inputs", "precision",
           "UploadedFile", "add_dataset", "add_model", "add_version", "create_project", "delete_project", "duplicate_project",
           "export_project", "get_settings", "import_project", "input_run", "job", "list_projects", "list_versions", "model_for",
           "open_project", "project_artifacts", "project_for_model", "project_datasets", "project_jobs", "project_model", "project_models", "projects_root",
           "record_artifact", "rename_project", "set_setting", "shared_mode", "decoder_spec", "inspect_decoder",
           "kv_budget", "merge_decoders", "parse_memory", "memory_plan", "memory_reorder", "edit", "validate_edit_script", "edit_script", "add_edited_version"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


# -- decoders: the KV cache, read from the graph (DESIGN.md section 12) --------------------------

def _decoder_source(model: ModelHandle | str | Path):
    """(proto, path): a loaded handle's, or a file parsed without its external data and without
    hashing (a 4 GB decoder is recognized without reading its weights)."""
    from studio.core.model import parse_model_file

    if isinstance(model, ModelHandle):
        return model.proto, model.path
    path = Path(model).absolute()
    return parse_model_file(path), path


def decoder_spec(model: ModelHandle | str | Path) -> DecoderSpec | None:
    """The KV-cache decoder ``model`` is (convention optimum / genai / merged-if / onnx-attention, layers,
    heads, KV heads, head dim, hidden, vocab, context, which present output feeds which past input, KV
    dtype), or None for a model without a cache. Names, shapes and attributes only, plus a
    ``genai_config.json`` / ``config.json`` beside the file; a cache whose inputs and outputs do not fit
    together is a one-line StudioError naming both sides."""
    from studio.inspect.decoder import recognize

    proto, path = _decoder_source(model)
    return recognize(proto, folder=path.parent, filename=path.name)


def inspect_decoder(model: ModelHandle | str | Path, *, length: int | None = None, batch: int = 1,
                    memory: int | str | None = None, kv_dtype: str | None = None) -> DecoderReport:
    """Parameters per block, KV-cache bytes per token and at ``length`` x ``batch`` (default: the context
    length, 1) per KV dtype, and the KV budget for ``memory`` (bytes or '16GiB'; default: this machine's
    RAM), with a warning where a runtime would preallocate more. Never reads the weights."""
    from studio.inspect.decoder import recognize
    from studio.inspect.kv_cache import decoder_report

    proto, path = _decoder_source(model)
    spec = recognize(proto, folder=path.parent, filename=path.name)
    if spec is None:
        raise StudioError(f"'{path.name[:80]}' is not a KV-cache decoder: it has no past_key_values.N.key/value "
                          "inputs nor present.N.key/value outputs", code="NOT-A-DECODER")
    return decoder_report(proto, spec, length=length, batch=batch, memory=memory, kv_dtype=kv_dtype)


def kv_budget(report: DecoderReport, *, memory: int | str | None = None, kv_dtype: str | None = None,
              batch: int = 1, length: int | None = None) -> KvBudget:
    """The KV budget of an inspected decoder for another memory size, KV dtype, batch or length
    (arithmetic only: what the Overview page's calculator calls on every change)."""
    from studio.inspect.kv_cache import kv_budget as _kv_budget

    return _kv_budget(report.spec, report.weights_bytes, memory=memory, kv_dtype=kv_dtype, batch=batch,
                      length=length)


def merge_decoders(decoder: str | Path, with_past: str | Path, output: str | Path, *, verify: bool = True,
                   dims: Mapping[str, int] | None = None, pool_key: str = "default") -> MergeResult:
    """One model from a decoder and its decoder-with-past (either order), under an ``If`` on
    ``use_cache_branch`` (optimum's merged convention), weights deduplicated by content, written to
    ``output``; with ``verify``, ONNX Runtime runs a prefill step (against the decoder) and a decode
    step (against the decoder with past) and every output must be equal. A pair whose inputs, outputs
    or cache do not fit together is a one-line StudioError naming both sides."""
    from passes.merge_decoders import merge_decoders as _merge

    return _merge(decoder, with_past, output, verify=verify, pool_key=pool_key, dims=dims)


def parse_memory(text: str | int) -> int:
    """'16GiB' / '16G' (2**30), '16GB' (10**9), '512MiB' or a byte count, as bytes."""
    from studio.inspect.kv_cache import parse_memory as _parse

    return _parse(text)


# -- the memory plan (issue 25 item 3) --------------------------------------------------------------

def memory_plan(handle: ModelHandle, dims: Mapping[str, int] | None = None, *, measure: bool = False,
                pool_key: str = "default", engine_graph: bool | None = None,
                measure_timeout_s: float = 120.0) -> MemoryReport:
    """Every tensor's lifetime in ORT's execution order at ``dims`` (unset ones as the seeded inputs take
    them; a decoder's past length is its ``past_sequence_length`` dim), live bytes per step, the peak
    with its op and tensors, the best-fit arena, the KV cache's share, and with ``measure`` the block
    ORT really allocates (a child process on the same inputs) beside the prediction. ``engine_graph``
    (default: ``measure``): also the plan of ORT as users run it, over the graph ORT optimizes at its
    default level; each engine child is stopped after ``measure_timeout_s`` ("too large to measure")."""
    from studio.inspect.memory_report import memory_report

    return memory_report(handle, dims, measure=measure, pool_key=pool_key, engine_graph=engine_graph,
                         timeout_s=measure_timeout_s)


def memory_reorder(handle: ModelHandle, out_path: str | Path, dims: Mapping[str, int] | None = None, *,
                   measure: bool = True, pool_key: str = "default",
                   measure_timeout_s: float = 120.0) -> MemoryReorder:
    """The what-if: ``reorder-for-memory`` as a verified pass written to ``out_path``, with the predicted
    (and, with ``measure``, ORT's measured) peak before and after at the same dims."""
    from passes.memory_whatif import memory_reorder as _reorder

    return _reorder(handle, out_path, dims, measure=measure, pool_key=pool_key, timeout_s=measure_timeout_s)


def dim_hints(handle: ModelHandle) -> tuple[DimHint, ...]:
    """What the model says its dynamic dims should be (metadata ``imgsz``, a static
    other side, a Resize/Reshape target, the dim's name), each with its source; empty where it says nothing."""
    return _dim_hints(handle.proto)


def input_dim_keys(handle: ModelHandle) -> tuple[str, ...]:
    """Every free dim of the model's inputs, as ``dims`` keys: its name, or INPUT[AXIS] for an unnamed one.
    A derived dim (``past_sequence_length + sequence_length``: :func:`derived_dims`) is not free: its
    parts set it."""
    from studio.inspect.edge_shapes import pinned_inputs

    derived = {d.key for d in derived_dims(handle)}
    return tuple(k for k in pinned_inputs(handle.proto, {}).keys if k not in derived)


def derived_dims(handle: ModelHandle) -> tuple[DerivedDim, ...]:
    """The input dims written as formulas of other input dims (an optimum decoder's
    ``past_sequence_length + sequence_length``): computed from their parts, never set on their own."""
    from studio.core.dim_hints import model_derived_dims

    return model_derived_dims(handle.proto)


def profile(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]],
            engines: Sequence[str | EngineSpec] | str = ("ort",), options: ProfileOptions | None = None, *,
            workspace: Workspace | ProjectModel | None = None, out_dir: Path | None = None, pool_key: str = "default",
            on_progress: Callable[[float, str], None] | None = None) -> Profile:
    """Latency (cold start, warm percentiles, interleaved ratios), and optionally per-op time,
    memory and sweeps, of every model version on every engine (``profilers.profile``).

    ``engines``: specs such as "ort", "ov", "ov:bf16", "trt", or "all". Side files (ORT
    profiles, traces, caches) go to ``out_dir``, else to a job folder of ``workspace``,
    else to a temporary folder removed afterwards. ``on_progress(fraction, message)``
    may raise to stop: the running worker is killed and the exception propagates.
    """
    import shutil
    import tempfile
    from dataclasses import replace

    from profilers.profile import ProfileOptions, run_profile

    chosen, specs = _profile_targets(targets), _engine_specs(engines)
    if any(t.openvino_ir is not None for t in chosen):
        raise StudioError("an OpenVINO IR is profiled by its generation loop only (profile --generate, "
                          "api.profile_generation); profile its ONNX model otherwise", code="BAD-OPTION")
    temporary = out_dir is None and workspace is None
    folder = Path(out_dir) if out_dir is not None else (
        workspace.job_dir("profile") if workspace is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-profile-")))
    try:
        result = run_profile(chosen, specs, options or ProfileOptions(), out_dir=folder, pool_key=pool_key,
                             on_progress=on_progress)
    finally:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)  # scratch: the temp folder made above
    return replace(result, out_dir=None) if temporary else result


def _profile_targets(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]]) -> list[ProfileTarget]:
    from profilers.variants import ProfileTarget

    chosen: list[ProfileTarget] = []
    for item in targets:
        if isinstance(item, ProfileTarget):
            chosen.append(item)
        elif isinstance(item, ModelHandle):
            chosen.append(ProfileTarget(item.name, item))
        else:
            label, handle = item
            chosen.append(ProfileTarget(str(label), handle))
    return chosen


def _engine_specs(engines: Sequence[str | EngineSpec] | str) -> list[EngineSpec]:
    from profilers.variants import EngineSpec, parse_engines

    specs: list[EngineSpec] = []
    for item in [engines] if isinstance(engines, str) else engines:
        for spec in [item] if isinstance(item, EngineSpec) else parse_engines(item):
            if spec not in specs:
                specs.append(spec)
    return specs


def openvino_ir_target(xml: str | Path, source: ModelHandle, label: str | None = None) -> ProfileTarget:
    """An OpenVINO IR (``.xml`` + ``.bin``, e.g. NNCF int4 ``compress_weights``) of the ONNX decoder ``source``
    as a generation-profile target: OpenVINO runs the IR, ``source`` gives its decoder contract and output
    names. The IR is checked first (:mod:`studio.core.engines.openvino_ir`): a missing or truncated ``.bin``,
    a file that is no IR, is one ``StudioError`` line; names ``source`` has and the IR lacks are refused when
    profiled."""
    from profilers.variants import ProfileTarget
    from studio.core.engines.openvino_ir import read_ir

    ir = read_ir(xml)
    return ProfileTarget(label or ir.xml.name, source, openvino_ir=ir)


def profile_generation(targets: Sequence[ModelHandle | ProfileTarget | tuple[str, ModelHandle]],
                       engines: Sequence[str | EngineSpec] | str = ("ort",),
                       options: GenerationOptions | None = None, *, out_dir: Path | None = None,
                       pool_key: str = "default",
                       on_progress: Callable[[float, str], None] | None = None) -> GenerationProfile:
    """A KV-cache decoder's generation profile (``profilers.generation_profile``): greedy generations
    with the cache fed back (present -> past), per prompt length and batch, every version on every
    engine interleaved: TTFT, decode p50/p99, tokens/s, latency against position, peak memory.
    Raises a one-line ``StudioError`` for a model that is no decoder or a prompt beyond its context."""
    import shutil
    import tempfile

    from profilers.generation_profile import GenerationOptions, run_generation

    folder = Path(out_dir) if out_dir is not None else Path(tempfile.mkdtemp(prefix="onnx-studio-generate-"))
    try:
        return run_generation(_profile_targets(targets), _engine_specs(engines), options or GenerationOptions(),
                              out_dir=folder, pool_key=pool_key, on_progress=on_progress)
    finally:
        if out_dir is None:
            shutil.rmtree(folder, ignore_errors=True)  # scratch: the temp folder made above


def default_engines() -> tuple[str, ...]:
    """The engines :func:`check` checks by default: ONNX Runtime, OpenVINO, TensorRT, and MNN and
    LiteRT wherever their stack is installed."""
    from diagnostics.compatibility import default_engines as _default_engines

    return _default_engines()


def check(handle: ModelHandle, engines: Sequence[str] | str | None = None, *,
          eps: Sequence[str] = ("cpu",), trt_version: str | int = "10", run: bool = True,
          dims: Mapping[str, int] | None = None, inputs: str | Path | None = None,
          pool_key: str = "default", tasks: Mapping[str, str] | None = None) -> Report:
    """Compatibility per node and per engine (ONNX Runtime and OpenVINO decided by a real session in a
    worker, TensorRT by its support table, MNN and LiteRT by a real conversion and run), plus lint and
    custom ops. See docs/findings.md. ``engines``: default :func:`default_engines`.
    ``inputs``: an .npz of real inputs for the runs (default: seeded inputs). ``tasks``: {output: kind}
    (see :func:`output_tasks`): how the converted engines' outputs are compared with ONNX Runtime's."""
    from diagnostics.compatibility import check_model

    return check_model(handle, engines, eps=eps, trt_version=trt_version, run=run, dims=dims, inputs=inputs,
                       pool_key=pool_key, tasks=tasks)


def apply_fix(workspace: Workspace | ProjectModel, version_id: str, fix: Finding | str, *, verify: bool = True,
              options: Mapping[str, Any] | None = None, dims: Mapping[str, int] | None = None,
              pool_key: str = "default") -> Version:
    """Run the fix pass (a pass name, or a finding's ``fix_pass``) through the verifying pipeline
    and add the result as a new version whose provenance records the fix and the pipeline.
    ``options`` are the pass's options (a finding brings its own); ``dims`` fix-input-shapes' values."""
    from diagnostics.fixes import apply_fix as _apply_fix

    return _apply_fix(workspace, version_id, fix, verify=verify, options=options, dims=dims, pool_key=pool_key)


def compatibility_overlay_data(report: Report) -> dict[str, dict[str, str]]:
    """The check report as Graph-page overlay data: per engine target, each node's status."""
    from studio.graphview.overlays import compatibility_data

    return compatibility_data(report.nodes)


def release_session(pool_key: str) -> None:
    """Stop the sandbox workers of one session (a browser session that ended)."""
    from studio.core.sandbox import shutdown_pool

    shutdown_pool(pool_key)


# -- graph view -------------------------------------------------------------------

def graph_index(handle: ModelHandle, summary: ModelSummary | None = None) -> GraphIndex:
    """The model's graph and hierarchy (build once, pass to ``graph_view`` many times).
    Without ``summary`` it is faster (no shape inference) but edges lack shapes and FLOPs."""
    return index_model(handle, summary)


def graph_prefers_fast_path(handle: ModelHandle) -> bool:
    """True for models big enough (> 50k nodes) that the graph should be drawn before
    ``inspect`` (shapes, FLOPs), which takes seconds at that size."""
    return len(handle.proto.graph.node) > FAST_PATH_NODES


def graph_levels(index: GraphIndex, budget: int = OVERVIEW_BUDGET) -> tuple[int, int]:
    """(the deepest level whose overview fits ``budget``, the deepest level there is)."""
    return auto_level(index.hierarchy, budget), len(index.hierarchy.visible_counts()) - 1


def search_nodes(index: GraphIndex, query: str, limit: int = 200) -> list[int]:
    """Nodes whose id, name, op type or tensor names contain ``query`` (any case)."""
    return search(index.graph, query, limit)


def graph_overlays(index: GraphIndex, summary: ModelSummary | None = None,
                   data: Mapping[str, Any] | None = None) -> dict[str, Overlay]:
    """Overlays the registered providers can make (op type, FLOPs share, and those fed by ``data``)."""
    return available_overlays(OverlayContext(index.graph, summary, data or {}))


def graph_view(handle: ModelHandle | None = None, *, index: GraphIndex | None = None,
               summary: ModelSummary | None = None, level: int | None = None,
               expanded: Collection[str] = (), collapsed: Collection[str] = (), focus: str | None = None,
               hops: int = 2, group: str | None = None, overlay: str | Overlay | None = "op type",
               overlay_data: Mapping[str, Any] | None = None, query: str = "",
               budget: int | None = None) -> GraphView:
    """A view of the model: the overview (``level`` None = the deepest that fits the
    budget), or a detail region: ``focus`` node (id or name) with ``hops`` of
    neighbours, or a ``group`` (by key). ``query`` highlights search hits."""
    if index is None:
        if handle is None:
            raise StudioError("graph_view needs a model handle or a graph index")
        index = index_model(handle, summary)
    ov: Overlay | None
    if isinstance(overlay, str):
        found = graph_overlays(index, summary, overlay_data)
        if overlay not in found:
            raise StudioError(f"no overlay '{overlay[:60]}' for this model; available: {', '.join(sorted(found))}",
                              code="NO-OVERLAY")
        ov = found[overlay]
    else:
        ov = overlay
    hits = search(index.graph, query) if query else []
    g, h = index.graph, index.hierarchy
    if focus is not None:
        k = index.find(focus)
        nodes = neighbourhood(g, k, hops, budget or DETAIL_BUDGET)
        return region(g, h, nodes, title=f"{g.name}: {hops} hops around {g.nodes[k].name or g.nodes[k].id}",
                      budget=budget or DETAIL_BUDGET, overlay=ov, focus=k, highlight=hits)
    if group is not None:
        nodes = group_nodes(h, group)
        if not nodes:
            raise StudioError("no such group in this model (the hierarchy changed?)", code="NO-GROUP")
        return region(g, h, nodes, title=f"{g.name}: group", budget=budget or DETAIL_BUDGET, overlay=ov,
                      highlight=hits)
    return overview(g, h, level=level, budget=budget or OVERVIEW_BUDGET, expanded=expanded,
                    collapsed=collapsed, overlay=ov, highlight=hits)


def graph_echarts(view: GraphView) -> dict:
    """The ECharts option drawing ``view`` (for ``st.echarts_chart``; data index = item index)."""
    return echarts_option(view)


def graph_dot(view: GraphView) -> str:
    """DOT source of ``view`` (for ``st.graphviz_chart`` or graphviz)."""
    return to_dot(view)


def graph_legend_html(view: GraphView) -> str:
    """The overlay's legend as escaped HTML with inline styles."""
    return legend_html(view.painted)


def graph_html(views: GraphView | Sequence[GraphView], title: str | None = None) -> str:
    """A self-contained interactive HTML page (no network needed) for one or more views."""
    vs = [views] if isinstance(views, GraphView) else list(views)
    return render_html([Panel(v.title, v) for v in vs], title=title or vs[0].title)


def write_graph_view(view: GraphView, path: str | Path) -> Written:
    """Write a view as .html, .dot or .svg (by suffix; .dot instead of .svg without graphviz)."""
    return write_graph(Path(path), [Panel(view.title, view)], title=view.title)


def graph_scene(index: GraphIndex, *, expanded: Collection[str] = ()) -> tuple[dict, SceneStats]:
    """The browser viewer's data: groups, op boxes (key attributes, weight shapes), shape-labelled
    edges and the groups open at first paint (at most ~150 items visible)."""
    return build_scene(index.graph, index.hierarchy, expanded=tuple(expanded))


def graph_viewer_html(index: GraphIndex, *, summary: ModelSummary | None = None, overlay: str | Overlay | None = None,
                      overlay_data: Mapping[str, Any] | None = None, height: int | None = None,
                      expanded: Collection[str] = (), title: str | None = None, focus: str | None = None) -> str:
    """The interactive viewer (ELK layout, canvas, expand in place, minimap) as one
    self-contained HTML document; ``height`` in px sizes it for an iframe; ``focus``
    (a node id) opens centred on that node, its groups open."""
    ov = _overlay(index, summary, overlay, overlay_data)
    html, _ = graph_page(index.graph, index.hierarchy, title=title, overlay=ov, height=height,
                         expanded=tuple(expanded), focus=focus)
    return html


def _overlay(index: GraphIndex, summary: ModelSummary | None, overlay: str | Overlay | None,
             overlay_data: Mapping[str, Any] | None) -> Overlay | None:
    if overlay is None or isinstance(overlay, Overlay):
        return overlay
    found = graph_overlays(index, summary, overlay_data)
    if overlay not in found:
        raise StudioError(f"no overlay '{overlay[:60]}' for this model; available: {', '.join(sorted(found))}",
                          code="NO-OVERLAY")
    return found[overlay]


def write_graph_viewer(index: GraphIndex, path: str | Path, *, summary: ModelSummary | None = None,
                       overlay: str | Overlay | None = None, overlay_data: Mapping[str, Any] | None = None) -> Written:
    """Write the interactive viewer of the whole model to an .html file."""
    p = Path(path)
    if format_of(p) != "html":
        raise StudioError("the interactive viewer writes .html (use .dot/.svg with a level or --focus)")
    ov = _overlay(index, summary, overlay, overlay_data)
    html, stats = graph_page(index.graph, index.hierarchy, overlay=ov)
    atomic_write_bytes(p, html.encode("utf-8"))
    return Written(p, "html", stats.leaves,
                   f"opens at level {stats.open_level} with {stats.visible:,} items; {stats.leaves:,} shipped"
                   + (f", {stats.sealed:,} groups closed" if stats.sealed else ""))


def diff_viewer_html(d: GraphDiff, *, side_by_side: bool = True, height: int | None = None) -> str:
    """The diff in the viewer: one layout of both graphs, before/after panels with synced
    pan/zoom (or one panel coloured by status)."""
    html, _ = diff_page(d, side_by_side=side_by_side, height=height, notes=[summary_line(d)])
    return html


def write_diff_viewer(d: GraphDiff, path: str | Path, *, side_by_side: bool = True) -> Written:
    """Write the diff viewer (with the op-count, lineage and change tables) to an .html file."""
    p = Path(path)
    if format_of(p) != "html":
        raise StudioError("the interactive diff viewer writes .html")
    html, stats = diff_page(d, side_by_side=side_by_side, notes=[summary_line(d)], tables=diff_tables(d))
    atomic_write_bytes(p, html.encode("utf-8"))
    return Written(p, "html", stats.leaves)


# -- diff ---------------------------------------------------------------------------

def diff(handle_a: ModelHandle, handle_b: ModelHandle, *, lineage: object = None,
         summary_a: ModelSummary | None = None, summary_b: ModelSummary | None = None,
         dims: Mapping[str, int] | None = None, dims_b: Mapping[str, int] | None = None,
         pool_key: str = "default") -> GraphDiff:
    """Nodes of ``a`` (before) and ``b`` (after) matched by name and structure, each removed,
    added, changed or unchanged; ``lineage`` (pipeline records) says which pass did it.
    ``dims`` (the model's dims setting; ``dims_b`` for ``b`` when it differs): edges are labelled
    with the numeric shapes at those sizes, as on the other pages."""
    if dims and summary_a is None:
        summary_a = inspect(handle_a, dims, pool_key=pool_key)
    if (dims_b if dims_b is not None else dims) and summary_b is None:
        summary_b = inspect(handle_b, dims_b if dims_b is not None else dims, pool_key=pool_key)
    ga = index_model(handle_a, summary_a).graph
    gb = index_model(handle_b, summary_b).graph
    return diff_graphs(ga, gb, lineage=lineage, model_a=handle_a.proto, model_b=handle_b.proto)


def diff_versions(ws: Workspace | ProjectModel, a: str, b: str, *, dims: Mapping[str, int] | None = None,
                  pool_key: str = "default") -> GraphDiff:
    """Diff two workspace versions, with the pipeline records that lead from ``a`` to ``b``
    (``dims``: the model's dims setting, for numeric edge shapes)."""
    return diff(ws.handle(a), ws.handle(b), lineage=lineage_between(ws, a, b), dims=dims, pool_key=pool_key)


def diff_views(d: GraphDiff, mode: str = OVERLAY, level: int | None = None) -> list[GraphView]:
    """Overview(s) coloured by diff status: one union graph ("overlay") or both ("side-by-side")."""
    return [p.view for p in diff_panels(d, mode, level=level)]


def diff_region_view(d: GraphDiff, hops: int = 1) -> GraphView:
    """The changed nodes with ``hops`` of context (small enough for graphviz)."""
    return diff_region(d, hops=hops)


def diff_tables(d: GraphDiff) -> list[Table]:
    """Op counts before/after, pass lineage counts, and the changed nodes."""
    return [op_count_table(d), lineage_table(d), changes_table(d)]


def diff_html(d: GraphDiff, mode: str = OVERLAY, level: int | None = None) -> str:
    """The diff as a self-contained HTML page: graphs coloured by status, op counts, changes."""
    return render_html(diff_panels(d, mode, level=level), title=f"diff {d.a.name} → {d.b.name}",
                       notes=[summary_line(d)], tables=diff_tables(d))


def write_diff(d: GraphDiff, path: str | Path, mode: str = OVERLAY, level: int | None = None) -> Written:
    """HTML: the diff page; .dot/.svg: the changed region with one hop of context."""
    p = Path(path)
    if format_of(p) == "html":
        return write_graph(p, diff_panels(d, mode, level=level), title=f"diff {d.a.name} → {d.b.name}",
                           notes=[summary_line(d)], tables=diff_tables(d))
    reg = diff_region(d)
    return write_graph(p, [Panel(reg.title, reg)], title=reg.title)
def list_passes() -> dict:
    """Registered passes and presets with their one-line descriptions (``optimize --list``)."""
    from passes.catalog import catalog

    return catalog()


def optimize(handle: ModelHandle, *, preset: str | None = None, passes: Sequence[str] | None = None,
             dims: Mapping[str, int] | None = None, pass_options: Mapping[str, Mapping] | None = None,
             on_failure: str = "stop", verify: bool = True, out_path: str | Path | None = None,
             on_progress: Callable[[int, int, str], None] | None = None,
             pool_key: str = "default", time_budget_s: float | None = None,
             partial: str | Path = "output", inputs: str | Path | None = None,
             dump_dir: str | Path | None = None) -> PipelineResult:
    """Run a preset (default ``safe``) or named passes, verifying after every modifying pass.

    ``dims`` fix symbolic dims for verification feeds and are what ``fix-input-shapes``
    specializes. The result is written to ``out_path`` (default: a new job folder in
    the workspace root); the input file is only read. Refuses models that fail
    ``onnx.checker`` (R17). ``time_budget_s`` skips passes that would start later.
    ``partial``: where the last verified model goes when the result is not ok ("output":
    ``out_path`` itself, "none": nowhere, ``result.output`` is None, or another path).
    ``inputs``: an .npz of real verification inputs; ``dump_dir``: the model after each pass.
    """
    from passes.optimize import OptimizeRequest, optimize_model

    return optimize_model(handle, OptimizeRequest(
        preset=preset, passes=passes, dims=dims, pass_options=pass_options, on_failure=on_failure, verify=verify,
        out_path=out_path, on_progress=on_progress, pool_key=pool_key, time_budget_s=time_budget_s, partial=partial,
        inputs=inputs, dump_dir=dump_dir))


def compare_peers(model: ModelHandle | str | Path, out_dir: str | Path | None = None, *,
                  timeout_s: float = 300.0) -> tuple:
    """onnxsim's and onnxslim's node counts on the same model (``optimize --compare-peers``), each run
    in a fresh sandbox worker with a timeout; a crash or a missing tool is that peer's ``error``.
    With ``out_dir`` their results are kept there as ``onnxsim.onnx`` / ``onnxslim.onnx``."""
    from passes.peers import compare_peers as _compare

    path = model.path if isinstance(model, ModelHandle) else Path(model)
    return _compare(path, out_dir, timeout_s=timeout_s)


def add_optimized_version(workspace: Workspace | ProjectModel, parent: str, result: PipelineResult, *,
                          preset: str | None = None, label: str | None = None) -> Version:
    """Save a pipeline's result as a new workspace version whose provenance holds the
    lineage the graph view reads: ``{"pipeline": [...], "preset": ..., "parent": ...}``."""
    from passes.optimize import add_version

    return add_version(workspace, parent, result, preset=preset, label=label)


# ---------------------------------------------------------------------------- edits (DESIGN.md §13)

def edit_script(source: str | Path | Sequence[Mapping] | Mapping) -> Any:
    """An edit script (``studio.edit.EditScript``) from a .json/.yaml file, or from already-decoded
    operations (``[{"op": "rename", ...}]``); each operation's fields are checked here."""
    from studio.edit import load_script, parse_ops

    if isinstance(source, (str, Path)):
        return load_script(source)
    return parse_ops(source)


def validate_edit_script(handle: ModelHandle, script: Any) -> Any:
    """Apply a script in memory and check the result (names exist, no cycle, full checker, strict
    shape inference); writes nothing. Returns the preview (``EditResult``: interface before/after,
    nodes removed/added) or raises a one-line ``StudioError``."""
    from studio.edit import validate

    return validate(handle, edit_script(script) if not _is_script(script) else script)


def edit(handle: ModelHandle, script: Any, out_path: str | Path, *, verify: bool = True,
         pool_key: str = "default") -> Any:
    """Apply an edit script and write the result to ``out_path`` (a split's second model beside it as
    ``OUT.part2.onnx``): checked, verified against the original (numbers where the edit keeps them,
    the original's tensors at a cut), written only then; the input is only read."""
    from studio.edit import edit as _edit

    return _edit(handle, edit_script(script) if not _is_script(script) else script, out_path,
                 verify_numbers=verify, pool_key=pool_key)


def _is_script(script: Any) -> bool:
    from studio.edit import EditScript

    return isinstance(script, EditScript)


def add_edited_version(model: ProjectModel | Workspace, parent: str, result: Any, *, label: str = "edit",
                       job_id: str | None = None, source_sha256: str | None = None) -> Version:
    """The edited model as a new version whose provenance records the script (undo: select ``parent``).
    A split's later parts become versions too (children of ``parent``, labelled ``... part N``); the
    first part is returned. In a project, an edit that changes no byte is refused as "same as vN" (R63)
    and ``source_sha256`` (the content edited) must be ``parent``'s (R59)."""
    from studio.edit import provenance
    from studio.projects import ProjectModel as _ProjectModel

    if not result.outputs:
        raise StudioError("the edit wrote no model to keep", code="NO-RESULT")
    kwargs: dict[str, Any] = {"job_id": job_id} if job_id is not None else {}
    if isinstance(model, _ProjectModel):
        kwargs.update(refuse_same=True, source_sha256=source_sha256)
    first = model.add_file(result.outputs[0], label=label, parent=parent, provenance=provenance(result, parent),
                           **kwargs)
    kwargs.pop("refuse_same", None)           # a later part may equal another version: it is still a part
    for i, path in enumerate(result.outputs[1:], 2):
        model.add_file(path, label=f"{label[:50]} part {i}", parent=parent,
                       provenance={**provenance(result, parent), "part": i}, **kwargs)
    return first


# ---------------------------------------------------------------------------- custom-op plugins

def plugin_signature(handle: ModelHandle, op: str, *, capture: bool = True, dims: Mapping[str, int] | None = None,
                     pool_key: str = "default"):
    """The op as the model uses it: attributes, ports, dtypes/shapes and captured samples (``OpSignature``)."""
    from studio.plugins.signature import collect_signature

    return collect_signature(handle, op, capture=capture, dims=dims, pool_key=pool_key)


def scaffold_plugin(handle: ModelHandle, op: str, target: str | Sequence[str], out_dir: str | Path, *,
                    signature=None, impl: str | Path | None = None, dims: Mapping[str, int] | None = None,
                    pool_key: str = "default"):
    """Write plugin packages for ``op`` (targets: ort-python, ort-cpp, openvino-python, openvino-cpp, tensorrt,
    all) under ``out_dir/<op>/<target>/`` and return the ``PluginScaffold``. ``impl`` (code or a .py file)
    replaces the generated Python body (``compute`` for ort-python, ``convert`` for openvino-python)."""
    from studio.plugins.runner import read_code
    from studio.plugins.scaffold import expand_targets, scaffold

    sig = signature or plugin_signature(handle, op, dims=dims, pool_key=pool_key)
    code = {}
    if impl is not None:
        text = read_code(impl)
        code["openvino-python" if "def convert(" in text and "def compute(" not in text else "ort-python"] = text
    opsets = {o.domain: o.version for o in handle.proto.opset_import}
    return scaffold(sig, expand_targets(target), Path(out_dir), model_name=handle.path.name, model_sha=handle.sha256,
                    opsets=opsets, impl_code=code)


def run_python_op(handle: ModelHandle, op: str, impl_code_or_path: str | Path, *, target: str = "ort-python",
                  signature=None, run_model: bool = True, timeout_s: float | None = None, pool_key: str = "default",
                  on_tick=None):
    """Run a Python implementation of ``op`` (ORT Python op or OpenVINO conversion extension) in a fresh,
    confined worker and compare it with the reference (``OpRunResult``; falsy unless it matches)."""
    from studio.plugins.runner import run_python_op as _run

    return _run(handle, op, impl_code_or_path, target=target, signature=signature, run_model=run_model,
                timeout_s=timeout_s, pool_key=pool_key, on_tick=on_tick)


def plugin_builds_allowed() -> bool:
    """Whether this studio compiles C++ plugin packages: not on a shared server (``serve --shared``)."""
    from studio.plugins.build import builds_allowed

    return builds_allowed()


def build_plugin(handle: ModelHandle, scaffold, target: str, *, signature=None, pool_key: str = "default",
                 on_tick=None):
    """Compile a generated C++ package (ort-cpp, openvino-cpp) in a one-off sandboxed worker and check the
    library against the reference (``BuildResult``). TensorRT packages are reported as not compiled here; on a
    shared server (:func:`plugin_builds_allowed` false) this raises ``StudioError``."""
    from studio.plugins.build import build_package, check_library

    package = scaffold.package(target)
    folder = scaffold.root.parent / package.folder
    result = build_package(folder, target, pool_key=pool_key, on_tick=on_tick)
    if not result.built:
        return result
    sig = signature or plugin_signature(handle, scaffold.op, pool_key=pool_key)
    check = check_library(handle, sig, target, folder / result.library, pool_key=pool_key, on_tick=on_tick)
    from dataclasses import replace

    return replace(result, check=check, message=f"{result.message}; {check.message}")


# ---------------------------------------------------------------------------- precision and verification
# (imports are local: the accuracy/precision layers pull in plotly-free but heavier modules)

def _path_of(model: ModelHandle | str | Path) -> Path:
    """A validated model path: handles are already validated; paths go through ``load``."""
    return model.path if isinstance(model, ModelHandle) else _load(model).path


def make_inputs(handle: ModelHandle, *, inputs: str | Path | None = None, images: str | Path | None = None,
                count: int = 1, dims: Mapping[str, int] | None = None, seed: int = 0, preprocess=None):
    """Feeds for ``handle``: a user .npz, an image folder, or ``count`` seeded random sets (a FeedSet)."""
    from studio.core.feeds import make_feeds

    return make_feeds(handle.proto, inputs=Path(inputs) if inputs else None, images=Path(images) if images else None,
                      count=count, dims=dims, seed=seed, preprocess=preprocess)


def compare(a: ModelHandle | str | Path, b: ModelHandle | str | Path, *, engine: str = "ort",
            engine_b: str | None = None, feeds=None, inputs: str | Path | None = None,
            images: str | Path | None = None, count: int = 2, dims: Mapping[str, int] | None = None,
            ov_precision: str = "f32", ov_precision_b: str | None = None, tolerance=None, layerwise: bool = False,
            layer_threshold: float | None = None, labels: tuple[str, str] | None = None,
            pool_key: str = "default", on_tick=None, dataset=None, dataset_part: str = "evaluation",
            limit: int | None = None, target: str | None = None, tasks: Mapping[str, str] | None = None):
    """Compare model ``a`` on ``engine`` with model ``b`` on ``engine_b`` (default: the same) on the
    same inputs: shapes first, then max abs/rel, L2, cosine, top-1/top-5 agreement per output
    (a ``ModelComparison``, truthy when everything matches). ``layerwise`` adds the first
    diverging layer and per-layer errors (``result.layerwise.node_errors()``). ``dataset``: run on its
    ``dataset_part`` samples and add task metrics of B against A's golden outputs (``result.extra["task"]``),
    judged by ``target`` when given (refused before any run when it applies to no output). Every output
    is compared by its task (``tasks``: {output: kind} chosen by the user, see :func:`output_tasks`)."""
    import dataclasses

    from studio.accuracy.compare_models import compare_models
    from studio.core.engines import RunOptions

    pa, pb = _path_of(a), _path_of(b)
    if target and dataset is None:
        raise StudioError("a task-metric target is judged on a dataset: give dataset=", code="BAD-OPTION")
    _checked_target(target, a if isinstance(a, ModelHandle) else pa, tasks, dataset)
    if dataset is not None and feeds is None:
        from studio.core.feeds import FeedSet
        from studio.data.datasets import dataset_feeds

        header = a.proto if isinstance(a, ModelHandle) else _load(pa).proto
        sets = dataset_feeds(dataset, header, part=dataset_part, limit=limit or 64, dims=dims)
        feeds = FeedSet(tuple(sets), f"dataset {dataset.name[:40]}: {len(sets)} {dataset_part} sample(s)")
    if feeds is None and (inputs or images):
        feeds = make_inputs(a if isinstance(a, ModelHandle) else _load(pa), inputs=inputs, images=images,
                            count=count, dims=dims)
    labels = labels or ((a.name if isinstance(a, ModelHandle) else pa.name),
                        (b.name if isinstance(b, ModelHandle) else pb.name))
    result = compare_models(pa, pb, engine=engine, engine_b=engine_b, feeds=feeds,
                          options=RunOptions(precision=ov_precision),
                          options_b=RunOptions(precision=ov_precision_b or ov_precision), tolerance=tolerance,
                          labels=labels, dims=dims, count=count, pool_key=pool_key, on_tick=on_tick,
                          layerwise=layerwise,
                          layerwise_options={"layer_threshold": layer_threshold} if layer_threshold else None,
                          tasks=tasks)
    if dataset is None:
        return result
    from studio.core.engines import resolve_engine_name

    task = evaluate_on_dataset(dataset, pa, pb, engine=resolve_engine_name(engine_b or engine), target=target,
                               part=dataset_part, limit=limit or 64, pool_key=pool_key, tasks=tasks)
    return dataclasses.replace(result, extra={**dict(result.extra), "task": task.to_dict()})


def precision(handle: ModelHandle | str | Path, *, variants=None, calibration: str | Path | None = None,
              inputs: str | Path | None = None, samples: int = 8, target_cosine: float = 0.99,
              out_dir: str | Path | None = None, dims: Mapping[str, int] | None = None, preprocess=None,
              latency_budget_s: float = 60.0, pool_key: str = "default", on_progress=None, on_tick=None,
              calibration_method: str = "minmax", dataset=None, target: str | None = None,
              tasks: Mapping[str, str] | None = None, weight_options: Mapping[str, Any] | None = None,
              generation_steps: int = 8):
    """Build fp16/bf16/INT8 variants, compare each with fp32 and time them side by side; the
    ``PrecisionReport`` recommends the fastest variant meeting ``target_cosine`` that is faster
    than fp32 (fp32 itself when none is). ``calibration_method``: minmax, entropy or percentile.
    With calibration data and no ``inputs``, accuracy is judged on samples held out from it.
    ``dataset`` (see :func:`dataset`): calibrate on its calibration part, judge on its evaluation part
    against stored golden outputs by task metrics; ``target`` (``top1-agreement>=0.99``,
    ``map-drop<=0.01``...) is then what a variant must meet; one that applies to no output (with
    ``tasks``: {output: kind}, see :func:`output_tasks`) is refused before any work. Without real data
    the report says it is a random-input estimate, not a recommendation. Weight-only variants (int4,
    int8-weights, int4-ov, int8-weights-ov) take ``weight_options`` (block_size, symmetric,
    accuracy_level, ratio); a KV-cache decoder is judged over ``generation_steps`` greedy tokens
    (next-token agreement and KL with fp32; a text ``dataset`` gives the prompts)."""
    from studio.core.paths import user_data_path
    from studio.data.metrics import parse_target
    from studio.precision.variants import evaluate_variants

    return evaluate_variants(_path_of(handle), variants=variants, out_dir=Path(out_dir) if out_dir else None,
                             calibration=user_data_path(calibration, label="calibration data") if calibration else None,
                             inputs=user_data_path(inputs, label="inputs file") if inputs else None, samples=samples,
                             preprocess=preprocess,
                             dims=dims, target_cosine=target_cosine, latency_budget_s=latency_budget_s,
                             pool_key=pool_key, on_progress=on_progress, on_tick=on_tick,
                             calibration_method=calibration_method, dataset=dataset,
                             target=parse_target(target) if target else None, tasks=tasks,
                             weight_options=weight_options, generation_steps=generation_steps)
# -- export ---------------------------------------------------------------------------

def export(handle: ModelHandle, targets: str | Sequence[str], out_dir: str | Path, *, preset: str | None = None,
           precision: str = "fp32", calibration: str | Path | None = None, calibration_method: str = "minmax",
           shapes: Mapping[str, object] | Sequence[str] | None = None, name: str | None = None,
           ort_level: str = "extended", ort_format: bool = True, max_batch: int = 8,
           plugins: Sequence[str | Path] = (), zip: bool = True, pool_key: str = "default",
           on_tick: Callable[[float], None] | None = None,
           on_progress: Callable[[str, str], None] | None = None,
           ov_precisions: str | Sequence[str] | None = None, ort_custom_ops: Sequence[str | Path] = (),
           ov_extensions: Sequence[str | Path] = (), dataset=None, target: str | None = None,
           tasks: Mapping[str, str] | None = None, dims: Mapping[str, int] | None = None) -> ExportResult:
    """Deployment artifacts for ``targets`` (ort, openvino, tensorrt, triton or all) in
    ``out_dir/<model>-<sha8>/`` (+ ``.zip``): each reloaded by its engine and compared with
    the original, with manifest.json and report.md/.html. ``shapes``: NAME=MIN:OPT:MAX
    specs (or a mapping). ``ov_precisions``: the OpenVINO IRs to write ("fp32", "fp16" or both; default
    from ``precision``). ``ort_custom_ops`` / ``ov_extensions``: custom-op libraries loaded wherever the
    artifact is converted and verified, and shipped in the bundle. ``result.ok`` is False when a verification failed; TensorRT
    without a GPU is "not verified" (not a failure). The model file is only read. ``tasks``: {output: kind}
    (see :func:`output_tasks`): how every artifact's outputs are compared; a dataset ``target`` that applies
    to no output is refused before any work. ``dims``: the model's dims setting (verification inputs and
    the TensorRT profile's opt at those sizes; ``shapes`` win where both name an input)."""
    from studio.core.paths import user_data_path
    from studio.export.exporter import export_model
    from studio.export.options import ExportOptions

    options = ExportOptions(targets=(targets,) if isinstance(targets, str) else tuple(targets), preset=preset,
                            precision=precision,
                            calibration=user_data_path(calibration, label="calibration data") if calibration else None,
                            calibration_method=calibration_method, shapes=shapes or {}, dims=dict(dims or {}),
                            name=name,
                            ort_level=ort_level, ort_format=ort_format, max_batch=max_batch,
                            plugins=tuple(Path(p) for p in plugins), zip=zip, ov_precisions=ov_precisions,
                            ort_custom_ops=tuple(Path(p) for p in ort_custom_ops),
                            ov_extensions=tuple(Path(p) for p in ov_extensions))
    if target and dataset is None:
        raise StudioError("a task-metric target is judged on a dataset: give dataset= (--dataset NAME)",
                          code="BAD-OPTION")
    _checked_target(target, handle, tasks, dataset)
    result = export_model(handle, options, out_dir, pool_key=pool_key, on_tick=on_tick, on_progress=on_progress,
                          tasks=tasks)
    if dataset is None:
        return result
    return _dataset_parity(result, handle, dataset, target, pool_key, tasks)


def _dataset_parity(result: ExportResult, handle: ModelHandle, ds, target: str | None,
                    pool_key: str, tasks: Mapping[str, str] | None = None) -> ExportResult:
    """Task metrics of every ONNX / OpenVINO IR artifact against the original's golden outputs on the
    dataset, kept in the bundle (``parity.json``, and ``dataset_parity`` in manifest.json)."""
    import dataclasses

    from studio.core import outputs
    from studio.core.engines import RunOptions
    from studio.data.evaluate import evaluate, golden_outputs
    from studio.data.metrics import parse_target

    golden = golden_outputs(ds, handle.path, limit=64, pool_key=pool_key, tasks=tasks)
    goal = parse_target(target) if target else None
    rows = []
    for t in result.targets:
        for art in t.artifacts:
            path = result.bundle / art.path
            engine = {"onnx": "onnxruntime", "openvino-ir": "openvino"}.get(art.kind)
            if engine is None or not path.is_file():
                continue
            report = evaluate(ds, golden, path, engine=engine, target=goal, candidate=art.path, pool_key=pool_key,
                              inputs_model=handle.path,
                              options=RunOptions(openvino_ir=art.kind == "openvino-ir"))
            rows.append({"artifact": art.path, "target": t.target, **report.to_dict()})
    parity = {"dataset": ds.name, "reference": golden.reference, "samples": len(golden.outputs),
              "task_target": target, "artifacts": rows,
              "all_met": all(r["target_met"] for r in rows) if goal is not None else None}
    outputs.write_json(result.bundle / "parity.json", parity)
    manifest = {**result.manifest, "dataset_parity": {k: parity[k] for k in ("dataset", "samples", "task_target",
                                                                              "all_met")}}
    outputs.write_json(result.bundle / "manifest.json", manifest)
    if result.zip_path is not None:
        from studio.export.bundle import write_zip

        write_zip(result.bundle, result.zip_path)       # the zip carries the parity report too
    return dataclasses.replace(result, manifest=manifest)


# -- projects ---------------------------------------------------------------------------
# A project keeps models, their version trees, artifacts, jobs and settings on disk
# (studio.projects; DESIGN.md §8). Functions take a ``Project`` or its id.

def input_run():
    """A context manager for one request of a long-lived front end (a page's script run): the files it
    reads stay protected from being overwritten by any output until it ends (``outputs.input_run``)."""
    from studio.core.outputs import input_run as _run

    return _run()


def shared_mode() -> bool:
    """True on a team server (``serve --shared``): no path input, sessions see only their projects."""
    import os

    return os.environ.get("ONNX_STUDIO_SHARED") == "1"


def projects_root(root: str | Path | None = None) -> Path:
    """The projects root: ``root``, else $ONNX_STUDIO_PROJECTS_ROOT, else ~/.local/share/onnx-studio/projects."""
    from studio.projects import default_projects_root

    return Path(root).expanduser().resolve() if root else default_projects_root()


def _project(project: Project | str, root: str | Path | None = None) -> Project:
    from studio.projects import Project, open_project

    return project if isinstance(project, Project) else open_project(str(project), root, by_name=False)


def create_project(name: str, root: str | Path | None = None) -> Project:
    """A new, empty project with an unguessable id and a human ``name``."""
    from studio.projects import create_project as _create

    return _create(name, root)


def list_projects(root: str | Path | None = None) -> list[ProjectInfo]:
    """Every project under the root (id, name, counts, size), most recently changed first."""
    from studio.projects import list_projects as _list

    return _list(root)


def open_project(id_or_name: str, root: str | Path | None = None, *, by_name: bool = True,
                 create: bool = False, unique: bool = False) -> Project:
    """A project by id (or name: where several share it, the most recently changed one; ``unique``:
    an error naming their ids, for what renames or removes); jobs left running by a dead process are
    marked interrupted. ``create``: make a project of that name when there is none."""
    from studio.projects import open_or_create, open_project as _open

    return open_or_create(id_or_name, root) if create else _open(id_or_name, root, by_name=by_name, unique=unique)


def project_for_model(source: str | Path | ModelHandle, root: str | Path | None = None
                      ) -> tuple[Project, ProjectModel, Version]:
    """Where a model opened by path lives (``serve MODEL``): the most recently changed project that
    holds this exact content (by sha256, whatever the projects are named), else a new project named
    after the model. Never ambiguous: names are labels, the content decides."""
    from studio.projects import create_project as _create, project_with_content

    handle = source if isinstance(source, ModelHandle) else _load(source)
    project = project_with_content(handle.sha256, root) or _create(handle.name, root)
    model, version = project.find_content(handle.sha256) or project.add_model_file(handle)
    return project, model, version


def rename_project(project: Project | str, name: str, root: str | Path | None = None) -> Project:
    from studio.projects import rename_project as _rename

    return _rename(_project(project, root), name)


def duplicate_project(project: Project | str, name: str | None = None, root: str | Path | None = None) -> Project:
    """A copy of the project under a new id (jobs running in the source show as interrupted there)."""
    from studio.projects import duplicate_project as _dup

    return _dup(_project(project, root), name)


def delete_project(project: Project | str, root: str | Path | None = None) -> None:
    """Remove a project and its files; a damaged one (listed with ``damaged`` set) by its id."""
    from studio.projects import delete_project as _delete

    try:
        target: Project | str = _project(project, root)
    except StudioError as exc:
        if exc.code != "BAD-CATALOG":
            raise
        target = str(project)
    _delete(target, root)


def export_project(project: Project | str, out: str | Path, root: str | Path | None = None) -> Path:
    """The project as one zip (catalog, models, artifacts, data); written atomically to ``out``."""
    from studio.projects import export_project as _export

    return _export(_project(project, root), out)


def import_project(archive: str | Path | bytes, root: str | Path | None = None, *, name: str | None = None) -> Project:
    """A new project from an exported zip, checked like an upload (no '..', absolute or link members, no bombs)."""
    from studio.core.paths import user_data_path
    from studio.projects import import_project as _import

    src = archive if isinstance(archive, bytes) else user_data_path(archive, label="project archive")
    return _import(src, root, name=name)


def project_models(project: Project | str) -> list[ModelInfo]:
    return _project(project).models()


def project_model(project: Project | str, model_id: str) -> ProjectModel:
    """One model of a project: its version tree, with the Workspace methods the other functions take."""
    return _project(project).model(model_id)


def add_model(project: Project | str, source: str | Path | ModelHandle | Sequence[UploadedFile], *,
              name: str | None = None, label: str = "original") -> tuple[ProjectModel, Version]:
    """A new model in the project from a file (only read), a loaded handle, or uploaded files."""
    p = _project(project)
    if isinstance(source, (list, tuple)):
        return p.add_model_upload(list(source), label=label)
    return p.add_model_file(source, name=name, label=label)


def model_for(project: Project | str, source: str | Path | ModelHandle) -> tuple[ProjectModel, Version]:
    """The project's model and version holding this content, added as a new model when absent."""
    p = _project(project)
    handle = source if isinstance(source, ModelHandle) else _load(source)
    return p.find_content(handle.sha256) or p.add_model_file(handle)


def add_version(model: ProjectModel, source: str | Path | ModelHandle, *, label: str, parent: str | None,
                provenance: dict | None = None, job_id: str | None = None, source_sha256: str | None = None,
                refuse_same: bool = False) -> Version:
    """Store a model file as a new version of ``model`` (content-addressed, written once). A result derived
    from a model (a precision variant) passes ``source_sha256``, the content it was computed on: unless
    that is ``parent``'s, nothing is saved (``WrongSourceError``, R59). ``refuse_same``: a byte-identical
    version is refused as "same as vN" (``SameContentError``, R63)."""
    return model.add_file(source, label=label, parent=parent, provenance=provenance, job_id=job_id,
                          source_sha256=source_sha256, refuse_same=refuse_same)


def list_versions(model: ProjectModel) -> tuple[Version, ...]:
    return model.versions


def record_artifact(project: Project | str, path: str | Path, kind: str, *, job_id: str | None = None,
                    model_id: str | None = None, version_id: str | None = None, meta: dict | None = None) -> Artifact:
    """Name a file or folder inside the project as a kept result (export bundle, report, profile...)."""
    return _project(project).record_artifact(path, kind, job_id=job_id, model_id=model_id, version_id=version_id,
                                             meta=meta)


def project_artifacts(project: Project | str, model_id: str | None = None) -> list[Artifact]:
    return _project(project).artifacts(model_id)


def project_datasets(project: Project | str) -> list[Dataset]:
    """The project's datasets (catalog rows; :func:`dataset` opens one)."""
    return _project(project).datasets()


def project_jobs(project: Project | str) -> list[Job]:
    """Jobs with their state; a job whose process died is reported "interrupted"."""
    return _project(project).jobs()


def get_settings(project: Project | str, model_id: str | None = None) -> dict[str, Any]:
    """Project settings, or one model's (dims, engines, tolerances, per-page settings)."""
    return _project(project).settings(model_id)


def set_setting(project: Project | str, key: str, value: Any, model_id: str | None = None) -> None:
    """Store one setting (JSON value; None removes it)."""
    _project(project).set_setting(key, value, model_id)


def job(project: Project | str, kind: str, args: Mapping[str, Any] | None = None, *, model_id: str | None = None,
        version_id: str | None = None):
    """``with api.job(project, "optimize", {...}) as j:`` writes the job row (running) before the block and
    closes it after (done/failed); ``j.dir`` is its artifact folder, ``j.id`` its id."""
    return _project(project).job(kind, dict(args or {}), model_id=model_id, version_id=version_id)


# -- datasets and task metrics ---------------------------------------------------------

def add_dataset(project: Project | str, source: str | Path, *, name: str | None = None, kind: str = "auto",
                model: ModelHandle | None = None, preset: str | None = None, calibration_fraction: float = 0.5,
                seed: int = 0, tokenizer: str | Path | None = None, options: Mapping[str, Any] | None = None,
                recipe=None, recipe_reason: str | None = None):
    """Import a folder/zip of images, WAV audio, text, tensors or a data-loader script into the
    project; ``model`` suggests the preprocessing (``preset`` overrides it: imagenet, caffe, yolo,
    clip, text-strip, grayscale, raw; ``recipe``, a :func:`preprocessing_recipe`, overrides both).
    Unreadable files are skipped and listed."""
    from studio.core.preprocess import preset as _preset
    from studio.data.project_data import add_dataset as _add

    return _add(_project(project), source, name=name, kind=kind, model=model.proto if model else None,
                recipe=recipe if recipe is not None else _preset(preset) if preset else None,
                recipe_reason=recipe_reason, calibration_fraction=calibration_fraction, seed=seed,
                tokenizer=tokenizer, options=options)


def add_dataset_upload(project: Project | str, filename: str, data: bytes, **kwargs):
    """:func:`add_dataset` for bytes uploaded through the browser (a zip, an .npz, a .jsonl or a
    loader .py): staged in the project's scratch folder, imported, then removed."""
    from studio.core import outputs
    from studio.core.paths import safe_name

    p = _project(project)
    folder = outputs.scratch_dir(p.scratch_dir("upload"), "dataset-")
    try:
        name = safe_name(Path(filename.replace("\\", "/")).name, default="dataset.zip")
        staged = outputs.write_bytes(folder / name, data)
        kwargs.setdefault("name", Path(name).stem)
        return add_dataset(p, staged, **kwargs)
    finally:
        outputs.remove_scratch(folder)


def sample_photos_folder() -> Path:
    """The free photos that ship with the studio (``sample_models/photos``), to try datasets on."""
    from sample_models.photos import PHOTO_DIR

    return PHOTO_DIR


def dataset(project: Project | str, id_or_name: str):
    from studio.data.project_data import get_dataset

    return get_dataset(_project(project), id_or_name)


def remove_dataset(project: Project | str, id_or_name: str) -> str | None:
    """Delete the dataset (its row and its own folder). A damaged row that points outside the
    project is removed and nothing is deleted; the returned note says so (None otherwise)."""
    from studio.data.project_data import remove_dataset as _rm

    return _rm(_project(project), id_or_name)


def dataset_damage(project: Project | str, row) -> str | None:
    """Why a dataset row (:func:`project_datasets`) does not point at the project's own folder, or None."""
    from studio.data.project_data import dataset_damage as _damage

    return _damage(_project(project), row)


def preview_dataset(ds, handle: ModelHandle, count: int = 4, part: str = "all") -> list[dict]:
    """The first ``count`` samples as the model will get them (after preprocessing)."""
    from studio.data.datasets import dataset_feeds

    return dataset_feeds(ds, handle.proto, part=part, limit=count)


def dataset_inputs_file(ds, handle: ModelHandle, path: str | Path, *, count: int = 1,
                        part: str = "evaluation") -> Path:
    """The first ``count`` samples of ``part`` as an .npz of model inputs (what ``--inputs`` takes)."""
    from studio.core.feeds import save_npz
    from studio.data.datasets import dataset_feeds

    return save_npz(dataset_feeds(ds, handle.proto, part=part, limit=count), Path(path))


def suggest_preprocessing(handle: ModelHandle):
    """(recipe, reason) the model suggests for image datasets; the reason names the evidence
    (input layout and dtype, normalization in the graph, metadata) or says it is a guess."""
    from studio.core.preprocess_suggest import suggest_recipe

    return suggest_recipe(handle.proto)


def preprocessing_recipe(base=None, *, file: str | Path | None = None, changes: Mapping[str, Any] | None = None):
    """A preprocessing recipe: ``file`` (a JSON recipe file, or a preset name) or else ``base``
    (default: plain RGB 0..1), with ``changes`` {field: value} on top (strings as typed on the CLI
    or the page: ``{"color": "BGR", "mean": "103.94,116.78,123.68", "scale": "1"}``). Errors are
    one line naming the field and its allowed values."""
    from studio.core.preprocess import PRESETS, Recipe, read_recipe_file, recipe_with

    if file is not None:
        base = PRESETS[str(file)] if str(file) in PRESETS and not Path(file).is_file() else read_recipe_file(file)
    return recipe_with(base if base is not None else Recipe(), changes or {})


def recipe_from_json(text: str, label: str = "recipe file"):
    """A recipe from the text of a JSON recipe file (an upload on the page)."""
    from studio.core.preprocess import recipe_from_json as _parse

    return _parse(text, label)


def recipe_fields() -> Mapping[str, str]:
    """Each recipe field and what it takes (for help texts)."""
    from studio.core.preprocess import ALLOWED

    return dict(ALLOWED)


def recipe_choices() -> Mapping[str, tuple[str, ...]]:
    """The allowed values of the recipe's choice fields, and the preset names."""
    from studio.core import preprocess as pp

    return {"preset": tuple(pp.PRESETS), "resize": pp.RESIZE_MODES, "color": pp.COLORS, "layout": pp.LAYOUTS,
            "dtype": pp.DTYPES, "interpolation": pp.INTERPOLATIONS}


def set_dataset_recipe(ds, recipe, *, reason: str = "set by the user"):
    """Store ``recipe`` as the dataset's preprocessing (image datasets); returns the dataset."""
    from studio.data.datasets import with_recipe

    return with_recipe(ds, recipe, reason=reason)


def dataset_with_recipe(ds, recipe, *, reason: str = "given for this run"):
    """The dataset with ``recipe`` for one run, not saved (golden outputs are kept per recipe)."""
    from studio.data.datasets import with_recipe

    return with_recipe(ds, recipe, reason=reason, save=False)


def preview_dataset_samples(ds, handle: ModelHandle, count: int = 4, part: str = "all"):
    """The first ``count`` samples after preprocessing: shape, dtype, per-channel min/max/mean
    and a thumbnail (:class:`studio.data.preview.PreviewSample`)."""
    from studio.data.preview import preview_samples

    return preview_samples(ds, handle.proto, count=count, part=part)


def evaluate_on_dataset(ds, reference: ModelHandle | str | Path, candidate: ModelHandle | str | Path | None = None,
                        *, engine: str = "onnxruntime", target: str | None = None, part: str = "evaluation",
                        limit: int | None = None, metrics: Mapping[str, Sequence[str]] | None = None,
                        pool_key: str = "default", tasks: Mapping[str, str] | None = None):
    """Task metrics of ``candidate`` (default: the reference itself) on ``engine`` against the
    reference's golden outputs on the dataset (computed once and stored with the dataset).
    ``tasks``: {output: kind} chosen by the user (see :func:`output_tasks`); a ``target`` that applies
    to no output is refused before anything runs."""
    from studio.data.evaluate import evaluate, golden_outputs

    ref = _path_of(reference)
    goal = _checked_target(target, reference, tasks, ds)
    golden = golden_outputs(ds, ref, part=part, limit=limit, pool_key=pool_key, tasks=tasks)
    cand = _path_of(candidate) if candidate is not None else ref
    return evaluate(ds, golden, cand, engine=engine, target=goal, metrics=metrics, pool_key=pool_key,
                    inputs_model=ref)


def _checked_target(target: str | None, model: ModelHandle | str | Path, tasks: Mapping[str, str] | None,
                    ds=None):
    """The parsed task-metric ``target``, refused with a one-line error (before any work) when it
    applies to no output of ``model`` with these tasks, or needs labels ``ds`` lacks."""
    if not target:
        return None
    from studio.data.evaluate import output_specs
    from studio.data.metrics import parse_target
    from studio.data.metrics import check_target

    goal = parse_target(target)
    proto = model.proto if isinstance(model, ModelHandle) else _load(model).proto
    labels = None if ds is None else any(s.label is not None for s in ds.samples)
    check_target(goal, output_specs(proto, tasks), has_labels=labels)
    return goal


def output_tasks(handle: ModelHandle, tasks: Mapping[str, str] | None = None, *,
                 project: Project | str | None = None):
    """The task of every output (``studio.data.tasks.OutputTask``: kind and the one-line reason),
    inferred from the graph, then the ``project``'s stored choices, then ``tasks`` {output: kind}."""
    from studio.data.tasks import output_tasks as _tasks

    stored = stored_output_tasks(project, handle) if project is not None else None
    return tuple(_tasks(handle.proto, tasks, stored=stored).values())


def stored_output_tasks(project: Project | str, handle: ModelHandle) -> dict[str, str]:
    """The {output: kind} choices the project keeps for the model holding this content."""
    from studio.data.tasks import SETTING

    found = _project(project).find_content(handle.sha256)
    return dict(found[0].settings().get(SETTING) or {}) if found else {}


def set_output_tasks(project: Project | str, handle: ModelHandle, tasks: Mapping[str, str | None]) -> dict[str, str]:
    """Store {output: kind} for the model (added to the project when absent); a kind of None or
    "auto" forgets the choice (back to inference). Returns what is stored now."""
    from studio.data.tasks import SETTING, check_overrides

    check_overrides(handle.proto, {k: v for k, v in tasks.items() if v and v != "auto"})
    pm, _version = model_for(project, handle)
    current = dict(pm.settings().get(SETTING) or {})
    for output, kind in tasks.items():
        if kind and kind != "auto":
            current[output] = kind
        else:
            current.pop(output, None)
    pm.set_setting(SETTING, current or None)
    return current


def output_task_kinds() -> tuple[str, ...]:
    """The tasks an output can have (classification, detection, ... other)."""
    from studio.data.tasks import TASKS

    return TASKS


def task_targets(handle: ModelHandle, tasks: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The target metrics that apply to at least one output of ``handle`` with these tasks (what a
    page offers), e.g. ("top1-agreement", "top1-accuracy", "cosine", "top1-drop")."""
    from studio.data.evaluate import output_specs
    from studio.data.metrics import applicable_targets

    return applicable_targets(output_specs(handle.proto, tasks))


def target_direction(metric: str) -> str:
    """">=" for a metric where higher is better (agreement, mAP, cosine), "<=" for errors and drops."""
    from studio.data.metrics import _DERIVED, METRICS

    return "<=" if metric in _DERIVED or not METRICS[metric].higher_is_better else ">="


def task_choices(handle: ModelHandle, tasks: Mapping[str, str] | None = None, *,
                 project: Project | str | None = None) -> dict[str, str]:
    """The {output: kind} a run uses: the project's stored choices, then ``tasks`` (which the
    project then keeps for the next run)."""
    from studio.data.tasks import check_overrides

    given = dict(tasks or {})
    check_overrides(handle.proto, given)
    if project is None:
        return given
    if given:
        return set_output_tasks(project, handle, given)
    return stored_output_tasks(project, handle)
# --- Thin calls the CLI makes besides the operations above (each delegates; no logic here) ---------------

def check_engines(engines: Sequence[str] | str | None) -> tuple[str, ...]:
    """Engine names of ``--engines`` (aliases such as ort/ov/trt, "all") in canonical form; unknown ones raise."""
    from diagnostics.compatibility import normalize_engines

    return normalize_engines(engines)


def fix_to_file(model_path: str | Path, fixes: Sequence[str], output: str | Path, *,
                options: Mapping[str, Mapping[str, Any]] | None = None, dims: Mapping[str, int] | None = None,
                inputs: str | Path | None = None, pool_key: str = "default") -> PipelineResult:
    """Run the fix passes ``fixes`` on a model file through the verifying pipeline and save the result to
    ``output`` (nothing is left there when the fix fails or changes nothing); ``check --fix``."""
    from diagnostics.fixes import fix_to_file as _fix_to_file

    return _fix_to_file(model_path, list(fixes), output, options=options, dims=dims, inputs=inputs,
                        pool_key=pool_key)


def plugin_kernel_known(signature) -> bool:  # noqa: ANN001 - studio.plugins.signature.OpSignature
    """Whether the plugin templates fill in this op's kernel (a complete package, runnable as generated)."""
    from studio.plugins.scaffold import known_kernel

    return known_kernel(signature)[0] is not None


def find_nsys() -> str | None:
    """The ``nsys`` (Nsight Systems) executable on PATH, or None."""
    from profilers.nvtx import find_nsys as _find

    return _find()


def nsys_plan(command: Sequence[str], out_dir: Path, *, nsys: str = "nsys"):
    """The commands that profile ``command`` under nsys into ``out_dir`` (``profilers.nvtx.NsysPlan``)."""
    from profilers.nvtx import nsys_plan as _plan

    return _plan(command, out_dir, nsys=nsys)


def run_nsys(plan, *, cwd: Path, env: dict[str, str] | None = None):  # noqa: ANN001 - profilers.nvtx.NsysPlan
    """Run an :func:`nsys_plan` in ``cwd`` and read its kernel statistics (``NsysStats``; not verified here)."""
    from profilers.nvtx import run_nsys as _run

    return _run(plan, cwd=cwd, env=env)


# --- What the pages render with -------------------------------------------------------------------------
# The pages (studio/ui) and the CLI import only this facade (the import-linter contracts in pyproject.toml,
# tests/test_layering.py). Option tuples, value types, parsers, command lines, and the rows and figures that
# need a capability's code or that the CLI writes too, live next to the engine code; the names below re-export
# them for both front ends, imported on first use so the CLI does not pay for plotly at start-up. Tables and
# figures that only a page shows, built from a result object alone, are the pages' own (studio/ui/*_charts.py).
# Each entry: page-facing name -> (module, attribute).
_PAGE_EXPORTS: dict[str, tuple[str, str]] = {
    # Optimize
    "optimize_report_rows": ("passes.optimize", "report_rows"),        # table of what each pass did
    "optimize_command": ("passes.optimize", "cli_command"),            # the equivalent `onnx-studio optimize`
    "op_count_diff": ("passes.pipeline", "op_count_diff"),             # (op, before, after) rows
    # Compatibility, plugins
    "default_dims": ("diagnostics.fixes", "default_dims"),             # dims the shape fix proposes
    "PYTHON_PLUGIN_TARGETS": ("studio.plugins.runner", "PYTHON_TARGETS"),  # targets run_python_op runs
    "plugin_targets": ("studio.plugins.scaffold", "expand_targets"),   # --target ort-python,... or all
    "read_plugin_code": ("studio.plugins.runner", "read_code"),        # a user's .py implementation, checked
    # Graph
    "overlay_data_from_json": ("studio.graphview.overlay_files", "overlay_data_from_json"),
    "DATA_OVERLAYS": ("studio.graphview.overlay_files", "DATA_OVERLAYS"),  # overlay -> the file it needs
    "SVG_MAX_ITEMS": ("studio.graphview.dot", "SVG_MAX_ITEMS"),       # what a .dot/.svg overview holds
    # Tasks of outputs (--task OUTPUT=KIND)
    "OUTPUT_TASKS": ("studio.data.tasks", "TASKS"),
    "parse_task_options": ("studio.data.tasks", "parse_task_options"),
    # Inputs
    "ImagePreprocess": ("studio.core.feeds", "ImagePreprocess"),       # --image-size/--mean/--std/--bgr
    "FindingGroup": ("studio.core.findings", "FindingGroup"),         # Report.grouped(): same code and message
    # Profile
    "ProfileOptions": ("profilers.profile", "ProfileOptions"),
    "ProfileTarget": ("profilers.variants", "ProfileTarget"),
    "profile_command": ("profilers.profile", "command_line"),           # the equivalent `onnx-studio profile`
    "GenerationOptions": ("profilers.generation_profile", "GenerationOptions"),   # profile --generate
    "generation_command": ("profilers.generation_profile", "generation_command"),
    "parse_engines": ("profilers.variants", "parse_engines"),          # --engine specs -> EngineSpec list
    "parse_engine": ("profilers.variants", "parse_engine"),
    "engine_label": ("profilers.variants", "choice_label"),
    # Verify, Precision
    "layer_error_figure": ("studio.accuracy.charts", "layer_error_figure"),
    "tradeoff_figure": ("studio.precision.charts", "tradeoff_figure"),
    "PRECISION_VARIANTS": ("studio.precision.variants", "VARIANTS"),
    "default_precision_variants": ("studio.precision.variants", "default_variants"),
    # Export
    "EXPORT_TARGETS": ("studio.export.options", "TARGETS"),
    "MOBILE_TARGETS": ("studio.export.options", "MOBILE_TARGETS"),
    "OV_PRECISIONS": ("studio.export.options", "OV_PRECISIONS"),
    "CALIBRATION_METHODS": ("studio.export.options", "CALIBRATION_METHODS"),
    "ORT_LEVELS": ("studio.export.options", "ORT_LEVELS"),
    "parse_shape_spec": ("studio.export.options", "parse_shape_spec"),
    "export_command": ("studio.export.command", "cli_command"),         # the equivalent `onnx-studio export`
    "cli_command": ("studio.core.cli_hints", "cli_command"),           # any page's Equivalent CLI command
    "export_target_rows": ("studio.export.views", "target_rows"),
    "export_artifact_rows": ("studio.export.views", "artifact_rows"),
    "export_bench_rows": ("studio.export.views", "bench_rows"),
    # Plugins
    "render_python_impl": ("studio.plugins.scaffold", "render_python_impl"),
    "zip_folder": ("studio.plugins.scaffold", "zip_folder"),
    # Nodes (shared widgets)
    "node_details": ("studio.inspect.node_details", "node_details"),
    "weight_stats": ("studio.inspect.weights", "weight_stats"),
    # Inputs picker
    "save_npz_upload": ("studio.core.input_files", "save_npz_upload"),
    "save_npy_upload": ("studio.core.input_files", "save_npy_upload"),
    "save_image_uploads": ("studio.core.input_files", "save_image_uploads"),
}


def engines() -> list[dict[str, Any]]:
    """Every engine the studio knows, one plain row each (studio/core/engines/table.py): name, label,
    aliases, kind, precisions, suffix, install... The CLI's engine choices and the pages' labels read it."""
    return [row.to_dict() for row in _ENGINE_ROWS]


def __getattr__(name: str) -> Any:
    """The page-facing re-exports above, imported on first use (PEP 562)."""
    target = _PAGE_EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'studio.api' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(target[0]), target[1])
    globals()[name] = value
    return value


def custom_op_names(handle: ModelHandle) -> list[str]:
    """``domain::op`` of every custom (non-standard) op the model uses, for the Plugins page."""
    from diagnostics.custom_ops import detect_custom_ops

    return [c.qualified for c in detect_custom_ops(handle.proto)]
