"""INT8 at the field's standard (issue 35 item 4): top-1 ACCURACY against true labels on a real golden set.

The digits sample (``sample_models/digits.py``: an MLP trained on scikit-learn's ``load_digits`` at ``make
samples`` time) and its golden set (500 held-out real digits with their true labels, 300 training digits to
calibrate), added as a dataset and run through the studio's precision flow with the target
``accuracy-drop<=0.01`` (fp32's top-1 accuracy minus the variant's, both against the labels). Every INT8
flavour side by side in one interleaved latency run. Per variant: top-1 accuracy with its 95 % bootstrap
interval over the 500 digits, the drop from fp32 with its paired interval, the latency ratio to ORT fp32 (95 %
interval over rounds), the target verdict.

Run with ``python -m benchmarks bench_digits``. A code-built, trained sample on real data: its accuracy is
real, its latency is that of a 64-wide MLP (per-call overhead, not GEMM throughput: INT8 is no faster here).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.harness import cpu_banner, print_table

TARGET = "accuracy-drop<=0.01"
VARIANTS = ["fp32", "fp32-ov", "int8", "int8-mixed", "int8-dynamic", "int8-ov", "int8-nncf", "int8-nncf-aa"]


def _metric(v, name: str) -> dict | None:
    return next((m for o in (v.task or {}).get("outputs", []) for m in o["metrics"] if m["metric"] == name), None)


def _with_ci(m: dict | None, signed: bool = False) -> tuple[str, str]:
    if m is None or m.get("value") is None:
        return "-", "-"
    fmt = "+.3f" if signed else ".3f"
    ci = m.get("ci")
    return format(m["value"], fmt), (f"{format(ci[0], fmt)}–{format(ci[1], fmt)}" if ci else "-")


def main() -> None:
    from sample_models.catalog import SAMPLE_DIR, path_of
    from studio import api

    print(cpu_banner())
    model = path_of("digits_classifier")
    with tempfile.TemporaryDirectory(prefix="bench-digits-") as tmp:
        os.environ.setdefault("ONNX_STUDIO_PROJECTS_ROOT", str(Path(tmp) / "projects"))
        project = api.create_project("bench-digits")
        ds = api.add_dataset(project, SAMPLE_DIR / "digits_classifier.golden.jsonl", name="digits",
                             model=api.load(model))
        started = time.perf_counter()
        report = api.precision(model, variants=VARIANTS, dataset=ds, target=TARGET, latency_budget_s=20,
                               out_dir=Path(tmp) / "variants")
        wall = time.perf_counter() - started
    rows = []
    for v in report.variants:
        acc, acc_ci = _with_ci(_metric(v, "top1-accuracy"))
        drop, drop_ci = _with_ci(_metric(v, "accuracy-drop"), signed=True)
        ratio_ci = f"{v.ratio_ci[0]:.2f}–{v.ratio_ci[1]:.2f}" if v.ratio_ci else "-"
        rows.append([v.name + (" *" if v.recommended else ""), v.engine, acc, acc_ci, drop, drop_ci,
                     "-" if v.ratio is None else f"{v.ratio:.2f}", ratio_ci, "met" if v.meets_target else "missed",
                     v.error[:60] if v.error else v.status])
    print_table(f"digits_classifier (sample, trained on load_digits): {len(ds.evaluation)} held-out real digits with "
                f"true labels, {len(ds.calibration)} calibration digits; target {TARGET} (* = recommended)",
                ["variant", "engine", "top-1 acc.", "95% CI", "drop", "95% CI", "x fp32", "95% CI", "target",
                 "status"], rows)
    for v in report.variants:                  # accuracy in words, and the per-CPU-kind verdict (issue 35 item 1)
        for note in v.notes:
            if note.startswith(("top-1 accuracy", "no faster than")):
                print(f"  {v.name}: {note}")
    print(f"recommendation: {report.summary()}")
    print(f"wall time of the whole precision run: {wall:.1f} s")


if __name__ == "__main__":
    main()
