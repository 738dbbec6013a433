"""The Precision page's int4 variant on a KV-cache decoder through AppTest: the weight-only options reach the
pass (block 16, asymmetric: MatMulNBits with zero points in the kept model), the table shows next-token
agreement and KL, the per-MatMul errors are listed, and the CLI line carries the same flags."""

from __future__ import annotations

import onnx
import pytest

from tests.conftest import SAMPLES

pytestmark = pytest.mark.slow


def test_precision_page_int4_on_a_decoder(app):
    at = app(str(SAMPLES / "llama_optimum.onnx")).run()
    at.switch_page("views/precision.py").run()
    assert not at.exception
    at.multiselect(key="precision_variants").set_value(["fp32", "int4"]).run()
    at.selectbox(key="precision_block").set_value("16").run()
    at.checkbox(key="precision_symmetric").uncheck().run()
    at.number_input(key="precision_budget").set_value(5).run()
    at.button(key="precision_run").click().run()
    assert not at.exception, at.exception
    table = at.dataframe[0].value
    assert list(table["variant"]) == ["fp32", "int4"]
    row = table[table["variant"] == "int4"].iloc[0]
    assert 0.0 <= float(row["next-token agreement"]) <= 1.0 and float(row["KL (nats)"]) > 0
    assert table[table["variant"] == "fp32"].iloc[0]["next-token agreement"] == ""      # the baseline itself
    assert any("quantized MatMul" in e.label for e in at.expander)
    code = " ".join(c.value for c in at.code)
    assert "--variants fp32,int4" in code and "--block-size 16" in code and "--asymmetric" in code
    _, (_, report) = at.session_state["onnx_studio_results"]["precision_report"]
    path = report.variant("int4").path
    q = onnx.load(path)
    nbits = [n for n in q.graph.node if n.op_type == "MatMulNBits"]
    assert nbits and all(len(n.input) >= 4 and n.input[3] for n in nbits)     # asymmetric: zero points
    assert all(a.i == 16 for n in nbits for a in n.attribute if a.name == "block_size")
