"""Edit a 2.6 GiB external-data model (issue 27 item 5): rename the logits and add an inner output.

The model is a LLaMA-shaped decoder (TinyLlama widths, 13 layers, optimum convention: standard ops,
so ONNX inference types every tensor), written lazily by ``sample_models.decoders.write_large_decoder``
into a temporary folder (seeded random float32 weights streamed to the data file, never all in memory)
and deleted afterwards.

Rows, each in a fresh process (wall time of the edit, peak RSS = VmHWM):
* ``edit --no-verify``: load (weights stay on disk), apply, full checker + strict shape inference on
  the graph, save (the data file copied tensor by tensor into the output's own ``.data``);
* ``edit`` (verified): the same plus the verification, where ONNX Runtime runs the original with the
  edit's boundary tensors exposed and then the edited model (its worker holds the weights: that
  process's peak is the row's second figure);
* reference: ``onnx.load`` with its weights + the same edit on the proto + ``onnx.save_model`` with
  external data, what a script (or a tool that loads the model) does.
Target: the studio's process within 2x the file size (it holds no weight it does not touch).

``--scaling`` (issue 31 item 8): removing, bypassing and extracting on code-built chains of 2k-100k nodes
(``x -> N Neg -> long``, ``x -> Relu -> short``), each operation timed alone (the model loaded and typed
before the clock starts; the best of two runs) and as ``validate`` (load, apply, checker, strict inference); the ratio to the
previous size is printed beside the ratio of sizes: linear work keeps the two close. Figures are of
code-built models, not the corpus.
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import print_table, run_snippet

LAYERS = 13            # 13 TinyLlama-wide layers + embeddings: 2.6 GiB of float32
INNER = "/model/layers.6/Add_1_output_0"    # a layer's residual output, half-way through
SCRIPT = [{"op": "rename", "tensors": {"logits": "scores"}}, {"op": "add_output", "tensor": INNER}]

_PEAK_SELF = """
def _hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""


def _studio(path: Path, out: Path, verify: bool) -> dict:
    run = run_snippet("from studio import api\nimport studio.edit, studio.core.model_io  # imports not timed\n" + _PEAK_SELF,
                      f"""
                      r = api.edit(api.load({str(path)!r}), {SCRIPT!r}, {str(out)!r}, verify={verify!r})
                      result = {{"self_peak": _hwm(), "status": r.verification.verdict,
                                 "outputs": [str(p) for p in r.outputs]}}
                      """)
    return {"seconds": run.seconds, "self": run.result["self_peak"], "peak": run.peak_rss_mb,
            "status": run.result["status"]}


def _reference(path: Path, out: Path) -> dict:
    run = run_snippet("import onnx, onnx.helper\n" + _PEAK_SELF,
                      f"""
                      m = onnx.load({str(path)!r})
                      for o in m.graph.output:
                          if o.name == "logits":
                              o.name = "scores"
                      for n in m.graph.node:
                          n.output[:] = ["scores" if x == "logits" else x for x in n.output]
                      m.graph.output.append(onnx.helper.make_empty_tensor_value_info({INNER!r}))
                      onnx.save_model(m, {str(out)!r}, save_as_external_data=True, location="ref.onnx.data")
                      result = {{"self_peak": _hwm()}}
                      """)
    return {"seconds": run.seconds, "self": run.result["self_peak"], "peak": run.peak_rss_mb, "status": "not checked"}


def main(reference: bool = True) -> list[list]:
    from sample_models.decoders import LLAMA_1B, write_large_decoder

    shape = dataclasses.replace(LLAMA_1B, layers=LAYERS)
    with tempfile.TemporaryDirectory(prefix="bench-edit-") as tmp:
        src = write_large_decoder(Path(tmp) / "model", shape=shape, convention="optimum", fill="random")
        data = src.with_name("model.onnx.data")
        size_mb = (src.stat().st_size + data.stat().st_size) / 2**20
        stamp = (data.stat().st_size, data.stat().st_mtime_ns)
        runs = [("onnx-studio edit --no-verify", _studio(src, Path(tmp) / "a" / "edited.onnx", False)),
                ("onnx-studio edit (verified on ORT)", _studio(src, Path(tmp) / "b" / "edited.onnx", True))]
        if reference:
            runs.append(("reference: onnx.load + edit + onnx.save_model", _reference(src, Path(tmp) / "ref.onnx")))
        untouched = (data.stat().st_size, data.stat().st_mtime_ns) == stamp
        out_mb = sum(p.stat().st_size for p in (Path(tmp) / "a").iterdir()) / 2**20
    rows = [[name, f"{r['seconds']:.1f}", f"{r['self']:.0f}", f"{r['self'] / size_mb:.2f}",
             f"{r['peak']:.0f}", r["status"]] for name, r in runs]
    print_table(f"Edit (rename + add output) of a {size_mb / 1024:.2f} GiB external-data decoder "
                f"({LAYERS} layers); output {out_mb / 1024:.2f} GiB; source data untouched: {untouched}",
                ["run", "seconds", "edit process peak RSS MB", "x file size",
                 "peak RSS incl. ORT worker MB", "verification"], rows)
    return rows


SIZES = (2_000, 8_000, 32_000, 100_000)
REPEATS = 2


def _chain_model(path: Path, n: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Neg", ["x" if i == 0 else f"c{i - 1}"], [f"c{i}" if i < n - 1 else "long"],
                              name=f"neg{i}") for i in range(n)]
    nodes.append(helper.make_node("Relu", ["x"], ["short"], name="relu"))
    vi = [helper.make_tensor_value_info(k, TensorProto.FLOAT, [2, 3]) for k in ("x", "long", "short")]
    onnx.save(helper.make_model(helper.make_graph(nodes, "chain", vi[:1], vi[1:]), ir_version=8,
                                opset_imports=[helper.make_opsetid("", 17)]), path)


def _scripts(n: int) -> dict[str, list[dict]]:
    return {"remove_outputs (whole chain dead)": [{"op": "remove_outputs", "outputs": ["long"]}],
            "delete (last node, chain dead)": [{"op": "delete", "node": f"neg{n - 1}"}],
            "bypass (middle node)": [{"op": "bypass", "node": f"neg{n // 2}"}],
            "extract (second half)": [{"op": "extract", "inputs": [f"c{n // 2}"], "outputs": ["long"]}]}


def scaling(sizes: tuple[int, ...] = SIZES) -> list[list]:
    """Seconds per operation alone and per validate, over chain sizes, with the growth ratio."""
    import time

    from studio import api
    from studio.edit import graph as g
    from studio.edit.apply import OPERATIONS, load_model
    from studio.edit.script import parse_ops
    from studio.edit.state import EditState

    times: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-edit-scaling-") as tmp:
        for n in sizes:
            path = Path(tmp) / f"chain{n}.onnx"
            _chain_model(path, n)
            for name, raw in _scripts(n).items():
                script = parse_ops(raw)
                op_s = float("inf")
                for _ in range(REPEATS):            # the best of REPEATS: the machine is shared
                    model = load_model(path)
                    g.infer_types(model)            # the types the op needs, before the clock
                    state = EditState(model, script, verify=False)
                    t0 = time.perf_counter()
                    OPERATIONS[script.ops[0].kind](state, script.ops[0])
                    op_s = min(op_s, time.perf_counter() - t0)
                t0 = time.perf_counter()
                api.validate_edit_script(api.load(path), raw)
                times.setdefault(name, []).append((op_s, time.perf_counter() - t0))
            path.unlink()
    rows = []
    for name, per in times.items():
        for i, (n, (op_s, val_s)) in enumerate(zip(sizes, per)):
            grow = "" if i == 0 else f"{op_s / max(per[i - 1][0], 1e-9):.1f}x / {val_s / per[i - 1][1]:.1f}x " \
                                      f"(size {n / sizes[i - 1]:.1f}x)"
            rows.append([name, f"{n:,}", f"{op_s:.3f}", f"{val_s:.2f}", grow])
        if len(per) > 1:
            rows.append([name, f"{sizes[0]:,} -> {sizes[-1]:,}", "", "", f"{per[-1][0] / max(per[0][0], 1e-9):.0f}x / "
                         f"{per[-1][1] / per[0][1]:.0f}x (size {sizes[-1] / sizes[0]:.0f}x)"])
    print_table("Edit operations on code-built chains (operation alone / validate: load, apply, checker, strict "
                "inference)", ["operation", "nodes", "op s", "validate s", "growth op / validate"], rows)
    return rows


if __name__ == "__main__":
    if "--scaling" in sys.argv:
        scaling(tuple(int(x) for x in sys.argv[sys.argv.index("--scaling") + 1:]) or SIZES)
    else:
        main(reference="--no-reference" not in sys.argv)
