"""Identical findings (same code and message on many nodes) are one collapsed group with a count and
the node list inside, not one expanded panel each (issue 15: 38 TensorRT findings made a 9,500-px page)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from studio.core.findings import Finding, group_findings
from tests.conftest import save

NAMES = [f"fix-input-shapes_a.b(c)_{i}" for i in range(7)]


def _custom_chain(path):
    nodes, prev = [], "x"
    for i, name in enumerate(NAMES):
        nodes.append(helper.make_node("MyOp", [prev], [f"t{i}"], name=name, domain="my.ops"))
        prev = f"t{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.ops", 1)])
    return save(model, path)


def test_group_findings_counts_and_keeps_severity_order():
    info = Finding("NOTE", "info", "just so you know")
    errs = [Finding("X-UNSUPPORTED", "error", "op Foo is not supported", engine="e", node=f"n{i}") for i in range(3)]
    warn = Finding("W", "warning", "careful", node="n9")
    groups = group_findings([info, errs[0], warn, errs[1], errs[2]])
    assert [(g.code, g.count, g.severity) for g in groups] == [("X-UNSUPPORTED", 3, "error"), ("W", 1, "warning"),
                                                               ("NOTE", 1, "info")]
    assert groups[0].nodes == ("n0", "n1", "n2") and groups[0].engines == ("e",)


def test_compatibility_page_groups_identical_findings(app, tmp_path):
    model = _custom_chain(tmp_path / "custom_chain.onnx")
    at = app(str(model)).run()
    at.switch_page("views/compatibility.py").run()
    assert not at.exception
    labels = [e.label for e in at.expander if "ORT-NO-KERNEL" in e.label]
    assert len(labels) == 1 and "×7" in labels[0], labels
    groups = [e for e in at.expander if any(c in e.label for c in ("NO-KERNEL", "UNSUPPORTED", "CUSTOM-OP"))]
    assert groups and not any(e.proto.expanded for e in groups)          # collapsed by default
    severities = [e.label.split(" ")[0] for e in groups]
    assert severities == sorted(severities, key=["🛑", "⚠️", "ℹ️"].index)  # errors first
    node_lists = [list(d.value["node"]) for d in at.dataframe if list(d.value.columns) == ["node"]]
    assert NAMES in node_lists                                             # the nodes, plain text, inside
