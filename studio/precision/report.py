"""What a precision run returns: one row per variant (accuracy against fp32, latency and its ratio with the
interval, the notes saying why a row is or is not recommended) and the report over them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RANDOM_BASIS", "PrecisionReport", "VariantResult"]


@dataclass(frozen=True)
class VariantResult:
    name: str
    label: str
    engine: str
    precision: str
    status: str                              # ok | failed | not verified here
    path: Path | None = None
    latency_p10_ms: float | None = None      # 10th percentile: other processes only ever add time
    p90_ms: float | None = None
    median_ms: float | None = None
    ratio: float | None = None               # latency / ORT fp32 latency, same run
    ratio_ci: tuple[float, float] | None = None   # 95 % interval of the per-round ratio (None: no interval)
    ratio_rounds: int = 0                    # interleaved rounds the interval comes from
    cosine: float | None = None              # min over outputs and inputs, vs ORT fp32
    top1: float | None = None
    top5: float | None = None
    max_abs: float | None = None
    meets_target: bool = False
    recommended: bool = False
    notes: tuple[str, ...] = ()
    error: str | None = None
    lineage: tuple[dict, ...] = ()           # pipeline records (provenance of the model)
    details: Mapping[str, Any] = field(default_factory=dict)
    task: Mapping[str, Any] | None = None     # task metrics on the dataset (MetricReport.to_dict()), if any
    # decoders: next-token agreement / KL over a greedy generation (GenerationAgreement.to_dict()) and, for
    # weight-only variants, each quantized MatMul's output error vs fp32 (worst first)
    generation: Mapping[str, Any] | None = None
    matmul_errors: tuple[Mapping[str, Any], ...] = ()
    # the precision the variant asked for, where the engine reported computing in another one here
    # (OpenVINO bf16 on a CPU without bf16 computes f32): the row is then named for what runs
    asked_precision: str | None = None
    # the engine's own fp32 variant this reduced-precision one is no faster than in the same run (its reason is
    # a note, naming this CPU's kind): never recommended here, whatever its ratio to ORT fp32
    no_gain_over: str | None = None
    # what the cosine target was judged on where it is not the cosine column: an output at float32 noise level
    # is judged value by value ("max abs 9.51e-08, output 'y' at float32 noise level, judged value by value");
    # the summary says this, as the row's note does, not the raw cosine
    judged: str | None = None

    @property
    def latency_ms(self) -> float | None:
        """The p10 latency under its former name (JSON keeps ``latency_ms`` too, for old readers)."""
        return self.latency_p10_ms

    @property
    def faster_than_fp32(self) -> bool:
        """Significantly faster: the ratio's whole interval lies below 1.0."""
        return self.ratio is not None and self.ratio_ci is not None and self.ratio_ci[1] < 1.0

    @property
    def speed_text(self) -> str:
        """"0.39x of fp32 (95 % CI 0.35–0.44 over 6 rounds)" / "no significant difference ..."."""
        if self.ratio is None:
            return "not timed"
        if self.ratio_ci is None:
            return f"{self.ratio:.2f}x of fp32 (no interval: {self.ratio_rounds} round(s))"
        lo, hi = self.ratio_ci
        spread = f"95 % CI {lo:.2f}–{hi:.2f} over {self.ratio_rounds} rounds"
        if lo <= 1.0 <= hi:
            return f"no significant difference from fp32 ({self.ratio:.2f}x, {spread})"
        return f"{self.ratio:.2f}x of fp32 ({spread})"

    def kept_path(self, out_dir: Path | None = None) -> str | None:
        """The kept file as the report names it: relative to ``out_dir`` ('int8/model.onnx'), since every
        variant's file has the model's name and the name alone ('oww_alexa.onnx' three times) said not which."""
        if self.path is None:
            return None
        try:
            return Path(self.path).resolve().relative_to(Path(out_dir).resolve()).as_posix() if out_dir is not None \
                else Path(self.path).name
        except ValueError:
            return Path(self.path).name

    def to_dict(self, out_dir: Path | None = None) -> dict:
        """``out_dir``: the folder the variants are kept in, their paths are given relative to it."""
        d = {k: getattr(self, k) for k in ("name", "label", "engine", "precision", "status", "latency_p10_ms",
                                           "median_ms", "p90_ms", "ratio", "cosine", "top1", "top5", "max_abs",
                                           "meets_target", "recommended", "error")}
        d.update(path=self.kept_path(out_dir), faster_than_fp32=self.faster_than_fp32,
                 ratio_ci=[round(x, 4) for x in self.ratio_ci] if self.ratio_ci else None,
                 ratio_rounds=self.ratio_rounds, speed=self.speed_text,
                 notes=list(self.notes), details=dict(self.details), lineage=list(self.lineage), task=self.task,
                 generation=dict(self.generation) if self.generation else None,
                 matmul_errors=[dict(e) for e in self.matmul_errors], asked_precision=self.asked_precision,
                 no_gain_over=self.no_gain_over, judged=self.judged)
        for k in ("latency_p10_ms", "median_ms", "p90_ms", "ratio", "cosine", "max_abs"):
            if d[k] is not None:
                d[k] = round(float(d[k]), 6)
        d["latency_ms"] = d["latency_p10_ms"]       # deprecated alias of latency_p10_ms (the same p10)
        return d


@dataclass(frozen=True, eq=False)
class PrecisionReport:
    variants: tuple[VariantResult, ...]
    recommended: str | None
    best_per_engine: Mapping[str, str]
    target_cosine: float
    calibration: str
    evaluation: Mapping[str, Any]
    model_kind: str
    out_dir: Path | None
    notes: tuple[str, ...] = ()
    basis: str = ""                  # "dataset NAME: ..." or "random-input estimate, not a recommendation"
    target: str | None = None        # the task-metric target when a dataset judged the variants
    request: Any = None              # the PrecisionRequest it ran (studio.precision.run); not in to_dict

    @property
    def is_estimate(self) -> bool:
        """Judged on random inputs: a speed/accuracy estimate, not a recommendation."""
        return self.basis.startswith(RANDOM_BASIS)

    def variant(self, name: str) -> VariantResult:
        for v in self.variants:
            if v.name == name:
                return v
        raise KeyError(name)

    def summary(self) -> str:
        prefix = f"{RANDOM_BASIS}: " if self.is_estimate else ""
        goal = self.target or f"cosine >= {self.target_cosine}"
        if self.recommended is None:
            return prefix + self._no_recommendation(goal)
        v = self.variant(self.recommended)
        if v.name == "fp32":
            return prefix + f"keep fp32: no reduced-precision variant is both faster than fp32 and meets {goal}"

        if self.target and v.task:
            return (prefix + f"recommended: {v.label}: {v.speed_text}, {self.target.split('>')[0].split('<')[0]} "
                    f"{v.task.get('target_value')} (target {self.target})")
        from passes.quant_tools import cosine_text  # start-up: ~60 ms the CLI parser would pay (it reads VARIANTS)

        if v.judged:
            return prefix + f"recommended: {v.label}: {v.speed_text}, {v.judged} (target cosine {self.target_cosine:.10g})"
        return (prefix + f"recommended: {v.label}: {v.speed_text}, cosine "
                f"{cosine_text(v.cosine, self.target_cosine)} (target {self.target_cosine:.10g})")

    def _no_recommendation(self, goal: str) -> str:
        """Why nothing is recommended, in terms of the table above it (never "could not be measured"
        when variants were measured)."""
        measured = [v for v in self.variants if v.status == "ok"]
        if not measured:
            why = next((v.error for v in self.variants if v.error), None)
            return "no variant could be measured" + (f": {why}" if why else "")
        base = next((v for v in measured if v.name == "fp32"), None)
        if base is None:
            err = next((v.error for v in self.variants if v.name == "fp32" and v.error), None)
            return ("nothing recommended: fp32 (the baseline every variant is measured against) did not run"
                    + (f" ({err})" if err else "") + f"; {len(measured)} other variant(s) measured")
        if not base.meets_target:
            got = target_text(base, self.target)
            return (f"nothing recommended: even fp32 misses {goal} (got {got}), so no reduced precision can meet "
                    f"it; {len(measured)} variant(s) measured: check the target and the output's task")
        return f"nothing recommended: none of the {len(measured)} measured variant(s) meets {goal}"

    def provenance(self, variant: str, source_sha256: str | None) -> dict[str, Any]:
        """What a version kept from ``variant`` records, whoever keeps it (the CLI's ``--project`` run, the
        page's Save): the request that built it, its measured result, and the pass ``pipeline`` the lineage
        view reads. ``source_sha256``: the model the report was computed on."""
        v = self.variant(variant)
        return {"source": "precision", "source_sha256": source_sha256, "variant": v.name, "engine": v.engine,
                "precision": v.precision, "recommended": v.recommended,
                "request": self.request.to_dict() if self.request is not None else None,
                "measured": {"latency_p10_ms": v.latency_p10_ms, "ratio_vs_fp32": v.ratio, "cosine": v.cosine,
                             "top1": v.top1, "meets_target": v.meets_target, "task": v.task,
                             "target_cosine": self.target_cosine, "goal": self.target},
                "calibration": self.calibration, "pipeline": list(v.lineage), "choice": v.details.get("chosen")}

    def to_dict(self) -> dict:
        return {"summary": self.summary(), "recommended": self.recommended,
                "best_per_engine": dict(self.best_per_engine), "target_cosine": self.target_cosine,
                "calibration": self.calibration, "evaluation": dict(self.evaluation), "model_kind": self.model_kind,
                "notes": list(self.notes), "basis": self.basis, "target": self.target,
                "is_estimate": self.is_estimate, "variants": [v.to_dict(self.out_dir) for v in self.variants]}


RANDOM_BASIS = "random-input estimate, not a recommendation"


def target_text(v: VariantResult, target: str | None) -> str:
    """The value ``v`` got for the target: the task metric (n/a with its reason), else the cosine."""
    if target:
        task = v.task or {}
        value = task.get("target_value")
        if value is not None:
            return f"{value:.4g}"
        why = next((n for n in task.get("notes", ()) if "target metric" in n), None) or \
            next((n for n in v.notes if n.startswith("task metrics could not")), "not computed")
        return f"n/a: {why}"
    return "n/a" if v.cosine is None else f"{v.cosine:.6f}"
