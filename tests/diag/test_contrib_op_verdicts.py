"""Per-node verdicts for onnxruntime-genai's com.microsoft ops (issue 26 item 3) against real runs.

The side under test is ``api.check`` on the genai-style LLaMA sample (GroupQueryAttention, MatMulNBits,
RotaryEmbedding, SkipSimplifiedLayerNormalization) on every engine, and on a tiny model with the
final-norm ``SimplifiedLayerNormalization``. Reality, per op: the first node of that op cut out as a
one-node model with the values the full model really gives it (captured here with a plain onnxruntime
session on a decode step written in this file), then run on a plain onnxruntime session (its output must
equal the full model's), a plain ``openvino.Core`` compile and infer, and MNN and LiteRT through the
agreement tests' children (MNNConvert + Module API, onnx2tf + ai_edge_litert, nothing of the studio's).
TensorRT needs a GPU: its verdict must be the support table's, read here from the table's source file.

A node verdict is a claim: supported/restricted = runs, unsupported = fails, unknown = none (LiteRT's
converter stops at the first op it cannot convert: only that op gets a claim, and only claimed ops are
converted here).
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from studio import api
from tests.conftest import ROOT, SAMPLES
from tests.diag.agreement import reality
from tests.engine_facts import openvino_reduces_precision_by_default
from tests.requirements import require_engine

# "with warnings" only where OpenVINO computes below f32 by default (OV-PRECISION), as it reports for this CPU.
OV_RUNS = "runs with warnings" if openvino_reduces_precision_by_default() else "runs"

GENAI = SAMPLES / "llama_genai.onnx"
OPS = ("GroupQueryAttention", "MatMulNBits", "RotaryEmbedding", "SkipSimplifiedLayerNormalization")
CLAIM = {"supported": True, "restricted": True, "unsupported": False, "unknown": None}
TRT_TABLE = ROOT / "diagnostics" / "support_tables" / "tensorrt_10.x_operators.psv"


def _decode_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The test's own decode step: 1 new token after a past of 8, mask of 9 ones, position 8."""
    rng = np.random.default_rng(26)
    feeds = {"input_ids": np.array([[17]], np.int64), "attention_mask": np.ones((1, 9), np.int64),
             "position_ids": np.array([[8]], np.int64)}
    for vi in model.graph.input:
        if vi.name.startswith("past_key_values."):
            feeds[vi.name] = rng.standard_normal((1, 2, 8, 8)).astype(np.float32)
    return feeds


def _captured(model: onnx.ModelProto, names: set[str]) -> dict[str, np.ndarray]:
    """Every value in ``names`` as the full model computes it (plain onnxruntime, optimizations off)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output} | {i.name for i in probe.graph.input} | {
        t.name for t in probe.graph.initializer}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in sorted(names - known))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = _decode_feeds(model)
    values = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    values.update(feeds)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return {n: values[n] if n in values else inits[n] for n in names}


def _shape(name: str, shape: tuple[int, ...], dynamic: bool) -> list:
    """The real shape, or (``dynamic``) named dims but the last, as the full model's values are dynamic."""
    return [d if not dynamic or i == len(shape) - 1 else f"{name[-24:]}_{i}" for i, d in enumerate(shape)]


def _one_node(model: onnx.ModelProto, node: onnx.NodeProto, values: dict[str, np.ndarray],
              dynamic: bool) -> onnx.ModelProto:
    """``node`` alone: float inputs computed by other nodes become graph inputs (of their real shape, or
    ``dynamic`` as in the full model: OpenVINO 2026.4's GroupQueryAttention fails on static shapes only),
    everything else (weights, integer lengths) initializers holding the real values."""
    inits = {t.name for t in model.graph.initializer}
    graph_inputs, initializers = [], []
    for name in dict.fromkeys(x for x in node.input if x):
        v = values[name]
        if name not in inits and v.dtype == np.float32:
            graph_inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, _shape(name, v.shape, dynamic)))
        else:
            initializers.append(numpy_helper.from_array(v, name))
    outputs = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(values[o].dtype),
                                             _shape(o, values[o].shape, dynamic)) for o in node.output if o]
    graph = helper.make_graph([node], f"one_{node.op_type}", graph_inputs, outputs, initializers)
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _run_ort(path, feeds) -> dict:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _run_openvino(path, feeds) -> bool:
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    compiled.create_infer_request().infer(feeds)
    return True


def _trt_table_ops() -> set[str]:
    ops = set()
    for line in TRT_TABLE.read_text().splitlines():
        if line.strip() and not line.startswith(("#", "@")):
            op, supported = (p.strip() for p in line.split("|")[:2])
            if supported == "Y":
                ops.add(op)
    return ops


def _verdicts(report, domain: str = "com.microsoft") -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for nv in report.nodes:
        if nv.domain == domain:
            out.setdefault((nv.engine, nv.op_type), set()).add(nv.status)
    return out


def _cut_models(model, ops, work):
    """{op: (one-node model with dynamic dims, the same with static dims, its float inputs, the outputs the
    full model gave)}: the dynamic one for the runs fed the real values here (ORT, OpenVINO), the static one
    for the agreement children, whose own recipe reads the shapes from the model (MNN, LiteRT)."""
    nodes = {op: next(n for n in model.graph.node if n.op_type == op) for op in ops}
    needed = {x for n in nodes.values() for x in (*n.input, *n.output) if x}
    values = _captured(model, needed)
    cut = {}
    for op, node in nodes.items():
        paths = []
        for dynamic in (True, False):
            one = _one_node(model, node, values, dynamic)
            onnx.checker.check_model(one)
            paths.append(work / ("dynamic" if dynamic else "static") / f"{op}.onnx")
            paths[-1].parent.mkdir(exist_ok=True)
            onnx.save(one, str(paths[-1]))
        cut[op] = (*paths, {i.name: values[i.name] for i in one.graph.input}, {o: values[o] for o in node.output if o})
    return cut


def _agree(report, cut, work, domain="com.microsoft") -> dict[str, int]:
    """Assert every claimed node verdict matches reality for the cut models; claims per engine."""
    verdicts = _verdicts(report, domain)
    real: dict[tuple[str, str], bool] = {}
    for op, (path, _static, feeds, want) in cut.items():
        got = _run_ort(path, feeds)             # plain onnxruntime: runs, and equals the full model
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{op} {name}")
        real[("onnxruntime", op)] = True
        try:
            real[("openvino", op)] = _run_openvino(path, feeds)
        except Exception:  # noqa: BLE001 - OpenVINO refusing the op is reality's answer
            real[("openvino", op)] = False
    for engine in ("mnn", "litert"):          # converted engines: only the ops the check makes a claim on
        claimed = {op: static for op, (_, static, _, _) in cut.items()
                   if {CLAIM[s] for s in verdicts.get((engine, op), ())} - {None}}
        outcomes = reality(engine, list(claimed.values()), work / engine) if claimed else {}
        for op, path in claimed.items():
            assert outcomes[path].ran is not None, (engine, op, outcomes[path].message)
            real[(engine, op)] = outcomes[path].ran
    for engine in ("onnxruntime", "openvino", "mnn", "litert"):
        for op in cut:
            assert verdicts.get((engine, op)), f"no node verdict for {op} on {engine}"
    claims: dict[str, int] = {}
    for (engine, op), ran in real.items():
        statuses = verdicts[(engine, op)]
        said = {CLAIM[s] for s in statuses} - {None}
        assert len(said) <= 1, (engine, op, statuses)
        if said:
            assert said == {ran}, f"{engine} {op}: check says {statuses}, reality ran={ran}"
            claims[engine] = claims.get(engine, 0) + 1
    return claims


@pytest.mark.slow
@pytest.mark.timeout(1500)      # MNN and LiteRT convert four one-node models each on a loaded machine
def test_genai_contrib_op_verdicts_agree_with_real_runs(tmp_path):
    for engine in ("onnxruntime", "openvino", "mnn", "litert"):
        require_engine(engine)
    report = api.check(api.load(GENAI), ["onnxruntime", "openvino", "mnn", "litert", "tensorrt"])
    model = onnx.load(str(GENAI))
    assert {n.op_type for n in model.graph.node if n.domain == "com.microsoft"} == set(OPS)
    claims = _agree(report, _cut_models(model, OPS, tmp_path), tmp_path)
    # every op has a claim on the engines that decide per node; LiteRT's converter stops at its first refusal
    assert claims["onnxruntime"] == claims["openvino"] == claims["mnn"] == len(OPS), claims
    assert claims.get("litert", 0) >= 1, claims
    verdicts = _verdicts(report)
    assert verdicts[("mnn", "MatMulNBits")] == {"unsupported"} and verdicts[("onnxruntime", "MatMulNBits")] == {
        "supported"}
    # TensorRT: the support table's word, nothing else (no GPU here). The table lists ONNX-domain ops: three
    # of these are not in it at all, and its RotaryEmbedding is ONNX's (opset 23, inputs in another order)
    table = _trt_table_ops()
    assert table & set(OPS) == {"RotaryEmbedding"}
    trt = [nv for nv in report.nodes if nv.engine == "tensorrt" and nv.domain == "com.microsoft"]
    assert {nv.op_type for nv in trt} == set(OPS)
    for nv in trt:
        assert nv.status == "unsupported" and nv.source.startswith("support table"), nv
        assert "(domain com.microsoft) not supported" in nv.reason, nv
    assert report.verdict("tensorrt").verdict == "fails"
    # the engines' whole-model verdicts follow: ORT and OpenVINO run it (both steps), MNN and LiteRT cannot
    assert report.verdict("onnxruntime").verdict == "runs" and report.verdict("openvino").verdict == OV_RUNS
    assert report.verdict("onnxruntime").ran_on["steps"][0].startswith("prefill step (past length 0")
    assert report.verdict("mnn").verdict == "fails" and report.verdict("litert").verdict == "fails"


def _final_norm(path):
    """x [batch, 4, 16] -> SimplifiedLayerNormalization (RMSNorm, the genai builder's final norm; ONNX Runtime
    registers it in the ONNX domain) with a scale of 16."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 16])
    scale = numpy_helper.from_array(np.linspace(0.5, 1.5, 16).astype(np.float32), "scale")
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="final_norm", axis=-1,
                            epsilon=1e-5, stash_type=1)
    model = helper.make_model(helper.make_graph([node], "final_norm", [x], [y], [scale]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path, numpy_helper.to_array(scale)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_simplified_layer_norm_verdicts_agree_with_real_runs(tmp_path):
    for engine in ("onnxruntime", "openvino", "mnn", "litert"):
        require_engine(engine)
    path, scale = _final_norm(tmp_path / "final_norm.onnx")
    report = api.check(api.load(path), ["onnxruntime", "openvino", "mnn", "litert", "tensorrt"])
    verdicts = _verdicts(report, domain="")
    x = np.random.default_rng(3).standard_normal((2, 4, 16)).astype(np.float32)
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * scale           # RMSNorm by hand
    np.testing.assert_allclose(_run_ort(path, {"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    real = {"onnxruntime": True}
    try:
        real["openvino"] = _run_openvino(path, {"x": x})
    except Exception:  # noqa: BLE001 - OpenVINO refusing the op is reality's answer
        real["openvino"] = False
    for engine in ("mnn", "litert"):
        outcome = reality(engine, [path], tmp_path / engine)[path]
        assert outcome.ran is not None, outcome.message
        real[engine] = outcome.ran
    for engine, ran in real.items():
        statuses = verdicts[(engine, "SimplifiedLayerNormalization")]
        assert {CLAIM[s] for s in statuses} == {ran}, (engine, statuses, ran)
    (trt,) = [nv for nv in report.nodes if nv.engine == "tensorrt"]
    assert "SimplifiedLayerNormalization" not in _trt_table_ops()
    assert trt.status == "unsupported" and trt.source.startswith("support table")
