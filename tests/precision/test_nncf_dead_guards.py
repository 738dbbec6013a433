"""The precision flow's NNCF variants start from the model with its dead NaN guards removed
(``variants.BEFORE_NNCF``): torch's ``Where(IsNaN(Softmax))`` would stay in the INT8 IR and block OpenVINO's
attention fusion. Oracles: plain openvino reading the variant's IR (no IsNaN left), plain onnxruntime on the
original guarded model (the row's cosine is against it)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from studio.core.feeds import save_npz
from studio.precision.variants import evaluate_variants
from tests.conftest import SAMPLES
from tests.requirements import require_module

require_module("nncf")


def _guarded(path):
    """The sample encoder with torch's guard after every Softmax: Where(IsNaN(p), 0, p)."""
    m = onnx.load(str(SAMPLES / "transformer_block.onnx"))
    g = m.graph
    nodes = []
    for n in g.node:
        nodes.append(n)
        if n.op_type == "Softmax":
            p = n.output[0]
            n.output[0] = p + "_raw"
            nodes += [helper.make_node("IsNaN", [p + "_raw"], [p + "_nan"]),
                      helper.make_node("Where", [p + "_nan", "guard_zero", p + "_raw"], [p])]
    del g.node[:]
    g.node.extend(nodes)
    g.initializer.append(helper.make_tensor("guard_zero", onnx.TensorProto.FLOAT, [], [0.0]))
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return path


@pytest.mark.slow
def test_nncf_int8_is_built_from_the_model_without_its_dead_guards(tmp_path, monkeypatch):
    import onnxruntime as ort
    import openvino as ov

    src = _guarded(tmp_path / "guarded.onnx")
    assert sum(n.op_type == "IsNaN" for n in onnx.load(str(src)).graph.node) >= 1
    rng = np.random.default_rng(3)
    feeds = {"input_ids": rng.integers(0, 1000, (1, 16), dtype=np.int64), "attention_mask": np.ones((1, 16), np.int64)}
    inputs = save_npz([feeds], tmp_path / "eval.npz")
    from passes import pipeline

    runs = []
    real_run = pipeline.run_pipeline

    def counted(*args, **kwargs):
        runs.append(args[1].passes)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_pipeline", counted)
    report = evaluate_variants(src, variants=["int8-nncf", "int8-nncf-sq"], inputs=inputs, samples=4,
                               latency_budget_s=0.5, out_dir=tmp_path / "out")
    assert [tuple(p) for p in runs].count(("remove-dead-guards",)) == 1     # built once, shared by both variants
    sq = report.variant("int8-nncf-sq")
    assert sq.status == "ok" and any(n.startswith("before NNCF, remove-dead-guards") for n in sq.notes), sq.notes
    row = report.variant("int8-nncf")
    assert row.status == "ok", (row.error, row.notes)
    assert [r.get("name") for r in row.lineage][0] == "remove-dead-guards"
    assert any(n.startswith("before NNCF, remove-dead-guards") for n in row.notes), row.notes
    ir_ops = {op.get_type_name() for op in ov.Core().read_model(str(row.path)).get_ops()}
    assert "IsNaN" not in ir_ops and "FakeQuantize" in ir_ops
    # judged against the guarded original, as given
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feeds)[0].ravel()
    compiled = ov.Core().compile_model(str(row.path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    got = np.asarray(compiled(feeds)[0]).ravel()
    cos = float(want.astype(np.float64) @ got / (np.linalg.norm(want) * np.linalg.norm(got)))
    assert row.cosine == pytest.approx(cos, abs=1e-5)
