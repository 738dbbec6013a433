"""Which values' *shapes* depend on the input *values*, not only on the input shapes.

A run at seeded inputs measures a shape that depends only on the input shapes (a
TopK whose k is read from a Shape) once and for all; it cannot measure the size of a
NonZero, an Expand to a shape the user feeds, or a StringNormalizer's output: those
change with the data, and a number measured on seeded inputs would be a made-up
size. This is a forward pass over the main graph, in node order: a value is
*tainted* when its contents come from the input values, and *shape-dependent* when
its shape does; ``Shape``/``Size`` turn a shape-dependent value into a tainted one.
"""

from __future__ import annotations

from onnx import ModelProto

from studio.core.protowalk import MAX_DEPTH, subgraphs_of

from studio.inspect.flops import ELEMENTWISE_FLOPS, POOL_OPS, REDUCE_OPS

# Ops whose output shape follows from their input *shapes* and attributes alone.
SHAPE_ONLY = frozenset({
    *ELEMENTWISE_FLOPS, *POOL_OPS,
    "Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm",
    "Einsum", "Transpose", "Identity", "Flatten", "Gather", "GatherElements", "GatherND", "Scatter",
    "ScatterElements", "ScatterND", "Concat", "DepthToSpace", "SpaceToDepth", "ArgMax", "ArgMin", "Dropout",
    "LSTM", "GRU", "RNN", "CastLike", "Trilu", "GridSample", "RoiAlign", "MaxRoiPool", "CumSum",
    "ReverseSequence", "Det", "EyeLike", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial",
    "IsNaN", "IsInf", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Hardmax", "Mish", "Swish",
    "MeanVarianceNormalization", "LRN", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "MaxUnpool",
    "Affine", "ImageScaler", "Crop", "SequenceConstruct", "SequenceEmpty", "SequenceInsert",
    "ConcatFromSequence", "Attention", "RotaryEmbedding", "Gelu", "FastGelu", "BiasGelu", "QuickGelu",
    "SkipLayerNormalization", "SimplifiedLayerNormalization", "FusedConv", "FusedMatMul", "NhwcConv",
    "DynamicQuantizeLinear", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
    # ONNX Runtime's quantized and fused contrib ops (onnxruntime.quantization, its transformers optimizer):
    # their output shapes follow the float op they stand for
    "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulInteger16", "MatMulIntegerToFloat", "QGemm",
    "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConcat", "QLinearSoftmax", "QAttention",
    "MatMulNBits", "EmbedLayerNormalization", "SkipSimplifiedLayerNormalization", "MultiHeadAttention",
    "BiasAdd", "BiasSplitGelu",
})

# Ops whose output shape follows from the *values* of these inputs (and the others' shapes).
SHAPE_ARGUMENTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Squeeze": (1,),
    "Unsqueeze": (1,), "TopK": (1,), "Range": (0, 1, 2), "ConstantOfShape": (0,), "Resize": (1, 2, 3),
    "Upsample": (1,), "OneHot": (1,), "Split": (1,), "CenterCropPad": (1,), "Col2Im": (1, 2), "DFT": (1, 2),
    "STFT": (1, 2, 3), "SequenceAt": (1,), "SplitToSequence": (1,), "SequenceErase": (1,),
    **{op: (1,) for op in REDUCE_OPS},
}

SHAPE_READERS = frozenset({"Shape", "Size", "SequenceLength"})   # their value is the input's shape


def value_dependent_shapes(model: ModelProto, known: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Main-graph values whose shape may change with the input values. ``known``: values
    whose shape pinned inference computed (from the input shapes alone): never dependent.
    Conservative: an op not known here or a custom op depends on every input's values."""
    init = {t.name for t in model.graph.initializer}
    tainted = {vi.name for vi in model.graph.input if vi.name not in init}
    shaped: set[str] = set()
    _walk(model.graph.node, tainted, shaped, set(known), 0)
    return shaped & {o for n in model.graph.node for o in n.output if o}


def _walk(nodes, tainted: set[str], shaped: set[str], known: set[str], depth: int) -> None:
    """Forward pass over ``nodes``, adding to ``tainted`` / ``shaped`` in place."""
    for node in nodes:
        own = node.domain in ("", "ai.onnx", "com.microsoft")
        sub = dict(subgraphs_of(node)) if depth < MAX_DEPTH else {}
        if own and node.op_type in ("If", "Loop", "Scan") and sub:
            taints, deps = _control_flow(node, sub, tainted, shaped, known, depth)
        else:
            ins = [i for i in node.input if i] + sorted(_captured(node, depth))
            dep = any(i in shaped for i in ins)
            if node.op_type in SHAPE_READERS and own:
                taint = dep
            else:
                taint = dep or any(i in tainted for i in ins)
                if not own or (node.op_type not in SHAPE_ONLY and node.op_type not in SHAPE_ARGUMENTS):
                    dep = dep or any(i in tainted for i in ins)
                elif node.op_type in SHAPE_ARGUMENTS:
                    dep = dep or any(k < len(node.input) and node.input[k] in tainted
                                     for k in SHAPE_ARGUMENTS[node.op_type])
            taints, deps = [taint] * len(node.output), [dep] * len(node.output)
        for o, taint, dep in zip(node.output, taints, deps):
            if not o:
                continue
            if taint:
                tainted.add(o)
            if dep and o not in known:
                shaped.add(o)


def _body(graph, inputs: list[tuple[bool, bool]], tainted: set[str], shaped: set[str], known: set[str],
          depth: int) -> tuple[list[bool], list[bool]]:
    """(tainted, shaped) of a body's outputs, given its inputs' and the outer scope's. The sets are
    shared, not copied (a graph of many Loops stays linear): ONNX names are unique across scopes."""
    t, s = tainted, shaped
    for vi, (ti, si) in zip(graph.input, inputs):
        t.discard(vi.name)
        s.discard(vi.name)
        if ti:
            t.add(vi.name)
        if si:
            s.add(vi.name)
    _walk(graph.node, t, s, known, depth + 1)
    return [o.name in t for o in graph.output], [o.name in s for o in graph.output]


def _control_flow(node, sub: dict, tainted: set[str], shaped: set[str], known: set[str],
                  depth: int) -> tuple[list[bool], list[bool]]:
    """If: a cond from the input values may pick branches of different shapes. Loop: the trip count
    (M, cond, the body's cond_out) fixes the scan outputs' length. Scan: the body decides."""
    n = len(node.output)
    flag = lambda name: (name in tainted, name in shaped)   # noqa: E731
    if node.op_type == "If":
        cond_t = bool(node.input) and node.input[0] in tainted
        taints, deps = [cond_t] * n, [cond_t] * n
        for key in ("then_branch", "else_branch"):
            if key in sub:
                bt, bs = _body(sub[key], [], tainted, shaped, known, depth)
                taints = [a or b for a, b in zip(taints, bt + [True] * n)]
                deps = [a or b for a, b in zip(deps, bs + [True] * n)]
        return taints, deps
    body = sub.get("body")
    if body is None:
        return [True] * n, [True] * n
    ins = list(node.input)
    if node.op_type == "Loop":
        m_t = len(ins) > 0 and bool(ins[0]) and ins[0] in tainted
        c_t = len(ins) > 1 and bool(ins[1]) and ins[1] in tainted
        states = ins[2:]
        bt, bs = _body(body, [(False, False), (c_t, False), *(flag(v) for v in states)], tainted, shaped, known,
                       depth)
        trip = m_t or c_t or (bool(bt) and bt[0])
        k = len(states)
        taints = [bt[i + 1] if i + 1 < len(bt) else True for i in range(n)]
        deps = [(bs[i + 1] if i + 1 < len(bs) else True) or (i >= k and trip) for i in range(n)]
        return taints, deps
    bt, bs = _body(body, [flag(v) for v in ins], tainted, shaped, known, depth)   # Scan
    return [bt[i] if i < len(bt) else True for i in range(n)], [bs[i] if i < len(bs) else True for i in range(n)]


def _captured(node, depth: int = 0) -> set[str]:
    """Outer-scope names a node's subgraphs read (they are inputs of the node in all but name)."""
    names: set[str] = set()
    if depth > MAX_DEPTH:
        return names
    for _, sub in subgraphs_of(node):
        defined = {i.name for i in sub.input} | {t.name for t in sub.initializer}
        for n in sub.node:
            names.update(i for i in n.input if i and i not in defined)
            names.update(_captured(n, depth + 1) - defined)
            defined.update(n.output)
    return names
