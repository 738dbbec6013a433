"""OpenVINO renames a parameter when it folds a sequence away: in the onnx wheel's
test_sequence_model1-3 (SequenceInsert ... SequenceAt) an ONNX input (``Y`` in model 1) becomes OpenVINO's ``out``.
Found by the independent agreement test (tests/diag/agreement.py): OpenVINO runs these models,
the check said "fails" ("no feed for OpenVINO input ['out']"). Inputs that match no name are fed
by position when exactly as many feeds remain and the shapes fit; the oracle is a plain
onnxruntime session on the same inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov
import pytest

from studio import api
from studio.core.engines import get_engine
from tests.conftest import ONNX_DATA
from tests.engine_facts import openvino_reduces_precision_by_default

# "with warnings" only where OpenVINO computes below f32 by default (OV-PRECISION), as it reports for this CPU.
OV_RUNS = "runs with warnings" if openvino_reduces_precision_by_default() else "runs"


def _model(n: int):
    return ONNX_DATA / "simple" / f"test_sequence_model{n}" / "model.onnx"


def _feeds(path):
    rng = np.random.default_rng(3)
    model = onnx.load(str(path))
    inits = {t.name for t in model.graph.initializer}
    return {i.name: rng.random([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input if i.name not in inits}


@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_renamed_parameter_is_fed_by_position(n):
    path = _model(n)
    feeds = _feeds(path)
    names = {nm for port in ov.Core().read_model(str(path)).inputs for nm in port.get_names()}
    assert set(feeds) - names and "out" in names          # the premise: OpenVINO really renamed an input
    assert api.check(api.load(path), ["openvino"]).verdict("openvino").verdict == OV_RUNS
    got = get_engine("openvino").run(path, feeds).outputs
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert list(got) == ["out"]
    np.testing.assert_allclose(got["out"], want[0], rtol=1e-6, atol=1e-6)


def test_position_is_not_guessed_when_the_feeds_do_not_fit():
    """A feed of the wrong shape for the renamed input is still an error naming the input."""
    from studio.core.engines.openvino_io import openvino_inputs

    ports = list(ov.Core().compile_model(str(_model(1)), "CPU").inputs)
    feeds = _feeds(_model(1))
    feeds["Y"] = np.zeros((7, 7), np.float32)
    with pytest.raises(KeyError, match="missing feed for model input"):
        openvino_inputs(ports, feeds)
    assert sorted(openvino_inputs(ports, _feeds(_model(1)))) == [0, 1, 2]
