"""Loading and reading a model: summary, dims, decoders and their KV cache, the memory plan, feeds.

A room of the facade (``studio.api`` names it; docs/architecture.md section 1)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from diagnostics.input_search import search_runs
from studio.accuracy.runs import run_feed_sets
from studio.core.dim_hints import DerivedDim, dim_hints as _dim_hints, DimHint, model_derived_dims
from studio.core.engines.table import REFERENCE_ENGINE
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, ort_cause
from studio.core.feeds import ImagePreprocess, make_feeds
from studio.core.input_files import save_image_uploads, save_npy_upload, save_npz_upload
from studio.core.model import load as _load, ModelHandle, parse_model_file
from studio.core.requests import InspectRequest, MemoryRequest
from studio.core.sandbox import shutdown_pool
from studio.inspect.decoder import recognize
from studio.inspect.edge_shapes import pinned_inputs
from studio.inspect.kv_cache import decoder_report, kv_budget as _kv_budget, parse_memory as _parse
from studio.inspect.memory_report import memory_report, MemoryReport
from studio.inspect.node_details import node_details
from studio.inspect.summary import ModelSummary, summarize
from studio.inspect.weights import weight_stats

if TYPE_CHECKING:
    from studio.inspect.decoder import DecoderSpec
    from studio.inspect.kv_cache import DecoderReport, KvBudget

__all__ = [
    "ModelSummary", "MemoryReport", "load", "inspect", "decoder_spec", "inspect_decoder", "kv_budget",
    "parse_memory", "memory_plan", "dim_hints", "input_dim_keys",
    "derived_dims", "release_session", "make_inputs", "node_details", "weight_stats", "ImagePreprocess",
    "save_npz_upload", "save_npy_upload", "save_image_uploads",
]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: InspectRequest | Mapping[str, int] | None = None, *,
            pool_key: str = "default", memory: bool = True) -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes. ``dims``: an
    ``InspectRequest`` (``studio.core.requests``: what the CLI and the Overview page build; a decoder's
    request goes to :func:`inspect_decoder`) or the dims themselves.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session).
    ``memory=False``: no memory plan (``summary.memory`` None), for the graph viewer, which draws only
    the edge shapes (measured ones included) and FLOPs."""
    if isinstance(dims, InspectRequest):
        if dims.decoder:
            raise StudioError("a decoder's inspect request is answered by inspect_decoder", code=ErrorCode.BAD_REQUEST)
        dims = dict(dims.dims)
    return summarize(handle, dims, pool_key=pool_key, memory=memory)


def _decoder_source(model: ModelHandle | str | Path):
    """(proto, path): a loaded handle's, or a file parsed without its external data and without
    hashing (a 4 GB decoder is recognized without reading its weights)."""
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
    proto, path = _decoder_source(model)
    return recognize(proto, folder=path.parent, filename=path.name)


def inspect_decoder(model: ModelHandle | str | Path, request: InspectRequest | None = None, *,
                    length: int | None = None, batch: int = 1, memory: int | str | None = None,
                    kv_dtype: str | None = None) -> DecoderReport:
    """Parameters per block, KV-cache bytes per token and at ``length`` x ``batch`` (default: the context
    length, 1) per KV dtype, and the KV budget for ``memory`` (bytes or '16GiB'; default: this machine's
    RAM), with a warning where a runtime would preallocate more. Never reads the weights. ``request``: an
    ``InspectRequest`` with ``decoder`` set (what ``inspect --decoder`` builds), in place of the keywords."""
    if request is not None:
        length, batch, memory, kv_dtype = (request.kv_length, request.batch, request.memory_bytes,
                                           request.kv_dtype_name)
    proto, path = _decoder_source(model)
    spec = recognize(proto, folder=path.parent, filename=path.name)
    if spec is None:
        raise StudioError(f"'{path.name[:80]}' is not a KV-cache decoder: it has no past_key_values.N.key/value "
                          "inputs nor present.N.key/value outputs", code=ErrorCode.NOT_A_DECODER)
    return decoder_report(proto, spec, length=length, batch=batch, memory=memory, kv_dtype=kv_dtype)


def kv_budget(report: DecoderReport, *, memory: int | str | None = None, kv_dtype: str | None = None,
              batch: int = 1, length: int | None = None) -> KvBudget:
    """The KV budget of an inspected decoder for another memory size, KV dtype, batch or length
    (arithmetic only: what the Overview page's calculator calls on every change)."""
    return _kv_budget(report.spec, report.weights_bytes, memory=memory, kv_dtype=kv_dtype, batch=batch,
                      length=length)


def parse_memory(text: str | int) -> int:
    """'16GiB' / '16G' (2**30), '16GB' (10**9), '512MiB' or a byte count, as bytes."""
    return _parse(text)


def memory_plan(handle: ModelHandle, dims: MemoryRequest | Mapping[str, int] | None = None, *,
                measure: bool = False,
                pool_key: str = "default", engine_graph: bool | None = None,
                measure_timeout_s: float = 120.0) -> MemoryReport:
    """Every tensor's lifetime in ORT's execution order at ``dims`` (unset ones as the seeded inputs take
    them; a decoder's past length is its ``past_sequence_length`` dim), live bytes per step, the peak
    with its op and tensors, the best-fit arena, the KV cache's share, and with ``measure`` the block
    ORT really allocates (a child process on the same inputs) beside the prediction. ``engine_graph``
    (default: ``measure``): also the plan of ORT as users run it, over the graph ORT optimizes at its
    default level; each engine child is stopped after ``measure_timeout_s`` ("too large to measure").
    ``dims`` may be a ``MemoryRequest`` (``studio.core.requests``: what the CLI and the Overview build), which
    brings its own options."""
    if isinstance(dims, MemoryRequest):
        r = dims
        dims, measure, engine_graph, measure_timeout_s = dict(r.dims), r.measure, r.engine_graph, r.measure_timeout_s
    report = memory_report(handle, dims, measure=measure, pool_key=pool_key, engine_graph=engine_graph,
                           timeout_s=measure_timeout_s)
    searched = _searched_memory_dims(handle, dims, report, pool_key)
    if searched is None:
        return report
    found, why = searched
    again = memory_report(handle, found, measure=measure, pool_key=pool_key, engine_graph=engine_graph,
                          timeout_s=measure_timeout_s)
    return dataclasses.replace(again, notes=(why, *again.notes))


def _searched_memory_dims(handle: ModelHandle, dims: Mapping[str, int] | None, report: MemoryReport,
                          pool_key: str) -> tuple[dict[str, int], str] | None:
    """ONNX Runtime could not run the model at the dims the studio chose (a reflect Pad longer than 16 samples):
    the dims of the input search's first set that runs (diagnostics.input_search, as check, optimize, export
    and compare use), and the note that says so; None when ORT ran, was not asked to, or nothing runs."""
    ort_plan = next((e for e in report.engine_plans if e.engine == REFERENCE_ENGINE), None)
    error = ort_plan.error if ort_plan is not None else None
    if not error or "too large to" in error:        # ran, or stopped by the time limit: no other size helps
        return None

    def run(sets: list) -> tuple:
        return run_feed_sets(handle.path, REFERENCE_ENGINE, sets, pool_key=pool_key).outputs

    given = dict(dims or {})
    found = search_runs(handle.proto, run, error, dims=given)
    if found is None:
        return None
    chosen = {**dict(found.recipe.dims), **given}
    seeded = ", ".join(f"{k}={v}" for k, v in report.dims)
    return chosen, (f"dims searched: planned where ONNX Runtime runs, {found.text}; the seeded ones ({seeded}) "
                    f"fail: {ort_cause(error, 300)}")


def dim_hints(handle: ModelHandle) -> tuple[DimHint, ...]:
    """What the model says its dynamic dims should be (metadata ``imgsz``, a static
    other side, a Resize/Reshape target, the dim's name), each with its source; empty where it says nothing."""
    return _dim_hints(handle.proto)


def input_dim_keys(handle: ModelHandle) -> tuple[str, ...]:
    """Every free dim of the model's inputs, as ``dims`` keys: its name, or INPUT[AXIS] for an unnamed one.
    A derived dim (``past_sequence_length + sequence_length``: :func:`derived_dims`) is not free: its
    parts set it."""
    derived = {d.key for d in derived_dims(handle)}
    return tuple(k for k in pinned_inputs(handle.proto, {}).keys if k not in derived)


def derived_dims(handle: ModelHandle) -> tuple[DerivedDim, ...]:
    """The input dims written as formulas of other input dims (an optimum decoder's
    ``past_sequence_length + sequence_length``): computed from their parts, never set on their own."""
    return model_derived_dims(handle.proto)


def release_session(pool_key: str) -> None:
    """Stop the sandbox workers of one session (a browser session that ended)."""
    shutdown_pool(pool_key)


def path_of(model: ModelHandle | str | Path) -> Path:
    """A validated model path: handles are already validated; paths go through ``load``."""
    return model.path if isinstance(model, ModelHandle) else _load(model).path


def make_inputs(handle: ModelHandle, *, inputs: str | Path | None = None, images: str | Path | None = None,
                count: int = 1, dims: Mapping[str, int] | None = None, seed: int = 0, preprocess=None):
    """Feeds for ``handle``: a user .npz, an image folder, or ``count`` seeded random sets (a FeedSet)."""
    return make_feeds(handle.proto, inputs=Path(inputs) if inputs else None, images=Path(images) if images else None,
                      count=count, dims=dims, seed=seed, preprocess=preprocess)

