"""A YOLOv8-style detector, built the way Ultralytics' dynamic export writes it.

What it is for: graph readability at the level a real detector opens at (scopes
``/model.N/...`` with C2f blocks, an SPPF, FPN/PAN skip connections and a decoupled
Detect head), and dims that flow: inputs are ``images[batch, 3, height, width]``,
the metadata says ``imgsz: [320, 320]``, and every intermediate value_info carries
the sympy formula an exporter writes (``floor(height/2 - 1/2) + 1``), so inspect
can resolve every edge once height and width are set.
Channel widths are a quarter of YOLOv8n's so the file stays small.
"""

from __future__ import annotations

import numpy as np
import onnx
import sympy
from onnx import TensorProto, helper, numpy_helper

from sample_models.protos import GraphParts, sample_model

F32 = TensorProto.FLOAT
NUM_CLASSES = 4
REG_MAX = 16
IMGSZ = 320
CHANNELS = [4, 8, 16, 24, 32]   # per stage, a fraction of YOLOv8n's so the file stays small


class _Det(GraphParts):
    """Node accumulator tracking each 4-D value's (channels, height, width) as sympy expressions."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.shapes: dict[str, tuple] = {}

    def node(self, op: str, inputs: list[str], name: str, shape: tuple | None = None, n_out: int = 1,
             **attrs) -> list[str]:
        outs = [f"{name}_output_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        if shape is not None and n_out == 1:
            self.shapes[outs[0]] = shape
        return outs

    def conv(self, x: str, scope: str, param: str, cout: int, k: int = 1, s: int = 1, act: bool = True) -> str:
        """Ultralytics ``Conv``: Conv (BN folded at export) + SiLU as Sigmoid * Mul."""
        c, h, w = self.shapes[x]
        p = k // 2
        wgt = self.init(f"{param}.conv.weight" if act else f"{param}.weight",
                        (self.rng.standard_normal((cout, c, k, k)) * np.sqrt(2.0 / (c * k * k))).astype(np.float32))
        bias = self.init(f"{param}.conv.bias" if act else f"{param}.bias",
                         (self.rng.standard_normal(cout) * 0.05).astype(np.float32))
        oh = sympy.floor((h + 2 * p - k) / s) + 1
        ow = sympy.floor((w + 2 * p - k) / s) + 1
        conv_name = f"{scope}/conv/Conv" if act else f"{scope}/Conv"
        (y,) = self.node("Conv", [x, wgt, bias], conv_name, (cout, oh, ow), dilations=[1, 1], group=1,
                         kernel_shape=[k, k], pads=[p] * 4, strides=[s, s])
        if not act:
            return y
        (sig,) = self.node("Sigmoid", [y], f"{scope}/act/Sigmoid", (cout, oh, ow))
        (out,) = self.node("Mul", [y, sig], f"{scope}/act/Mul", (cout, oh, ow))
        return out

    def const(self, name: str, array) -> str:
        (out,) = self.node("Constant", [], name, value=numpy_helper.from_array(np.asarray(array)))
        return out


def _c2f(g: _Det, x: str, i: int, cout: int, n: int, shortcut: bool) -> str:
    scope, param = f"/model.{i}", f"model.{i}"
    half = cout // 2
    y = g.conv(x, f"{scope}/cv1", f"{param}.cv1", cout)
    _, h, w = g.shapes[y]
    split = g.const(f"{scope}/Constant", np.array([half, half], dtype=np.int64))
    parts = g.node("Split", [y, split], f"{scope}/Split", n_out=2, axis=1)
    for p in parts:
        g.shapes[p] = (half, h, w)
    ys = list(parts)
    cur = ys[-1]
    for j in range(n):
        b = g.conv(cur, f"{scope}/m.{j}/cv1", f"{param}.m.{j}.cv1", half, k=3)
        b = g.conv(b, f"{scope}/m.{j}/cv2", f"{param}.m.{j}.cv2", half, k=3)
        if shortcut:
            (b,) = g.node("Add", [cur, b], f"{scope}/m.{j}/Add", (half, h, w))
        ys.append(b)
        cur = b
    (cat,) = g.node("Concat", ys, f"{scope}/Concat", (half * len(ys), h, w), axis=1)
    return g.conv(cat, f"{scope}/cv2", f"{param}.cv2", cout)


def _sppf(g: _Det, x: str, i: int, cout: int) -> str:
    scope, param = f"/model.{i}", f"model.{i}"
    c = g.shapes[x][0]
    y = g.conv(x, f"{scope}/cv1", f"{param}.cv1", c // 2)
    shape = g.shapes[y]
    pools = [y]
    for k in range(3):
        (y,) = g.node("MaxPool", [y], f"{scope}/m/MaxPool" + (f"_{k}" if k else ""), shape, ceil_mode=0,
                      dilations=[1, 1], kernel_shape=[5, 5], pads=[2, 2, 2, 2], strides=[1, 1])
        pools.append(y)
    (cat,) = g.node("Concat", pools, f"{scope}/Concat", (shape[0] * 4, shape[1], shape[2]), axis=1)
    return g.conv(cat, f"{scope}/cv2", f"{param}.cv2", cout)


def _upsample(g: _Det, x: str, i: int) -> str:
    c, h, w = g.shapes[x]
    scales = g.const(f"/model.{i}/Constant", np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32))
    (y,) = g.node("Resize", [x, "", scales], f"/model.{i}/Resize", (c, 2 * h, 2 * w),
                  coordinate_transformation_mode="asymmetric", cubic_coeff_a=-0.75, mode="nearest",
                  nearest_mode="floor")
    return y


def _concat(g: _Det, xs: list[str], i: int) -> str:
    c = sum(g.shapes[x][0] for x in xs)
    _, h, w = g.shapes[xs[0]]
    (y,) = g.node("Concat", xs, f"/model.{i}/Concat", (c, h, w), axis=1)
    return y


def _detect(g: _Det, feats: list[str], i: int) -> tuple[str, object]:
    """Decoupled head: a box branch (cv2: DFL logits) and a class branch (cv3) per level."""
    scope, param = f"/model.{i}", f"model.{i}"
    c2 = max(16, g.shapes[feats[0]][0] // 4, REG_MAX)
    c3 = max(g.shapes[feats[0]][0], NUM_CLASSES)
    no = 4 * REG_MAX + NUM_CLASSES
    flat, total = [], 0
    for lvl, f in enumerate(feats):
        b = g.conv(f, f"{scope}/cv2.{lvl}/cv2.{lvl}.0", f"{param}.cv2.{lvl}.0", c2, k=3)
        b = g.conv(b, f"{scope}/cv2.{lvl}/cv2.{lvl}.1", f"{param}.cv2.{lvl}.1", c2, k=3)
        b = g.conv(b, f"{scope}/cv2.{lvl}/cv2.{lvl}.2", f"{param}.cv2.{lvl}.2", 4 * REG_MAX, act=False)
        c = g.conv(f, f"{scope}/cv3.{lvl}/cv3.{lvl}.0", f"{param}.cv3.{lvl}.0", c3, k=3)
        c = g.conv(c, f"{scope}/cv3.{lvl}/cv3.{lvl}.1", f"{param}.cv3.{lvl}.1", c3, k=3)
        c = g.conv(c, f"{scope}/cv3.{lvl}/cv3.{lvl}.2", f"{param}.cv3.{lvl}.2", NUM_CLASSES, act=False)
        _, h, w = g.shapes[b]
        (cat,) = g.node("Concat", [b, c], f"{scope}/Concat" + (f"_{lvl}" if lvl else ""), (no, h, w), axis=1)
        shape = g.const(f"{scope}/Constant" + (f"_{lvl}" if lvl else ""), np.array([1, no, -1], dtype=np.int64))
        (r,) = g.node("Reshape", [cat, shape], f"{scope}/Reshape" + (f"_{lvl}" if lvl else ""))
        g.shapes[r] = ("flat", no, h * w)
        flat.append(r)
        total = total + h * w
    (x,) = g.node("Concat", flat, f"{scope}/Concat_3", axis=2)
    g.shapes[x] = ("flat", no, total)
    split = g.const(f"{scope}/Constant_3", np.array([4 * REG_MAX, NUM_CLASSES], dtype=np.int64))
    box, cls = g.node("Split", [x, split], f"{scope}/Split", n_out=2, axis=1)
    g.shapes[box] = ("flat", 4 * REG_MAX, total)
    g.shapes[cls] = ("flat", NUM_CLASSES, total)
    # DFL: softmax over REG_MAX bins per side, expectation by a fixed 1x1 conv with weights 0..15.
    dscope = f"{scope}/dfl"
    shp = g.const(f"{dscope}/Constant", np.array([1, 4, REG_MAX, -1], dtype=np.int64))
    (r,) = g.node("Reshape", [box, shp], f"{dscope}/Reshape")
    g.shapes[r] = ("raw", (1, 4, REG_MAX, total))
    (t,) = g.node("Transpose", [r], f"{dscope}/Transpose", perm=[0, 2, 1, 3])
    g.shapes[t] = ("raw", (1, REG_MAX, 4, total))
    (s,) = g.node("Softmax", [t], f"{dscope}/Softmax", axis=1)
    g.shapes[s] = ("raw", (1, REG_MAX, 4, total))
    wgt = g.init(f"{param}.dfl.conv.weight", np.arange(REG_MAX, dtype=np.float32).reshape(1, REG_MAX, 1, 1))
    (cv,) = g.node("Conv", [s, wgt], f"{dscope}/conv/Conv", dilations=[1, 1], group=1, kernel_shape=[1, 1],
                   pads=[0, 0, 0, 0], strides=[1, 1])
    g.shapes[cv] = ("raw", (1, 1, 4, total))
    shp2 = g.const(f"{dscope}/Constant_1", np.array([1, 4, -1], dtype=np.int64))
    (dist,) = g.node("Reshape", [cv, shp2], f"{dscope}/Reshape_1")
    g.shapes[dist] = ("flat", 4, total)
    (sig,) = g.node("Sigmoid", [cls], f"{scope}/Sigmoid")
    g.shapes[sig] = ("flat", NUM_CLASSES, total)
    g.node("Concat", [dist, sig], f"{scope}/Concat_4", axis=1)
    return f"{scope}/Concat_4_output_0", total


def _dim(d) -> int | str:
    d = sympy.sympify(d)
    return int(d) if d.is_Integer else str(d)


def build_yolo_detector() -> onnx.ModelProto:
    """YOLOv8-style detector with dynamic height/width, Ultralytics scope names and metadata."""
    g = _Det(seed=2024)
    h, w = sympy.Symbol("height", positive=True, integer=True), sympy.Symbol("width", positive=True, integer=True)
    g.shapes["images"] = (3, h, w)
    ch = CHANNELS
    x = g.conv("images", "/model.0", "model.0", ch[0], k=3, s=2)
    x = g.conv(x, "/model.1", "model.1", ch[1], k=3, s=2)
    x = _c2f(g, x, 2, ch[1], 1, True)
    x = g.conv(x, "/model.3", "model.3", ch[2], k=3, s=2)
    p3 = _c2f(g, x, 4, ch[2], 2, True)
    x = g.conv(p3, "/model.5", "model.5", ch[3], k=3, s=2)
    p4 = _c2f(g, x, 6, ch[3], 2, True)
    x = g.conv(p4, "/model.7", "model.7", ch[4], k=3, s=2)
    x = _c2f(g, x, 8, ch[4], 1, True)
    p5 = _sppf(g, x, 9, ch[4])
    x = _upsample(g, p5, 10)
    x = _concat(g, [x, p4], 11)
    h4 = _c2f(g, x, 12, ch[3], 1, False)
    x = _upsample(g, h4, 13)
    x = _concat(g, [x, p3], 14)
    n3 = _c2f(g, x, 15, ch[2], 1, False)
    x = g.conv(n3, "/model.16", "model.16", ch[2], k=3, s=2)
    x = _concat(g, [x, h4], 17)
    n4 = _c2f(g, x, 18, ch[3], 1, False)
    x = g.conv(n4, "/model.19", "model.19", ch[3], k=3, s=2)
    x = _concat(g, [x, p5], 20)
    n5 = _c2f(g, x, 21, ch[4], 1, False)
    out, total = _detect(g, [n3, n4, n5], 22)
    # Rename the head's output as Ultralytics does.
    for n in g.nodes:
        n.output[:] = ["output0" if o == out else o for o in n.output]

    value_info = []
    for name, shape in g.shapes.items():
        if name == "images" or name == out:
            continue
        if shape[0] == "flat":
            dims = ["batch", shape[1], _dim(shape[2])]
        elif shape[0] == "raw":
            dims = ["batch", *[_dim(d) for d in shape[1][1:]]]
        else:
            dims = ["batch", shape[0], _dim(shape[1]), _dim(shape[2])]
        value_info.append(helper.make_tensor_value_info(name, F32, dims))
    graph = helper.make_graph(
        g.nodes, "main_graph",
        [helper.make_tensor_value_info("images", F32, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output0", F32, ["batch", 4 + NUM_CLASSES, _dim(total)])],
        initializer=g.initializers, value_info=value_info)
    model = sample_model(graph, 17, "YOLOv8-style detector (onnx-studio sample): C2f backbone, SPPF, "
                                    "FPN/PAN neck, decoupled DFL head. images[batch,3,height,width] -> "
                                    f"output0[batch,{4 + NUM_CLASSES},anchors].")
    names = {i: n for i, n in enumerate(["person", "bicycle", "car", "dog"][:NUM_CLASSES])}
    for key, value in [("description", "Ultralytics-style YOLOv8 sample (onnx-studio)"), ("author", "onnx-studio"),
                       ("task", "detect"), ("stride", "32"), ("batch", "1"), ("imgsz", f"[{IMGSZ}, {IMGSZ}]"),
                       ("names", str(names))]:
        model.metadata_props.add(key=key, value=value)
    return model
