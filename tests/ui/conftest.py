"""AppTest helpers: run the real app script with a preloaded model."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import ROOT

APP = str(ROOT / "studio" / "ui" / "app.py")


@pytest.fixture
def app(monkeypatch):
    def make(model: str | None = None, **env: str) -> AppTest:
        if model:
            monkeypatch.setenv("ONNX_STUDIO_MODEL", model)
        else:
            monkeypatch.delenv("ONNX_STUDIO_MODEL", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        return AppTest.from_file(APP, default_timeout=120)
    return make
