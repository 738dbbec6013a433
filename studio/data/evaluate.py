"""Golden outputs and task-metric evaluation on a dataset.

The reference (the original model on ONNX Runtime's CPU provider with graph
optimizations off) runs once over a dataset part; its outputs are stored beside
the dataset (``golden/<model sha256>-<part>.npz`` + a JSON note of how they were
made). Every later version x engine is judged against them with the metrics of
:mod:`studio.data.metrics`, without re-running the reference.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from studio.core.model import sha256_file
from studio.core.engines import RunOptions
from studio.core.errors import StudioError
from studio.core import outputs
from studio.core.paths import atomic_write_text
from studio.data.datasets import Dataset, dataset_feeds
from studio.data.metrics import MetricResult, OutputSpec, Target, metrics_for
from studio.core.types import value_info
from studio.data.tasks import output_tasks
from studio.data.datasets import contained, recipe_fingerprint
from studio.accuracy.runs import run_feed_sets
from studio.core.error_codes import ErrorCode
from studio.data.metrics import task_info

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
    labels: tuple[int | None, ...] = ()   # each sample's true class id from the dataset (None: unlabelled)

    @property
    def labelled(self) -> list[int | None] | None:
        """The true labels in sample order for the metrics that need them, None when no sample has one."""
        return list(self.labels) if any(v is not None for v in self.labels) else None


@dataclass(frozen=True)
class OutputReport:
    output: str
    task: str
    results: tuple[MetricResult, ...]
    task_reason: str = ""            # why the output has this task (studio.data.tasks)

    def to_dict(self) -> dict:
        return {"output": self.output, "task": self.task, "task_reason": self.task_reason,
                "metrics": [r.to_dict() for r in self.results]}


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

    def accuracy_text(self) -> str | None:
        """"top-1 accuracy 0.982 (95 % CI 0.970–0.992) on 500 labelled samples; drop from fp32 +0.000 (95 % CI
        +0.000–+0.000)": the figures against true labels a report leads with, None without labels."""
        acc, drop = self.metric("top1-accuracy"), self.metric("accuracy-drop")
        if acc is None:
            return None
        n = sum(1 for v in acc.per_sample if v == v)
        text = f"top-1 accuracy {acc.value:.3f}" + (f" (95 % CI {acc.ci[0]:.3f}–{acc.ci[1]:.3f})" if acc.ci else "")
        text += f" on {n} labelled samples"
        if drop is not None:
            text += f"; drop from fp32 {drop.value:+.3f}" + (
                f" (95 % CI {drop.ci[0]:+.3f}–{drop.ci[1]:+.3f})" if drop.ci else "")
        return text

    def to_dict(self) -> dict:
        def clean(v):
            return None if v is None or (isinstance(v, float) and not math.isfinite(v)) else v
        return {"candidate": self.candidate, "engine": self.engine, "dataset": self.dataset, "part": self.part,
                "samples": self.samples, "outputs": [o.to_dict() for o in self.outputs],
                "failed_samples": [{"sample": i, "error": e} for i, e in self.failed_samples],
                "target": self.target, "target_met": self.target_met, "target_value": clean(self.target_value),
                "notes": list(self.notes)}


def output_specs(model: onnx.ModelProto, tasks: Mapping[str, str] | None = None, *,
                 shapes: Mapping[str, tuple] | None = None) -> tuple[OutputSpec, ...]:
    """Output name, dtype, shape, producing op type and task (``studio.data.tasks``: inferred from
    the graph, ``tasks`` {output: kind} chosen by the user), for choosing metrics. ``shapes``: real
    output shapes for the dims the model leaves open."""
    producer = {o: n.op_type for n in model.graph.node for o in n.output}
    decided = output_tasks(model, tasks, shapes=shapes)
    out = []
    for vi in model.graph.output:
        t = value_info(vi)
        task = decided.get(vi.name)
        shape = tuple(task.shape if task is not None and task.shape is not None else t.shape or ())
        out.append(OutputSpec(vi.name, t.dtype, shape, producer.get(vi.name), task))
    return tuple(out)


def sample_labels(ds: Dataset, indices: Sequence[int]) -> tuple[int | None, ...]:
    """The true class id of each sample index (``Dataset.label_index``), None where it has no label."""
    by_index = {s.index: s for s in ds.samples}
    return tuple(ds.label_index(by_index[i].label) if i in by_index else None for i in indices)


def _real_shapes(outs: Sequence[Mapping[str, np.ndarray]]) -> dict[str, tuple]:
    return {k: tuple(np.shape(v)) for k, v in (outs[0] if outs else {}).items()}


def _golden_paths(ds: Dataset, sha: str, part: str) -> tuple[Path, Path]:
    recipe = recipe_fingerprint(ds)              # other preprocessing, other golden outputs
    golden = ds.folder / "golden"
    if golden.is_symlink():
        contained(ds.folder, "golden", "golden outputs folder")      # a link out: refused, never read
    base = golden / (f"{sha[:32]}-{part}" + (f"-{recipe}" if recipe else ""))
    return base.with_suffix(".npz"), base.with_suffix(".json")


def _run_sets(model_path: Path, engine: str, feeds: Sequence[dict], options: RunOptions | None, pool_key: str):
    return run_feed_sets(model_path, engine, feeds, options=options, pool_key=pool_key)


def golden_outputs(ds: Dataset, model_path: str | Path, *, part: str = "evaluation", limit: int | None = None,
                   pool_key: str = "default", refresh: bool = False,
                   tasks: Mapping[str, str] | None = None) -> Golden:
    """The reference outputs of ``model_path`` on ``part`` of ``ds``: read back when stored, else
    computed once on ORT CPU (optimizations off) and stored beside the dataset. ``tasks``: the
    user's {output: kind} choices (the specs carry the decided task of every output)."""
    model_path = Path(model_path)
    sha = sha256_file(model_path)
    npz, meta = _golden_paths(ds, sha, part)
    model = onnx.load_model(str(model_path), load_external_data=False)
    specs = output_specs(model, tasks)
    if not ds.part(part)[: limit or None]:
        return Golden(sha, part, (), (), f"not run: the {part} part of dataset {ds.name[:40]} is empty", specs)
    if npz.is_file() and meta.is_file() and not refresh:
        info = json.loads(meta.read_text(encoding="utf-8"))
        if info.get("limit") == limit:
            with np.load(npz, allow_pickle=False) as data:
                outs = [dict() for _ in info["samples"]]
                for key in data.files:
                    i, _, name = key.partition("/")
                    outs[int(i)][name] = data[key]
            return Golden(sha, part, tuple(outs), tuple(info["samples"]), info["reference"],
                          output_specs(model, tasks, shapes=_real_shapes(outs)), float(info.get("seconds", 0.0)),
                          sample_labels(ds, info["samples"]))
    refs = ds.part(part)[: limit or None]
    feeds = dataset_feeds(ds, model, part=part, limit=limit)
    started = time.perf_counter()
    runs = _run_sets(model_path, "onnxruntime", feeds, REFERENCE_OPTIONS, pool_key)
    seconds = time.perf_counter() - started
    bad = [(r.index, e) for r, e in zip(refs, runs.errors) if e]
    if bad:
        raise StudioError(f"the reference (ONNX Runtime CPU) fails on dataset sample {bad[0][0]}: "
                          f"{str(bad[0][1])[:200]}", code=ErrorCode.REFERENCE_FAILED)
    outs = tuple({k: np.asarray(v) for k, v in o.items() if isinstance(v, np.ndarray)} for o in runs.outputs)
    version = runs.details.get("engine_version") or runs.details.get("version") or ""
    reference = f"onnxruntime CPU, graph optimizations off{f' ({version})' if version else ''}"
    npz.parent.mkdir(parents=True, exist_ok=True)
    arrays = {f"{i}/{name}": arr for i, o in enumerate(outs) for name, arr in o.items()}
    with outputs.open_output(npz, "wb") as fh:
        np.savez(fh, **arrays)  # scratch: into the output file opened above
    atomic_write_text(meta, json.dumps({"model_sha256": sha, "part": part, "samples": [r.index for r in refs],
                                        "reference": reference, "seconds": seconds, "limit": limit}))
    return Golden(sha, part, outs, tuple(r.index for r in refs), reference,
                  output_specs(model, tasks, shapes=_real_shapes(outs)), seconds,
                  sample_labels(ds, [r.index for r in refs]))


def score_outputs(golden: Golden, candidate: Sequence[Mapping[str, np.ndarray] | None], *,
                  labels: Sequence[object] | None = None,
                  metrics: Mapping[str, Sequence[str]] | None = None) -> tuple[OutputReport, ...]:
    """Metrics per output of ``candidate`` (outputs per sample, None for a failed sample). A metric
    with no sample to score is n/a with the reason (never a default value)."""
    keep = [i for i, c in enumerate(candidate) if c is not None]
    reports = []
    for spec in golden.specs:
        chosen = metrics_for(spec, (metrics or {}).get(spec.name))
        info = task_info(spec)
        if not chosen:
            continue
        g = [golden.outputs[i].get(spec.name) for i in keep]
        c = [candidate[i].get(spec.name) for i in keep]
        pairs = [(a, b) for a, b in zip(g, c) if a is not None and b is not None]
        if not pairs:
            why = ("no sample: the evaluation part is empty" if not golden.outputs else
                   "no sample ran on the candidate" if not keep else "the candidate does not produce this output")
            results = tuple(MetricResult(m.name, spec.name, None, m.higher_is_better, detail=why) for m in chosen)
            reports.append(OutputReport(spec.name, info.kind, results, info.reason))
            continue
        # pair labels with the samples kept (a sample whose output is missing drops its label too)
        lab = [labels[i] for i, a, b in zip(keep, g, c) if a is not None and b is not None] if labels else None
        ga, ca = [np.asarray(a) for a, _ in pairs], [np.asarray(b) for _, b in pairs]
        results = tuple(m.score(spec.name, ga, ca, lab) for m in chosen)
        reports.append(OutputReport(spec.name, info.kind, results, info.reason))
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
    if not golden.outputs:                   # an empty part: every metric n/a with the reason, nothing run
        feeds, outs, errors = [], [], []
    else:
        if feeds is None:
            model = onnx.load_model(str(inputs_model or model_path), load_external_data=False)
            feeds = dataset_feeds(ds, model, part=golden.part, limit=len(golden.sample_indices))
        runs = _run_sets(model_path, engine, feeds, options, pool_key)
        outs, errors = runs.outputs, runs.errors
    failed = tuple((golden.sample_indices[i], str(e)[:200]) for i, e in enumerate(errors) if e)
    labels = list(sample_labels(ds, golden.sample_indices))
    reports = score_outputs(golden, outs, labels=labels if any(v is not None for v in labels) else None,
                            metrics=metrics)
    notes = [] if golden.outputs else [f"nothing evaluated: {golden.reference}"]
    if failed:
        notes.append(f"{len(failed)} of {len(feeds)} samples failed on {engine}")
    met = value = None
    report = MetricReport(candidate or model_path.name, engine, ds.name, golden.part, len(feeds), reports,
                          failed, target.text() if target else None, None, None, tuple(notes))
    if target is not None:
        r = report.metric(target.base_metric)
        found = [x for o in reports for x in o.results if x.metric == target.base_metric]
        if r is None and found:
            notes.append(f"target metric {target.base_metric} is n/a: {found[0].detail or 'not computable'}")
            met = False
        elif r is None:
            notes.append(f"target metric {target.base_metric} does not apply to any output")
            met = False
        else:
            value = target.value_of(r)
            met = target.met(r) and not failed
        from dataclasses import replace
        report = replace(report, target_met=met, target_value=value, notes=tuple(notes))
    return report
