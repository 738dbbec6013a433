"""Optimizer strength: the studio's better preset (``ort`` or ``safe``) against onnxsim and onnxslim.

For the onnx wheel's backend models (``light/`` and the ``simple/``,
``pytorch-converted/``, ``pytorch-operator/`` models with more than 3 nodes; this
wheel ships no ``node/`` models with weights worth optimizing), the sample models
and the exporter-like structures of ``benchmarks.strength_models``, it prints top-level
nodes before and after each tool, whether each result is correct (plain
onnxruntime, optimizations off, on seeded inputs, against the original), the file
growth, wall time, the median node reduction and the wins/ties/losses of the studio
against each peer. Peers run in fresh sandbox workers with a timeout (onnxsim can
crash). A peer result is compared only where it is correct and grows the file by at
most 1.1× (the studio's own cap; onnxsim materializes ``ConstantOfShape`` weights).

Models in ``HOLDOUT`` were never tuned on; the summary gives their figures apart.

``python -m benchmarks bench_optimizer_strength`` (``--big``: also the four large
light models, whose weights are ``ConstantOfShape`` nodes: both peers grow them hundreds
of times, so they only cost minutes and memory; ``--only SUBSTR``; ``--json FILE``).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from benchmarks.harness import print_table
from benchmarks.models import CACHE

OUT = CACHE / "bench_optimizer_strength"
PRESETS = ("ort", "safe")
MAX_GROWTH = 1.1
GROWTH_FLOOR = 4096     # bytes: below this, growth of a tiny file is a folded shape tensor, not a size problem
BIG_LIGHT = frozenset({"light_vgg19", "light_bvlc_alexnet", "light_zfnet512", "light_densenet121"})
# Never tuned on (the studio's rules were written without looking at these).
HOLDOUT = frozenset({"light_inception_v2", "light_shufflenet", "llama_optimum", "gpt2_decoder_with_past",
                     "test_operator_rnn", "attention_heads_dynamic", "shape_slice_split"})


@dataclass
class ToolRun:
    nodes: int | None = None
    correct: bool | None = None     # None: could not be judged (the original does not run)
    growth: float | None = None     # result bytes / original bytes
    added_bytes: int = 0
    seconds: float = 0.0
    note: str = ""


@dataclass
class Row:
    name: str
    group: str
    before: int
    tools: dict[str, ToolRun] = field(default_factory=dict)


def backend_models(min_nodes: int = 4) -> list[tuple[str, str, Path]]:
    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    out = [(p.stem, "backend/light", p) for p in sorted((root / "light").glob("*.onnx"))]
    for sub in ("simple", "pytorch-converted", "pytorch-operator", "node"):
        for p in sorted((root / sub).glob("*/model.onnx")):
            try:
                m = onnx.load(str(p), load_external_data=False)
            except Exception:
                continue
            if len(m.graph.node) >= min_nodes:
                out.append((p.parent.name, f"backend/{sub}", p))
    return out


def sample_models() -> list[tuple[str, str, Path]]:
    from sample_models.catalog import ALL_SAMPLES

    return [(s.name, "sample", s.path) for s in ALL_SAMPLES if s.runs_on_ort and s.path.exists()]


def structure_models() -> list[tuple[str, str, Path]]:
    from benchmarks.strength_models import build

    return [(n, "structure", p) for n, p in build(OUT / "structures").items()]


def _file_bytes(path: Path) -> int:
    """The model file plus its external data files (those named in it)."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    total = path.stat().st_size
    seen = set()
    for t in list(m.graph.initializer):
        for e in t.external_data:
            if e.key == "location" and e.value not in seen:
                seen.add(e.value)
                f = path.parent / e.value
                if f.exists():
                    total += f.stat().st_size
    return total


def _run_ort(path: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    return sess.run(None, {k: v for k, v in feeds.items() if k in names})


def _feeds(path: Path) -> dict:
    import onnx

    from studio.core.feeds import input_specs, random_feeds

    proto = onnx.load(str(path), load_external_data=False)
    feeds = random_feeds(input_specs(proto), {}, seed=0)
    for spec in input_specs(proto):          # trip counts and similar int scalars: small
        if spec.name in feeds and feeds[spec.name].ndim == 0 and feeds[spec.name].dtype.kind in "iu":
            feeds[spec.name] = np.asarray(3, dtype=feeds[spec.name].dtype)
    return feeds


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x), np.asarray(y)
        if x.shape != y.shape:
            return False
        if x.dtype.kind in "fc":
            if not np.allclose(x.astype(np.float64), y.astype(np.float64), rtol=1e-3, atol=1e-4, equal_nan=True):
                return False
        elif not np.array_equal(x, y):
            return False
    return True


def _nodes(path: Path) -> int:
    import onnx

    return len(onnx.load(str(path), load_external_data=False).graph.node)


def _studio(src: Path, out: Path) -> ToolRun:
    """The better verified preset; its wall time is that preset's."""
    from studio import api

    best: ToolRun | None = None
    notes = []
    for preset in PRESETS:
        dst = out / f"studio-{preset}" / "model.onnx"
        t = time.perf_counter()
        try:
            r = api.optimize(api.load(src), preset=preset, out_path=dst, partial="none")
        except Exception as exc:
            notes.append(f"{preset}: {type(exc).__name__}: {str(exc)[:80]}")
            continue
        dt = time.perf_counter() - t
        if not r.ok or r.output is None:
            notes.append(f"{preset}: {r.summary()[:80]}")
            continue
        run = ToolRun(_nodes(dst), seconds=dt, note=preset)
        run.path = dst            # type: ignore[attr-defined]
        if best is None or run.nodes < best.nodes:
            best = run
    return best or ToolRun(note="; ".join(notes))


def measure(name: str, group: str, src: Path, timeout_s: float) -> Row:
    from passes.peers import run_peer

    out = OUT / "runs" / name
    row = Row(name, group, _nodes(src))
    try:
        feeds = _feeds(src)
        reference = _run_ort(src, feeds)
    except Exception as exc:
        feeds, reference = None, None
        ref_note = f"original does not run: {type(exc).__name__}"
    src_bytes = _file_bytes(src)
    runs: dict[str, tuple[ToolRun, Path | None]] = {}
    s = _studio(src, out)
    runs["studio"] = (s, getattr(s, "path", None))
    for tool in ("onnxsim", "onnxslim"):
        dst = out / tool / "model.onnx"
        p = run_peer(tool, src, dst, timeout_s=timeout_s)
        runs[tool] = (ToolRun(p.nodes, seconds=p.seconds, note=p.error[:80]) if p.ok
                      else ToolRun(note=p.error[:80]), dst if p.ok else None)
    for tool, (run, path) in runs.items():
        if path is not None and run.nodes is not None:
            run.growth = _file_bytes(path) / max(1, src_bytes)
            run.added_bytes = _file_bytes(path) - src_bytes
            if reference is not None:
                try:
                    run.correct = _same(reference, _run_ort(path, feeds))
                    if not run.correct:
                        run.note = (run.note + " outputs differ").strip()
                except Exception as exc:
                    run.correct = False
                    run.note = f"does not run on ORT: {type(exc).__name__}"
            else:
                run.note = ref_note
        row.tools[tool] = run
    return row


def _grew(run: ToolRun) -> bool:
    return run.growth is not None and run.growth > MAX_GROWTH and run.added_bytes > GROWTH_FLOOR


def _usable(run: ToolRun) -> bool:
    """A result that counts: produced, not judged wrong, not grown past the cap."""
    return run.nodes is not None and run.correct is not False and not _grew(run)


def _median(values: list[float]) -> str:
    return f"{100 * statistics.median(values):.1f} %" if values else "-"


def summarize(rows: list[Row], label: str) -> list[list]:
    out = []
    common = [r for r in rows if r.before and all(_usable(r.tools[t]) for t in ("studio", "onnxsim", "onnxslim"))]
    for tool in ("studio", "onnxsim", "onnxslim"):
        red = [(r.before - r.tools[tool].nodes) / r.before for r in rows
               if r.before and _usable(r.tools[tool])]
        med = _median(red)
        med_common = _median([(r.before - r.tools[tool].nodes) / r.before for r in common])
        wrong = sum(1 for r in rows if r.tools[tool].correct is False)
        grown = sum(1 for r in rows if _grew(r.tools[tool]))
        failed = sum(1 for r in rows if r.tools[tool].nodes is None)
        if tool == "studio":
            wtl = "-"
        else:
            w = t = lo = 0
            for r in rows:
                s, p = r.tools["studio"], r.tools[tool]
                if not (_usable(s) and _usable(p)):
                    continue
                w += s.nodes < p.nodes
                t += s.nodes == p.nodes
                lo += s.nodes > p.nodes
            wtl = f"{w}/{t}/{lo}"
        secs = sum(r.tools[tool].seconds for r in rows)
        out.append([label, tool, len(rows), med, f"{med_common} (n={len(common)})", wtl, wrong, grown, failed,
                    f"{secs:.1f}"])
    goal = sum(1 for r in rows if _usable(r.tools["studio"]) and all(
        not _usable(r.tools[p]) or r.tools["studio"].nodes <= r.tools[p].nodes for p in ("onnxsim", "onnxslim")))
    out.append([label, "studio <= better usable peer", "", f"{goal}/{len(rows)}", "", "", "", "", "", ""])
    return out


def _cell(run: ToolRun) -> str:
    if run.nodes is None:
        return "fail"
    mark = {True: "", False: " WRONG", None: " ?"}[run.correct]
    grow = f" x{run.growth:.2f}" if _grew(run) else ""
    return f"{run.nodes}{mark}{grow}"


def main(big: bool = False, only: str = "", json_path: str = "", timeout_s: float = 300.0) -> list[Row]:
    models = backend_models() + sample_models() + structure_models()
    if not big:
        models = [m for m in models if m[0] not in BIG_LIGHT]
    if only:
        models = [m for m in models if only in m[0]]
    rows = []
    for name, group, path in models:
        try:
            rows.append(measure(name, group, path, timeout_s))
        except Exception as exc:       # one model's trouble never ends the table
            print(f"{name}: not measured ({type(exc).__name__}: {str(exc)[:120]})", flush=True)
    table = [[r.name + (" (holdout)" if r.name in HOLDOUT else ""), r.group, r.before,
              _cell(r.tools["studio"]) + f" {r.tools['studio'].note}", _cell(r.tools["onnxsim"]),
              _cell(r.tools["onnxslim"]),
              " ".join(f"{r.tools[t].seconds:.1f}" for t in ("studio", "onnxsim", "onnxslim"))] for r in rows]
    print_table("Optimizer strength: top-level nodes after each tool (WRONG: outputs differ from the original on "
                f"ORT; xN: file grew N times, over the {MAX_GROWTH}x cap and by more than {GROWTH_FLOOR} bytes)",
                ["model", "set", "before", "studio (best preset)", "onnxsim", "onnxslim", "seconds s/sim/slim"], table)
    tuned = [r for r in rows if r.name not in HOLDOUT]
    held = [r for r in rows if r.name in HOLDOUT]
    summary = summarize(rows, "all") + summarize(tuned, "tuned") + (summarize(held, "holdout") if held else [])
    print_table("Summary: median node reduction over usable results (correct, <= 1.1x growth); wins/ties/losses "
                "of the studio against each peer where both are usable",
                ["models", "tool", "n", "median reduction", "median where all 3 usable", "W/T/L (studio vs)", "wrong",
                 "grew > 1.1x", "failed", "total s"], summary)
    if json_path:
        Path(json_path).write_text(json.dumps([{"name": r.name, "group": r.group, "before": r.before,
                                                "tools": {k: vars(v) | {"path": None} for k, v in r.tools.items()}}
                                               for r in rows], default=str, indent=1))
    return rows


if __name__ == "__main__":
    args = sys.argv[1:]
    main(big="--big" in args, only=args[args.index("--only") + 1] if "--only" in args else "",
         json_path=args[args.index("--json") + 1] if "--json" in args else "")
