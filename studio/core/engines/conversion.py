"""What an engine's converter did: the artifact, the command line, the time and the log.

MNN and LiteRT do not read ONNX themselves: a converter (MNNConvert, onnx2tf) writes
their format first. Both run inside a sandbox worker (they can crash or hang on hostile
models) and both print their unsupported-op messages rather than raising them; the log is
kept so the check can attribute a failure to ONNX nodes.

A converter that refuses a model with its defaults often says which of its own options to
use (onnx2tf: "-kt or -kat" for NHWC inputs, "-onwdt" for NMS heads). :func:`search_options`
tries those, a bounded number of times in the same worker, as the input search tries inputs;
what was tried, what the converter advised and the options that worked are recorded
(``attempts``, ``advice``, ``options``) for the check's finding and the export manifest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from studio.core.engines.table import engine_row
from studio.core.jobs import JobOutput
from studio.core.closeness import closeness

__all__ = ["Conversion", "ConversionFailed", "ConvertedRunner", "OptionSet", "conversion_output", "converter_advice",
           "onnx_output_types", "onnx_typed", "outputs_disagree", "search_options"]

# Conversions tried after the defaults, at most, and the seconds the search may spend: onnx2tf takes
# tens of seconds on small models and minutes on a ResNet-50, inside a worker whose own timeout is 600 s.
MAX_OPTION_ATTEMPTS = 4
OPTION_BUDGET_S = 300.0
# A converted file the engine's runtime cannot run on any input (LiteRT: TensorFlow "Flex" ops): the run's error
# leads with this, and the check's hint says that no input size changes it.
RUNTIME_LACKS_OPS = "the converted model needs op(s) the engine's runtime lacks"
# How a judge's reason starts when the converted file failed to run (not a difference in numbers).
RUN_FAILED = "the converted file fails at run: "
# An output whose cosine with ONNX Runtime's is below this is "different numbers" (the check's criterion).
COSINE_MIN = 0.999
# Log lines in which a converter recommends one of its options ("use the -kt or -kat option",
# "try the -onwdt option", "you can try set --weightQuantAsymmetric", "Re-run with --x").
_ADVICE = re.compile(r"(use the -|try the -|try set -|re-run with -|please try .*-|use -{1,2}\w)", re.I)


class ConversionFailed(RuntimeError):
    """Worker side: the converter refused the model (the message is its log's gist)."""

    def __init__(self, message: str, info: dict[str, Any]) -> None:
        super().__init__(message)
        self.info = info


@dataclass(frozen=True)
class Conversion:
    """One conversion ONNX -> engine format (parent side)."""

    engine: str
    ok: bool
    artifact: Path | None
    command: tuple[str, ...]
    seconds: float
    converter_version: str | None
    error: str | None = None
    unsupported_ops: tuple[str, ...] = ()
    failed_nodes: tuple[str, ...] = ()
    layout: dict[str, Any] = field(default_factory=dict)
    log_tail: str = ""
    options: tuple[str, ...] = ()          # the converter options that made it convert (empty: its defaults)
    attempts: tuple[dict[str, Any], ...] = ()   # every option set tried: {"options", "ok", "error"}
    advice: tuple[str, ...] = ()           # the converter's own recommendations, from its log
    reused: bool = False                   # the worker had made this very conversion already: its file, not a new run

    @property
    def command_line(self) -> str:
        import shlex

        # "&&" joins two steps (MNN int8: convert, then quantize); every other word is quoted
        return " ".join(c if c == "&&" else shlex.quote(c) for c in self.command)

    @classmethod
    def from_data(cls, engine: str, data: dict[str, Any], artifact: Path | None) -> Conversion:
        return cls(engine, bool(data.get("ok")), artifact if data.get("ok") else None,
                   tuple(data.get("command") or ()), float(data.get("seconds") or 0.0),
                   data.get("converter_version"), data.get("error"), tuple(data.get("unsupported_ops") or ()),
                   tuple(data.get("failed_nodes") or ()), dict(data.get("layout") or {}),
                   str(data.get("log") or "")[-2000:], tuple(data.get("options") or ()),
                   tuple(dict(a) for a in data.get("attempts") or ()), tuple(data.get("advice") or ()),
                   bool(data.get("reused")))

    def converter_label(self) -> str:
        return converter_name(self.engine)

    @property
    def search_note(self) -> str | None:
        """One line for notes and manifests: which options made the converter accept the model."""
        return options_note(self.engine, {"options": self.options, "attempts": self.attempts, "ok": self.ok})


def converter_name(engine: str) -> str:
    """The converter a converted engine's row names (``MNNConvert``, ``onnx2tf``, ``pnnx``)."""
    row = engine_row(engine)
    return row.converter if row is not None and row.converter else engine


def options_note(engine: str, info: Mapping[str, Any]) -> str | None:
    """What the option search did, in one line (None when the defaults were used and nothing else tried)."""
    attempts = list(info.get("attempts") or ())
    if len(attempts) <= 1:
        return None
    tool = converter_name(engine)
    first = attempts[0]
    reason = str(first.get("error") or "")[:160]
    why = "refused its defaults" if not first.get("converted", first.get("ok")) else \
        "wrote a file its runtime cannot run with its defaults" if RUNTIME_LACKS_OPS in reason else \
        "wrote a file that fails at run with its defaults" if reason.startswith(RUN_FAILED) else \
        "gave different numbers from ONNX Runtime with its defaults"
    tried = ", ".join(" ".join(a.get("options") or ()) or "defaults" for a in attempts[1:])
    if info.get("ok") and info.get("options"):
        won = next((a for a in reversed(attempts) if a.get("ok")), {})
        return (f"{tool} {why} ({reason}); converted with {' '.join(info['options'])} "
                f"(tried {len(attempts) - 1} option set(s): {tried})" + (f"; {won['note']}" if won.get("note") else ""))
    return f"{tool} {why} ({reason}); none of the options it recommends helped (tried: {tried})"


class ConvertedRunner:
    """What the MNN and LiteRT runners share (the one runner protocol of
    :mod:`studio.core.engines.sessions`): their converter's record in ``details``, the timings
    read from it, and the precision they compute in."""

    engine = ""
    details: dict[str, Any]
    _import_ms: float | None = None

    @property
    def timings(self) -> dict[str, float | None]:
        """``convert_ms`` (MNNConvert / onnx2tf) and ``session_ms`` (the runtime's load) separately."""
        return {"import_ms": self._import_ms, "convert_ms": self.details.get("convert_ms"),
                "session_ms": self.details.get("load_ms"), "load_ms": None}

    # What each requested precision computes in, when the converter's file is not "<p> weights, fp32 compute".
    precision_labels: dict[str, str] = {}

    @property
    def effective_precision(self) -> str | None:
        requested = self.details.get("precision_requested") or "f32"
        return self.precision_labels.get(requested, f"{requested} weights, fp32 compute")

    def prepare(self, feeds: Mapping[str, Any]) -> None:
        """Nothing to do before the first inference (LiteRT converts here)."""

    def record_conversion(self, conv: Mapping[str, Any], convert_ms: float) -> None:
        """The converter's command, options search and advice, as the check and manifests read them."""
        self.details.update(convert_ms=round(convert_ms, 3), converter_command=conv["command"],
                            converter_options=list(conv.get("options") or []),
                            converter_attempts=list(conv.get("attempts") or []),
                            converter_advice=list(conv.get("advice") or []),
                            converter_reused=bool(conv.get("reused")))


def conversion_output(convert: Callable[[], dict[str, Any]]) -> Any:
    """A conversion job's reply (a ``JobOutput``): the converter's info, a refusal's too (the check
    and the option search read its log, unsupported ops and attempts)."""
    try:
        data = convert()
    except ConversionFailed as exc:
        data = exc.info
    return JobOutput(data=data)


def onnx_output_types(path: str | Path) -> dict[str, int]:
    """The ONNX model's outputs, in order, with their element types (a converted model is bound to them)."""
    import onnx

    model = onnx.load_model(str(path), load_external_data=False)
    return {o.name: o.type.tensor_type.elem_type for o in model.graph.output}


def onnx_typed(a: Any, elem_type: int | None) -> Any:
    """A converted engine computes integers in int32: give them back in the ONNX output's type."""
    if not elem_type:
        return a
    try:
        import onnx

        want = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except Exception:  # noqa: BLE001
        return a
    return a.astype(want) if want != a.dtype and want.kind in "iubf" else a



@dataclass(frozen=True)
class OptionSet:
    """One set of converter options to try: the flags as the converter's command line spells them
    (what is reported and recorded), the keyword arguments its Python API takes, and why it is tried."""

    flags: tuple[str, ...]
    kwargs: Mapping[str, Any]
    reason: str


def converter_advice(log: str) -> list[str]:
    """The lines of a converter's log that recommend one of its options, de-colored, once each."""
    out: list[str] = []
    for line in log.splitlines():
        text = re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
        text = re.sub(r"^(ERROR|WARNING|INFO):\s*", "", text)
        if text and _ADVICE.search(text) and text not in out:
            out.append(text[:300])
    return out[:8]


def outputs_disagree(expected: Mapping[str, Any], got: Mapping[str, Any]) -> str | None:
    """Why ``got`` (a converted model's outputs) is not ``expected`` (ONNX Runtime's on the same
    inputs): a shape that differs or a cosine below :data:`COSINE_MIN`; None when they agree."""
    import numpy as np


    for name, want in expected.items():
        if name not in got or not isinstance(want, np.ndarray) or want.dtype.kind not in "fiub":
            continue
        have = np.asarray(got[name])
        if have.shape != want.shape:
            return f"output {name!r} has shape {list(have.shape)}, ONNX Runtime gives {list(want.shape)}"
        cos = closeness(want, have).cosine_score     # NaN/Inf on one side only: 0.0 (closeness's rules)
        if cos < COSINE_MIN:
            return f"output {name!r} differs from ONNX Runtime's (cosine {cos:.4f})"
    return None


def search_options(convert: Callable[[OptionSet], dict[str, Any]],
                   propose: Callable[[dict[str, Any], bool], Sequence[OptionSet]], *,
                   judge: Callable[[dict[str, Any]], str | None] | None = None,
                   first: OptionSet | None = None, max_attempts: int = MAX_OPTION_ATTEMPTS,
                   budget_s: float = OPTION_BUDGET_S,
                   follow_up: Callable[[dict[str, Any], OptionSet], Sequence[OptionSet]] | None = None
                   ) -> dict[str, Any]:
    """Worker side: convert with the defaults (or ``first``), and when the converter refuses
    (``convert`` raises :class:`ConversionFailed`) or ``judge`` finds the result wrong (a reason
    string), try the option sets ``propose(info, refused)`` suggests, in order, until one converts
    and passes ``judge``; at most ``max_attempts`` of them, and none that would start after
    ``budget_s`` (judged by the slowest attempt so far). Returns the winner's info with
    ``attempts`` (every set tried), ``advice`` and ``options``; raises :class:`ConversionFailed`
    with the defaults' info (and the attempts) when the model never converts. A conversion that
    converts but stays wrong with every option keeps the defaults' result (the check reports the
    difference); refused with the defaults, the first option set that converted, though judged wrong, is
    returned (its run says what is wrong). ``first`` refused, the converter's defaults are tried next.
    ``follow_up(info, options)``: the sets to try next after ``options`` converted but was judged wrong (what
    ``propose`` could not know from the defaults' result: LiteRT's -rtpo for the Flex ops of a -static file)."""
    started = time.perf_counter()
    attempts: list[dict[str, Any]] = []
    default = first or OptionSet((), {}, "the converter's defaults")

    def attempt(options: OptionSet) -> tuple[dict[str, Any], bool]:
        t0 = time.perf_counter()
        try:
            info = convert(options)
            ok, why = True, (judge(info) if judge is not None else None)
        except ConversionFailed as exc:
            info, ok, why = dict(exc.info), False, str(exc)
        attempts.append({"options": list(options.flags), "ok": ok and why is None, "converted": ok,
                         "error": None if ok and why is None else (why or "")[:400], "reason": options.reason,
                         "seconds": round(time.perf_counter() - t0, 3)})
        info["options"] = list(options.flags)
        return info, ok

    base, converted = attempt(default)
    base["advice"] = converter_advice(str(base.get("log") or ""))
    if attempts[0]["ok"]:
        base["attempts"] = attempts
        return base
    tried = {tuple(default.flags)}
    slowest = attempts[0]["seconds"]
    if first is not None and first.flags and not converted:
        # ``first`` (an earlier shape's winning flags) is a guess for this shape: refused, the converter's own
        # defaults come next, and their result (a file that converts) is the base the search goes on from
        plain = OptionSet((), {}, "the converter's defaults")
        tried.add(())
        info, ok = attempt(plain)
        slowest = max(slowest, attempts[-1]["seconds"])
        if attempts[-1]["ok"]:
            info.update(attempts=attempts, advice=converter_advice(str(info.get("log") or "")))
            return info
        if ok:
            base, converted = info, True
            base["advice"] = converter_advice(str(base.get("log") or ""))
    nearest: dict[str, Any] | None = None        # the first option set that converted, though judged wrong
    queue = list(propose(base, not converted))
    while queue:
        options = queue.pop(0)
        if len(attempts) > max_attempts or tuple(options.flags) in tried:
            continue
        if time.perf_counter() - started + slowest > budget_s:
            break
        tried.add(tuple(options.flags))
        info, ok = attempt(options)
        slowest = max(slowest, attempts[-1]["seconds"])
        if attempts[-1]["ok"]:
            info.update(attempts=attempts, advice=base["advice"])
            return info
        if ok and follow_up is not None:
            queue[:0] = [o for o in follow_up(info, options) if tuple(o.flags) not in tried]
        if ok and not converted and nearest is None:
            nearest = info
    if not converted and nearest is not None:
        # refused with the defaults, converted with an option set but judged wrong (other numbers, or a file that
        # fails at run): that file is what the user gets, and its run says what is wrong, not "cannot convert"
        nearest.update(attempts=attempts, advice=base["advice"])
        return nearest
    base.update(attempts=attempts)
    if not converted:
        raise ConversionFailed(str(base.get("error") or attempts[0]["error"]), base)
    return base
