"""Golden outputs and task-metric evaluation on a dataset.

The reference (the original model on ONNX Runtime's CPU provider with graph
optimizations off) runs once over a dataset part; its outputs are stored beside
the dataset (``golden/<model sha256>-<part>.npz`` + a JSON note of how they were
made). Every later version x engine is judged against them with the metrics of
:mod:`studio.data.metrics`, without re-running the reference.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from studio.core.engines import RunOptions
from studio.core.errors import StudioError
from studio.core import outputs
from studio.core.paths import atomic_write_text
from studio.data.datasets import Dataset, dataset_feeds
from studio.data.metrics import MetricResult, OutputSpec, Target, metrics_for

REFERENCE_OPTIONS = RunOptions(graph_optimization_level="disable")


@dataclass(frozen=True, eq=False)
class Golden:
    """The reference's outputs per sample of one dataset part, and how they were made."""

    model_sha256: str
    part: str
    outputs: tuple[dict[str, np.ndarray], ...]
    sample_indices: tuple[int, ...]
    reference: str                   # "onnxruntime CPU, graph optimizations off (1.32.0)"
    specs: tuple[OutputSpec, ...]
    seconds: float = 0.0


@dataclass(frozen=True)
class OutputReport:
    output: str
    task: str
    results: tuple[MetricResult, ...]

    def to_dict(self) -> dict:
        return {"output": self.output, "task": self.task, "metrics": [r.to_dict() for r in self.results]}


@dataclass(frozen=True)
class MetricReport:
    """Task metrics of one candidate (version x engine) against the golden outputs."""

    candidate: str
    engine: str
    dataset: str
    part: str
    samples: int
    outputs: tuple[OutputReport, ...]
    failed_samples: tuple[tuple[int, str], ...] = ()
    target: str | None = None
    target_met: bool | None = None
    target_value: float | None = None
    notes: tuple[str, ...] = ()

    def metric(self, name: str, output: str | None = None) -> MetricResult | None:
        """The result of metric ``name`` (on ``output``, else the worst over outputs)."""
        found = [r for o in self.outputs if output in (None, o.output) for r in o.results if r.metric == name]
        found = [r for r in found if r.value is not None]
        if not found:
            return None
        return min(found, key=lambda r: r.value if r.higher_is_better else -r.value)

    def to_dict(self) -> dict:
        def clean(v):
            return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
        return {"candidate": self.candidate, "engine": self.engine, "dataset": self.dataset, "part": self.part,
                "samples": self.samples, "outputs": [o.to_dict() for o in self.outputs],
                "failed_samples": [{"sample": i, "error": e} for i, e in self.failed_samples],
                "target": self.target, "target_met": self.target_met, "target_value": clean(self.target_value),
                "notes": list(self.notes)}


def output_specs(model: onnx.ModelProto) -> tuple[OutputSpec, ...]:
    """Output name, dtype, shape and producing op type, for choosing metrics."""
    from studio.core.types import value_info

    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    out = []
    for vi in model.graph.output:
        t = value_info(vi)
        out.append(OutputSpec(vi.name, t.dtype, tuple(t.shape or ()), producer.get(vi.name)))
    return tuple(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _golden_paths(ds: Dataset, sha: str, part: str) -> tuple[Path, Path]:
    base = ds.folder / "golden" / f"{sha[:32]}-{part}"
    return base.with_suffix(".npz"), base.with_suffix(".json")


def _run_sets(model_path: Path, engine: str, feeds: Sequence[dict], options: RunOptions | None, pool_key: str):
    from studio.accuracy.runs import run_feed_sets

    return run_feed_sets(model_path, engine, feeds, options=options, pool_key=pool_key)


def golden_outputs(ds: Dataset, model_path: str | Path, *, part: str = "evaluation", limit: int | None = None,
                   pool_key: str = "default", refresh: bool = False) -> Golden:
    """The reference outputs of ``model_path`` on ``part`` of ``ds``: read back when stored, else
    computed once on ORT CPU (optimizations off) and stored beside the dataset."""
    model_path = Path(model_path)
    sha = _sha256(model_path)
    npz, meta = _golden_paths(ds, sha, part)
    model = onnx.load_model(str(model_path), load_external_data=False)
    specs = output_specs(model)
    if npz.is_file() and meta.is_file() and not refresh:
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("limit") == limit:
            with np.load(npz, allow_pickle=False) as data:
                outs = [dict() for _ in info["samples"]]
                for key in data.files:
                    i, _, name = key.partition("/")
                    outs[int(i)][name] = data[key]
            return Golden(sha, part, tuple(outs), tuple(info["samples"]), info["reference"], specs,
                          float(info.get("seconds", 0.0)))
    refs = ds.part(part)[: limit or None]
    feeds = dataset_feeds(ds, model, part=part, limit=limit)
    started = time.perf_counter()
    runs = _run_sets(model_path, "onnxruntime", feeds, REFERENCE_OPTIONS, pool_key)
    seconds = time.perf_counter() - started
    bad = [(r.index, e) for r, e in zip(refs, runs.errors) if e]
    if bad:
        raise StudioError(f"the reference (ONNX Runtime CPU) fails on dataset sample {bad[0][0]}: "
                          f"{str(bad[0][1])[:200]}", code="REFERENCE-FAILED")
    outs = tuple({k: np.asarray(v) for k, v in o.items() if isinstance(v, np.ndarray)} for o in runs.outputs)
    version = runs.details.get("engine_version") or runs.details.get("version") or ""
    reference = f"onnxruntime CPU, graph optimizations off{f' ({version})' if version else ''}"
    npz.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{i}/{name}": arr for i, o in enumerate(outs) for name, arr in o.items()}
    with outputs.open_output(npz, "wb") as fh:
        np.savez(fh, **arrays)  # scratch: into the output file opened above
    atomic_write_text(meta, json.dumps({"model_sha256": sha, "part": part, "samples": [r.index for r in refs],
                                        "reference": reference, "seconds": seconds, "limit": limit}))
    return Golden(sha, part, outs, tuple(r.index for r in refs), reference, specs, seconds)


def score_outputs(golden: Golden, candidate: Sequence[Mapping[str, np.ndarray] | None], *,
                  labels: Sequence[object] | None = None,
                  metrics: Mapping[str, Sequence[str]] | None = None) -> tuple[OutputReport, ...]:
    """Metrics per output of ``candidate`` (outputs per sample, None for a failed sample)."""
    from studio.data.metrics import task_of

    keep = [i for i, c in enumerate(candidate) if c is not None]
    reports = []
    for spec in golden.specs:
        g = [golden.outputs[i].get(spec.name) for i in keep]
        c = [candidate[i].get(spec.name) for i in keep]
        pairs = [(a, b) for a, b in zip(g, c) if a is not None and b is not None]
        if not pairs:
            continue
        ga, ca = [np.asarray(a) for a, _ in pairs], [np.asarray(b) for _, b in pairs]
        lab = [labels[i] for i in keep] if labels else None
        results = tuple(m.score(spec.name, ga, ca, lab) for m in metrics_for(spec, (metrics or {}).get(spec.name)))
        reports.append(OutputReport(spec.name, task_of(spec), results))
    return tuple(reports)


def evaluate(ds: Dataset, golden: Golden, model_path: str | Path, *, engine: str = "onnxruntime",
             options: RunOptions | None = None, target: Target | None = None, candidate: str | None = None,
             metrics: Mapping[str, Sequence[str]] | None = None, pool_key: str = "default",
             feeds: Sequence[dict] | None = None, inputs_model: str | Path | None = None) -> MetricReport:
    """Run ``model_path`` on ``engine`` over the golden set's samples and score it. A model that
    is no ONNX file (an OpenVINO IR) takes its inputs as ``inputs_model`` (the original) does."""
    model_path = Path(model_path)
    if model_path.suffix == ".xml":
        options = dataclasses.replace(options or RunOptions(), openvino_ir=True)
        if inputs_model is None and feeds is None:
            raise StudioError("an OpenVINO IR is evaluated with the original ONNX model's inputs (inputs_model)")
    if feeds is None:
        model = onnx.load_model(str(inputs_model or model_path), load_external_data=False)
        feeds = dataset_feeds(ds, model, part=golden.part, limit=len(golden.sample_indices))
    runs = _run_sets(model_path, engine, feeds, options, pool_key)
    failed = tuple((golden.sample_indices[i], str(e)[:200]) for i, e in enumerate(runs.errors) if e)
    by_index = {s.index: s for s in ds.samples}
    labels = [ds.label_index(by_index[i].label) if i in by_index else None for i in golden.sample_indices]
    reports = score_outputs(golden, runs.outputs, labels=labels if any(v is not None for v in labels) else None,
                            metrics=metrics)
    notes = []
    if failed:
        notes.append(f"{len(failed)} of {len(feeds)} samples failed on {engine}")
    met = value = None
    report = MetricReport(candidate or model_path.name, engine, ds.name, golden.part, len(feeds), reports,
                          failed, target.text() if target else None, None, None, tuple(notes))
    if target is not None:
        r = report.metric(target.base_metric)
        if r is None:
            notes.append(f"target metric {target.base_metric} does not apply to any output")
            met = False
        else:
            value = target.value_of(r)
            met = target.met(r) and not failed
        from dataclasses import replace
        report = replace(report, target_met=met, target_value=value, notes=tuple(notes))
    return report
