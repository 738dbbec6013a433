"""The memory plan's arena against what ONNX Runtime and OpenVINO CPU really allocate (issue 25 item 3).

Models: the bundled samples (``sample_models.catalog``) and the onnx wheel's light model-zoo models
(``onnx/backend/test/data/light``), each planned at the studio's seeded dims (``api.memory_plan``,
``measure=True``: one child process per engine with the allocation shim). Columns:

* predicted: the plan's best-fit arena for intermediate tensors (ORT's order and in-place rules); ORT's
  run has its graph optimizations off, so its prediction is the plan of that run ("ORT run's plan",
  shown where the nodes computed from weights alone make it differ);
* ORT: its memory-pattern block (arena off, second run);
* OpenVINO: its CPU plugin's intermediate workspace (static shapes at the same dims, one stream, f32),
  re-allocated after ``release_memory()``. OpenVINO fuses nodes and computes some in place into an
  input or output, so a smaller figure there is the engine reusing more, not a wrong plan;
* error: (predicted - measured) / measured; the last row counts the models within 15 %.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from benchmarks.harness import cpu_banner, print_table

WITHIN = 0.15


def light_models() -> list[Path]:
    """The onnx wheel's light models (small zoo CNNs), where the installed onnx has them."""
    import onnx

    return sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


def models() -> list[tuple[str, Path]]:
    from sample_models.catalog import CATALOG

    return [(m.name, m.path) for m in CATALOG] + [(p.stem, p) for p in light_models()]


def _kib(n: int | None) -> str:
    return "—" if n is None else f"{n / 1024:,.1f}"


def _err(m) -> str:
    if m.measured_bytes is None:
        reason = (m.error or "").split("for the memory measurement: ", 1)[-1]
        return "n/a: …" + reason[-44:] if len(reason) > 44 else "n/a: " + reason
    return "n/a (0 B)" if m.relative_error is None else f"{m.relative_error * 100:+.1f} %"


def measure_row(name: str, path: Path) -> tuple[list, dict[str, bool]]:
    """One table row and, per engine, whether the plan is within 15 % of what it measured."""
    from studio import api

    t = time.perf_counter()
    r = api.memory_plan(api.load(path), measure=True)
    by = {m.engine: m for m in r.measured}
    ort_m, ov_m = by["onnxruntime"], by["openvino"]
    ort_plan = "=" if ort_m.predicted_bytes == r.plan.arena_bytes else _kib(ort_m.predicted_bytes)
    ok = {e: m.relative_error is not None and abs(m.relative_error) <= WITHIN for e, m in by.items()}
    row = [name, _kib(r.plan.arena_bytes), ort_plan, _kib(ort_m.measured_bytes), _err(ort_m),
           _kib(ov_m.measured_bytes), _err(ov_m), f"{time.perf_counter() - t:.1f}"]
    return row, ok


def main() -> list[list]:
    print(cpu_banner(), flush=True)
    rows, within = [], {"onnxruntime": 0, "openvino": 0}
    measured = {"onnxruntime": 0, "openvino": 0}
    for name, path in models():
        try:
            row, ok = measure_row(name, path)
        except Exception as exc:  # noqa: BLE001 - a model the plan cannot read is its own row
            rows.append([name, "—", "—", "—", f"plan failed: {str(exc)[:60]}", "—", "", ""])
            continue
        rows.append(row)
        for engine, good in ok.items():
            within[engine] += good
        measured["onnxruntime"] += row[3] != "—"
        measured["openvino"] += row[5] != "—"
    rows.append([f"within {WITHIN:.0%}", "", "", f"{within['onnxruntime']}/{measured['onnxruntime']} measured", "",
                 f"{within['openvino']}/{measured['openvino']} measured", "", ""])
    print_table("Memory plan: predicted arena vs measured activation memory (KiB)",
                ["model", "predicted", "ORT run's plan", "ORT", "ORT error", "OpenVINO", "OV error", "s"], rows)
    print("ORT run's plan: the plan of ORT's unoptimized run where it differs (nodes computed from weights alone "
          "run and hold their outputs); ORT's error is against it, OpenVINO's against 'predicted'.")
    return rows


if __name__ == "__main__":
    main()
    sys.exit(0)
