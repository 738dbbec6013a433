"""Run several input sets through one engine in a sandbox worker: one session
(or compiled model), many inferences, outputs sent back per set.

A failing set is reported, not raised, so a comparison can say "set 3 fails on
OpenVINO: ..." instead of losing the others. TensorRT has no in-worker runner
here: its sets go through the adapter one by one (and, where TensorRT is not
installed, fail with the adapter's "not available" message).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from studio.core.engines import RunOptions, engine_limits, engine_row, get_engine, resolve_engine_name, sessions
from studio.core.engines.base import (
    check_model_file,
    decode_output_sets,
    encode_outputs,
    rekey_arrays,
    require_available,
)
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, WorkerError, engine_message
from studio.core.feeds import Feeds
from studio.core.jobs import JobContext, JobOutput, job
from studio.core.sandbox import Limits, run_job

__all__ = ["SetRuns", "explain_engine_error", "run_feed_sets", "pack_sets", "unpack_sets"]

_ORT_UNKNOWN_OP = re.compile(r"(?:(?P<domain>[\w.]+):)?(?P<op>[\w.]+)\(-?\d+\) is not a registered function/op")
# Op names keep their domain ("ai.onnx.ml.TreeEnsembleRegressor"): the list ends at the first
# character that cannot be in a qualified name list.
_OV_UNKNOWN_OP = re.compile(r"No conversion rule found for operations?: (?P<ops>[\w.:]+(?:, ?[\w.:]+)*)")
# OpenVINO's frontend on a value that is not a tensor (skl2onnx's ZipMap output, a sequence of maps).
_OV_NON_TENSOR = re.compile(r"Unsupported value_info type: (?P<name>\S+)")


@dataclass(frozen=True, eq=False)
class SetRuns:
    """Outputs per input set (None where that set failed), the failures, and what ran."""

    engine: str
    outputs: tuple[dict[str, Any] | None, ...]
    errors: tuple[str | None, ...]
    details: dict[str, Any] = field(default_factory=dict)
    peak_rss_bytes: int | None = None

    @property
    def first_error(self) -> str | None:
        return next((e for e in self.errors if e), None)


def explain_engine_error(message: str, engine_label: str, model_name: str) -> str | None:
    """A one-line "operator X (domain Y) is not supported by <engine>" for the engines' own
    unknown-operator messages (RELIABILITY R19); None when the message is something else."""
    m = _ORT_UNKNOWN_OP.search(message)
    if m:
        domain = m.group("domain") or "ai.onnx"
        return (f"{model_name[:60]}: operator {m.group('op')} (domain {domain}) is not supported by {engine_label}; "
                "provide a custom op implementation or rewrite it")
    m = _OV_UNKNOWN_OP.search(message)
    if m:
        return (f"{model_name[:60]}: operator(s) {m.group('ops').strip().rstrip('.')[:120]} not supported by "
                f"{engine_label}; provide an extension or rewrite them")
    m = _OV_NON_TENSOR.search(message)
    if m:
        return (f"{model_name[:60]}: '{m.group('name')[:60]}' is not a tensor (a sequence or map, such as ZipMap's "
                f"output) and {engine_label} takes tensors only; export the model with tensor outputs")
    return None


def pack_sets(sets: Sequence[Feeds]) -> dict[str, np.ndarray]:
    """Feed sets as one array dict for a job ('<set>\\x00<input name>' keys; names are never file names)."""
    out: dict[str, np.ndarray] = {}
    for i, feeds in enumerate(sets):
        for name, value in feeds.items():
            if isinstance(value, list):
                for j, item in enumerate(value):
                    out[f"{i}\x00{name}\x00{j}"] = np.asarray(item)
            else:
                out[f"{i}\x00{name}"] = np.asarray(value)
    return out


def unpack_sets(arrays: Mapping[str, np.ndarray], count: int) -> list[dict[str, Any]]:
    sets: list[dict[str, Any]] = [{} for _ in range(count)]
    seqs: dict[tuple[int, str], dict[int, np.ndarray]] = {}
    for key, value in arrays.items():
        parts = key.split("\x00")
        if len(parts) == 3:
            seqs.setdefault((int(parts[0]), parts[1]), {})[int(parts[2])] = value
        else:
            sets[int(parts[0])][parts[1]] = value
    for (i, name), items in seqs.items():
        sets[i][name] = [items[j] for j in sorted(items)]
    return sets


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {engine_message(text, 300)}"


@job("accuracy.run_sets")
def run_sets_job(args: dict, arrays: dict[str, np.ndarray], ctx: JobContext) -> JobOutput:

    engine = str(args["engine"])
    ctx.set_stage(f"{engine} session creation")
    runner = sessions.open_runner(engine, args["model_path"], args.get("options") or {}, ctx)
    names = args.get("output_names") or None
    data: dict[str, Any] = {"details": {**runner.details, "input_names": runner.input_names,
                                        "output_names": runner.output_names}, "sets": []}
    out_arrays: dict[str, np.ndarray] = {}
    ctx.set_stage(f"{engine} inference")
    for i, feeds in enumerate(unpack_sets(arrays, int(args["count"]))):
        try:
            values = runner.infer(feeds, names)
        except Exception as exc:  # noqa: BLE001 - per-set failures are data
            data["sets"].append({"error": _first_line(exc)})
            continue
        encoded, arrs = encode_outputs(list(values), list(values.values()))
        for item in encoded:
            rekey_arrays(item[1], f"s{i}.", arrs, out_arrays)
        data["sets"].append({"outputs": encoded})
    data["details"].update(runner.details)   # converted engines learn layout and names on the first run
    runner.close()
    return JobOutput(data=data, arrays=out_arrays)


def run_feed_sets(model_path: Path, engine: str, feed_sets: Sequence[Feeds], *,
                  options: RunOptions | None = None, output_names: Sequence[str] | None = None,
                  limits: Limits | None = None, pool_key: str = "default",
                  on_tick: Callable[[float], None] | None = None) -> SetRuns:
    """Run every feed set through ``engine`` (one session) and return the outputs per set."""
    canonical = resolve_engine_name(engine)
    adapter = get_engine(canonical)
    require_available(adapter)
    options = options or RunOptions()
    path = check_model_file(model_path)
    if engine_row(canonical).kind == "table":    # TensorRT: one run per set (an engine built per shape)
        outs, errs, details = [], [], {}
        for feeds in feed_sets:
            res = adapter.run(path, feeds, options=options, limits=limits, pool_key=pool_key, on_tick=on_tick)
            outs.append(res.outputs)
            errs.append(None)
            details = {**res.details, "engine_version": res.engine_version}
        return SetRuns(canonical, tuple(outs), tuple(errs), details)
    limits = engine_limits(canonical, limits)    # the row's needs (LiteRT: TensorFlow's room), its own pool below
    pool_key = pool_key + getattr(adapter, "pool_suffix", "")
    args = {"model_path": str(path), "engine": canonical, "options": options.to_args(), "count": len(feed_sets),
            "output_names": list(output_names) if output_names else None}
    try:
        res = run_job("accuracy.run_sets", args, pack_sets(feed_sets), stage=f"{adapter.label} run", limits=limits,
                      pool_key=pool_key, on_tick=on_tick, fresh=options.needs_fresh_worker())
    except WorkerError as exc:
        friendly = explain_engine_error(str(exc), adapter.label, Path(model_path).name)
        if friendly:
            raise StudioError(friendly, code=ErrorCode.UNSUPPORTED_OP) from None
        raise
    outs, errs = decode_output_sets(res.data["sets"], res.arrays)
    return SetRuns(canonical, outs, errs, dict(res.data.get("details", {})), res.peak_rss_bytes)
