"""Four CPU engines side by side: ONNX Runtime, OpenVINO, MNN and LiteRT, fp32 and each
engine's best INT8 here, on the ResNet-50-like and MobileNetV2-like models, timed in ONE
interleaved run (the precision flow's latency job: every variant in the same worker, in
alternating blocks), with cosine vs ORT fp32; plus each converter's time (MNNConvert,
onnx2tf) and the runtime's load time.

INT8 per engine: ORT static QDQ (studio's quantize-int8-static), OpenVINO on the QDQ model,
MNN full INT8 (MNN's offline quantizer) and MNN int8 weights (MNNConvert --weightQuantBits 8),
LiteRT full integer (onnx2tf's integer quantization); every INT8 is calibrated on the same 8
calibration sets, and "best" is the fastest INT8 of the engine that ran.

Run with ``python -m benchmarks bench_engines`` (prints tables; not a test).

Measured here (2 CPUs, AVX-512 VNNI + AMX, 30 s latency budget, p10 ms, one interleaved run per model;
INT8 calibrated on 8 seeded sets):

ResNet-50-like 224x224: fp32 ORT 25.05, OpenVINO 25.89, LiteRT 42.46, MNN 54.97. Best INT8: OpenVINO QDQ
4.33 (0.18x of ORT fp32, cos 0.983), LiteRT full integer 6.57 (0.28x, cos 0.979), ORT static 27.66 (1.09x,
cos 0.981), MNN weight-only 54.27 (cos 0.984); MNN's calibrated full INT8 56.82 (cos 0.978) is no faster
than its fp32 here (the PyPI wheel's x86 int8 kernels). Conversion: MNNConvert 1.53 s, MNN quantizer
8.32 s (convert included), onnx2tf integer quantization 214 s; onnx2tf fp32 once exceeded a 4 GiB worker
(LiteRT conversions now get up to 12 GiB, at most 60 % of the machine's memory).

MobileNetV2-like 224x224: fp32 ORT 2.99, OpenVINO 3.45, LiteRT 3.42, MNN 5.93. Best INT8: OpenVINO 1.82
(cos 0.991), ORT 1.88 (0.991), LiteRT 2.25 (0.989), MNN weight-only 6.22 (0.998; full INT8 7.14, 0.985).
Conversion: MNNConvert 0.12 s, onnx2tf 47.5 s fp32 / 44.1 s integer.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import print_table
from benchmarks.models import build_mobilenetv2, build_resnet50, cached

VARIANTS = ["fp32", "fp32-ov", "fp32-mnn", "fp32-litert", "int8", "int8-ov", "int8-mnn", "int8w-mnn", "int8-litert"]
# the INT8 variants of each engine; the best is the fastest that ran
INT8_OF = {"onnxruntime": ("int8",), "openvino": ("int8-ov",), "mnn": ("int8-mnn", "int8w-mnn"),
           "litert": ("int8-litert",)}


def _models() -> list[tuple[str, Path]]:
    return [("resnet50", cached(build_resnet50, "resnet50-trained", trained_like=True)),
            ("mobilenetv2", cached(build_mobilenetv2, "mobilenetv2"))]


def conversion_rows(name: str, path: Path) -> list[list]:
    import onnx

    from studio.core.engines import get_engine
    from studio.core.feeds import input_specs, random_feeds

    feeds = random_feeds(input_specs(onnx.load_model(str(path), load_external_data=False)), seed=0)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-engines-") as tmp:
        for engine, out in (("mnn", "model.mnn"), ("litert", "model.tflite")):
            adapter = get_engine(engine)
            if not adapter.available():
                rows.append([name, engine, "-", "-", adapter.available().reason])
                continue
            try:
                rows.append(_convert_row(name, engine, adapter, path, Path(tmp) / out, feeds))
            except Exception as exc:  # noqa: BLE001 - a benchmark row, not a crash
                rows.append([name, engine, "failed", "-", f"{type(exc).__name__}: {str(exc)[:100]}"])
    return rows


def _convert_row(name, engine, adapter, path, out, feeds) -> list:
    """Convert once (converter time), then one adapter run (runtime load time)."""
    started = time.perf_counter()
    if engine == "mnn":
        conv = adapter.convert(path, out, pool_key="bench-engines")
    else:
        conv = adapter.convert(path, out, shapes={k: v.shape for k, v in feeds.items()}, pool_key="bench-engines")
    wall = time.perf_counter() - started
    run = adapter.run(path, feeds, pool_key="bench-engines") if conv.ok else None
    return [name, engine, f"{conv.seconds:.2f}" if conv.ok else "failed",
            f"{run.details.get('load_ms', 0):.1f}" if run else "-",
            f"wall {wall:.1f} s; {conv.command_line[:90]}" if conv.ok else (conv.error or "")[:120]]


def main(budget_s: float = 60.0, only: set[str] | None = None) -> None:
    from studio.precision.variants import evaluate_variants

    rows, best, conv = [], [], []
    for name, path in _models():
        if only and name not in only:
            continue
        conv += conversion_rows(name, path)
        report = evaluate_variants(path, variants=VARIANTS, samples=8, latency_budget_s=budget_s,
                                   on_progress=lambda i, n, label: print(f"  [{name} {i}/{n}] {label}",
                                                                         file=sys.stderr, flush=True))
        by = {v.name: v for v in report.variants}
        for v in report.variants:
            rows.append([name, v.label, "-" if v.latency_ms is None else f"{v.latency_ms:.2f}",
                         "-" if v.median_ms is None else f"{v.median_ms:.2f}",
                         "-" if v.ratio is None else f"{v.ratio:.3f}", "-" if v.cosine is None else f"{v.cosine:.5f}",
                         v.status + (f": {v.error[:60]}" if v.error else "")])
        for engine, fp32 in (("onnxruntime", "fp32"), ("openvino", "fp32-ov"), ("mnn", "fp32-mnn"),
                             ("litert", "fp32-litert")):
            f = by.get(fp32)
            ran = [by[n] for n in INT8_OF[engine] if n in by and by[n].latency_ms is not None]
            q = min(ran, key=lambda v: v.latency_ms, default=None)
            best.append([name, engine, "-" if not f or f.latency_ms is None else f"{f.latency_ms:.2f}",
                         "-" if q is None else f"{q.latency_ms:.2f} ({q.name}, cos {q.cosine:.4f})"])
        for v in (by.get("int8-mnn"), by.get("int8-litert")):
            if v is not None and v.details.get("convert_seconds") is not None:
                conv.append([name, f"{v.engine} int8", f"{v.details['convert_seconds']:.2f}", "-",
                             f"{v.details.get('calibration', '')[:40]}; {v.details['converter_command'][:70]}"])
    print_table("Engines side by side (one interleaved run per model; ms = p10; x = latency / ORT fp32)",
                ["model", "variant", "ms p10", "median", "x ORT fp32", "cosine", "status"], rows)
    print_table("fp32 and best INT8 per engine (ms p10)", ["model", "engine", "fp32", "best int8"], best)
    print_table("Conversion (converter seconds, runtime load ms)", ["model", "engine", "convert s", "load ms", "note"],
                conv)


if __name__ == "__main__":   # python -m benchmarks.bench_engines [BUDGET_S] [MODEL ...]
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0, set(sys.argv[2:]) or None)
