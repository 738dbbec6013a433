"""eliminate-identity: no-op nodes go; the interface (names, dtypes, declared
shapes, outer-scope values) never changes."""

from __future__ import annotations

from passes.registry import make_pass
from tests.passes.pass_helpers import check_applies, check_skips

H = '<ir_version: 8, opset_import: ["" : 17]>'


def test_removes_every_kind_of_no_op(tmp_path):
    m = H + """
    g (float[N,4] x) => (float[N,4] y) <int64[2] same = {0, 4}, float[1] one = {1.0}, int64[4] zero_pads = {0,0,0,0},
        int64[1] s0 = {0}, int64[1] e_big = {9223372036854775807}, int64[1] ax = {-1}, int64[1] ones1 = {1}> {
      a = Identity(x)
      b = Dropout(a)
      c = Cast<to=1>(b)
      d = Reshape(c, same)
      e = Transpose<perm=[0,1]>(d)
      f = Pad(e, zero_pads)
      g1 = Slice(f, s0, e_big, ax)
      h = Expand(g1, ones1)
      i = Mul(h, one)
      y = Relu(i)
    }"""
    r = check_applies(tmp_path, m, "eliminate-identity", ["Relu"])
    details = {c.detail for c in r.records[0].changes}
    assert {"Identity", "Dropout in inference", "Transpose with the identity permutation", "Pad by zero",
            "Slice of the whole tensor", "Mul by one"} <= details
    assert r.records[0].counts["nodes_removed"] == 9


def test_identity_to_graph_output_renames_the_producer(tmp_path):
    m = H + "g (float[N,4] x) => (float[N,4] y) { r = Relu(x) y = Identity(r) }"
    check_applies(tmp_path, m, "eliminate-identity", ["Relu"])


def test_interface_identities_are_kept(tmp_path):
    # input -> output, and output -> another output: removing either would rename an interface value.
    m = H + "g (float[N,4] x) => (float[N,4] y, float[N,4] z, float[N,4] w) { y = Identity(x) z = Relu(x) w = Identity(z) }"
    r = check_skips(tmp_path, m, "eliminate-identity")
    assert any("graph output" in n or "graph input" in n for n in r.records[0].notes)


def test_outer_scope_identity_in_if_branch_is_kept(tmp_path):
    # The onnxsim failure mode: an If branch returning Identity(outer value) must keep its Identity.
    m = H + """
    g (float[4] x, bool c) => (float[4] y) {
      r = Relu(x)
      y = If(c) <then_branch = g1 () => (float[4] t) { t = Identity(r) },
                 else_branch = g2 () => (float[4] e) { e = Neg(r) }>
    }"""
    check_skips(tmp_path, m, "eliminate-identity")


def test_no_ops_that_are_not_no_ops_stay(tmp_path):
    m = H + """
    g (int32[3] x, float[2,1] v) => (float[3] y, float[2,3] z) <float[3] ones3 = {1.0, 1.0, 1.0}, int64[2] shp = {2,3}> {
      c = Cast<to=1>(x)
      y = Mul(c, ones3)
      z = Expand(v, shp)
    }"""
    # Cast changes the dtype; Expand broadcasts [2,1] -> [2,3]; Mul by ones keeps shape [3] but
    # only after the Cast, which stays. So only the Mul goes.
    r = check_applies(tmp_path, m, "eliminate-identity", ["Cast", "Expand"])
    assert [c.detail for c in r.records[0].changes] == ["Mul by one"]


def test_broadcasting_mul_by_one_stays_and_zero_add_goes_unless_exact_sign_asked(tmp_path):
    m = H + """
    g (float[1] x, float[3] u) => (float[3] y, float[3] z) <float[3] ones3 = {1.0, 1.0, 1.0}, float[1] zero = {0.0}> {
      y = Mul(x, ones3)
      a = Add(u, zero)
      z = Relu(a)
    }"""
    r = check_applies(tmp_path, m, "eliminate-identity", ["Mul", "Relu"])
    assert "compares equal" in r.records[0].changes[0].detail
    check_skips(tmp_path / "exact", m, "eliminate-identity", options={"exact_zero_sign": True})


def test_training_dropout_stays(tmp_path):
    m = H + """
    g (float[4,4] x) => (float[4,4] y) <bool t = {1}, float r = {0.5}> { y = Dropout(x, r, t) }"""
    assert make_pass("eliminate-identity").call is not None
    r = check_skips(tmp_path, m, "eliminate-identity")
    assert r.records[0].status == "unchanged"
