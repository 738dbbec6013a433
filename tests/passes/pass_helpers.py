"""Running one pass the way a test should: through the pipeline (so ORT with
optimizations off compares outputs on seeded inputs), then the full checker,
then a second run that must change nothing. Also the models several pass tests share."""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper

from passes.pipeline import PipelineResult, run_passes
from passes.registry import make_pass
from studio.verification.verifier import interface_problems
from tests.conftest import parse_model, save


def assert_plain_ort_equal(src: Path, out: Path, inputs: list[dict], *, exact: bool = False,
                           rtol: float = 1e-5, atol: float = 1e-5) -> None:
    """The oracle of a rewrite: plain onnxruntime runs the result with its optimizer off and at ORT_ENABLE_ALL,
    and each equals the original (optimizer off) on every feed set of ``inputs``."""
    import numpy as np
    import onnxruntime as ort

    def session(path: Path, level) -> ort.InferenceSession:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    off, on = ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    original, results = session(src, off), [session(out, off), session(out, on)]
    for feeds in inputs:
        ref = original.run(None, feeds)
        for result in results:
            for got, want in zip(result.run(None, feeds), ref):
                if exact:
                    np.testing.assert_array_equal(got, want)
                else:
                    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def mlp(nodes: list[onnx.NodeProto], inits: list[onnx.TensorProto], width_in: int, width_out: int,
        batch: int = 4) -> onnx.ModelProto:
    """x[batch, width_in] -> ``nodes`` -> y[batch, width_out] (opset 17, IR 8): the float MLPs the INT8
    passes are tried on."""
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width_in])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width_out])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


# A Reshape whose target shape is computed from the input's symbolic batch (Shape -> Gather -> Unsqueeze
# -> Concat): nothing folds while batch is unknown; fixing it (or a static input) makes the subgraph constant.
BATCH_RESHAPE = '<ir_version: 8, opset_import: ["" : 17]>' + """
g (float[batch,3,4,4] x) => (float[batch,48] y) <int64 zero = {0}, int64[1] ax = {0}, int64[1] rest = {-1}> {
  s = Shape(x)
  b = Gather(s, zero)
  bu = Unsqueeze(b, ax)
  shp = Concat<axis=0>(bu, rest)
  y = Reshape(x, shp)
}"""


def ops(path: Path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node]


def run_one(tmp_path: Path, model: str | onnx.ModelProto, name: str, *, options: dict | None = None,
            dims: dict | None = None, tag: str = "a") -> PipelineResult:
    proto = parse_model(model) if isinstance(model, str) else model
    src = save(proto, tmp_path / f"in-{tag}" / "m.onnx")
    return run_passes(src, [make_pass(name, **(options or {}))], tmp_path / f"out-{tag}" / "m.onnx", dims=dims)


def check_applies(tmp_path: Path, model: str | onnx.ModelProto, name: str, expected_ops: list[str] | None = None,
                  *, options: dict | None = None, dims: dict | None = None, numeric: bool = True) -> PipelineResult:
    """The pass changes the model, verification passes (numerically unless told
    otherwise), the result passes the full check, keeps the interface (unless the
    pass changes it on purpose) and a second run changes nothing."""
    r = run_one(tmp_path, model, name, options=options, dims=dims)
    rec = r.records[0]
    assert rec.status == "changed", (rec.status, rec.message, rec.notes)
    assert rec.verification is not None and rec.verification.ok, rec.verification
    if numeric:
        assert rec.verification.numeric_status == "passed", rec.verification
    if expected_ops is not None:
        assert ops(r.output) == expected_ops
    onnx.checker.check_model(str(r.output), full_check=True)
    original = onnx.load(str(tmp_path / "in-a" / "m.onnx"))
    result = onnx.load(str(r.output))
    if not make_pass(name).changes_interface:
        assert interface_problems(original, result) == []
    again = run_passes(r.output, [make_pass(name, **(options or {}))], tmp_path / "out-again" / "m.onnx",
                         dims=dims)
    assert again.records[0].status == "unchanged", again.records[0].changes
    return r


def check_skips(tmp_path: Path, model: str | onnx.ModelProto, name: str, *, options: dict | None = None,
                dims: dict | None = None) -> PipelineResult:
    """The pass must leave this model alone (byte-identical result)."""
    r = run_one(tmp_path, model, name, options=options, dims=dims, tag="skip")
    rec = r.records[0]
    assert rec.status == "unchanged", (rec.status, rec.changes)
    assert Path(r.output).read_bytes() == (tmp_path / "in-skip" / "m.onnx").read_bytes()
    return r
