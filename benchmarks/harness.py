"""Measure a snippet in a fresh Python process: wall time and peak RSS."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class ProcessRun:
    seconds: float           # measured inside the child around the snippet
    peak_rss_mb: float       # max ru_maxrss of the child and its own children (sandbox workers)
    baseline_rss_mb: float   # RSS after imports, before the snippet
    result: dict


def run_snippet(setup: str, snippet: str, timeout: float = 1800) -> ProcessRun:
    """Run ``setup`` (imports) then time ``snippet``; the snippet may set ``result`` (a dict)."""
    code = textwrap.dedent(f"""
        import json, resource, time
        {textwrap.indent(textwrap.dedent(setup), '        ').strip()}
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        result = {{}}
        t0 = time.perf_counter()
        {textwrap.indent(textwrap.dedent(snippet), '        ').strip()}
        dt = time.perf_counter() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        try:  # sandbox workers are children: their peak counts too
            from studio.core.sandbox import shutdown_all
            shutdown_all()
        except Exception:
            pass
        peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)
        print("@@RESULT@@" + json.dumps({{"seconds": dt, "peak": peak, "base": base, "result": result}}))
    """)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({time.perf_counter() - t:.1f} s): {proc.stderr[-2000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT@@"))
    data = json.loads(line[len("@@RESULT@@"):])
    return ProcessRun(data["seconds"], data["peak"], data["base"], data["result"])


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(f"\n## {title}")
    print("| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(x).ljust(w) for x, w in zip(r, widths)) + " |")
    sys.stdout.flush()


@contextmanager
def opened_in_chromium(html: Path, ready: str, **wait: Any) -> Iterator[tuple[Any, float] | None]:
    """The offline page ``html`` in headless Chromium (1400x1000), waited on until the JS ``ready`` holds:
    yields (the Playwright page, seconds from navigation to ready), or None where Playwright or Chromium is
    missing. ``wait``: more ``wait_for_function`` options (``polling``). The browser closes on exit."""
    try:
        from playwright.sync_api import sync_playwright

        from tests.e2e.conftest import CHROMIUM_ARGS, chromium_path
    except ImportError:
        yield None
        return
    exe = chromium_path()
    if exe is None:
        yield None
        return
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.perf_counter()
            page.goto(html.as_uri())
            page.wait_for_function(ready, timeout=300_000, **wait)
            yield page, time.perf_counter() - t
        finally:
            browser.close()


INT8_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8",
              "amx_bf16")


def cpu_banner() -> str:
    """CPU model, cores and the ISA flags INT8/bf16 speed depends on (AVX2-only vs VNNI/AMX differ a lot)."""
    import os
    import platform

    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    have = [f for f in INT8_FLAGS if f in flags]
    return f"CPU: {model}, {os.cpu_count()} cores; flags: {' '.join(have) or 'none of ' + ', '.join(INT8_FLAGS)}"
