"""One export, start to finish: deploy model -> reference -> targets -> manifest,
reports -> bundle folder and zip.

Order matters: ONNX Runtime and OpenVINO first, TensorRT next, Triton last
(it reuses their files). A target that fails becomes a failed TargetResult with
a one-line message; an unexpected exception in one target never stops the
others, and nothing is written outside the output folder (the bundle is built
under a temporary name there, scratch files live beside it and are removed).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from studio.core import jsonsafe
from studio.core.errors import StudioError
from studio.core.model import ModelHandle, model_weight_bytes, require_valid
from studio.core.outputs import check_destination, disk_error, register_input, remove_scratch, writing_folder
from studio.core.paths import atomic_write_text
from studio.export.bundle import bundle_name, check_final, finalize, inventory, prepare_output, staging_dir, write_zip
from studio.export.context import ExportContext
from studio.export.growth import with_growth_note
from studio.export.manifest import build_manifest
from studio.export.onnxruntime import export_onnxruntime
from studio.export.openvino import export_openvino
from studio.export.tensorrt import export_tensorrt
from studio.export.triton import export_triton
from studio.export.options import ExportOptions
from studio.export.prepare import prepare_deploy
from studio.export.reference import (criteria_for, decoder_feeds, feed_shapes, make_feeds, reference_outputs,
                                     searched_reference, shapes_of, small_image_shapes, with_tasks)
from studio.export.report import graph_page, html_report, markdown_report
from studio.export.options import CONVERTED_TARGETS
from studio.export.results import ERROR, ExportResult, TargetResult
from passes.normalize import normalize_in_worker
from studio.core.model import load
from studio.core.outputs import shown_path, side_output_failed
from studio.export.mobile import export_converted

log = logging.getLogger(__name__)

# Models above this size run every engine job in a fresh worker: a warm worker keeps the memory of the
# previous engine (ORT arenas, mapped weights) and a second engine on a 1.3 GB BERT then ran out of it.
FRESH_WORKER_BYTES = 256 * 2**20


# the native targets' exporters; every converted row of the engine table is one converted target
_NATIVE: dict[str, Callable[[ExportContext], TargetResult]] = {
    "onnxruntime": export_onnxruntime, "openvino": export_openvino, "tensorrt": export_tensorrt,
    "triton": export_triton}


def _runner(target: str) -> Callable[[ExportContext], TargetResult]:
    if target in CONVERTED_TARGETS:
        return functools.partial(export_converted, engine=target)
    return _NATIVE.get(target, export_triton)


def _run_target(ctx: ExportContext, target: str) -> TargetResult:
    started = time.perf_counter()
    ctx.progress(target, "starting")
    try:
        result = _runner(target)(ctx)
    except Exception as exc:
        if disk_error(exc) is not None:
            raise             # the output folder's disk is full or read-only: the whole export stops
        if isinstance(exc, StudioError):
            result = TargetResult(target, ERROR, str(exc), seconds=time.perf_counter() - started)
        else:                 # a bug in one target must not cost the user the others
            first = (str(exc).splitlines() or [""])[0][:200]
            log.debug("export target %s failed", target, exc_info=True)     # the traceback with -v only
            result = TargetResult(target, ERROR, f"unexpected error ({type(exc).__name__}): {first}",
                                  seconds=time.perf_counter() - started)
    ctx.progress(target, f"done: {result.status}")
    return result


def export_model(handle: ModelHandle, options: ExportOptions, out_dir: str | Path, *, pool_key: str = "default",
                 on_tick: Callable[[float], None] | None = None,
                 on_progress: Callable[[str, str], None] | None = None,
                 tasks: Mapping[str, str] | None = None) -> ExportResult:
    """Export ``handle`` to ``out_dir/<model>-<sha8>/`` (+ ``.zip``). The model file is only read.
    ``tasks``: the user's {output: kind} (``studio.data.tasks``): how artifacts' outputs are compared.

    A model that fails the full check but that ONNX Runtime reads after the repairs it makes
    itself (node order, duplicated opsets, an old IR version, a contradicted output shape:
    :mod:`passes.normalize`) is exported from a repaired copy, each repair a note of the bundle;
    anything else the checker refuses is refused here too."""
    # A full or read-only disk: one line naming the folder; the staging goes (a concurrent export's bundle stays).
    with writing_folder(out_dir, remove_new=False):
        return _export_checked(handle, options, out_dir, pool_key=pool_key, on_tick=on_tick,
                               on_progress=on_progress, tasks=tasks)


def _export_checked(handle: ModelHandle, options: ExportOptions, out_dir: str | Path, *, pool_key: str,
                    on_tick: Callable[[float], None] | None, on_progress: Callable[[str, str], None] | None,
                    tasks: Mapping[str, str] | None) -> ExportResult:
    if handle.check.ok:
        return _export(handle, (), options, out_dir, pool_key=pool_key, on_tick=on_tick, on_progress=on_progress,
                       tasks=tasks)
    import tempfile


    register_input(handle.path, *handle.external_files)
    with tempfile.TemporaryDirectory(prefix="onnx-studio-repair-") as tmp:
        normalized = normalize_in_worker(handle.path, Path(tmp), pool_key=pool_key)
        repaired = handle
        if normalized.lint:      # under the user's file name: the manifest's source names it
            copy = normalized.path.with_name(handle.path.name)
            normalized.path.replace(copy)  # scratch: the repaired copy in this export's temporary folder
            repaired = dataclasses.replace(load(copy), name=handle.name)
        require_valid(repaired if repaired.check.ok else handle, "export")
        notes = tuple(f"input repaired as ONNX Runtime reads it: {line}" for line in normalized.lint) + (
            f"the bundle is built from the repaired copy (the original {handle.name[:60]} is sha256 "
            f"{handle.sha256[:12]}, unchanged)",)
        return _export(repaired, notes, options, out_dir, pool_key=pool_key, on_tick=on_tick,
                       on_progress=on_progress, named=handle, tasks=tasks)


def _export(handle: ModelHandle, repairs: tuple[str, ...], options: ExportOptions, out_dir: str | Path, *,
            pool_key: str, on_tick: Callable[[float], None] | None,
            on_progress: Callable[[str, str], None] | None, named: ModelHandle | None = None,
            tasks: Mapping[str, str] | None = None) -> ExportResult:
    started = time.perf_counter()
    register_input(handle.path, *handle.external_files, *options.plugins, *options.ort_custom_ops,
                   *options.ov_extensions)            # files this run reads: never an output
    shapes = feed_shapes(handle.proto, options.shapes, options.dims)   # bad --shapes fail before any work
    out = prepare_output(Path(out_dir))
    named = named or handle                 # the bundle keeps the user's model's name and hash
    name = bundle_name(options.name or named.name, named.sha256)
    check_final(out / name)                # an old bundle may be replaced; a foreign folder or the input's never
    if options.zip:
        check_destination(out / f"{name}.zip")
    staging = staging_dir(out, name, "partial")
    work = staging_dir(out, name, "work")
    try:
        if on_progress:
            on_progress("prepare", "deploy model" + (f" (preset {options.preset})" if options.preset else ""))
        deploy = prepare_deploy(handle, options, work, pool_key=pool_key)
        if on_progress:
            on_progress("prepare", "reference outputs (original on ONNX Runtime, optimizations off)")
        decoder = decoder_feeds(handle.proto, options.shapes, options.dims)     # a decoder's decode step
        if decoder is not None:
            shapes = {k: tuple(v) for k, v in shapes_of(decoder).items()}
        reference = reference_outputs(handle.path, decoder if decoder is not None else make_feeds(handle.proto, shapes),
                                      pool_key=pool_key)
        small = small_image_shapes(handle.proto, options.shapes, options.dims) if reference.error else None
        if small is not None:          # an image model made for small inputs (text recognizers): try them
            retry = reference_outputs(handle.path, make_feeds(handle.proto, small), pool_key=pool_key)
            if retry.error is None:
                shapes, reference = small, retry
        if reference.error:            # sizes/values the model is made for (Silero VAD's 512 samples...)
            searched = searched_reference(handle.path, handle.proto, reference, options.shapes, pool_key=pool_key)
            if searched is not None:
                shapes, reference = {k: tuple(v) for k, v in shapes_of(searched.feeds).items()}, searched
        reference = with_tasks(reference, handle.proto, tasks)     # every output compared by its task
        ctx = ExportContext(options=options, bundle=staging, work=work, source=handle, deploy=deploy.path,
                            deploy_facts=deploy.facts, deploy_precision=deploy.precision, reference=reference,
                            criteria=criteria_for(deploy.precision, quantized_model=deploy.facts.quantized),
                            input_shapes=shapes, pool_key=pool_key, on_tick=on_tick, on_progress=on_progress,
                            pipeline_records=list(deploy.records),
                            fresh=model_weight_bytes(deploy.path) > FRESH_WORKER_BYTES)
        targets = tuple(_run_target(ctx, t) for t in options.targets)
        # one rule for every target: an artifact far larger than the user's model says why, in one line
        targets = tuple(with_growth_note(t, staging, named.total_bytes, handle.proto) for t in targets)
        graph_html, graph_note = _graph(deploy.handle)
        notes = repairs + deploy.notes + ((graph_note,) if graph_html is None else ())
        if graph_html is not None:
            atomic_write_text(staging / "graph.html", graph_html)
        partial = ExportResult(staging, None, targets, {})
        reports = {"markdown": "report.md", "html": "report.html"}
        manifest = build_manifest(ctx, targets, [], partial.failures, bundle_name=name, notes=notes,
                                  graph="graph.html" if graph_html is not None else None, reports=reports)
        atomic_write_text(staging / "report.md", markdown_report(manifest))
        atomic_write_text(staging / "report.html", html_report(manifest))
        manifest["files"] = inventory(staging)
        atomic_write_text(staging / "manifest.json", jsonsafe.dumps(manifest, indent=2))
        final = finalize(staging, out / name)
        try:
            zip_path = write_zip(final, out / f"{name}.zip") if options.zip else None
        except StudioError as exc:          # a full disk after the bundle was published: say what is there

            raise side_output_failed(exc, shown_path(Path(out_dir) / f"{name}.zip"),
                                     f"the bundle ({shown_path(Path(out_dir) / name)})") or exc from None
        return ExportResult(final, zip_path, targets, manifest, time.perf_counter() - started)
    finally:
        remove_scratch(work)
        remove_scratch(staging)      # only still there when the export failed


def _graph(handle: ModelHandle) -> tuple[str | None, str]:
    try:
        return graph_page(handle)
    except Exception as exc:  # the report is still useful without the picture
        log.warning("graph view for the report failed: %s", exc)
        return None, f"graph view not embedded ({type(exc).__name__})"
