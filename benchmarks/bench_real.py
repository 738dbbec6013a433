"""`make bench-real`: one table per capability over the real third-party corpus (benchmarks/corpus).

Every figure here is measured on models other people wrote (manifest.toml names them, with the facts a
person stated: each output's task, each dim's meaning, sensible input shapes). Kept-aside models (never
tuned on) are in their own rows and their own totals line. Tables:

- ``inspect``: every top-level edge shape ``studio.api.inspect`` gives with the dims pinned at the
  manifest's input shapes, against the tensors plain ONNX Runtime really produces (every value made a
  graph output, optimizations off);
- ``hints``: ``api.dim_hints`` against the manifest (a hint equal to the stated size; a hint on a dim whose
  meaning is batch/state/derived/kv_length is made up);
- ``tasks``: ``api.output_tasks`` against each output's stated task;
- ``check``: ``api.check``'s ONNX Runtime and OpenVINO verdicts against plain runs of each engine (OpenVINO
  compiled at the manifest's shapes, f32, its outputs compared with ORT's);
- ``optimizer``: ``bench_optimizer_strength.measure_corpus`` (nodes vs onnxsim/onnxslim, correctness,
  size, ORT_ENABLE_ALL latency before/after, ORT's fused ops);
- ``memory``: ``bench_memory_plan.corpus_row`` (the plan vs ORT as run, ORT optimizations off, OpenVINO as
  compiled: the plan over its runtime graph);
- ``precision``: ``api.precision``'s recommended variant, its latency ratio to fp32 and its cosine.

Each (table, model) cell runs in its own child process under a time limit (``--timeout``, default per
table), so a model that hangs or crashes one table is a row with its one-line reason, never the end of
the run. Results go to ``benchmarks/.cache/bench_real/<table>.json`` (gitignored) beside the printed
tables; ``--out DIR`` names another folder.

``python -m benchmarks bench_real [--tables inspect,hints,...] [--only SUBSTR] [--aside-only]
[--models A,B,...] [--timeout S] [--out DIR]`` (``--models``: these, in this order); ``--report``: print the tables again from the JSON written (each row is
written as it is measured, so a stopped run keeps its rows).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import ROOT, print_table

OUT = ROOT / "benchmarks" / ".cache" / "bench_real"
TABLES = ("inspect", "hints", "tasks", "check", "memory", "optimizer", "precision")
TIMEOUT_S = {"inspect": 180, "hints": 60, "tasks": 60, "check": 300, "memory": 300, "optimizer": 900,
             "precision": 600}
NOT_SIZES = frozenset({"batch", "state", "derived", "kv_length"})
MARK = "@@CELL@@"


# -- shared pieces -----------------------------------------------------------------------------------

def _entry(name: str):
    from benchmarks.corpus import corpus_dir, load_manifest

    m = load_manifest()[name]
    return m, corpus_dir() / m.filename


def _feeds(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    from benchmarks.corpus.feeds import feeds_for

    m, path = _entry(name)
    return feeds_for(m, path, seed=seed)


def manifest_dims(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """The studio's ``dims`` that pin every free input dim at the manifest's shapes (named dims by name,
    unnamed ones as INPUT[AXIS]), the way bench_memory_plan pins them."""
    from studio import api
    from studio.core.feeds import input_specs, unnamed_dim_key

    dims: dict[str, int] = {}
    for s in input_specs(api.load(path).proto):
        if s.name in feeds and s.shape is not None:
            for axis, d in enumerate(s.shape):
                if not isinstance(d, int) and axis < feeds[s.name].ndim:
                    dims[d if isinstance(d, str) else unnamed_dim_key(s.name, axis)] = int(feeds[s.name].shape[axis])
    return dims


def ort_value_shapes(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """The oracle: every top-level value's real shape, from plain ONNX Runtime (optimizations off) with
    every node output made a graph output."""
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    have = {o.name for o in model.graph.output}
    for node in model.graph.node:
        for out in node.output:
            if out and out not in have:
                model.graph.output.append(onnx.ValueInfoProto(name=out))
                have.add(out)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    values = sess.run(names, {k: v for k, v in feeds.items() if k in {i.name for i in sess.get_inputs()}})
    return {n: tuple(v.shape) for n, v in zip(names, values) if isinstance(v, np.ndarray)}


# -- the cells (run in a child process) --------------------------------------------------------------

def cell_inspect(name: str) -> dict:
    from studio import api

    _, path = _entry(name)
    feeds = _feeds(name)
    real = ort_value_shapes(path, feeds)
    edges = {e.name: e.shape for e in api.inspect(api.load(path), manifest_dims(path, feeds)).edges}
    wrong = [(n, str(edges.get(n, "missing"))[:60], list(s)) for n, s in real.items()
             if n in edges and tuple(edges[n] or ()) != s]
    missing = [n for n in real if n not in edges]
    return {"compared": len(real), "wrong": len(wrong), "missing": len(missing), "examples": wrong[:3]}


def cell_hints(name: str) -> dict:
    from studio import api

    m, path = _entry(name)
    feeds = _feeds(name)
    h = api.load(path)
    free = set(api.input_dim_keys(h))
    sizes: dict[str, int] = manifest_dims(path, feeds)
    rows = []
    for hint in api.dim_hints(h):
        meaning = m.dims.get(hint.key, "unnamed" if "[" in hint.key else "?")
        verdict = ("made up" if meaning in NOT_SIZES else
                   "= manifest" if sizes.get(hint.key) == hint.value else "differs")
        rows.append({"dim": hint.key[:40], "value": hint.value, "origin": hint.origin, "meaning": meaning,
                     "verdict": verdict})
    return {"free": len(free), "hints": rows}


def cell_tasks(name: str) -> dict:
    from benchmarks.corpus import ACCEPTED_TASKS
    from studio import api

    m, path = _entry(name)
    got = {t.output: t.kind for t in api.output_tasks(api.load(path))}
    rows = [{"output": o[:40], "fact": fact, "inferred": got.get(o), "right": got.get(o) in ACCEPTED_TASKS[fact]}
            for o, fact in m.outputs.items()]
    return {"outputs": rows}


def _plain_openvino(path: Path, feeds: dict[str, np.ndarray], ref: list) -> tuple[str, str]:
    """OpenVINO CPU as a user compiles it, at the feeds' shapes, f32; its outputs against ORT's."""
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    shapes = {}
    for port in model.inputs:
        name = port.get_any_name()
        if name in feeds:
            shapes[port] = ov.PartialShape(list(feeds[name].shape))
    if shapes:
        model.reshape(shapes)
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    by_name = {p.get_any_name(): feeds[p.get_any_name()] for p in model.inputs if p.get_any_name() in feeds}
    res = compiled(by_name)
    worst = 0.0
    for i, r in enumerate(ref):
        if not isinstance(r, np.ndarray) or i >= len(compiled.outputs):
            continue
        o = np.asarray(res[compiled.outputs[i]])
        if o.shape != r.shape:
            return "runs, differs", f"output {i} shape {o.shape} vs ORT {r.shape}"
        if r.dtype.kind == "f" and r.size:
            scale = max(1.0, float(np.abs(r).max()))
            worst = max(worst, float(np.abs(o.astype(np.float64) - r).max()) / scale)
        elif r.size and not np.array_equal(o, r):
            worst = max(worst, 1.0)
    return ("runs" if worst <= 1e-2 else "runs, differs"), f"max rel diff {worst:.2g}"


def cell_check(name: str) -> dict:
    import onnxruntime as ort

    from studio import api

    _, path = _entry(name)
    feeds = _feeds(name)
    out: dict[str, Any] = {}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        ref = sess.run(None, feeds)
        out["ort_plain"] = "runs"
    except Exception as exc:  # noqa: BLE001 - the engine's own refusal is the oracle's answer
        ref, out["ort_plain"] = [], f"fails: {str(exc).splitlines()[0][:80]}"
    try:
        out["ov_plain"], out["ov_note"] = _plain_openvino(path, feeds, ref)
    except Exception as exc:  # noqa: BLE001
        out["ov_plain"], out["ov_note"] = "fails", str(exc).strip().splitlines()[0][:100] if str(exc).strip() else ""
    npz = OUT / "inputs" / f"{name}.npz"
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez(npz, **feeds)
    report = api.check(api.load(path), engines=("onnxruntime", "openvino"), inputs=npz)
    for v in report.verdicts:
        out[f"studio_{v.engine}"] = v.verdict
        out[f"studio_{v.engine}_summary"] = v.summary[:100]
    return out


def cell_optimizer(name: str) -> dict:
    from benchmarks.bench_optimizer_strength import (CORPUS_BIG, best_peer, engine_verdict, lost_fusions,
                                                     measure_corpus)

    m, path = _entry(name)
    if name in CORPUS_BIG and os.environ.get("BENCH_REAL_BIG") != "1":
        return {"error": "not run: both peers inflate its ConstantOfShape weights hundreds of times (T3); "
                         "BENCH_REAL_BIG=1 runs it"}
    row = measure_corpus(name, path, m.kept_aside, m, timeout_s=300.0)
    d = {k: v for k, v in vars(row).items()}
    d["best_peer"] = best_peer(row)
    d["lost_fusions"] = lost_fusions(row)
    d["verdict"], d["verdict_peer"] = engine_verdict(row)
    return json.loads(json.dumps(d, default=str))


def cell_memory(name: str) -> dict:
    from benchmarks.bench_memory_plan import corpus_row

    _, path = _entry(name)
    row, errs = corpus_row(name, path, _feeds(name))
    return {"row": [str(x) for x in row], "errors": errs}


def cell_precision(name: str) -> dict:
    from studio import api

    _, path = _entry(name)
    npz = OUT / "inputs" / f"{name}.npz"
    npz.parent.mkdir(parents=True, exist_ok=True)
    np.savez(npz, **_feeds(name))
    rep = api.precision(api.load(path), inputs=npz, samples=2, latency_budget_s=5.0,
                        out_dir=OUT / "precision" / name)
    rec = rep.variant(rep.recommended) if rep.recommended else None
    return {"recommended": rep.recommended, "ratio": None if rec is None else rec.ratio,
            "cosine": None if rec is None else rec.cosine, "engine": None if rec is None else rec.engine,
            "variants": {v.name: v.status for v in rep.variants}, "basis": rep.basis[:60]}


CELLS = {"inspect": cell_inspect, "hints": cell_hints, "tasks": cell_tasks, "check": cell_check,
         "optimizer": cell_optimizer, "memory": cell_memory, "precision": cell_precision}


# -- the parent: bounded cells, tables, totals ---------------------------------------------------------

def run_cell(table: str, name: str, timeout_s: float) -> dict:
    """One cell in a child process: its result, or {"error": one line} (timeout, crash, exception)."""
    t = time.perf_counter()
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    # Its own process group: a cell over its limit is stopped with the workers it started.
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_real", "--cell", table, name], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"over the {timeout_s:.0f} s limit", "seconds": round(time.perf_counter() - t, 1)}
    proc.stdout, proc.stderr = stdout, stderr                      # type: ignore[assignment]
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        tail = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
        return {"error": f"exit {proc.returncode}: {tail[-1][:120] if tail else 'no output'}",
                "seconds": round(time.perf_counter() - t, 1)}
    result = json.loads(line[len(MARK):])
    result["seconds"] = round(time.perf_counter() - t, 1)
    return result


def _child(table: str, name: str) -> int:
    try:
        result = CELLS[table](name)
    except Exception as exc:  # noqa: BLE001 - a model failing a table is a row with its reason
        msg = " ".join(str(exc).split())[:140]
        result = {"error": f"{type(exc).__name__}: {msg}"}
    print(MARK + json.dumps(result, default=str), flush=True)
    return 0


def _label(name: str, aside: bool) -> str:
    return name + (" (kept aside)" if aside else "")


def _split(rows: list[tuple[str, bool, dict]]):
    return [("tuned on", [r for r in rows if not r[1]]), ("kept aside", [r for r in rows if r[1]])]


def report_inspect(rows) -> dict:
    table = [[_label(n, a), r.get("error") or f"{r['compared']}", "" if "error" in r else r["wrong"],
              "" if "error" in r else r["missing"], "" if "error" in r else "; ".join(
                  f"{e[0][:30]}: {e[1]} vs {e[2]}" for e in r["examples"][:1])] for n, a, r in rows]
    print_table("inspect: top-level edge shapes with dims pinned at the manifest's inputs vs plain ORT's real "
                "tensors", ["model", "edges compared", "wrong", "not shown", "first wrong"], table)
    totals = []
    for label, part in _split(rows):
        ok = [r for _, _, r in part if "error" not in r]
        exact = sum(1 for r in ok if r["wrong"] == 0 and r["missing"] == 0)
        totals.append([label, len(part), len(part) - len(ok), f"{exact}/{len(ok)}",
                       sum(r["compared"] for r in ok), sum(r["wrong"] for r in ok)])
    print_table("inspect totals", ["models", "n", "failed", "every edge right", "edges", "wrong edges"], totals)
    return {"totals": totals}


def report_hints(rows) -> dict:
    table = []
    for n, a, r in rows:
        if "error" in r:
            table.append([_label(n, a), r["error"], "", ""])
            continue
        hs = r["hints"]
        table.append([_label(n, a), r["free"], len(hs), "; ".join(
            f"{h['dim'][:24]}={h['value']} ({h['origin']}, {h['meaning']}: {h['verdict']})" for h in hs[:3])])
    print_table("hints: api.dim_hints vs the manifest (made up: a hint on a batch/state/derived/kv dim)",
                ["model", "free dims", "hints", "hints (first 3)"], table)
    totals = []
    for label, part in _split(rows):
        hs = [h for _, _, r in part if "error" not in r for h in r["hints"]]
        count = {v: sum(1 for h in hs if h["verdict"] == v) for v in ("= manifest", "differs", "made up")}
        totals.append([label, len(part), sum(r.get("free", 0) for _, _, r in part), len(hs), count["= manifest"],
                       count["differs"], count["made up"]])
    print_table("hints totals", ["models", "n", "free dims", "hints", "= manifest size", "differs", "made up"],
                totals)
    return {"totals": totals}


def report_tasks(rows) -> dict:
    table = []
    for n, a, r in rows:
        if "error" in r:
            table.append([_label(n, a), r["error"], "", ""])
            continue
        wrong = [o for o in r["outputs"] if not o["right"]]
        table.append([_label(n, a), len(r["outputs"]), len(r["outputs"]) - len(wrong),
                      "; ".join(f"{o['output'][:24]}: {o['fact']} judged {o['inferred']}" for o in wrong[:2])])
    print_table("tasks: api.output_tasks vs each output's stated task", ["model", "outputs", "right", "wrong"], table)
    totals = []
    for label, part in _split(rows):
        outs = [o for _, _, r in part if "error" not in r for o in r["outputs"]]
        right = sum(1 for o in outs if o["right"])
        totals.append([label, len(part), len(outs), f"{right}/{len(outs)}"])
    print_table("tasks totals", ["models", "n", "outputs", "right"], totals)
    return {"totals": totals}


def _agrees(studio: str | None, plain: str | None) -> bool | None:
    if studio is None or plain is None:
        return None
    s_runs = studio.startswith("runs")
    return s_runs == plain.startswith("runs")


def report_check(rows) -> dict:
    table = []
    for n, a, r in rows:
        if "error" in r:
            table.append([_label(n, a), r["error"], "", "", ""])
            continue
        table.append([_label(n, a), r.get("studio_onnxruntime"), r.get("ort_plain", "")[:40],
                      r.get("studio_openvino"), f"{r.get('ov_plain')} ({r.get('ov_note', '')[:50]})"])
    print_table("check: api.check verdicts vs plain ORT / OpenVINO runs at the manifest's inputs",
                ["model", "studio ORT", "plain ORT", "studio OpenVINO", "plain OpenVINO (vs ORT)"], table)
    totals = []
    for label, part in _split(rows):
        ok = [r for _, _, r in part if "error" not in r]
        agree = {e: [_agrees(r.get(f"studio_{e}"), r.get(p)) for r in ok]
                 for e, p in (("onnxruntime", "ort_plain"), ("openvino", "ov_plain"))}
        differs = sum(1 for r in ok if r.get("ov_plain") == "runs, differs")
        totals.append([label, len(part), len(part) - len(ok),
                       f"{sum(1 for x in agree['onnxruntime'] if x)}/{len(ok)}",
                       f"{sum(1 for x in agree['openvino'] if x)}/{len(ok)}", differs])
    print_table("check totals (agree: the studio says it runs exactly where the plain engine runs)",
                ["models", "n", "failed", "ORT agrees", "OpenVINO agrees", "OpenVINO runs but differs"], totals)
    return {"totals": totals}


def _raw_verdict(r: dict) -> str:
    bp, n = r.get("best_peer"), r.get("nodes", {}).get("studio")
    if bp is None:
        return "-"
    if n is None or not r.get("correct", {}).get("studio"):
        return "above"
    return "below" if n < bp else "at" if n == bp else "above"


def _rejudge(r: dict) -> dict:
    """The row with its engine verdict worked out again from its measured fields (so a JSON written before a
    change of the rule reads by today's rule)."""
    from dataclasses import fields

    from benchmarks.bench_optimizer_strength import CorpusRow, engine_verdict

    if "nodes" not in r or "error" in r:
        return r
    names = {f.name for f in fields(CorpusRow)} - {"name", "kept_aside"}
    row = CorpusRow(str(r.get("name", "")), bool(r.get("kept_aside")),
                    **{k: (tuple(v) if isinstance(v, list) else v) for k, v in r.items() if k in names})
    row.latency_vs_peer = {k: tuple(v) for k, v in row.latency_vs_peer.items()}
    r = dict(r)
    r["verdict"], r["verdict_peer"] = engine_verdict(row)
    return r


def _engine_cell(r: dict) -> tuple[str, str]:
    """(ORT-run nodes studio / the judged peer, studio/peer latency) for the row's engine verdict."""
    tool = r.get("verdict_peer")
    ort_studio = (r.get("ort_nodes") or [None, None])[1]
    if tool is None:
        return (f"{ort_studio} / -", "-")
    lat = (r.get("latency_vs_peer") or {}).get(tool) or [None, None, None]
    lat_s = "-" if lat[0] is None else f"{lat[0]:.2f} [{lat[1]:.2f}-{lat[2]:.2f}]" if lat[1] is not None \
        else f"{lat[0]:.2f}"
    if (r.get("slower_than_peer") or {}).get(tool):
        lat_s += " SLOWER"
    return f"{ort_studio} / {(r.get('ort_nodes_peer') or {}).get(tool)} ({tool})", lat_s


def report_optimizer(rows) -> dict:
    from benchmarks.bench_optimizer_strength import ENGINE_RULE

    rows = [(n, a, _rejudge(r)) for n, a, r in rows]
    table = []
    for n, a, r in rows:
        if "error" in r:
            table.append([_label(n, a), r["error"], "", "", "", "", "", "", "", "", ""])
            continue
        nodes, correct = r.get("nodes", {}), r.get("correct", {})

        def cell(tool: str) -> str:
            v = nodes.get(tool)
            return "fail" if v is None else f"{v}{'' if correct.get(tool) else ' WRONG'}"
        lat = r.get("latency_ratio")
        ort_cell, peer_lat = _engine_cell(r)
        table.append([_label(n, a), nodes.get("raw"), cell("onnxsim"), cell("onnxslim"), cell("studio"),
                      "-" if r.get("best_peer") is None else r["best_peer"], _raw_verdict(r), ort_cell, peer_lat,
                      r.get("verdict", "-"), "-" if lat is None else f"{lat:.2f}"])
    print_table("optimizer: nodes in all graphs (raw / onnxsim / onnxslim / studio's better preset), best usable "
                "peer by nodes and the verdict by nodes; ORT-run nodes studio / judged peer, studio/peer latency "
                "at ORT_ENABLE_ALL (interleaved), the verdict " + ENGINE_RULE + "; latency studio/raw",
                ["model", "raw", "onnxsim", "onnxslim", "studio", "best peer", "by nodes", "ORT runs studio/peer",
                 "studio/peer latency", "by engine", "studio/raw"], table)
    totals = []
    for label, part in _split(rows):
        ok = [r for _, _, r in part if "error" not in r]
        with_peer = [r for r in ok if r.get("best_peer") is not None]
        raw_v = [_raw_verdict(r) for r in with_peer]
        eng_v = [r.get("verdict", "-") for r in with_peer]
        wrong = sum(1 for r in ok if r.get("correct", {}).get("studio") is False)
        slower = sum(1 for r in ok if r.get("slower"))
        n = len(with_peer)
        totals.append([label, len(part), len(part) - len(ok), n,
                       f"{sum(v in ('at', 'below') for v in raw_v)}/{n}", f"{raw_v.count('below')}/{n}",
                       f"{sum(v in ('at', 'below') for v in eng_v)}/{n}", f"{eng_v.count('below')}/{n}",
                       wrong, slower])
    print_table("optimizer totals (the goal is judged by engine; by nodes beside it)",
                ["models", "n", "failed", "with a usable peer", "<= peer by nodes", "< peer by nodes",
                 "<= peer by engine", "< peer by engine", "studio wrong", "slower than raw (both runs, past the A/A control)"], totals)
    print(f"rule: {ENGINE_RULE}")
    return {"totals": totals, "rule": ENGINE_RULE}


def _within(e: float | None, bound: float = 0.15) -> bool:
    return e is not None and abs(e) <= bound


def report_memory(rows) -> dict:
    table = [[_label(n, a)] + ([r["error"]] if "error" in r else r["row"][1:]) for n, a, r in rows]
    print_table("memory: plan vs ORT as run (default options), ORT optimizations off, OpenVINO CPU",
                ["model", "ORT nodes", "plan (run)", "ORT (run)", "err", "plan (off)", "ORT (off)", "err",
                 "OV plan (compiled)", "OpenVINO", "err", "err vs written plan", "s"], table)
    totals = []
    for label, part in _split(rows):
        ok = [r for _, _, r in part if "error" not in r]
        cnt = {k: (sum(1 for r in ok if _within(r["errors"].get(k))),
                   sum(1 for r in ok if r["errors"].get(k) is not None)) for k in ("run", "off", "ov")}
        totals.append([label, len(part), len(part) - len(ok)] + [f"{a}/{b}" for a, b in cnt.values()])
    print_table("memory totals (within 15 % / measured)", ["models", "n", "failed", "ORT as run", "ORT opt off",
                                                           "OpenVINO"], totals)
    return {"totals": totals}


def report_precision(rows) -> dict:
    table = []
    for n, a, r in rows:
        if "error" in r:
            table.append([_label(n, a), r["error"], "", "", ""])
            continue
        table.append([_label(n, a), r.get("recommended"), "-" if r.get("ratio") is None else f"{r['ratio']:.2f}",
                      "-" if r.get("cosine") is None else f"{r['cosine']:.5f}",
                      ", ".join(f"{k}:{v}" for k, v in (r.get("variants") or {}).items())[:80]])
    print_table("precision: the recommended variant (random-input estimate), latency ratio to ORT fp32, cosine",
                ["model", "recommended", "ratio", "cosine", "variants"], table)
    totals = []
    for label, part in _split(rows):
        ok = [r for _, _, r in part if "error" not in r]
        faster = [r for r in ok if r.get("recommended") not in (None, "fp32")]
        ratios = sorted(r["ratio"] for r in faster if r.get("ratio") is not None)
        cos = [r["cosine"] for r in faster if r.get("cosine") is not None]
        totals.append([label, len(part), len(part) - len(ok), len(faster),
                       "-" if not ratios else f"{ratios[len(ratios) // 2]:.2f}",
                       "-" if not cos else f"{min(cos):.4f}"])
    print_table("precision totals", ["models", "n", "failed", "a variant other than fp32 recommended",
                                     "median ratio", "worst cosine"], totals)
    return {"totals": totals}


REPORTS = {"inspect": report_inspect, "hints": report_hints, "tasks": report_tasks, "check": report_check,
           "optimizer": report_optimizer, "memory": report_memory, "precision": report_precision}


def _arg(argv: list[str], flag: str, default: str = "") -> str:
    return argv[argv.index(flag) + 1] if flag in argv and argv.index(flag) + 1 < len(argv) else default


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks.corpus import corpus_dir, is_present, load_manifest
    from benchmarks.harness import cpu_banner

    global OUT
    argv = sys.argv[1:] if argv is None else argv
    if "--out" in argv:
        OUT = Path(_arg(argv, "--out")).resolve()
    tables = [t for t in _arg(argv, "--tables", ",".join(TABLES)).split(",") if t]
    unknown = [t for t in tables if t not in CELLS]
    if unknown:
        raise SystemExit(f"bench_real: unknown table {', '.join(unknown)} (choose from {', '.join(TABLES)})")
    only, aside_only = _arg(argv, "--only"), "--aside-only" in argv
    manifest, folder = load_manifest(), corpus_dir()
    models = [(n, m.kept_aside) for n, m in manifest.items()
              if (not only or only in n) and (not aside_only or m.kept_aside)]
    if "--models" in argv:          # these models, in this order (early partial results on what matters)
        order = [n for n in _arg(argv, "--models").split(",") if n]
        bad = [n for n in order if n not in manifest]
        if bad:
            raise SystemExit(f"bench_real: not in the manifest: {', '.join(bad)}")
        models = [(n, manifest[n].kept_aside) for n in order]
    missing = [n for n, _ in models if not is_present(manifest[n], folder)]
    if missing:
        print(f"bench_real: {len(missing)} corpus models not fetched (make corpus): {', '.join(missing[:5])}",
              file=sys.stderr)
        models = [(n, a) for n, a in models if n not in missing]
    print(cpu_banner(), flush=True)
    print(f"bench_real: {len(models)} models ({sum(a for _, a in models)} kept aside) from {folder}; "
          f"tables: {', '.join(tables)}; JSON in {OUT}", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    for table in tables:
        limit = float(_arg(argv, "--timeout", "0")) or TIMEOUT_S[table]
        rows = []
        t0 = time.perf_counter()
        for name, aside in models:
            r = run_cell(table, name, limit)
            rows.append((name, aside, r))
            print(f"  {table} {name}: {r.get('seconds')} s{' ' + r['error'] if 'error' in r else ''}", flush=True)
            _write(table, rows, limit, t0, complete=False)       # a stopped run keeps what it measured
        summary = REPORTS[table](rows)
        results[table] = _write(table, rows, limit, t0, complete=True, summary=summary)
    return results


def _write(table: str, rows: list, limit: float, t0: float, *, complete: bool, summary: dict | None = None) -> dict:
    data = {"complete": complete, "seconds": round(time.perf_counter() - t0, 1), "limit_s": limit, **(summary or {}),
            "rows": [{"model": n, "kept_aside": a, **r} for n, a, r in rows]}
    (OUT / f"{table}.json").write_text(json.dumps(data, indent=1, default=str))
    return data


def report_from_json(folder: Path) -> None:
    """``--report``: print the tables again from the JSON a run wrote (a stopped run's rows included)."""
    for table in TABLES:
        path = folder / f"{table}.json"
        if path.is_file():
            data = json.loads(path.read_text())
            rows = [(r.pop("model"), r.pop("kept_aside"), r) for r in data["rows"]]
            print(f"\n# {table}: {len(rows)} models{'' if data.get('complete') else ' (run stopped before the end)'}")
            REPORTS[table](rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--cell"]:
        sys.exit(_child(sys.argv[2], sys.argv[3]))
    if "--report" in sys.argv:
        report_from_json(Path(_arg(sys.argv, "--out")).resolve() if "--out" in sys.argv else OUT)
        sys.exit(0)
    main()
