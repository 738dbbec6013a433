"""Diff of two versions: the PyTorch-style CNN against its hand-optimized
version (BN folded into Conv, Identity/Dropout removed), with and without a
pipeline that renames every node; lineage from pipeline records; the union
and side-by-side views; workspace versions."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from studio import api
from studio.core.workspace import Workspace
from studio.graphview.diff import ADDED, CHANGED, REMOVED, UNCHANGED, diff_graphs
from studio.graphview.diffview import REMOVED_PREFIX, changed_nodes, union_graph
from studio.graphview.lineage import lineage_between, parse_pipeline
from studio.graphview.model import graph_from_proto
from tests.conftest import SAMPLES, parse_model
from tests.graphview.optimized import fold_conv_bn

BN = "BatchNormalization"


@pytest.fixture(scope="module")
def unfused():
    return onnx.load(str(SAMPLES / "cnn_unfused.onnx"))


def _diff(before, after, records):
    return diff_graphs(graph_from_proto(before, "before"), graph_from_proto(after, "after"), lineage=records,
                       model_a=before, model_b=after)


def test_the_optimized_model_is_equivalent(unfused):
    """The hand-made optimization is a real one (so the diff below diffs a real pipeline)."""
    opt, _ = fold_conv_bn(unfused, rename=True)
    x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
           for m in (unfused, opt)]
    np.testing.assert_allclose(run[0], run[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("rename", [False, True], ids=["names-kept", "all-renamed"])
def test_fused_batchnorms_are_removed_by_the_conv_bn_pass(unfused, rename):
    opt, records = fold_conv_bn(unfused, rename=rename)
    d = _diff(unfused, opt, records)
    removed = d.by_status(REMOVED)
    bns = sorted(d.a.nodes[e.a].name for e in removed if d.a.nodes[e.a].op_type == BN)
    all_bns = sorted(n.name for n in unfused.graph.node if n.op_type == BN)
    assert bns == all_bns and len(bns) == 7
    assert sorted(d.removed_by("fuse-conv-bn")) == all_bns
    for e in removed:
        op = d.a.nodes[e.a].op_type
        passes = {(c.pass_name, c.kind) for c in e.lineage}
        assert passes == ({("fuse-conv-bn", "fused")} if op == BN else {("eliminate-identity", "removed")})
    assert {d.a.nodes[e.a].op_type for e in removed} == {BN, "Identity", "Dropout"}
    # Each Conv that absorbed a BN changed (it gained a bias); nothing was added.
    changed = d.by_status(CHANGED)
    assert len(changed) == 7 and {d.b.nodes[e.b].op_type for e in changed} == {"Conv"}
    assert all(any(r.startswith("inputs: 2 → 3") for r in e.reasons) for e in changed)
    assert d.counts() == {UNCHANGED: 19, CHANGED: 7, ADDED: 0, REMOVED: 11}
    # A Relu that now reads its Conv directly was rewired, not changed; renames are noted.
    relu = next(e for e in d.entries if e.a is not None and d.a.nodes[e.a].name == "/relu/Relu")
    assert relu.status == UNCHANGED and "rewired" in relu.reasons
    assert ("renamed" in relu.reasons) == rename
    if rename:
        assert d.matched_by.get("structure", 0) >= 20
    rows = {r.op_type: (r.before, r.after) for r in d.op_counts}
    assert rows[BN] == (7, 0) and rows["Conv"] == (7, 7) and rows["Identity"] == (2, 0) and rows["Dropout"] == (2, 0)
    assert d.passes == ("fuse-conv-bn", "eliminate-identity")


def test_identical_models_are_all_unchanged(unfused):
    d = _diff(unfused, unfused, None)
    assert d.counts()[UNCHANGED] == len(unfused.graph.node) and sum(d.counts().values()) == len(unfused.graph.node)


def test_attribute_and_constant_changes_and_additions():
    a = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1,4] x) => (float[1,4] y) '
                    '<float[4] w = {1,2,3,4}> { t = Mul(x, w) y = Softmax <axis = 1> (t) }')
    b = parse_model('<ir_version: 8, opset_import: ["" : 17]> g (float[1,4] x) => (float[1,4] y) '
                    '<float[4] w = {1,2,3,5}> { t = Mul(x, w) u = Relu(t) y = Softmax <axis = -1> (u) }')
    for m, names in ((a, ["mul", "softmax"]), (b, ["mul", "relu", "softmax"])):
        for n, name in zip(m.graph.node, names):
            n.name = name
    d = _diff(a, b, [{"name": "my-pass", "changes": [{"kind": "added", "nodes": ["relu"]}]}])
    status = {d.name(e): (e.status, e.reasons) for e in d.entries if d.b.nodes[e.b if e.b is not None else 0]}
    assert status["relu"][0] == ADDED
    assert status["softmax"][0] == CHANGED and "attributes: axis" in status["softmax"][1]
    assert status["mul"][0] == CHANGED and "input 1: constant values differ" in status["mul"][1]
    added = d.by_status(ADDED)[0]
    assert [(c.pass_name, c.kind) for c in added.lineage] == [("my-pass", "added")]


def test_union_graph_and_side_views(unfused):
    opt, records = fold_conv_bn(unfused, rename=True)
    d = _diff(unfused, opt, records)
    u = union_graph(d)
    removed = [n for n in u.graph.nodes if n.id.startswith(REMOVED_PREFIX)]
    assert len(removed) == 11
    assert len(u.graph.nodes) == len(d.b.nodes) + 11
    # The removed BN keeps its place: an edge from the Conv it was fused into, into its old consumer.
    bn = next(n for n in removed if n.name == "/bn1/BatchNormalization")
    assert any(e.dst == bn.index for e in u.graph.edges) and any(e.src == bn.index for e in u.graph.edges)
    assert "fused by fuse-conv-bn" in u.overlay.details[bn.id]
    region = changed_nodes(u)
    assert bn.index in region and len(region) < len(u.graph.nodes)
    overlay_view, = api.diff_views(d, "overlay")
    i = next(i for i in range(len(overlay_view)) if overlay_view.item_key(i) == bn.id)
    assert overlay_view.painted.values[i] == REMOVED
    assert ("diff", "fused by fuse-conv-bn (BatchNormalization folded into /conv1/Conv)") in \
        overlay_view.tooltip_lines(i)
    before, after = api.diff_views(d, "side-by-side")
    assert {before.painted.values[i] for i in range(len(before))} >= {REMOVED, CHANGED, UNCHANGED}
    assert REMOVED not in {after.painted.values[i] for i in range(len(after))}
    region_view = api.diff_region_view(d)
    assert region_view.mode == "region" and len(region_view) <= 300
    tables = api.diff_tables(d)
    ops = {r[0]: r for r in tables[0].rows}
    assert ops[BN][1:] == ("7", "0", "-7")


def test_lineage_records_are_validated():
    recs = parse_pipeline([{"name": "ok", "modified": True, "changes": [
        {"kind": "removed", "nodes": ["a", 3, None], "detail": "x" * 10_000},
        {"kind": "exploded", "nodes": ["b"]}, "junk"]}, {"no": "name"}, 42])
    assert len(recs) == 1 and recs[0].changes[0].nodes == ("a",) and len(recs[0].changes[0].detail) == 500
    assert parse_pipeline("not a list") == () and parse_pipeline(None) == ()


def test_workspace_versions_diff_with_lineage(tmp_path, unfused):
    ws = Workspace(tmp_path / "ws")
    v0 = ws.add_file(SAMPLES / "cnn_unfused.onnx")
    opt, records = fold_conv_bn(unfused)
    v1 = ws.add_model(opt, "fused", v0.id, {"pipeline": records[:1]})
    v2 = ws.add_model(opt, "cleaned", v1.id, {"pipeline": records[1:]})
    assert [r["name"] for r in lineage_between(ws, v0.id, v2.id)] == ["fuse-conv-bn", "eliminate-identity"]
    assert lineage_between(ws, v2.id, v0.id) == []          # not a descendant: no lineage
    d = api.diff_versions(ws, v0.id, v2.id)
    assert len(d.removed_by("fuse-conv-bn")) == 7 and d.passes == ("fuse-conv-bn", "eliminate-identity")
