"""Small models that mimic what real exporters write, built in code for the optimizer-strength table.

Each is an ONNX text model: the shape subgraphs of PyTorch's tracer
(``Shape→Gather→Unsqueeze→Concat→Reshape``), constant ``Expand``/``Tile``/``Range``,
``Cast``/``Reshape``/``Squeeze`` round trips, an ``If`` on a constant condition and a
``Loop`` whose body computes constants. ``HOLDOUT`` names the ones never tuned on.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx.parser

_HEAD = '<ir_version: 8, opset_import: ["" : 17]>\n'


def _size_reads(k: int, *dims: int) -> str:
    """The tracer's ``x.size(d)`` for each of ``dims``: Shape, a Gather per dim (index constants ``k<k>``,
    ``k<k+1>``...), each unsqueezed to 1-D as ``u<d>``."""
    lines = ["  s = Shape(x)"]
    for n, d in enumerate(dims):
        lines += [f"  k{k + n} = Constant<value = int64 {{{d}}}>()", f"  g{d} = Gather<axis = 0>(s, k{k + n})"]
    lines.append("  ax = Constant<value = int64[1] {0}>()")
    lines += [f"  u{d} = Unsqueeze(g{d}, ax)" for d in dims]
    return "\n".join(lines)


def _head_split(batch: str, k: int) -> str:
    """x[batch,6,16] -> [batch,4,6,4]: batch and sequence read from the shape, 4 heads of 4 constant."""
    return _HEAD + f"""
agraph (float[{batch},6,16] x) => (float[{batch},4,6,4] y) {{
{_size_reads(k, 0, 1)}
  k{k + 2} = Constant<value = int64[1] {{4}}>()
  k{k + 3} = Constant<value = int64[1] {{4}}>()
  shp = Concat<axis = 0>(u0, u1, k{k + 2}, k{k + 3})
  r = Reshape(x, shp)
  y = Transpose<perm = [0, 2, 1, 3]>(r)
}}"""


MODELS: dict[str, str] = {
    # PyTorch's x.view(x.size(0), -1) on a static batch, then a matmul.
    "shape_chain_static": _HEAD + f"""
agraph (float[2,3,4,4] x, float[48,5] w) => (float[2,5] y) {{
{_size_reads(0, 0)}
  m1 = Constant<value = int64[1] {{-1}}>()
  shp = Concat<axis = 0>(u0, m1)
  f = Reshape(x, shp)
  k1 = Constant<value = int64[2] {{48, 5}}>()
  we = Expand(w, k1)
  y = MatMul(f, we)
}}""",
    # A transformer's head split: batch and sequence read from the shape, heads and width constant.
    "attention_heads_static": _head_split("1", 2),
    # Same with a dynamic batch: only the static parts may fold.
    "attention_heads_dynamic": _head_split("N", 6),
    # Position ids from Range over a static length, expanded and tiled constants.
    "const_generators": _HEAD + """
agraph (float[2,8] x) => (float[2,8] y) {
  s = Shape(x)
  k10 = Constant<value = int64 {1}>()
  n = Gather<axis = 0>(s, k10)
  k11 = Constant<value = int64 {0}>()
  k12 = Constant<value = int64 {1}>()
  r = Range(k11, n, k12)
  rf = Cast<to = 1>(r)
  k13 = Constant<value = int64[2] {2, 8}>()
  e = Expand(rf, k13)
  k14 = Constant<value = float[1,4] {1.0, 2.0, 3.0, 4.0}>()
  k15 = Constant<value = int64[2] {2, 2}>()
  t = Tile(k14, k15)
  a = Add(x, e)
  y = Mul(a, t)
}""",
    # Round trips exporters leave: Cast there and back, Reshape of a Reshape, Unsqueeze then Squeeze.
    "cast_reshape_pairs": _HEAD + """
agraph (float[2,3,4] x) => (float[2,12] y) {
  c1 = Cast<to = 11>(x)
  c2 = Cast<to = 1>(c1)
  k16 = Constant<value = int64[2] {6, 4}>()
  r1 = Reshape(c2, k16)
  k17 = Constant<value = int64[2] {2, 12}>()
  r2 = Reshape(r1, k17)
  k18 = Constant<value = int64[1] {0}>()
  u = Unsqueeze(r2, k18)
  k19 = Constant<value = int64[1] {0}>()
  q = Squeeze(u, k19)
  y = Relu(q)
}""",
    # torch.onnx's scripted 'if self.training' and friends: an If on a constant condition.
    "if_constant_condition": _HEAD + """
agraph (float[2,4] x) => (float[2,4] y) {
  c = Constant<value = bool {1}>()
  y = If(c) <
    then_branch = g1 () => (float[2,4] a) { a = Relu(x) },
    else_branch = g2 () => (float[2,4] b) { b = Neg(x) }
  >
}""",
    # A Loop whose body recomputes constants every iteration (a scale from two constants).
    "loop_body_constants": _HEAD + """
agraph (float[2,3] x, int64 n) => (float[2,3] y) {
  t = Constant<value = bool {1}>()
  y = Loop(n, t, x) <body = body (int64 i, bool cond_in, float[2,3] acc) => (bool cond_out, float[2,3] out) {
    cond_out = Identity(cond_in)
    a = Constant<value = float {2.0}>()
    b = Constant<value = float {0.25}>()
    s = Mul(a, b)
  k20 = Constant<value = float {1.0}>()
    k = Add(s, k20)
    out = Mul(acc, k)
  }>
}""",
    # Slice bounds computed from the shape (YOLO-style split of channels).
    "shape_slice_split": _HEAD + """
agraph (float[1,8,5] x) => (float[1,4,5] y) {
  s = Shape(x)
  k21 = Constant<value = int64[1] {1}>()
  c = Gather<axis = 0>(s, k21)
  k22 = Constant<value = int64[1] {2}>()
  h = Div(c, k22)
  k23 = Constant<value = int64[1] {0}>()
  k24 = Constant<value = int64[1] {1}>()
  lo = Slice(x, k23, h, k24)
  k25 = Constant<value = int64[1] {1}>()
  hi = Slice(x, h, c, k25)
  y = Add(lo, hi)
}""",
}

# Never tuned on: measured only (the real-model check of the issue had its own unseen set).
HOLDOUT = frozenset({"attention_heads_dynamic", "shape_slice_split"})


def _weights_as_initializers(model: onnx.ModelProto) -> None:
    """Inputs named ``w*`` become seeded initializers (the text format cannot hold random weights)."""
    import numpy as np
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    for inp in [i for i in model.graph.input if i.name.startswith("w")]:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        model.graph.initializer.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), inp.name))
        model.graph.input.remove(inp)


def build(folder: Path) -> dict[str, Path]:
    """Write every model to ``folder/<name>.onnx`` (checked by onnx.checker) and return the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, text in MODELS.items():
        model = onnx.parser.parse_model(text)
        _weights_as_initializers(model)
        onnx.checker.check_model(model, full_check=True)
        path = folder / f"{name}.onnx"
        onnx.save(model, str(path))
        out[name] = path
    return out
