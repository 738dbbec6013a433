"""NNCF INT8 for OpenVINO on a transformer uses NNCF's transformer scheme (``ModelType.TRANSFORMER``).

Oracle: ``nncf.quantize`` called here directly, with and without ``model_type=TRANSFORMER``, on the
same calibration sets: the studio's IR places FakeQuantize exactly where the transformer call does,
and the default scheme places them differently (so the test fails if the model type is dropped).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx
import pytest

from passes.transformer_fusion import is_transformer
from studio.precision.nncf_int8 import quantize_openvino
from tests.conftest import SAMPLES
from tests.requirements import require_module

require_module("nncf")


def _sets(n: int = 4) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [{"input_ids": rng.integers(0, 1000, (1, 16), dtype=np.int64),
             "attention_mask": np.ones((1, 16), np.int64)} for _ in range(n)]


def _fq_inputs(model) -> Counter:
    """Which op types each FakeQuantize feeds: where the scheme puts quantizers."""
    return Counter(c.get_node().get_type_name() for op in model.get_ops() if op.get_type_name() == "FakeQuantize"
                   for out in op.outputs() for c in out.get_target_inputs())


def _oracle(path, sets, transformer: bool) -> Counter:
    os.environ["NNCF_CI"] = "1"
    import nncf
    import openvino as ov

    model = ov.Core().read_model(str(path))
    kw = {"model_type": nncf.ModelType.TRANSFORMER} if transformer else {}
    return _fq_inputs(nncf.quantize(model, nncf.Dataset(sets), subset_size=len(sets), **kw))


@pytest.mark.slow
def test_transformer_model_type_reaches_nncf(tmp_path):
    import openvino as ov

    src = SAMPLES / "transformer_block.onnx"
    assert is_transformer(onnx.load(str(src), load_external_data=False))
    assert not is_transformer(onnx.load(str(SAMPLES / "cnn_unfused.onnx"), load_external_data=False))
    sets = _sets()
    r = quantize_openvino(src, sets, tmp_path / "q")
    assert r.model_type == "transformer"
    got = _fq_inputs(ov.Core().read_model(str(r.ir_path)))
    assert got == _oracle(src, sets, transformer=True)
    assert got != _oracle(src, sets, transformer=False)
