"""Benchmark models built in code (no model hubs here): a BERT-like encoder of
any size with weights streamed straight into an external-data file, so a
1.3 GB model is generated without holding its weights in memory.

Models are cached under ``benchmarks/.cache/`` (git-ignored) by their config.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

CACHE = Path(__file__).resolve().parent / ".cache"


@dataclass(frozen=True)
class BertConfig:
    layers: int = 24
    hidden: int = 1024
    heads: int = 16
    ffn: int = 4096
    vocab: int = 30522
    max_positions: int = 512
    opset: int = 17

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


BERT_LARGE = BertConfig()                                               # ~1.34 GB of fp32 weights
BERT_SMALL = BertConfig(layers=4, hidden=256, heads=4, ffn=1024, vocab=8000, max_positions=256)


class _Weights:
    """Appends tensors to one external-data file and returns their TensorProtos."""

    def __init__(self, data_path: Path, rng: np.random.Generator, external: bool) -> None:
        self.fh = open(data_path, "wb") if external else None
        self.location = data_path.name
        self.rng = rng
        self.protos: list[TensorProto] = []

    def add(self, name: str, shape: tuple[int, ...], kind: str = "normal", dtype=np.float32) -> str:
        if kind == "normal":
            arr = (self.rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtype)
        elif kind == "ones":
            arr = np.ones(shape, dtype)
        elif kind == "zeros":
            arr = np.zeros(shape, dtype)
        else:
            raise ValueError(kind)
        if self.fh is None or arr.nbytes <= 1024:
            self.protos.append(onnx.numpy_helper.from_array(arr, name))
            return name
        offset = self.fh.tell()
        self.fh.write(arr.tobytes())
        pad = (-self.fh.tell()) % 64          # keep tensors 64-byte aligned (mmap friendly)
        self.fh.write(b"\0" * pad)
        t = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype), dims=shape)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", self.location), ("offset", str(offset)), ("length", str(arr.nbytes))):
            t.external_data.add(key=k, value=v)
        self.protos.append(t)
        return name

    def const(self, name: str, values, dtype=np.int64) -> str:
        self.protos.append(onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def close(self) -> None:
        if self.fh:
            self.fh.close()


def build_bert(cfg: BertConfig, out_dir: Path, *, external: bool = True, seed: int = 0) -> Path:
    """A BERT-like encoder exported op by op (as torch.onnx does before fusion)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "model.onnx"
    w = _Weights(out_dir / "model.onnx.data", np.random.default_rng(seed), external)
    nodes: list[onnx.NodeProto] = []
    h, heads, d = cfg.hidden, cfg.heads, cfg.hidden // cfg.heads

    def node(op, inputs, name, **attrs) -> str:
        out = f"{name}_output_0"
        nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def linear(x, name, fan_in, fan_out) -> str:
        wt = w.add(f"{name}.weight", (fan_in, fan_out))
        b = w.add(f"{name}.bias", (fan_out,), "zeros")
        return node("Add", [node("MatMul", [x, wt], f"/{name}/MatMul"), b], f"/{name}/Add")

    def layer_norm(x, name) -> str:
        axes = w.const(f"{name}.axes", [-1])
        mean = node("ReduceMean", [x, axes], f"/{name}/ReduceMean") if cfg.opset >= 18 else \
            node("ReduceMean", [x], f"/{name}/ReduceMean", axes=[-1])
        diff = node("Sub", [x, mean], f"/{name}/Sub")
        sq = node("Pow", [diff, w.const(f"{name}.two", 2.0, np.float32)], f"/{name}/Pow")
        var = node("ReduceMean", [sq, axes], f"/{name}/ReduceMean_1") if cfg.opset >= 18 else \
            node("ReduceMean", [sq], f"/{name}/ReduceMean_1", axes=[-1])
        std = node("Sqrt", [node("Add", [var, w.const(f"{name}.eps", 1e-12, np.float32)], f"/{name}/Add")],
                   f"/{name}/Sqrt")
        normed = node("Div", [diff, std], f"/{name}/Div")
        scaled = node("Mul", [normed, w.add(f"{name}.weight", (h,), "ones")], f"/{name}/Mul")
        return node("Add", [scaled, w.add(f"{name}.bias", (h,), "zeros")], f"/{name}/Add_1")

    ids, mask = "input_ids", "attention_mask"
    word = node("Gather", [w.add("embeddings.word_embeddings.weight", (cfg.vocab, h)), ids],
                "/embeddings/word_embeddings/Gather")
    seq_len = node("Gather", [node("Shape", [ids], "/embeddings/Shape"), w.const("seq_axis", 1)],
                   "/embeddings/Gather")
    end = node("Unsqueeze", [seq_len, w.const("unsq_axes", [0])], "/embeddings/Unsqueeze")
    pos_ids = node("Slice", [w.const("embeddings.position_ids", [list(range(cfg.max_positions))]),
                             w.const("slice_start", [0]), end, w.const("slice_axes", [1])], "/embeddings/Slice")
    pos = node("Gather", [w.add("embeddings.position_embeddings.weight", (cfg.max_positions, h)), pos_ids],
               "/embeddings/position_embeddings/Gather")
    x = layer_norm(node("Add", [word, pos], "/embeddings/Add"), "embeddings/LayerNorm")
    # Additive mask: (1 - mask) * -10000, shaped [batch, 1, 1, seq].
    m = node("Cast", [node("Unsqueeze", [node("Unsqueeze", [mask, w.const("m_ax1", [1])], "/Unsqueeze"),
                                         w.const("m_ax2", [2])], "/Unsqueeze_1")], "/Cast", to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", [w.const("one_f", 1.0, np.float32), m], "/Sub"),
                     w.const("neg_big", -10000.0, np.float32)], "/Mul")
    heads_shape = w.const("heads_shape", [0, 0, heads, d])
    merge_shape = w.const("merge_shape", [0, 0, h])
    scale = w.const("attn_scale", math.sqrt(d), np.float32)
    for i in range(cfg.layers):
        p = f"encoder/layer.{i}"
        q, k, v = (node("Transpose", [node("Reshape", [linear(x, f"{p}/attention/self/{n}", h, h), heads_shape],
                                           f"/{p}/attention/self/Reshape_{n}")],
                        f"/{p}/attention/self/Transpose_{n}", perm=perm)
                   for n, perm in (("query", [0, 2, 1, 3]), ("key", [0, 2, 3, 1]), ("value", [0, 2, 1, 3])))
        scores = node("Add", [node("Div", [node("MatMul", [q, k], f"/{p}/attention/self/MatMul"), scale],
                                   f"/{p}/attention/self/Div"), m], f"/{p}/attention/self/Add")
        probs = node("Softmax", [scores], f"/{p}/attention/self/Softmax", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], f"/{p}/attention/self/MatMul_1")],
                   f"/{p}/attention/self/Transpose", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_shape], f"/{p}/attention/self/Reshape")
        attn = linear(ctx, f"{p}/attention/output/dense", h, h)
        x = layer_norm(node("Add", [attn, x], f"/{p}/attention/output/Add"), f"{p}/attention/output/LayerNorm")
        inter = linear(x, f"{p}/intermediate/dense", h, cfg.ffn)
        # GELU via Erf: x * 0.5 * (1 + erf(x / sqrt(2)))
        erf = node("Erf", [node("Div", [inter, w.const(f"{p}.sqrt2", math.sqrt(2.0), np.float32)],
                                f"/{p}/intermediate/intermediate_act_fn/Div")],
                   f"/{p}/intermediate/intermediate_act_fn/Erf")
        gelu = node("Mul", [node("Mul", [inter, node("Add", [erf, w.const(f"{p}.one", 1.0, np.float32)],
                                                     f"/{p}/intermediate/intermediate_act_fn/Add")],
                                 f"/{p}/intermediate/intermediate_act_fn/Mul"),
                            w.const(f"{p}.half", 0.5, np.float32)], f"/{p}/intermediate/intermediate_act_fn/Mul_1")
        out = linear(gelu, f"{p}/output/dense", cfg.ffn, h)
        x = layer_norm(node("Add", [out, x], f"/{p}/output/Add"), f"{p}/output/LayerNorm")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="/Identity"))
    w.close()
    graph = helper.make_graph(
        nodes, "bert", [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "sequence"]),
                        helper.make_tensor_value_info(mask, TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", h])],
        w.protos)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", cfg.opset)], ir_version=8,
                              producer_name="onnx-studio-benchmarks")
    tmp = model_path.with_suffix(".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, model_path)
    return model_path


def cached_bert(cfg: BertConfig, *, external: bool = True) -> Path:
    """Build once per config into benchmarks/.cache and reuse."""
    out = CACHE / f"bert-{cfg.key}-{'ext' if external else 'inline'}"
    path = out / "model.onnx"
    if not path.exists():
        build_bert(cfg, out, external=external)
    return path


# ---------------------------------------------------------------------------- ResNet-50

def build_resnet50(out_dir: Path, *, seed: int = 0, batch: int | str = "batch", trained_like: bool = False) -> Path:
    """A ResNet-50 (torchvision topology: 53 convs, 224x224, 25.6 M params) exported
    op by op as ``torch.onnx.export(..., do_constant_folding=False)`` writes it:
    every Conv followed by its own BatchNormalization, node names like
    ``/layer1/layer1.0/conv1/Conv``, dynamic batch, opset 17, weights inline.
    Weights are random (He init, BatchNorm statistics near 1/0), so activations
    stay bounded through 50 layers. ``trained_like``: BatchNorm statistics measured on
    seeded images instead (what training leaves behind; see ``_calibrate_batchnorm``),
    which INT8 calibration and accuracy measurements need."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def tensor(name: str, arr: np.ndarray) -> str:
        inits.append(onnx.numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def conv_bn(x: str, scope: str, cin: int, cout: int, k: int, stride: int, relu: str | None,
                conv: str, bn: str) -> str:
        pre = f"{scope.replace('/', '.').split('.', 1)[-1] if '/' in scope else scope}"
        key = f"{pre}." if pre else ""
        w = tensor(f"{key}{conv}.weight",
                   rng.standard_normal((cout, cin, k, k), dtype=np.float32) * np.sqrt(2.0 / (cin * k * k)))
        path = f"/{scope}" if scope else ""
        c = f"{path}/{conv}/Conv"
        y = f"{c}_output_0"
        nodes.append(helper.make_node("Conv", [x, w], [y], name=c, kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4, dilations=[1, 1], group=1))
        params = [tensor(f"{key}{bn}.{p}", v) for p, v in (
            ("weight", rng.uniform(0.5, 1.0, cout)), ("bias", rng.normal(0, 0.05, cout)),
            ("running_mean", rng.normal(0, 0.05, cout)), ("running_var", rng.uniform(0.8, 1.2, cout)))]
        b = f"{path}/{bn}/BatchNormalization"
        nodes.append(helper.make_node("BatchNormalization", [y, *params], [f"{b}_output_0"], name=b,
                                      epsilon=1e-5, momentum=0.9))
        y = f"{b}_output_0"
        if relu:
            r = f"{path}/{relu}/Relu"
            nodes.append(helper.make_node("Relu", [y], [f"{r}_output_0"], name=r))
            y = f"{r}_output_0"
        return y

    x = conv_bn("input", "", 3, 64, 7, 2, "relu", "conv1", "bn1")
    nodes.append(helper.make_node("MaxPool", [x], ["/maxpool/MaxPool_output_0"], name="/maxpool/MaxPool",
                                  kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "/maxpool/MaxPool_output_0", 64
    for li, (blocks, width, stride) in enumerate(((3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)), start=1):
        for bi in range(blocks):
            scope = f"layer{li}/layer{li}.{bi}"
            s = stride if bi == 0 else 1
            y = conv_bn(x, scope, cin, width, 1, 1, "relu", "conv1", "bn1")
            y = conv_bn(y, scope, width, width, 3, s, "relu_1", "conv2", "bn2")
            y = conv_bn(y, scope, width, width * 4, 1, 1, None, "conv3", "bn3")
            shortcut = x
            if bi == 0:
                shortcut = conv_bn(x, f"{scope}/downsample", cin, width * 4, 1, s, None, "0", "1")
            add = f"/{scope}/Add"
            nodes.append(helper.make_node("Add", [y, shortcut], [f"{add}_output_0"], name=add))
            relu = f"/{scope}/relu_2/Relu"
            nodes.append(helper.make_node("Relu", [f"{add}_output_0"], [f"{relu}_output_0"], name=relu))
            x, cin = f"{relu}_output_0", width * 4
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["/avgpool/GlobalAveragePool_output_0"],
                                  name="/avgpool/GlobalAveragePool"))
    nodes.append(helper.make_node("Flatten", ["/avgpool/GlobalAveragePool_output_0"], ["/Flatten_output_0"],
                                  name="/Flatten", axis=1))
    fc_w = tensor("fc.weight", rng.standard_normal((1000, 2048), dtype=np.float32) * np.sqrt(1.0 / 2048))
    fc_b = tensor("fc.bias", np.zeros(1000, np.float32))
    nodes.append(helper.make_node("Gemm", ["/Flatten_output_0", fc_w, fc_b], ["output"], name="/fc/Gemm",
                                  alpha=1.0, beta=1.0, transB=1))
    graph = helper.make_graph(
        nodes, "main_graph", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, [batch, 1000])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                              producer_name="pytorch", producer_version="2.5.0")
    if trained_like:
        _calibrate_batchnorm(model, 224, seed)
    path = out_dir / "model.onnx"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return path


def cached_resnet50() -> Path:
    """ResNet-50 built once into benchmarks/.cache and reused."""
    path = CACHE / "resnet50-v2" / "model.onnx"
    if not path.exists():
        build_resnet50(path.parent)
    return path


# ---------------------------------------------------------------------------- CNNs with trained-like statistics

class _ConvNet:
    """Builds Conv → BatchNormalization (unfused) → activation graphs with He-init weights."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[TensorProto] = []
        self.n = 0

    def _name(self, op: str) -> str:
        self.n += 1
        return f"{op}_{self.n}"

    def init(self, name: str, arr: np.ndarray) -> str:
        self.inits.append(onnx.numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(self, op: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        name = name or self._name(op)
        out = f"{name}_out"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1, act: str | None = "relu",
                gamma: float = 1.0, prefix: str = "") -> str:
        name = prefix or self._name("conv")
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * math.sqrt(2.0 / fan_in)
        y = self.node("Conv", [x, self.init(f"{name}.weight", w)], f"{name}/Conv", kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4, group=group)
        scale = (gamma * (0.75 + 0.5 * self.rng.random(cout))).astype(np.float32)
        bias = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        mean, var = f"{name}.bn.running_mean", f"{name}.bn.running_var"
        self.init(mean, np.zeros(cout, np.float32))
        self.init(var, np.ones(cout, np.float32))
        y = self.node("BatchNormalization", [y, self.init(f"{name}.bn.weight", scale),
                                             self.init(f"{name}.bn.bias", bias), mean, var],
                      f"{name}/BatchNormalization", epsilon=1e-5)
        if act == "relu":
            y = self.node("Relu", [y], f"{name}/Relu")
        elif act == "relu6":
            y = self.node("Clip", [y, "clip_min", "clip_max"], f"{name}/Clip")
        return y

    def head(self, x: str, channels: int, classes: int = 1000) -> str:
        y = self.node("Flatten", [self.node("GlobalAveragePool", [x], "head/GlobalAveragePool")], "head/Flatten")
        w = self.rng.standard_normal((classes, channels)).astype(np.float32) * math.sqrt(1.0 / channels)
        self.nodes.append(helper.make_node("Gemm", [y, self.init("fc.weight", w),
                                                    self.init("fc.bias", np.zeros(classes, np.float32))],
                                           ["logits"], name="fc/Gemm", transB=1))
        return "logits"

    def model(self, name: str, size: int, classes: int = 1000) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, size, size])],
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8,
                                 producer_name="onnx-studio-benchmarks")


def _calibrate_batchnorm(model: onnx.ModelProto, size: int, seed: int) -> None:
    """Data-dependent BN statistics (what training leaves behind): one forward pass with every
    BatchNormalization in training mode (momentum 0) on seeded N(0, 1) images, whose
    running-mean/var outputs become the model's statistics. Without this, He-init weights and
    unit BN statistics make activations explode or collapse, which no trained model does."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    stats: list[tuple[str, str, str, str]] = []        # (mean init, var init, mean out, var out)
    for node in probe.graph.node:
        if node.op_type == "BatchNormalization":
            del node.attribute[:]
            node.attribute.extend([helper.make_attribute("epsilon", 1e-5), helper.make_attribute("momentum", 0.0),
                                   helper.make_attribute("training_mode", 1)])
            outs = [f"{node.name}.stat_mean", f"{node.name}.stat_var"]
            node.output.extend(outs)
            stats.append((node.input[3], node.input[4], *outs))
    probe.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                              for _, _, m, v in stats for n in (m, v))
    dim0 = model.graph.input[0].type.tensor_type.shape.dim[0]
    batch = dim0.dim_value if dim0.HasField("dim_value") else 8
    x = np.random.default_rng(seed + 1000).standard_normal((batch, 3, size, size)).astype(np.float32)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"input": x})))
    inits = {t.name: t for t in model.graph.initializer}
    for mean_name, var_name, mean_out, var_out in stats:
        inits[mean_name].CopyFrom(onnx.numpy_helper.from_array(values[mean_out].astype(np.float32), mean_name))
        inits[var_name].CopyFrom(onnx.numpy_helper.from_array(values[var_out].astype(np.float32), var_name))


def _save_cnn(model: onnx.ModelProto, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "model.onnx"
    onnx.checker.check_model(model)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, path)
    return path


def build_mobilenetv2(out_dir: Path, seed: int = 0) -> Path:
    """MobileNetV2 (inverted residuals, depthwise convs, ReLU6 as Clip, BN unfused, 224×224),
    He-init weights and data-dependent BN statistics."""
    net = _ConvNet(np.random.default_rng(seed))
    net.init("clip_min", np.array(0.0, np.float32))
    net.init("clip_max", np.array(6.0, np.float32))
    x = net.conv_bn("input", 3, 32, 3, stride=2, act="relu6", prefix="features.0")
    cin, idx = 32, 1
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            p = f"features.{idx}"
            stride = s if i == 0 else 1
            hidden = cin * t
            y = net.conv_bn(x, cin, hidden, 1, act="relu6", prefix=f"{p}.expand") if t != 1 else x
            y = net.conv_bn(y, hidden, hidden, 3, stride=stride, group=hidden, act="relu6", prefix=f"{p}.dw")
            y = net.conv_bn(y, hidden, c, 1, act=None, gamma=0.5 if stride == 1 and cin == c else 1.0,
                            prefix=f"{p}.project")
            x = net.node("Add", [x, y], f"{p}/Add") if stride == 1 and cin == c else y
            cin, idx = c, idx + 1
    x = net.conv_bn(x, cin, 1280, 1, act="relu6", prefix=f"features.{idx}")
    net.head(x, 1280)
    model = net.model("mobilenetv2", 224)
    _calibrate_batchnorm(model, 224, seed)
    return _save_cnn(model, out_dir)


def cached(builder, name: str, seed: int = 0, **kwargs) -> Path:
    """Build once into benchmarks/.cache/<name>-s<seed>/model.onnx and reuse."""
    path = CACHE / f"{name}-s{seed}" / "model.onnx"
    if not path.exists():
        builder(path.parent, seed=seed, **kwargs)
    return path


def tiny_relu(path: Path) -> Path:
    """A one-Relu model on ``x[1,16]`` (opset 17, IR 9): the cheapest model a session can run, for overheads."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return path
