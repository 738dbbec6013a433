"""Layer-wise comparison on MNN and LiteRT: their converters fuse activations under the
producer's tensor name (MNN's Gemm_output_0 holds HardSwish(Gemm)), keep fully connected
results 4-D, store tensors channels-last under shapes that read the same both ways, and
onnx2tf refuses PyTorch-style output names. None of these is a divergence; a changed weight is."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from studio import api
from tests.conftest import SAMPLES
from tests.requirements import require_engine

MODEL = SAMPLES / "mobilenet_like.onnx"


def _perturbed(tmp_path, conv_index: int) -> tuple[str, str]:
    """A copy of the model with the weight of its ``conv_index``-th Conv scaled: (path, node name)."""
    m = onnx.load(str(MODEL))
    convs = [n for n in m.graph.node if n.op_type == "Conv"]
    node = convs[conv_index]
    inits = {t.name: t for t in m.graph.initializer}
    w = numpy_helper.to_array(inits[node.input[1]])
    inits[node.input[1]].CopyFrom(numpy_helper.from_array((w * 1.5).astype(w.dtype), node.input[1]))
    path = tmp_path / "perturbed.onnx"
    onnx.save(m, str(path))
    return str(path), node.name


@pytest.mark.parametrize("engine", ["mnn", "litert"])
def test_same_model_has_no_diverging_layer_and_a_changed_weight_is_found(engine, tmp_path):
    require_engine(engine)
    same = api.compare(str(MODEL), str(MODEL), engine="ort", engine_b=engine, layerwise=True, count=1)
    lw = same.layerwise
    assert lw.compared >= 20 and lw.first_divergence is None, lw.summary()
    if engine == "mnn":
        gemm = [x for x in lw.layers if x.tensor == "/classifier/classifier.0/Gemm_output_0"]
        assert gemm and "fused this op with the next one" in gemm[0].note and not gemm[0].exceeds
    else:
        square = [x for x in lw.layers if x.shape == (1, 16, 16, 16)]
        assert square and all("channels-last" in x.note and not x.exceeds for x in square)
    path, node = _perturbed(tmp_path, 3)
    changed = api.compare(str(MODEL), path, engine="ort", engine_b=engine, layerwise=True, count=1).layerwise
    assert changed.first_divergence is not None and changed.first_divergence.node == node, changed.summary()
    before = [x for x in changed.layers if x.index < changed.first_divergence.index]
    assert before and not any(x.exceeds for x in before)


def test_other_rank_is_the_same_values_only_when_only_unit_axes_differ():
    from studio.accuracy.layerwise import same_values_other_rank

    ref = np.arange(32, dtype=np.float32).reshape(1, 32)
    assert same_values_other_rank(ref.reshape(1, 32, 1, 1), ref).shape == (1, 32)
    assert same_values_other_rank(ref.reshape(1, 4, 8), ref).shape == (1, 4, 8)      # a real shape change
