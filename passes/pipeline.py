"""Run passes in order, verifying after every modifying pass.

The model is loaded once into onnx-ir (weights mapped lazily, never copied)
and changed in place. After a modifying pass the result is saved as a
checkpoint and verified against the original (``studio.verification.verifier``); a failed
verification either stops the pipeline or reverts that pass (the caller's
choice, ``on_failure``), naming the pass and the first differing output.
Reverting reloads the last verified checkpoint, so no in-memory copy of the
weights is ever made. Instruments (timing, NVTX ranges, dumps) wrap passes
from outside (``passes.instruments``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import onnx_ir as ir

from passes.base import PassResult, StudioPass, all_nodes, count_ops
from passes.instruments import Instrument, with_nvtx
from studio.core.model_io import Checkpoint, Linker, load_checkpoint, load_for_passes, load_ir, save_checkpoint, save_result
from passes.normalize import normalize_in_worker
from passes.records import PassRecord
from passes.registry import make_pass, preset
from studio.verification.verifier import Verifier
from studio.core.compare import Tolerance, Verification, VerifyStatus
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, engine_message
from studio.core.feeds import Feeds, npz_feeds
from studio.core.paths import user_data_path
from studio.core.requests import OptimizeRequest
from studio.core.sandbox import Limits
from studio.verification.verifier import full_check_in_worker
from studio.core.outputs import check_destination, register_input, shown_path, copy_into, staged_files, disk_error, remove_scratch, scratch_dir
from studio.core.protowalk import iter_tensors
from passes import worker_pass
from passes.base import result
from passes.ort_fusions import ort_fusions
from passes.onnxsim_pass import PEER_CRITERIA, peer_engine
from studio.inspect.ov_compiled import compiled_graph
from studio.core.errors import WorkerError

log = logging.getLogger(__name__)

# Above this many nodes every pass runs in a sandbox worker (the hand-off costs a save and a load).
IN_PROCESS_NODE_LIMIT = 20_000

@dataclass(frozen=True)
class PipelineResult:
    output: Path | None                      # the saved result (None when nothing was saved)
    records: tuple[PassRecord, ...]
    ok: bool                                 # every pass ran and every verification passed
    stopped_at: str | None                   # the pass that stopped the pipeline
    ops_before: Mapping[str, int] = field(default_factory=dict)
    ops_after: Mapping[str, int] = field(default_factory=dict)
    reference: str = ""                      # how numbers were verified ("ORT CPU, optimizations off" / why not)
    seconds: float = 0.0
    lint: tuple[str, ...] = ()               # what was repaired in the input as ORT reads it (passes.normalize)
    request: OptimizeRequest | None = None   # what was asked (provenance of a kept result; not in to_dict)

    @property
    def modified(self) -> bool:
        return any(r.modified for r in self.records)

    def summary(self) -> str:
        if self.stopped_at:
            rec = next(r for r in reversed(self.records)
                       if r.name == self.stopped_at and r.status in ("failed", "error", "skipped"))
            return f"stopped at '{self.stopped_at}': {rec.message}"
        changed = [r.name for r in self.records if r.modified]
        reverted = [r.name for r in self.records if r.status == "reverted"]
        text = f"{len(changed)} of {len(self.records)} passes changed the model"
        if reverted:
            text += f"; reverted: {', '.join(reverted)}"
        if self.lint:
            text += f"; input repaired as ONNX Runtime reads it: {self.lint[0]}" + (
                f" (+{len(self.lint) - 1} more)" if len(self.lint) > 1 else "")
        return text

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(), "stopped_at": self.stopped_at,
                "output": self.output.name if self.output else None, "reference": self.reference,
                "seconds": round(self.seconds, 3), "lint": list(self.lint), "ops_before": dict(self.ops_before),
                "ops_after": dict(self.ops_after), "records": [r.to_dict() for r in self.records]}

    def lineage(self) -> list[dict]:
        """Records in the format workspace versions keep as provenance["pipeline"]."""
        return [r.to_dict() for r in self.records]


def resolve_passes(preset_name: str | None = None, names: Sequence[str] | None = None,
                   options: Mapping[str, Mapping] | None = None) -> list[StudioPass]:
    """Pass instances from a preset name or explicit names (one of them); a preset's own pass options
    apply under the caller's."""
    if bool(preset_name) == bool(names):
        raise StudioError("give either a preset or a list of passes", code=ErrorCode.BAD_OPTION)
    chosen = list(preset(preset_name).passes) if preset_name else list(names or [])
    opts = preset_pass_options(preset_name, options)
    return [make_pass(n, **opts.get(n, {})) for n in chosen]


def preset_pass_options(preset_name: str | None, options: Mapping[str, Mapping] | None = None) -> dict[str, dict]:
    """``{pass: {option: value}}``: a preset's own pass options (its engine's choices) under the caller's, one
    rule for optimize and for export's deploy model."""
    merged = {n: dict(o) for n, o in (preset(preset_name).pass_options() if preset_name else {}).items()}
    for name, opts in (options or {}).items():
        merged[name] = {**merged.get(name, {}), **dict(opts)}
    return merged


def _param_count(model: ir.Model) -> int:
    total = 0
    for g in model.graphs():
        for v in g.initializers.values():
            if v.const_value is not None:
                total += v.const_value.size
    return total


def save_ir(model: ir.Model, path: Path, *, shown: str | None = None) -> Path:
    """Save a self-contained model (weights to ``<name>.data`` when large); ``shown``: the path as
    the user gave it, for messages."""
    return save_result(model, path, shown=shown)


class _Checkpoints:
    """Checkpoints in a private folder (``studio.core.model_io``: graph only, unchanged
    weights read from the original's folder). A folder the in-memory model may
    still read weights from is kept until the pipeline ends."""

    def __init__(self, workdir: Path, original: Path, *, self_contained: bool = False) -> None:
        self.dir = workdir
        self.self_contained = self_contained     # data files beside each checkpoint (an engine reads them only so)
        self.original = Checkpoint(original, original.parent)
        self.data_dir = original.parent
        self.linker = Linker(workdir)
        self.last_good = self.original
        self.loaded_from = self.original
        self._n = 0

    def folder(self, kind: str) -> Path:
        self._n += 1
        d = self.dir / f"{kind}{self._n}"
        d.mkdir(parents=True)
        return d

    def save(self, model: ir.Model) -> Checkpoint:
        return save_checkpoint(model, self.folder("step") / "model.onnx", data_dir=self.data_dir, linker=self.linker,
                               self_contained=self.self_contained)

    def accept(self, ckpt: Checkpoint) -> None:
        old = self.last_good
        self.last_good = ckpt
        self._drop(old)

    def reject(self, ckpt: Checkpoint) -> ir.Model:
        self._drop(ckpt)
        return self.restore()

    def restore(self) -> ir.Model:
        """The last verified model (the original when nothing was verified yet)."""
        self.loaded_from = self.last_good
        return load_ir(self.original.path) if self.last_good == self.original else load_checkpoint(self.last_good)

    def _drop(self, ckpt: Checkpoint) -> None:
        folder = ckpt.path.parent
        if folder.parent == self.dir and ckpt not in (self.last_good, self.loaded_from):
            shutil.rmtree(folder, ignore_errors=True)   # scratch: a checkpoint folder inside the workdir


def validate_input(model_path: Path, *, limits: Limits | None = None, pool_key: str = "default",
                   full_check: bool = True) -> None:
    """Refuse models the passes must not touch: models without outputs, and models
    that fail ``onnx.checker`` with ``full_check`` (cycles, missing inputs, duplicate
    or unproduced outputs, recursive functions, shape-inference traps). The full
    check runs in a sandbox worker: onnx's shape inference can crash on hostile models."""
    import onnx

    proto = onnx.load_model(str(model_path), load_external_data=False)
    if not proto.graph.output:
        raise StudioError("cannot optimize: the model's graph has no outputs (empty graph)",
                          code=ErrorCode.INVALID_MODEL)
    problem = full_check_in_worker(Path(model_path), limits=limits, pool_key=pool_key) if full_check else None
    if problem:
        raise StudioError(f"cannot optimize: the model fails the onnx.checker full check ({problem}); "
                          "fix the model first", code=ErrorCode.INVALID_MODEL)


def _check_output_path(model_path: Path, output: Path) -> None:
    """The result must never overwrite the input model or its external data, nor go through a
    link, a FIFO or a folder (``studio.core.outputs``): checked before any pass runs."""
    import onnx

    src = Path(model_path)
    proto = onnx.load_model(str(model_path), load_external_data=False)
    register_input(src, *(src.parent / loc for loc in _locations(iter_tensors, proto)))
    label = shown_path(output)
    check_destination(output, shown=label)
    check_destination(output.with_name(output.name + ".data"), shown=label + ".data")


def _absolute(path: str | Path) -> Path:
    """Absolute, the parent resolved, the final name kept (so a link at it is refused, not followed)."""
    p = Path(os.path.abspath(path))
    return Path(os.path.realpath(p.parent)) / p.name


def _locations(iter_tensors, proto) -> set[str]:
    locs = set()
    for item in iter_tensors(proto):
        t = item[0] if isinstance(item, tuple) else item
        for kv in getattr(t, "external_data", ()):
            if kv.key == "location":
                locs.add(kv.value)
    return locs


def _copy_unchanged(model_path: Path, output: Path, shown: str) -> None:
    """Nothing changed: the result is the input, byte for byte (with its data files), committed
    together through ``studio.core.outputs.staged_files``."""
    import onnx

    proto = onnx.load_model(str(model_path), load_external_data=False)
    with staged_files(output.parent, shown=str(Path(shown).parent), what=shown) as stage:
        for loc in sorted(_locations(_iter_tensors(), proto)):
            src, rel = (model_path.parent / loc).resolve(), Path(os.path.normpath(loc))
            if rel.is_absolute() or rel.parts[:1] == ("..",):
                continue
            copy_into(src, stage / rel)
        copy_into(model_path, stage / output.name)


def _iter_tensors():
    return iter_tensors


def _scrub(text: str, **folders: Path) -> str:
    """No absolute server paths in messages: folders become <work folder>, <model folder>..."""
    for label, folder in sorted(folders.items(), key=lambda kv: -len(str(kv[1]))):
        text = text.replace(str(folder), f"<{label.replace('_dir', ' folder').replace('workdir', 'work folder')}>")
    return text


def _fixed_dims(passes: Sequence[StudioPass]) -> dict[str, int]:
    """Dims that passes fix on purpose (fix-input-shapes): verification feeds use them."""
    out: dict[str, int] = {}
    for p in passes:
        if p.changes_interface:
            out.update({str(k): int(v) for k, v in dict(p.options.get("dims") or {}).items()
                        if isinstance(v, int) and v > 0})
    return out


def _interface(model: ir.Model) -> list[tuple[str | None, object, object]]:
    return [(v.name, v.type, v.shape) for v in (*model.graph.inputs, *model.graph.outputs)]


def _restore_interface(model: ir.Model, before: list[tuple[str | None, object, object]], *,
                       keep_types: bool = False) -> None:
    """Put back declared dtypes/shapes of graph inputs/outputs a pass re-annotated
    (a pass that keeps names must keep the declared interface too). ``keep_types``: the
    pass changes dtypes on purpose (convert-fp16 without keep_io_types): shapes only."""
    values = [*model.graph.inputs, *model.graph.outputs]
    if [v.name for v in values] != [b[0] for b in before]:
        return                       # names changed: verification reports it
    for v, (_, type_, shape) in zip(values, before):
        if not keep_types and v.type != type_:
            v.type = type_
        if v.shape != shape:
            v.shape = shape


def request_passes(request: OptimizeRequest) -> list[StudioPass]:
    """The pass objects ``request`` names (its preset or its passes, with their options and its dims routed
    to ``fix-input-shapes``), path-valued options made absolute here (``resolve_user_paths``). A pass that
    measures on inputs (an ``inputs`` path option: convert-fp16's value ranges) takes the request's own
    ``inputs`` (``optimize --inputs``) unless its option says otherwise: it measures on what is verified."""
    chosen = resolve_passes(request.preset if not request.passes else None, list(request.passes or ()) or None,
                            request.options)
    if request.inputs:
        for p in chosen:
            if "inputs" in p.path_options and p.options.get("inputs") in (None, ""):
                p.options["inputs"] = request.inputs
    return resolve_user_paths(chosen)


def resolve_user_paths(chosen: Sequence[StudioPass]) -> list[StudioPass]:
    """Path-valued pass options (``quantize-int8-static.calibration``...) made absolute here, where
    the user's relative path means something (passes run in workers with their own cwd);
    a missing path is an error now, naming the option, not a pass failure later."""
    for p in chosen:
        for key in p.path_options:
            value = p.options.get(key)
            if value not in (None, ""):
                p.options[key] = str(user_data_path(value, label=f"{p.name}.{key}"))
    return list(chosen)


def run_pipeline(model_path: Path, request: OptimizeRequest, output: Path, *,
                 passes: Sequence[StudioPass] | None = None, feeds: list[Feeds] | None = None,
                 tolerance: Tolerance | None = None, limits: Limits | None = None, pool_key: str = "default",
                 instruments: Sequence[Instrument] = (),
                 on_progress: Callable[[int, int, str], None] | None = None,
                 partial: str | Path = "output") -> PipelineResult:
    """Run what ``request`` asks (``studio.core.requests.OptimizeRequest``: passes, dims, verification,
    on-failure, time budget, real inputs) on the model at ``model_path`` and save the result to ``output``.

    Every door builds the request (CLI, pages, batch, fixes, export, precision variants); the rest are
    arguments of this call, not of what was asked: ``passes``, the objects already resolved from the
    request (or built in code: ``run_passes``); ``feeds``, inputs already in memory (else the request's
    .npz); ``partial``: where the last verified model goes when the result is not ok: "output" (``output``
    itself; the UI offers it labelled partial), "none" (nothing is written, ``result.output`` is None) or
    another path. ``on_failure`` "stop" keeps the last verified model and stops; "revert" undoes the
    failing pass and continues. Passes that would start after ``time_budget_s`` are skipped (status
    "skipped"); passes in workers are also bounded by the worker timeout. The input file is only read.
    The result carries the request (``PipelineResult.request``). A preset made for one engine
    (``request.engine``: the openvino preset's OpenVINO) has every changed model also compiled and compared
    with the original there; ``PipelineResult.reference`` says so, or why not (that engine cannot load the
    original either).
    """
    passes = list(passes) if passes is not None else request_passes(request)
    if feeds is None and request.inputs:
        feeds = npz_feeds(request.inputs, model_path)
    result = _run_pipeline(model_path, passes, output, verify=request.verify, on_failure=request.on_failure,
                           dims=dict(request.dims), feeds=feeds, tolerance=tolerance, limits=limits,
                           pool_key=pool_key, instruments=instruments, on_progress=on_progress,
                           time_budget_s=request.time_budget_s, partial=partial, engine=request.engine)
    return replace(result, request=request)


def run_passes(model_path: Path, passes: Sequence[StudioPass], output: Path, *, verify: bool = True,
               on_failure: str = "stop", dims: Mapping[str, int] | None = None,
               time_budget_s: float | None = None, **call) -> PipelineResult:
    """Pass objects built in code (tests, a plugin's own instances) run as the request naming them."""
    request = OptimizeRequest(passes=tuple(p.name for p in passes) or None, dims=dims or {}, verify=verify,
                              on_failure=on_failure, time_budget_s=time_budget_s)
    return run_pipeline(model_path, request, output, passes=passes, **call)


def _run_pipeline(model_path: Path, passes: Sequence[StudioPass], output: Path, *, verify: bool,
                  on_failure: str, dims: Mapping[str, int], feeds: list[Feeds] | None,
                  tolerance: Tolerance | None, limits: Limits | None, pool_key: str,
                  instruments: Sequence[Instrument], on_progress: Callable[[int, int, str], None] | None,
                  time_budget_s: float | None, partial: str | Path, engine: str | None = None) -> PipelineResult:
    """The body of ``run_pipeline`` (see there); ``engine``: the one the request's preset is made for, on which
    every candidate must also load and compute the same (``Verifier``'s ``engine``)."""
    started = time.perf_counter()
    instruments = with_nvtx(instruments)        # NVTX range per pass when nsys is attached
    model_path = Path(model_path).resolve()     # workers run in a scratch cwd
    _check_output_path(model_path, Path(output))

    shown = shown_path(output)                  # messages name the path as the user gave it
    output = _absolute(output)                  # the name itself is never resolved: a link there is refused
    labels = {output: shown}
    partial_path: Path | None = output
    if partial == "none":
        partial_path = None
    elif partial != "output":
        _check_output_path(model_path, Path(partial))
        partial_path = _absolute(partial)
        labels[partial_path] = shown_path(partial)
    output.parent.mkdir(parents=True, exist_ok=True)
    dims = {**dict(dims or {}), **_fixed_dims(passes)}

    workdir = scratch_dir(output.parent, ".pipeline-", shown=shown)
    try:
        return _run_in(workdir, model_path, passes, output, labels, partial_path, verify=verify,
                       on_failure=on_failure, dims=dims, feeds=feeds, tolerance=tolerance, limits=limits,
                       pool_key=pool_key, instruments=instruments, on_progress=on_progress,
                       time_budget_s=time_budget_s, started=started, engine=engine)
    except Exception as exc:
        # The destination's disk is full, read-only or past a file-size limit: the run stops there and
        # says so (never a pass's failure); the work folder goes with it, so nothing was written.
        err = disk_error(exc, shown)
        if err is None:
            raise
        raise err from None
    finally:
        remove_scratch(workdir)


def _run_in(workdir: Path, model_path: Path, passes: Sequence[StudioPass], output: Path, labels: dict,
            partial_path: Path | None, *, verify: bool, on_failure: str, dims: dict[str, int],
            feeds: list[Feeds] | None, tolerance: Tolerance | None, limits: Limits | None, pool_key: str,
            instruments: Sequence[Instrument], on_progress: Callable[[int, int, str], None] | None,
            time_budget_s: float | None, started: float, engine: str | None = None) -> PipelineResult:
    """The body of ``run_pipeline`` in its work folder (see there)."""
    # What ORT fixes silently (node order, duplicated opsets, old IR, contradicting output
    # shapes) is repaired in a copy and said as lint; the user's file is only read.
    source_dir = model_path.parent
    normalized = normalize_in_worker(model_path, workdir, limits=limits, pool_key=pool_key)
    lint, model_path = normalized.lint, normalized.path
    if not (passes and passes[0].accepts_invalid):
        validate_input(model_path, limits=limits, pool_key=pool_key, full_check=not normalized.checked)
    model = load_for_passes(model_path)
    ops_before = count_ops(model)
    verifier = Verifier(model_path, dims=dims, feeds=feeds, tolerance=tolerance, limits=limits,
                        pool_key=pool_key, engine=engine) if verify else None
    ckpt = _Checkpoints(workdir, model_path, self_contained=verifier is not None and verifier.engine is not None)
    records: list[PassRecord] = []
    stopped: str | None = None
    interface_fixed = False          # a changes_interface pass was accepted: later checks allow it too
    io_dtypes_changed = False        # likewise for float input/output dtypes (convert-fp16, keep_io_types=false)
    for i, p in enumerate(passes):
        if time_budget_s is not None and time.perf_counter() - started > time_budget_s:
            records.extend(PassRecord(q.name, "skipped", False, (), {}, 0.0, 0.0, 0, 0, 0, 0, None,
                                      f"skipped: the time budget of {time_budget_s:g} s was used up")
                           for q in passes[i:])
            stopped = p.name
            break
        if on_progress:
            on_progress(i, len(passes), p.name)
        for inst in instruments:
            inst.before_pass(p, model)
        nodes_before, params_before = sum(1 for _ in all_nodes(model)), _param_count(model)
        declared = _interface(model)
        t0 = time.perf_counter()
        chosen: tuple | None = None      # a candidate pass's verified pick: (checkpoint, verification)
        try:
            if getattr(p, "candidates", ()):
                res, chosen = _choose_candidate(p, model, ckpt, verifier, limits, pool_key, nodes_before,
                                                allow_fixed_dims=interface_fixed)
            else:
                res = _apply(p, model, ckpt, limits, pool_key, nodes_before)
            model = res.model
            if not p.changes_interface:
                _restore_interface(model, declared, keep_types=p.changes_io_dtypes())
        except Exception as exc:   # a pass bug must not lose the user's work
            if disk_error(exc) is not None:
                raise                  # the work folder's disk, not the pass: run_pipeline says so
            seconds = time.perf_counter() - t0
            msg = _scrub(f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}",
                         workdir=workdir, model_dir=source_dir, out_dir=output.parent)
            model = ckpt.restore()
            rec = PassRecord(p.name, "error", False, (), {}, seconds, 0.0, nodes_before,
                             sum(1 for _ in all_nodes(model)), params_before, _param_count(model), None,
                             f"pass '{p.name}' failed: {msg}")
            records.append(rec)
            _after(instruments, p, model, rec)
            if on_failure == "stop":
                stopped = p.name
                break
            continue
        seconds = time.perf_counter() - t0
        changes = tuple(res.changes) if isinstance(res, PassResult) else ()
        counts = dict(res.counts) if isinstance(res, PassResult) else {}
        notes = tuple(getattr(res, "notes", ()))
        modified = bool(res.modified)
        verification: Verification | None = None
        status, message = ("changed" if modified else "unchanged"), ""
        if modified and chosen is not None:
            ckpt.accept(chosen[0])           # verified (and fusion-checked) when it was chosen
            verification = chosen[1]
            message = verification.message
        elif modified and verifier is not None:
            candidate = ckpt.save(model)
            verification = verifier.verify(candidate, allow_fixed_dims=p.changes_interface or interface_fixed,
                                           tolerance=p.verify_tolerance, quantized=p.verify_quantized,
                                           allow_io_dtypes=p.changes_io_dtypes() or io_dtypes_changed)
            message = verification.message
            if verification.ok:
                ckpt.accept(candidate)
            else:
                model = ckpt.reject(candidate)
                status = "reverted" if on_failure == "revert" else "failed"
                modified = False
                message = _scrub(f"pass '{p.name}' broke the model: {verification.message}", workdir=workdir,
                                 model_dir=source_dir, out_dir=output.parent)
        elif modified:
            ckpt.accept(ckpt.save(model))     # unverified, but a later pass error reverts only that pass
        if modified and p.changes_interface:
            interface_fixed = True
        if modified and p.changes_io_dtypes():
            io_dtypes_changed = True
        rec = PassRecord(p.name, status, modified, changes, counts, seconds,
                         verification.seconds if verification else 0.0, nodes_before,
                         sum(1 for _ in all_nodes(model)), params_before, _param_count(model),
                         verification, message, notes, tuple(getattr(res, "warnings", ())),
                         dict(getattr(res, "details", {}) or {}))
        records.append(rec)
        _after(instruments, p, model, rec)
        if status == "failed":
            stopped = p.name
            break
    if on_progress:
        on_progress(len(passes), len(passes), "saving")
    ok = stopped is None and all(r.status in ("changed", "unchanged") for r in records)
    target = output if ok else partial_path
    if target is not None:
        target.parent.mkdir(parents=True, exist_ok=True)
        if any(r.modified for r in records):
            save_ir(model, target, shown=labels[target])
        else:
            _copy_unchanged(model_path, target, labels[target])
    reference = "not verified (verification turned off)"
    if verifier is not None:
        if verifier.reference_error is not None:
            reference = f"structure only: {verifier.reference_error}"
        elif verifier.computed:
            kind = "seeded" if feeds is None else "given"
            reference = f"{verifier.reference_label}, {len(verifier.feed_sets)} {kind} feed set(s)"
            if verifier.nondeterministic_note:       # never a pass's fault: said once, for the run
                reference += f"; {verifier.nondeterministic_note}"
            if feeds is None and verifier.picture_note:   # seeded inputs left outputs at zero: a picture too
                reference += f"; {verifier.picture_note}"
            if feeds is None and verifier.quiet_note:     # ... and where no picture helped, they check little
                reference += f"; {verifier.quiet_note}"
        else:
            reference = "nothing to verify: no pass changed the model"
        if verifier.engine_note:     # the preset's engine: checked on it, or why it cannot be (said, not hidden)
            reference += f"; {verifier.engine_note}"
    return PipelineResult(target, tuple(records), ok, stopped, dict(ops_before), dict(count_ops(model)),
                          reference, time.perf_counter() - started, lint)


def _after(instruments: Sequence[Instrument], p: StudioPass, model: ir.Model, rec: PassRecord) -> None:
    for inst in instruments:
        inst.after_pass(p, model, rec)


def _apply(p: StudioPass, model: ir.Model, ckpt: _Checkpoints, limits: Limits | None,
           pool_key: str, node_count: int = 0) -> PassResult:
    """Run one pass: in process, or in a sandbox worker (timeout, memory limit, stoppable) for
    passes that call engines (or evaluate ops that could hang or explode) and for every pass
    on a model above ``IN_PROCESS_NODE_LIMIT`` nodes, where a pass that scales badly must be
    stoppable rather than hold the studio (R46)."""
    if not p.calls_engines and node_count <= IN_PROCESS_NODE_LIMIT:
        return p(model)

    return worker_pass.run_pass_in_worker(p, model, ckpt.folder("worker"), data_dir=ckpt.data_dir, linker=ckpt.linker,
                              limits=limits, pool_key=pool_key)


def _const_bytes(model: ir.Model) -> int:
    """Bytes of the model's constant tensors (initializers and Constant values, subgraphs too): the
    file size that matters between two candidates, without serializing either."""
    total = 0
    for g in model.graphs():
        total += sum(v.const_value.nbytes for v in g.initializers.values() if v.const_value is not None)
    for n in all_nodes(model):
        if n.op_type == "Constant":
            for a in n.attributes.values():
                if isinstance(a.value, ir.TensorProtocol):
                    total += a.value.nbytes
    return total


def _choose_candidate(p: StudioPass, model: ir.Model, ckpt: _Checkpoints, verifier: Verifier | None,
                      limits: Limits | None, pool_key: str, node_count: int, *,
                      allow_fixed_dims: bool = False) -> tuple[PassResult, tuple | None]:
    """Run each of ``p.candidates`` (passes, e.g. onnxsim and onnxslim) on ``model``; keep the one with the
    fewest nodes, then the fewest constant bytes, among those that are smaller than ``model``, pass the
    verification and cost ONNX Runtime none of its own fusions (``passes.ort_fusions``). With the option
    ``engine=openvino`` (the openvino preset) the engine's own judgement is OpenVINO's instead: a candidate
    whose compiled model (CPU, ``get_runtime_model()``) has more ops than its input's is refused, one OpenVINO
    cannot compile at all is refused too (never taken unmeasured), and the fewest compiled ops wins (ORT's
    fusions say nothing of what OpenVINO fuses: PP-OCRv4 rec). Returns the
    result and (checkpoint, verification) of the pick, or ``model`` unchanged and None. Peers are never
    kept unverified: with verification off, or without reference outputs, nothing is kept.
    ``allow_fixed_dims``: an earlier pass (fix-input-shapes) pinned the user's dims, so the candidates
    have them pinned too."""
    if verifier is None:
        return result(model, [], notes=[f"{p.name}: candidates are kept only verified; verification is off"]), None
    base = (node_count, _const_bytes(model))
    declared = _interface(model)
    notes: list[str] = []
    picks: list[tuple[tuple[int, ...], str, PassResult, Checkpoint, Verification]] = []
    base_fusions = None
    engine = peer_engine(p.options)
    by_compiled_ops = PEER_CRITERIA[engine] == "compiled ops"     # else ONNX Runtime's fusions
    base_ov: int | None = None
    base_ov_error: str | None = None     # why OpenVINO cannot compile the input (its candidates are still judged)
    # the verification opens every candidate on OpenVINO's runner too (the openvino preset) and the input runs there
    ran_on_engine = (by_compiled_ops and verifier.engine == engine and verifier.engine_reference() is not None)
    for name in p.candidates:
        sub = make_pass(name, **{k: v for k, v in p.options.items() if k != "engine"})
        try:
            # A worker pass works on its own copy; an in-process one gets a fresh load of the last verified
            # model, so a refused candidate leaves nothing behind in ``model``.
            in_worker = sub.calls_engines or node_count > IN_PROCESS_NODE_LIMIT
            r = _apply(sub, model if in_worker else ckpt.restore(), ckpt, limits, pool_key, node_count)
        except Exception as exc:     # the peer crashed, timed out or ran out of memory: that candidate only
            notes.append(f"{name}: failed ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})")
            continue
        notes.extend(f"{name}: {n}" for n in r.notes)
        if not r.modified:        # why the peer kept its input (a result that grew the file) is its warning
            notes.extend([f"{name}: {w}" for w in r.warnings] or [f"{name}: no change"])
            continue
        size = (sum(1 for _ in all_nodes(r.model)), _const_bytes(r.model))
        if size >= base:
            notes.append(f"{name}: not smaller ({size[0]} nodes vs {base[0]})")
            continue
        _restore_interface(r.model, declared)     # as for any pass: the declared interface stays (T4)
        cand = ckpt.save(r.model)
        v = verifier.verify(cand, allow_fixed_dims=allow_fixed_dims)   # after fix-input-shapes: its pins
        if v.ok and verifier.reference_error is not None:
            v = replace(v, status=VerifyStatus.FAILED, comparison=None,
                        message="outputs not compared (" + verifier.reference_error[:120] + ")")
        if not v.ok:
            notes.append(f"{name}: refused, {v.message[:200]}")
            ckpt._drop(cand)
            continue
        if by_compiled_ops:
            if base_ov is None and base_ov_error is None:
                try:
                    base_ov = ov_compiled_ops(ckpt.last_good.path, limits, pool_key)
                except (WorkerError, StudioError) as exc:
                    base_ov_error = engine_message(exc, 120) or type(exc).__name__
            try:
                theirs_ov: int | None = ov_compiled_ops(cand.path, limits, pool_key)
            except (WorkerError, StudioError) as exc:
                theirs_ov = None
                if not ran_on_engine:
                    # the engine that judges cannot compile it: never taken (its input compiling or not)
                    notes.append(f"{name}: refused, OpenVINO cannot compile it: {engine_message(exc, 240)}" + (
                        "; nor its input" if base_ov_error else ""))
                    ckpt._drop(cand)
                    continue
                # its verification compiled and ran it on OpenVINO at the run's input shapes: only the count failed
                notes.append(f"{name}: OpenVINO compiled and ran it at the input shapes (its verification); its "
                             f"compiled ops not counted ({engine_message(exc, 120)})")
            else:
                if base_ov_error is not None:
                    notes.append(f"{name}: OpenVINO's compiled ops of its input not counted ({base_ov_error})")
            if base_ov is not None and theirs_ov is not None and theirs_ov > base_ov:
                notes.append(f"{name}: refused, OpenVINO compiles it to more ops: {theirs_ov} vs {base_ov} "
                             "(CPU, runtime model)")
                ckpt._drop(cand)
                continue
            notes.append(f"{name}: verified, {size[0]} nodes" + (
                f"; OpenVINO compiles {theirs_ov} ops" if theirs_ov is not None else "") + (
                f" vs {base_ov}" if base_ov is not None and theirs_ov is not None else ""))
            # uncounted (compiled by its verification) sorts after every counted candidate
            picks.append(((theirs_ov if theirs_ov is not None else 1 << 62, *size), name, r, cand, v))
            continue
        try:
            if base_fusions is None:
                last = ckpt.last_good
                base_fusions = ort_fusions(last.path, ckpt.folder("fusions"), data_dir=last.data_dir, limits=limits,
                                           pool_key=pool_key)
            theirs = ort_fusions(cand.path, ckpt.folder("fusions"), data_dir=cand.data_dir, limits=limits,
                                 pool_key=pool_key)
            lost = base_fusions.costs(theirs)
        except (WorkerError, StudioError) as exc:
            lost, theirs = {}, None
            notes.append(f"{name}: ONNX Runtime's fusions not compared ({str(exc).splitlines()[0][:120]})")
        if lost and theirs is not None and base_fusions is not None:
            notes.append(f"{name}: refused, costs ONNX Runtime its fusions: " + ", ".join(
                f"{op} {a} -> {b}" for op, (a, b) in lost.items()) +
                f" (ORT runs {theirs.nodes} nodes vs {base_fusions.nodes})")
            ckpt._drop(cand)
            continue
        notes.append(f"{name}: verified, {size[0]} nodes" + (
            f"; ORT runs {theirs.nodes} nodes vs {base_fusions.nodes}" if theirs and base_fusions else ""))
        picks.append((size, name, r, cand, v))
    if not picks:
        return result(model, [], notes=notes), None
    picks.sort(key=lambda t: t[0])
    key, name, r, cand, v = picks[0]
    for other in picks[1:]:
        ckpt._drop(other[3])
    if by_compiled_ops:
        shown = f"{key[1]} nodes, from {base[0]}" + (f"; OpenVINO {key[0]} compiled ops, from {base_ov}"
                                                     if base_ov is not None and key[0] < 1 << 62 else "")
    else:
        shown = f"{key[0]} nodes, from {base[0]}"
    notes.append(f"kept {name}'s result ({shown})")
    r = PassResult(r.model, True, r.changes, dict(r.counts), tuple(notes)[:20], r.warnings,
                   {**dict(r.details), "chosen": name, "criterion": engine})
    return r, (cand, v)


def ov_compiled_ops(model_path: Path, limits: Limits | None, pool_key: str) -> int:
    """How many ops OpenVINO's CPU plugin runs for the model as written (``get_runtime_model()``, its own
    fusions done; f32, one thread), in a sandbox worker. Raises ``WorkerError`` when OpenVINO cannot
    compile it."""
    timeout = limits.timeout_s if limits is not None else None
    return len(compiled_graph(model_path, {}, pool_key=pool_key, timeout_s=timeout).ops)


def op_count_diff(before: Mapping[str, int], after: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """(op, before, after) rows where the count changed, largest change first."""
    ops = set(before) | set(after)
    rows = [(op, before.get(op, 0), after.get(op, 0)) for op in ops if before.get(op, 0) != after.get(op, 0)]
    return sorted(rows, key=lambda r: -abs(r[1] - r[2]))


__all__ = ["PassRecord", "PipelineResult", "op_count_diff", "request_passes", "resolve_passes",
           "resolve_user_paths", "run_passes", "run_pipeline", "save_ir"]
