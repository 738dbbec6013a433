"""NNCF's transformer INT8 with the cosine guard (issue 35): when the full INT8 model misses the cosine bound
on the calibration samples, the FFN down-projections are left in float.

Oracles: plain ``nncf.quantize`` with ``IgnoredScope(names=...)`` called here (the guarded IR places its
FakeQuantize exactly there), the weight shapes read here from the ONNX file (which MatMuls are
down-projections), and plain onnxruntime fp32 vs plain openvino on the produced IR (cosine >= 0.99).
The guard is forced by an unreachable bound (1.01) and kept off by 0: no dependence on the CPU's numerics.
SmoothQuant's MatMul alpha (what the guard tries before float layers): the smoothing scales in the studio's IR equal
those of plain ``nncf.quantize`` with that alpha, and differ from NNCF's default alpha's.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from studio.precision.nncf_int8 import GUARD_COSINE, SMOOTH_QUANT_ALPHAS, ffn_down_projections, quantize_openvino
from tests.conftest import SAMPLES
from tests.requirements import require_module

require_module("nncf")

SRC = SAMPLES / "transformer_block.onnx"


def _sets(n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [{"input_ids": rng.integers(0, 1000, (1, 16), dtype=np.int64),
             "attention_mask": np.ones((1, 16), np.int64)} for _ in range(n)]


def _fq_targets(model) -> Counter:
    """(consumer's friendly name) for every FakeQuantize: where quantizers sit."""
    return Counter(c.get_node().get_friendly_name() for op in model.get_ops() if op.get_type_name() == "FakeQuantize"
                   for out in op.outputs() for c in out.get_target_inputs())


def _down_projections_from_onnx() -> set[str]:
    """MatMul nodes whose initializer weight is [K, N] with K >= 2N, read from the ONNX file itself."""
    m = onnx.load(str(SRC))
    weights = {i.name: numpy_helper.to_array(i).shape for i in m.graph.initializer}
    return {n.name for n in m.graph.node if n.op_type == "MatMul" and len(weights.get(n.input[1], ())) == 2
            and weights[n.input[1]][0] >= 2 * weights[n.input[1]][1]}


def test_down_projections_are_the_ffn_outputs():
    import openvino as ov

    found = ffn_down_projections(ov.Core().read_model(str(SRC)))
    assert set(found) == _down_projections_from_onnx() and found     # /encoder/layer.0/output/dense/MatMul
    assert GUARD_COSINE == 0.99


@pytest.mark.slow
def test_guard_leaves_ffn_down_projections_in_float(tmp_path):
    os.environ["NNCF_CI"] = "1"
    import nncf
    import openvino as ov

    sets = _sets()
    guarded = quantize_openvino(SRC, sets, tmp_path / "g", guard_cosine=1.01, smooth_quant_alphas=SMOOTH_QUANT_ALPHAS)
    plain = quantize_openvino(SRC, sets, tmp_path / "p", guard_cosine=0.0)
    down = _down_projections_from_onnx()
    assert set(guarded.float_layers) == down and len(guarded.guard_cosine) == 2
    assert plain.float_layers == () and len(plain.guard_cosine) == 1
    # SmoothQuant alphas, when asked (int8-nncf-sq), are tried in order, each judged, before any layer is left in float
    assert [a for a, _ in guarded.smooth_quant_tried] == list(SMOOTH_QUANT_ALPHAS)
    assert guarded.smooth_quant_alpha is None
    assert plain.smooth_quant_tried == () and plain.smooth_quant_alpha is None
    core = ov.Core()
    got, full = (_fq_targets(core.read_model(str(r.ir_path))) for r in (guarded, plain))
    assert not down & set(got) and down <= set(full)          # quantized before, float now
    oracle = nncf.quantize(core.read_model(str(SRC)), nncf.Dataset(sets), subset_size=len(sets),
                           model_type=nncf.ModelType.TRANSFORMER, ignored_scope=nncf.IgnoredScope(names=sorted(down)))
    assert got == _fq_targets(oracle)
    # the IR runs in plain openvino and matches plain onnxruntime fp32
    feeds = _sets(1)[0]
    ref = ort.InferenceSession(str(SRC), providers=["CPUExecutionProvider"]).run(None, feeds)[0].ravel()
    out = np.asarray(core.compile_model(str(guarded.ir_path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(feeds)[0])
    out = out.ravel()
    assert float(ref @ out / (np.linalg.norm(ref) * np.linalg.norm(out))) >= 0.99


def _smooth_scales(model) -> dict[str, np.ndarray]:
    """NNCF's SmoothQuant scale constants (``<source>/nncf_smooth_quant/scale``) by name."""
    return {op.get_friendly_name(): op.get_data().copy() for op in model.get_ops()
            if op.get_type_name() == "Constant" and op.get_friendly_name().endswith("nncf_smooth_quant/scale")}


@pytest.mark.slow
def test_smooth_quant_alpha_reaches_the_ir(tmp_path):
    os.environ["NNCF_CI"] = "1"
    import nncf
    import openvino as ov
    from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters, AdvancedSmoothQuantParameters

    sets = _sets()
    r = quantize_openvino(SRC, sets, tmp_path / "a", smooth_quant_alpha=0.5, guard_cosine=1.01)
    assert r.smooth_quant_alpha == 0.5 and r.smooth_quant_tried == () and r.float_layers == ()   # forced: no guard
    core = ov.Core()
    got = _smooth_scales(core.read_model(str(r.ir_path)))

    def oracle(**advanced):
        q = nncf.quantize(core.read_model(str(SRC)), nncf.Dataset(sets), subset_size=len(sets),
                          model_type=nncf.ModelType.TRANSFORMER, **advanced)
        return _smooth_scales(q)

    want = oracle(advanced_parameters=AdvancedQuantizationParameters(
        smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=0.5)))
    default = oracle()
    assert got and got.keys() == want.keys()
    assert all(np.allclose(got[k], want[k], rtol=1e-6) for k in got)
    assert any(not np.allclose(got[k], default[k], rtol=1e-3) for k in got if k in default)  # not NNCF's 0.95
