"""The whole agreement sweep (R55): every sample model and every model under the onnx wheel's
backend/test/data, check against independent reality on ONNX Runtime, OpenVINO, MNN and LiteRT.
About an hour on 2 cores (LiteRT converts each model twice: once for the check, once for reality),
so it is `make sweep`, not part of `make test`; CI runs the stratified share in test_agreement.py.
This file's name keeps pytest's default collection away from it; `make sweep` names it."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, backend_models
from tests.diag.test_agreement import sweep_report


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_every_sample_and_backend_model_agrees(tmp_path):
    sweep_report(sorted(SAMPLES.glob("*.onnx")) + backend_models(), tmp_path)
