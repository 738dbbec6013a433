"""The converted engines' check (the engine table's converted rows: MNN, LiteRT, ...): convert (MNNConvert / onnx2tf / ...), load, run once on the seeded or
given inputs and compare with ONNX Runtime -- all in one sandbox worker, one session at a time: ONNX Runtime's pass
first (the sets tried until the original runs, and the picture), closed before the conversion, then the engine's pass
on those sets with ORT's answers kept. Each session holds its own copy of the weights; both open at once made the
worker's peak RSS (corpus chython_rxnmap, 85 MB, on MNN) 1039 MB, one at a time 874 MB.

The verdict is the real run's: a model the engine converts and runs "runs"; a conversion
the converter refuses "fails", with the failing ONNX nodes named where the converter's log
names them (MNN: "These Op Not Support: ONNX::grid_sampler" -> every node of that op type;
onnx2tf: "ERROR: onnx_op_name: /GridSample" -> that node, "ERROR: X OP is not yet
implemented" -> every X node). Inputs are tried as the other engines' checks try them
(``diagnostics.base.run_candidates``: seeded, then a small image size), so a model the engine
runs is never called failing because of the studio's own inputs. Each output is compared with
ONNX Runtime's by its task (``studio.data.tasks``, the user's ``--task`` choices included):
detection rows picked by TopK/NMS in any order and judged by AP50 against ONNX Runtime's boxes
(R42), integer outputs exactly (a mismatch count, never a cosine), other float outputs by cosine
(with the top-1 agreement of class scores). A difference (cosine < 0.999, AP50 < 0.99, any integer
mismatch) is a warning: the engine runs, but not the same results.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from diagnostics.base import (EngineCheck, OutputInfo, first_line, needs_inputs_finding, recorded_limit, run_candidates,
                              seeded_size_finding, verdict_from)
from diagnostics.node_context import NodeCtx
from passes.quant_tools import release_memory
from studio.core.engines.conversion import COSINE_MIN, RUNTIME_LACKS_OPS, options_note
from studio.core.engines.table import engine_rows
from studio.core.errors import WorkerError
from studio.core.findings import Finding, NodeVerdict
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job
from studio.core.compare import NOISE_FLOOR_RMS, compare_arrays
from studio.data.metrics import DetectionMAP, OutputSpec
from studio.core.engines.conversion import ConversionFailed
from diagnostics.input_search import input_dependent, run_search, validate_inputs
from studio.core.feeds import feeds_text
from studio.core.pictures import choose_picture, picture_input, quiet_outputs
from studio.data.tasks import order_free_for, output_tasks
from studio.core.engines import engine_limits, get_engine, sessions

__all__ = ["CONVERTED_ENGINES", "check_converted"]

# engine -> (label, finding-code prefix, converter), from the engine table's converted rows
CONVERTED_ENGINES = {r.name: (r.label, r.code, r.converter) for r in engine_rows("converted")}
_AP50_MIN = 0.99
_UNSUPPORTED_HINT = "rewrite the op into ops the converter supports, or use another engine"


def judge_output(name: str, want: np.ndarray, got: np.ndarray, task=None, order=None) -> dict:
    """One output of a converted engine against ONNX Runtime's, by the output's task (``task``: a
    ``studio.data.tasks.OutputTask``; ``order``: rows TopK/NMS picked, ``studio.core.order_free``)."""
    d = compare_arrays(name, want, got, order=order, task=task)
    kind = getattr(task, "kind", "") or ""
    entry = {"output": name, "task": kind, "mode": d.mode, "cosine": d.cosine, "max_abs": d.max_abs,
             "top1": d.top1_agreement, "mismatches": d.mismatches, "map50": None, "problem": None}
    if d.got_shape != d.ref_shape:
        entry["problem"] = f"shape {list(d.got_shape or ())} vs ONNX {list(d.ref_shape or ())}"
        return entry
    if d.mode == "exact" or (d.mode.startswith("rows") and d.ref_dtype.startswith(("int", "uint", "bool"))):
        if d.mismatches:
            entry["problem"] = f"{d.mismatches} of {int(np.size(want))} values differ (compared exactly)"
        return entry
    spec_shape = tuple(np.shape(want))
    if kind == "detection" and DetectionMAP().applies_to(_spec(name, want)):
        ap = DetectionMAP(head=getattr(task, "head", None)).score(name, [want], [got]).value
        entry["map50"] = ap
        if ap is not None and ap < _AP50_MIN:
            entry["problem"] = (f"detections differ: AP50 {ap:.3f} against ONNX Runtime's boxes "
                                f"({d.mode.split(' (')[0]}, {spec_shape[-2] if len(spec_shape) > 1 else 1} rows)")
        return entry
    ref = np.asarray(want, np.float64)
    ref = ref[np.isfinite(ref)]
    if ref.size and float(np.sqrt(np.mean(ref * ref))) < NOISE_FLOOR_RMS:
        # numerically zero (a detector's seeded heat map, ~1e-7): its cosine is rounding noise, values are judged
        if not d.match:
            entry["problem"] = f"max abs diff {d.max_abs:.3g} on an output at float noise level ({d.note})"
        return entry
    if d.cosine is not None and d.cosine < COSINE_MIN:
        top1 = f", top-1 agreement {d.top1_agreement:.2f}" if d.top1_agreement is not None else ""
        entry["problem"] = f"cosine {d.cosine:.6f}, max abs diff {d.max_abs:.3g}{top1}"
    return entry


def _spec(name: str, a: np.ndarray):
    return OutputSpec(name, str(a.dtype), tuple(np.shape(a)))


def _how(entry: dict) -> str:
    """How an output was judged, for a note: 'detection, rows in any order, AP50 1.000'."""
    parts = [entry.get("task") or "values", entry["mode"].split(" (")[0].split(";")[0]]
    if entry.get("map50") is not None:
        parts.append(f"AP50 {entry['map50']:.3f} against ONNX Runtime's boxes")
    elif entry.get("cosine") is not None:
        parts.append(f"cosine {entry['cosine']:.6f}")
    elif entry["mode"] != "exact" and not entry.get("problem"):
        parts.append("cosine n/a (no finite values)")
    if entry.get("top1") is not None:
        parts.append(f"top-1 agreement {entry['top1']:.2f}")
    return ", ".join(parts)


class _OneAtATime:
    """ONNX Runtime's session of the original and the engine's session of the converted file, never both open:
    each holds its own copy of the weights (the peak RSS figures: the module doc). ``get`` closes the other one
    first."""

    def __init__(self, openers: dict[str, Callable[[], Any]]) -> None:
        self._openers = openers
        self._held: tuple[str, Any] | None = None

    def get(self, which: str) -> Any:
        """The open runner of ``which`` ("reference" or "engine"), opening it (and closing the other) if need be."""
        if self._held is not None and self._held[0] == which:
            return self._held[1]
        self.release()
        runner = self._openers[which]()
        self._held = (which, runner)
        return runner

    def release(self) -> None:
        """Close what is open and free its memory now, not whenever the collector gets to it."""
        if self._held is None:
            return
        runner, self._held = self._held[1], None
        close = getattr(runner, "close", None)
        if close is not None:
            close()
        del runner
        release_memory()


def _digest(feeds: Any) -> str:
    """One input set's content (names, dtypes, shapes, values): the key of ONNX Runtime's answers, so the
    engine's pass finds the reference pass's answer for the same set drawn again."""
    h = hashlib.sha1()

    def add(v: Any) -> None:
        if isinstance(v, dict):
            for k in sorted(v):
                h.update(repr(k).encode())
                add(v[k])
        elif isinstance(v, (list, tuple)):
            h.update(f"[{len(v)}".encode())
            for x in v:
                add(x)
        elif isinstance(v, np.ndarray) and v.dtype != object:
            h.update(f"{v.dtype}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        elif isinstance(v, np.ndarray):
            add(v.tolist())
        else:
            h.update(repr(v).encode())

    add(dict(feeds))
    return h.hexdigest()


class _Reference:
    """ONNX Runtime's outputs of the original per input set, kept by content: the reference pass fills it before the
    engine is opened, so the engine's pass finds them with ORT closed; a set the reference pass did not reach (the
    engine failed on the set ORT ran) closes the engine for ORT's run and reopens it after."""

    def __init__(self, held: _OneAtATime, data: dict) -> None:
        self.held, self.data = held, data
        self.outputs: dict[str, dict] = {}
        self.refused: dict[str, str] = {}
        self.pictures: dict[str, Any] = {}
        self.broken = False              # ORT cannot run the model at all: the engine alone decides from there
        self.last: tuple[Any, dict] | None = None     # the last set ORT ran, with its outputs

    def _session(self) -> Any:
        try:
            return self.held.get("reference")
        except Exception as exc:  # noqa: BLE001 - no reference: the engine alone decides, nothing to compare
            self.broken = True
            self.data["reference_error"] = first_line(f"{type(exc).__name__}: {exc}", 300)
            return None

    def verdict(self, feeds: Any) -> dict | None:
        """ORT's outputs on ``feeds``; None where ORT cannot run the model (no comparison). Raises RuntimeError
        where the original refuses these inputs for their sizes or values (a reflect Pad on 16 samples): they
        never reach the engine, which may crash on them instead of raising (MNN: SIGSEGV, the worker lost and
        the search with it); the search goes on to the next set."""
        key = _digest(feeds)
        if key in self.refused:
            raise RuntimeError(self.refused[key])
        if key in self.outputs:
            return self.outputs[key]
        session = None if self.broken else self._session()
        if session is None:
            return None
        try:
            out = session.infer(feeds)
        except Exception as exc:  # noqa: BLE001 - ORT's message says why the inputs do not fit
            message = f"{type(exc).__name__}: {exc}"
            if input_dependent(message):
                self.refused[key] = f"the original refuses these inputs on ONNX Runtime: {message}"
                raise RuntimeError(self.refused[key]) from None
            self.broken = True
            self.data["reference_error"] = first_line(message, 300)
            return None
        self.outputs[key], self.last = out, (feeds, out)
        return out

    def picture(self, onnx_model: Any, feeds: Any, expected: dict) -> Any:
        """The synthetic picture (``studio.core.pictures.choose_picture``) for the set ``feeds``, with ORT's outputs
        on it; None where none is used."""
        key = _digest(feeds)
        if key not in self.pictures:
            session = None if self.broken else self._session()
            self.pictures[key] = None if session is None else choose_picture(
                feeds, onnx_model, [expected], lambda sets: _outputs_or_none(session, sets))
        return self.pictures[key]


def _outputs_or_none(runner: Any, sets: Sequence[Any]) -> list:
    outs = []
    for feeds in sets:
        try:
            outs.append(runner.infer(feeds))
        except Exception:  # noqa: BLE001 - that picture is simply not used
            outs.append(None)
    return outs


@job("diagnostics.converted_check")
def converted_check_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """ONNX Runtime's pass first (the sets the search tries until the original runs, and the picture), closed before
    the conversion; then the engine's pass on the same sets with ORT's answers kept (:class:`_OneAtATime`)."""
    import onnx

    engine = str(args["engine"])
    path = str(args["model_path"])
    data: dict[str, Any] = {"convert_error": None, "conversion": None, "load_error": None, "run_error": None,
                            "outputs": None, "feeds_error": None, "feeds_note": None, "compare": [], "layout": {},
                            "names_mapped": None, "reference_error": None}
    onnx_model = onnx.load_model(path, load_external_data=False)
    held = _OneAtATime({"engine": lambda: sessions.open_runner(engine, path, {"precision": "f32"}, ctx),
                        "reference": lambda: sessions.open_runner("onnxruntime", path,
                                                                  {"graph_optimization_level": "disable"}, ctx)})
    try:
        return JobOutput(data=_check(engine, onnx_model, args, held, data, ctx))
    finally:
        held.release()


def _check(engine: str, onnx_model: Any, args: dict, held: _OneAtATime, data: dict, ctx: JobContext) -> dict:
    run = bool(args.get("run", True))
    if run:
        try:
            validate_inputs(onnx_model, args.get("dims"), args.get("inputs"))
        except Exception as exc:  # noqa: BLE001
            data["feeds_error"] = str(exc)[:500]
            run = False
    reference = _Reference(held, data)
    if run:
        ctx.set_stage("ONNX Runtime reference")
        # the search stops at the first set the original runs (or where ORT cannot run it: no reference)
        run_search(onnx_model, reference.verdict, dims=args.get("dims"), inputs=args.get("inputs"))
        if reference.last is not None and not args.get("inputs"):
            reference.picture(onnx_model, *reference.last)
    ctx.set_stage(f"{engine} conversion")
    try:
        data["version"] = held.get("engine").details.get("engine_version")
    except ConversionFailed as exc:
        data["convert_error"], data["conversion"] = str(exc), exc.info
        return data
    except Exception as exc:  # noqa: BLE001 - the engine's message is the finding
        data["load_error"] = f"{type(exc).__name__}: {exc}"[:2000]
        return data
    if not run:
        return data
    ran: dict[str, Any] = {}

    def infer(feeds):
        expected = reference.verdict(feeds)       # ORT first: inputs it refuses never reach the engine
        try:
            values = held.get("engine").infer(feeds)
        except Exception as exc:
            if isinstance(exc, ConversionFailed):
                data["conversion"] = exc.info
            elif expected is not None and "engine_failed_on" not in ran:     # the first set ORT ran
                ran["engine_failed_on"] = feeds_text(feeds)
                ran["engine_error"] = f"{type(exc).__name__}: {exc}"[:2000]
            raise
        ran["feeds"], ran["values"], ran["expected"] = feeds, values, expected
        return [[n, str(np.asarray(v).dtype), list(np.shape(v)), "tensor"] for n, v in values.items()]

    ctx.set_stage(f"{engine} inference")
    run_candidates(onnx_model, infer, data, dims=args.get("dims"), inputs=args.get("inputs"))
    if data.get("outputs") is None and data.get("needs_inputs") and ran.get("engine_failed_on"):
        # The original ran on inputs the engine refused: no other inputs are needed, the converted model
        # fails ("fails", not "not run: needs inputs"; onnx2tf's PP-OCR detector: ADD [1,14,14,96] and
        # [1,7,14,96] not broadcastable where ONNX Runtime runs the original).
        data["needs_inputs"], data["run_error"] = False, ran["engine_error"]
        data["feeds_note"] = (f"ONNX Runtime runs the original on {ran['engine_failed_on']}; the converted model "
                              "fails there: compare per layer (compare --layerwise), or use another engine")
    if data.get("outputs") is None:
        if data.get("conversion") and not data["conversion"].get("ok"):
            data["convert_error"] = data["conversion"].get("error") or data.get("run_error")
        return data
    details = held.get("engine").details
    data["search"] = {k: details.get(f"converter_{k}") for k in ("options", "attempts", "advice", "command")}
    data["layout"] = dict(details.get("layout") or {})
    data["names_mapped"] = details.get("names_mapped") or details.get("outputs_mapped")
    data["fallback"] = details.get("fallback")      # LiteRT: XNNPack refused, the built-in kernels ran
    expected = ran["expected"]
    if expected is None:          # ORT could not run the original on the inputs the engine ran
        data["reference_error"] = data.get("reference_error") or "ONNX Runtime cannot run the original"
        return data

    tasks = output_tasks(onnx_model, args.get("tasks") or None)
    order = order_free_for(onnx_model, tasks)
    if args.get("inputs"):
        values = ran["values"]
    else:
        choose = None if reference.broken else (lambda: reference.picture(onnx_model, ran["feeds"], expected))
        expected, values = _compare_on_picture(onnx_model, ran, choose, lambda: held.get("engine"), data)
    for name, want in expected.items():
        got = values.get(name)
        if not isinstance(want, np.ndarray) or want.dtype.kind not in "fiub" or got is None:
            continue
        got = np.asarray(got)
        if want.size == 0 and got.shape == want.shape:
            continue
        data["compare"].append(judge_output(name, want, got, tasks.get(name), order.get(name)))
    return data


def _on_a_picture(onnx_model, ran: dict, reference, runner, data: dict) -> tuple[dict, dict]:
    """:func:`_compare_on_picture` with an open ORT ``reference`` runner (None: none) and the engine's ``runner``."""
    choose = None if reference is None else (lambda: choose_picture(
        ran["feeds"], onnx_model, [ran["expected"]], lambda sets: _outputs_or_none(reference, sets)))
    return _compare_on_picture(onnx_model, ran, choose, lambda: runner, data)


def _compare_on_picture(onnx_model, ran: dict, choose: Callable[[], Any] | None, engine: Callable[[], Any],
                        data: dict) -> tuple[dict, dict]:
    """The outputs to compare: those of the seeded set, except where ORT's are numerically zero there, or a sliver
    of what a picture gives (a text detector's mask on noise), which are compared on the synthetic picture that
    lifts them (studio.core.pictures, the rule optimize and precision use; ``choose()``: that picture with ORT's
    outputs on it, None where none lifts them; ``choose`` None: no reference), run on the engine (``engine()``);
    ``data["picture_note"]`` says so.
    Where no picture lifts them, or the engine fails on it, the seeded comparison stands."""
    expected, values = ran["expected"], ran["values"]
    quiet = quiet_outputs([expected])
    if choose is None or picture_input(onnx_model) is None:
        return expected, values
    choice = choose()
    if choice is None and not quiet:
        return expected, values
    if choice is None:
        data["picture_note"] = (f"output(s) {', '.join(repr(n[:60]) for n in quiet)} near zero on the seeded inputs and "
                                "on every synthetic picture: compared at float noise level, which proves little; "
                                "give real inputs (--inputs X.npz)")
        return expected, values
    try:
        on_picture = engine().infer(choice.feeds)
    except Exception as exc:  # noqa: BLE001 - the engine's failure on the picture is said, not hidden
        data["picture_note"] = f"not compared on {choice.label}: the engine fails there ({first_line(str(exc), 200)})"
        return expected, values
    data["picture_note"] = (f"outputs {choice.smallness('seeded inputs')} compared on {choice.label} "
                            f"({choice.rms_text()})")
    return ({**expected, **{n: choice.outputs[n] for n in choice.before}},
            {**values, **{n: on_picture[n] for n in choice.before if n in on_picture}})


def _attributed(nodes: Sequence[NodeCtx], conversion: dict | None) -> dict[str, str]:
    """node id -> reason, from the converter's log."""
    if not conversion:
        return {}
    out: dict[str, str] = {}
    for op in conversion.get("unsupported_ops") or ():
        for n in nodes:
            if n.op_type == op or n.op_type.lower() == str(op).lower():
                out.setdefault(n.id, f"no conversion for {n.qualified}")
    for name in conversion.get("failed_nodes") or ():
        n = next((n for n in nodes if n.name == name), None) or next((n for n in nodes if name in n.outputs), None)
        if n is not None:
            why = str(conversion.get("error") or "")
            why = why.split(" (", 1)[1].rstrip(")") if " (" in why else ""
            out.setdefault(n.id, "the converter fails at this node" + (f" ({first_line(why, 200)})" if why else ""))
    return out


def _refusal_hint(converter: str, conversion: dict | None) -> str | None:
    """A refused conversion's fix hint: the converter's own advice and the options already tried
    (None when the converter gave none and nothing was tried: the op itself is missing)."""
    if not conversion:
        return None
    advice = [a for a in conversion.get("advice") or () if a]
    tried = [" ".join(a.get("options") or ()) for a in (conversion.get("attempts") or ())[1:]]
    if not advice and not tried:
        return None
    parts = []
    if advice and converter == "onnx2tf":
        # its advice names its own flags: say what each became here (a studio user cannot pass them)
        parts.append("onnx2tf's advice was followed where it applies: the studio converts at the run's input shapes "
                     "(its -b/-ois; set them with --dim NAME=VALUE)")
    elif advice:
        parts.append(f"{converter} advises: " + " ".join(advice[:4]))
    if tried:
        parts.append(f"the studio tried {', '.join(tried)} without success; convert by hand (the "
                     f"{converter} options its log names, or a parameter-replacement file), or use another engine")
    else:
        parts.append("no option it names applies to this model (use another engine, or rewrite the failing node)")
    return "; ".join(parts)[:900]


def check_converted(engine: str, model_path: Path, nodes: Sequence[NodeCtx], *, run: bool = True,
                    dims: dict[str, int] | None = None, inputs: Path | None = None, pool_key: str = "default",
                    limits: Limits | None = None, tasks: dict[str, str] | None = None) -> EngineCheck:
    """The check of a converted ``engine`` (a row of kind "converted") on ``model_path``; ``tasks``: the user's
    {output: kind} (how outputs are compared with ONNX Runtime's, see the module doc)."""
    label, prefix, converter = CONVERTED_ENGINES[engine]
    target = "CPU"
    result = EngineCheck()
    adapter = get_engine(engine)
    availability = adapter.available()
    if not availability.ok:
        result.findings.append(Finding(f"{prefix}-NOT-INSTALLED", "info", availability.reason or f"{label} missing",
                                       engine, target=target, source="package metadata"))
        result.verdicts.append(verdict_from(engine, target, result.findings, "not checked"))
        return result
    result.version = availability.version
    checked = [n for n in nodes if not n.is_function_call]
    job_limits = engine_limits(engine, limits)       # the row's own needs (LiteRT: TensorFlow's room)
    try:
        res = run_job("diagnostics.converted_check", {"engine": engine, "model_path": str(model_path), "run": run,
                                                      "dims": dims or {}, "inputs": str(inputs) if inputs else None,
                                                      "tasks": dict(tasks or {})},
                      stage=f"{label} check", pool_key=f"{pool_key}:{engine}", limits=job_limits)
    except WorkerError as exc:
        if recorded_limit(result, exc, engine, label, prefix, target):
            return result
        result.findings.append(Finding(f"{prefix}-CRASH", "error", f"{label} {exc.kind}: {first_line(exc)}", engine,
                                       target=target, fix_hint="the converter or engine process died on this model",
                                       source="real session"))
        result.verdicts.append(verdict_from(engine, target, result.findings, "real session", ran=False,
                                            version=result.version))
        return result
    data = res.data
    result.version = data.get("version") or result.version
    conversion = data.get("conversion") or {}
    if conversion.get("converter_version"):
        result.notes.append(f"{label}: converted with {converter} {conversion['converter_version']}")
    ran: bool | None = True
    if data.get("convert_error"):
        ran = False
        bad = _attributed(checked, conversion)
        hint = _refusal_hint(converter, conversion)
        for node_id, reason in bad.items():
            n = next(n for n in checked if n.id == node_id)
            result.findings.append(Finding(f"{prefix}-UNSUPPORTED", "error",
                                           f"{label} cannot convert node {n.id} ({n.qualified}): {reason}", engine,
                                           n.id, n.op_type, n.domain, target, hint or _UNSUPPORTED_HINT,
                                           None, converter))
        if not bad:
            result.findings.append(Finding(f"{prefix}-CONVERT-ERROR", "error",
                                           f"{label} conversion fails: {first_line(data['convert_error'])}", engine,
                                           target=target, fix_hint=hint, source=converter))
        note = options_note(engine, conversion)
        if note:
            result.notes.append(f"{label}: {note}")
        for n in checked:
            status = "unsupported" if n.id in bad else "unknown"
            result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, engine, target, status,
                                            bad.get(n.id, "conversion failed elsewhere"), converter))
    else:
        # Converted and loaded, but no input the studio could make ran it: "not run", never "fails" (R39).
        needs_inputs = bool(data.get("needs_inputs")) and not data.get("load_error")
        for key, code, stage in (("load_error", "LOAD-ERROR", "load"), ("run_error", "RUN-ERROR", "inference")):
            if key == "run_error" and needs_inputs:
                ran = None
                continue
            if data.get(key):
                ran = False
                hint = data.get("feeds_note") if key == "run_error" else None
                if RUNTIME_LACKS_OPS in str(data[key]):     # no input size changes this: the sizes hint would mislead
                    hint = (f"{label} cannot run these ops on any input: rewrite them in the ONNX model with ops "
                            f"{label} has, or deploy on another engine")
                result.findings.append(Finding(f"{prefix}-{code}", "error", f"{label} {stage} fails: "
                                               f"{first_line(data[key])}", engine, target=target, fix_hint=hint,
                                               source="real session"))
        status = "supported" if ran or ran is None else "unknown"
        for n in checked:
            result.nodes.append(NodeVerdict(n.id, n.op_type, n.domain, engine, target, status,
                                            "converted and ran" if ran else "the model did not run", converter))
        search = data.get("search") or {}
        note = options_note(engine, {**search, "ok": True})
        if note and search.get("options"):
            command = " ".join(search.get("command") or ())
            result.findings.append(Finding(f"{prefix}-CONVERTER-OPTIONS", "info", f"{label}: {note}", engine,
                                           target=target, fix_hint=f"convert with these options: {command}",
                                           source=converter))
            result.notes.append(f"{label}: converted with {converter} options {' '.join(search['options'])}")
        elif note:
            result.notes.append(f"{label}: {note}")
        for extra in (seeded_size_finding(engine, label, data, target),
                      needs_inputs_finding(engine, label, data, target)):
            if extra is not None:
                result.findings.append(extra)
        if data.get("feeds_error"):
            result.findings.append(Finding(f"{prefix}-NOT-RUN", "info", "the model converted but was not run: "
                                           f"{first_line(data['feeds_error'])}", engine, target=target,
                                           source="real session"))
        for entry in data.get("compare") or ():
            name = entry["output"]
            if entry.get("problem"):
                result.findings.append(Finding(f"{prefix}-MISMATCH", "warning",
                                               f"{label} output {name[:80]!r} differs from ONNX Runtime: "
                                               f"{entry['problem']}", engine, target=target,
                                               fix_hint="compare per layer (compare --layerwise) before deploying",
                                               source="real session"))
            elif entry.get("task") in ("detection", "integer") or entry["mode"] != "tolerance":
                result.notes.append(f"{label}: output {name[:60]!r} judged as {_how(entry)}")
        layout = data.get("layout") or {}
        if layout:
            shown = "; ".join(f"{k[:40]}: {v}" for k, v in list(layout.items())[:4])
            result.notes.append(f"{label}: layout handled before comparing with ONNX Runtime ({shown})")
        if data.get("names_mapped"):
            result.notes.append(f"{label}: outputs mapped to ONNX names {data['names_mapped']}")
        if data.get("fallback"):
            result.notes.append(f"{label}: {data['fallback']}")
        if data.get("reference_error"):
            result.notes.append(f"{label}: not compared with ONNX Runtime ({data['reference_error']})")
        if data.get("picture_note"):
            result.notes.append(f"{label}: {data['picture_note']}")
        if data.get("outputs") is not None:
            result.outputs = tuple(OutputInfo(n, d, None if s is None else tuple(s), k) for n, d, s, k in data["outputs"])
    # a clean run on other kernels than the engine's default says so where "no problem found" would stand
    clean = ran and not any(f.engine == engine and f.severity in ("error", "warning") for f in result.findings)
    result.verdicts.append(verdict_from(engine, target, result.findings, "real session", version=result.version,
                                        ran=ran, needs_inputs=ran is None and bool(data.get("needs_inputs")),
                                        summary=data.get("fallback") if clean and data.get("outputs") else None))
    return result
