"""Precision on real data: a ResNet-50-like classifier calibrated on real photos
(``sample_models/photos``), every INT8 flavour judged by top-1 agreement with the fp32
golden outputs, ORT QDQ, NNCF-OpenVINO, MNN's offline quantizer and LiteRT's integer
quantization (both calibrated on the photos' calibration part) side by side in one interleaved run.

Run with ``python -m benchmarks bench_precision_data``. Prints, per variant: latency
ratio to ORT fp32 with its 95 % interval, top-1 agreement on the evaluation part, whether
it meets ``top1-agreement>=0.99``, and the wall time of the whole precision run.

Measured here (2 CPUs, AVX-512 VNNI + AMX; 6 calibration / 6 evaluation photos): ORT int8 0.37x, top-1
0.667 (missed); ORT int8-mixed (float fallback searched by the task metric) 0.82x, 1.000 (met); NNCF 0.21x,
0.833 (missed); NNCF accuracy-aware 0.21x (95 % CI 0.20-0.21), 1.000 (met, recommended); MNN fp32 2.19x, MNN
full INT8 2.23x, 0.667 (missed); LiteRT fp32 1.66x, LiteRT full integer 0.26x, 0.833 (missed). 1,180 s wall.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks.harness import cpu_banner, print_table
from benchmarks.models import build_resnet50, cached

TARGET = "top1-agreement>=0.99"
VARIANTS = ["fp32", "fp32-ov", "int8", "int8-mixed", "int8-nncf", "int8-nncf-aa", "fp32-mnn", "int8-mnn",
            "fp32-litert", "int8-litert"]


def main() -> None:
    from sample_models.photos import PHOTO_DIR
    from studio import api

    print(cpu_banner())
    model = cached(build_resnet50, "resnet50-trained", trained_like=True)
    with tempfile.TemporaryDirectory(prefix="bench-precision-data-") as tmp:
        os.environ.setdefault("ONNX_STUDIO_PROJECTS_ROOT", str(Path(tmp) / "projects"))
        project = api.create_project("bench-precision-data")
        ds = api.add_dataset(project, PHOTO_DIR, name="photos", model=api.load(model), calibration_fraction=0.5)
        started = time.perf_counter()
        report = api.precision(model, variants=VARIANTS, dataset=ds, target=TARGET, latency_budget_s=30,
                               out_dir=Path(tmp) / "variants")
        wall = time.perf_counter() - started
    rows = []
    for v in report.variants:
        ci = f"{v.ratio_ci[0]:.2f}-{v.ratio_ci[1]:.2f}" if v.ratio_ci else "-"
        top1 = (v.task or {}).get("target_value")
        rows.append([v.name + (" *" if v.recommended else ""), v.engine, "-" if v.ratio is None else f"{v.ratio:.2f}",
                     ci, "-" if top1 is None else f"{top1:.3f}", "met" if v.meets_target else "missed",
                     v.error[:60] if v.error else v.status])
    print_table(f"ResNet-50-like on {len(ds.calibration)} calibration / {len(ds.evaluation)} evaluation photos, "
                f"target {TARGET} (* = recommended)",
                ["variant", "engine", "x fp32", "95% CI", "top-1 agr.", "target", "status"], rows)
    print(f"recommendation: {report.summary()}")
    print(f"wall time of the whole precision run: {wall:.1f} s")


if __name__ == "__main__":
    main()
