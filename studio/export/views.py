"""Plain rows for tables of an ExportResult (the Export page and the CLI show them)."""

from __future__ import annotations

from studio.export.report import benchmark_rows
from studio.export.results import ExportResult

STATUS_ICON = {"passed": "✅ passed", "failed": "❌ failed", "error": "❌ error", "not verified": "⚠️ not verified"}


def target_rows(result: ExportResult) -> list[dict]:
    return [{"target": t.target, "status": STATUS_ICON.get(t.status, t.status), "message": t.message,
             "seconds": round(t.seconds, 2)} for t in result.targets]


def artifact_rows(result: ExportResult) -> list[dict]:
    rows = []
    for t in result.targets:
        for a in t.artifacts:
            v = a.verification
            rows.append({"file": a.path, "kind": a.kind, "precision": a.precision or "",
                         "portable": "" if a.portable is None else ("yes" if a.portable else "no (hardware-specific)"),
                         "verification": f"{STATUS_ICON.get(v.status, v.status)}: {v.message}" if v else "",
                         "bytes": a.bytes, "sha256": a.sha256[:12]})
    return rows


def bench_rows(result: ExportResult) -> list[dict]:
    return [{"target": t, "artifact": n, "session creation ms": s, "latency ms (median)": lat}
            for t, n, s, lat in benchmark_rows(result.manifest)]
