"""The Profile page's generation section (studio/ui/generation_section.py) through AppTest."""

from __future__ import annotations

import pytest

from tests.conftest import SAMPLES, table_with


def _charts(at) -> str:
    return " ".join(str(c.proto.spec) for c in at.get("plotly_chart"))


def _profile(at):
    at.switch_page("views/profile.py").run()
    assert not at.exception
    return at


def test_no_generation_section_for_a_model_without_cache(app):
    at = _profile(app(str(SAMPLES / "cnn_unfused.onnx")).run())
    assert "profile_generate_run" not in [b.key for b in at.button]


@pytest.mark.slow
def test_generation_section_runs_and_charts(app):
    at = _profile(app(str(SAMPLES / "llama_optimum.onnx")).run())
    at.multiselect(key="profile_engines").set_value(["ort", "ov"])
    at.text_input(key="profile_gen_lengths").set_value("4,8")
    at.number_input(key="profile_gen_tokens").set_value(4)
    at.number_input(key="profile_gen_count").set_value(2)
    at.run()
    hint = " ".join(c.value for c in at.code)
    assert ("onnx-studio profile llama_optimum.onnx --generate --engine ort,ov --prompt-lengths 4,8 "
            "--new-tokens 4 --generations 2") in hint
    at.button(key="profile_generate_run").click().run()
    assert not at.exception and not at.error
    table = table_with(at, "TTFT ms")
    assert list(zip(table["variant"], table["prompt"])) == [("t0-ort", 4), ("t0-ort", 8), ("t0-ov", 4), ("t0-ov", 8)]
    assert (table["status"] == "ok").all() and (table["decode p50 ms"] > 0).all()
    assert list(table["tokens/s"]) == pytest.approx(list(1000 / table["decode p50 ms"]), rel=1e-3, abs=0.06)
    ratios = table_with(at, "decode ratio")
    assert list(ratios["variant"]) == ["t0-ov", "t0-ov"] and ratios["same tokens"].all()
    charts = _charts(at)
    assert "Decode latency against position" in charts and "Memory against length" in charts
    assert "t0-ov prompt 8 batch 1" in charts
