"""Fixtures of the diagnostics tests: a model file built in code, and R18/R19 models."""

from __future__ import annotations

import pytest

from tests.conftest import save


@pytest.fixture
def model_file(tmp_path):
    def make(model, name: str = "model.onnx"):
        return save(model, tmp_path / name)
    return make
