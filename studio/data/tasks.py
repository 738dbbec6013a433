"""What each output of a model is for, with the evidence, so every comparison judges it by its task.

A comparison that does not know an output's task judges a 2-class softmax as a regression, a
detector's TopK rows element by element, and integer class ids by a cosine nobody measured.
This module decides, per output, one of :data:`TASKS` from the graph (the op producing the
output: Softmax/LogSoftmax and its axis, Sigmoid, ArgMax, TopK/NonMaxSuppression through the ops
that only move values, L2 normalization), its dtype and dims, and its name when the graph says
nothing; every choice comes with a one-line reason ("[N, 2] softmax over the last axis ->
classification"). The user overrides a choice per output (``--task OUTPUT=KIND``; a project
keeps it, :func:`stored_tasks`), and the metrics, the precision search, ``compare``, ``check`` on
the converted engines and export parity all read the same :class:`OutputTask`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import onnx

from studio.core.errors import StudioError
from studio.core.types import shape_text, value_info
from studio.core.feeds import value_uses
from studio.core.dim_hints import image_axes
from studio.core.error_codes import ErrorCode
from studio.core.feeds import input_specs
from studio.core.order_free import OrderFree, order_free_outputs

TASKS = ("classification", "detection", "segmentation", "embedding", "sequence", "language-model", "integer",
         "regression", "other")
SETTING = "output_tasks"          # the model setting (project store) holding {output: kind}

# Ops that only carry values to the output (the class axis stays the class axis).
_PASS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Cast", "CastLike", "Dropout"})
_LINEAR = frozenset({"Gemm", "MatMul", "Add", "Conv", "ConvTranspose", "Einsum", "BatchNormalization"})
_MAX_DEPTH = 32
# ai.onnx.ml classifiers: their first output is the class label of each row.
_ML_CLASSIFIERS = frozenset({"LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"})
# Recurrent ops: per-step scores after one, over an image, are a CTC text recogniser's.
_RECURRENT = frozenset({"LSTM", "GRU", "RNN", "DynamicQuantizeLSTM"})
# Ops that reduce probabilities to a probability (Silero VAD averages its per-frame sigmoid).
_PROB_REDUCE = frozenset({"ReduceMean", "ReduceMax", "ReduceMin"})
_ID_PICKS = frozenset({"Gather", "Slice", "GatherElements", "Squeeze"})   # ids taken from ids are still ids
_RECURRENT_WALK = 24               # nodes walked back from an output looking for a recurrent layer

_CLASS = re.compile(r"logit|prob|score|class|cls|pred|softmax|fc\b|fc_|fc\d|label|category", re.I)
_EMBED = re.compile(r"embed|pooler|sentence|feature|vector|last_hidden|hidden_state|descriptor", re.I)
_SEQ = re.compile(r"ctc|char|text|ocr|\brec\b|rec_|_rec|transcri", re.I)
_SEG = re.compile(r"seg|mask|matte|parsing|semantic", re.I)
_TOKEN_INPUT = re.compile(r"input_ids|token_ids|^tokens?$", re.I)
# Outputs handed back to the next call (an RNN's hidden state, a KV cache): state, not features.
_STATE_OUT = re.compile(r"state|^hidden(_out)?$|^[hc]n?$|^[hc]_?out$|present|cache", re.I)
_LOGITS = re.compile(r"logit|lm_head|lm_logits|next_token", re.I)
# 1-D detection heads ([N, slots, 3] of score, centre, width: events found along a signal) are named so.
_DETECT = re.compile(r"detect|\bdet\b|_det|det_|box|proposal|interval", re.I)
_SCORE_OPS = frozenset({"Softmax", "LogSoftmax", "Sigmoid"})   # turn a sibling output's scores into probabilities


@dataclass(frozen=True)
class OutputTask:
    """The task of one output and why. ``threshold``: the decision point of a single-score binary
    classifier ([N, 1]: 0.5 after a Sigmoid, 0 for a logit); ``classes``: the class count when known."""

    output: str
    kind: str
    reason: str
    source: str = "inferred"          # inferred | project (stored) | given (this run's --task)
    classes: int | None = None
    threshold: float | None = None
    shape: tuple | None = None        # the output's shape the decision read (declared, inferred or run)
    head: str | None = None           # detection: "rows" (boxes picked by TopK/NMS) or "raw" (per-anchor head)

    def text(self) -> str:
        how = {"project": ", stored in the project", "given": ""}.get(self.source, "")
        return f"{self.output}: {self.kind} ({self.reason}{how})"

    def to_dict(self) -> dict:
        return {"output": self.output, "kind": self.kind, "reason": self.reason, "source": self.source,
                "classes": self.classes, "threshold": self.threshold,
                "shape": None if self.shape is None else list(self.shape), "head": self.head}


@dataclass(frozen=True)
class Evidence:
    """What the graph says about one output."""

    op: str | None = None                  # the op producing the values (after pass-through ops)
    node: str = ""
    axis: int | None = None                # Softmax/LogSoftmax/ArgMax axis (normalized on its own rank)
    op_shape: tuple | None = None          # that op's output shape (inferred), when known
    order_free: str | None = None          # "TopK 'name'" when rows are picked by TopK/NMS
    l2_normalized: bool = False
    input_hw: tuple[tuple[int, int], ...] = ()   # (H, W) of the image-like inputs
    out_shape: tuple | None = None         # the output's shape from ONNX shape inference
    token_input: bool = False              # an integer input indexes an embedding table (token ids)
    vocab: tuple[int, ...] = ()            # row counts of the tables integer inputs index (vocabulary sizes)
    image_input: bool = False              # a float NCHW/NHWC image input (studio.core.dim_hints.image_axes)
    recurrent: str | None = None           # the recurrent op (LSTM...) the output's scores come after
    via: str = ""                          # how the op was reached ("in both If branches", "mean of")


def _dims(shape) -> str:
    return shape_text(tuple(shape or ()), 16)


def _is_int(dtype: str) -> bool:
    return dtype.startswith(("int", "uint", "bool"))


def _is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def _single_score(shape: tuple) -> bool:
    """[N, 1] (or [N, 1, 1]): one score per sample."""
    return len(shape) >= 2 and all(d == 1 for d in shape[1:])


def _squeezed(shape: tuple) -> tuple:
    """Trailing unit dims dropped ([N, C, 1, 1] → [N, C]); never below rank 1."""
    s = list(shape)
    while len(s) > 1 and s[-1] == 1:
        s.pop()
    return tuple(s)


def _opset(model: onnx.ModelProto) -> int:
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _value_shapes(model: onnx.ModelProto) -> dict[str, tuple]:
    """Shapes of the values near the outputs, from the model's value_info and ONNX shape inference."""
    shapes: dict[str, tuple] = {}
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - a model shape inference refuses: declared shapes only
        inferred = model
    for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
        t = value_info(vi)
        if t.shape is not None and (vi.name not in shapes or _open(shapes[vi.name]) > _open(t.shape)):
            shapes[vi.name] = tuple(t.shape)
    return shapes


def _open(shape: tuple) -> int:
    return sum(not isinstance(d, int) for d in shape)


def _input_hw(model: onnx.ModelProto, shapes: Mapping[str, tuple]) -> tuple[tuple[int, int], ...]:
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        s = shapes.get(vi.name)
        if vi.name in inits or not s or len(s) != 4:
            continue
        hw = (s[2], s[3]) if s[1] in (1, 3, 4) else (s[1], s[2])      # NCHW, else NHWC
        if all(isinstance(d, int) for d in hw):
            out.append(hw)
    return tuple(out)


def _through_pass(producer: Mapping[str, onnx.NodeProto], name: str) -> tuple[onnx.NodeProto | None, str]:
    """The node making ``name``'s values through pass-through ops, and which of its outputs carries them."""
    node, depth = producer.get(name), 0
    while node is not None and node.op_type in _PASS and node.input and depth < _MAX_DEPTH:
        name = node.input[0]
        node, depth = producer.get(name), depth + 1
    return node, name


def _final_op(graph: onnx.GraphProto, name: str, depth: int = 0,
              outer: Mapping[str, onnx.NodeProto] | None = None) -> tuple[str | None, str]:
    """The op that makes the values of ``name`` in ``graph``, looking through pass-through ops, into both
    branches of an If (Silero VAD's whole net sits in nested Ifs) and through a mean/max of probabilities
    (its per-frame sigmoid averaged): (op, how it was reached). ``outer``: the enclosing graphs' producers
    (a branch reads their values)."""
    producer = {**(outer or {}), **{o: n for n in graph.node for o in n.output if o}}
    node, value = _through_pass(producer, name)
    if node is None or depth > 8:
        return None, ""
    if node.op_type in _PROB_REDUCE and node.input:
        inner, how = _final_op(graph, node.input[0], depth + 1, outer)
        if inner == "Sigmoid":
            return "Sigmoid", f"{node.op_type} of a Sigmoid" + (f", {how}" if how else "")
    if node.op_type == "If":
        k = list(node.output).index(value)
        found = {_final_op(a.g, a.g.output[k].name, depth + 1, producer) for a in node.attribute
                 if a.name in ("then_branch", "else_branch") and len(a.g.output) > k}
        ops = {op for op, _how in found}
        if len(ops) == 1 and None not in ops:
            hows = sorted(h for _op, h in found if h)
            return ops.pop(), "in both If branches" + (f": {hows[0]}" if hows else "")
    return node.op_type, ""


def _recurrent_before(producer: Mapping[str, onnx.NodeProto], name: str) -> str | None:
    """The recurrent op (LSTM, GRU...) within a few nodes upstream of ``name``, else None."""
    frontier, seen = [name], set()
    while frontier and len(seen) < _RECURRENT_WALK:
        node = producer.get(frontier.pop(0))
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type in _RECURRENT:
            return node.op_type
        frontier.extend(i for i in node.input if i)
    return None


def _vocab_sizes(model: onnx.ModelProto) -> tuple[int, ...]:
    """Row counts of the tables (initializers or Constant nodes) that integer inputs index with Gather: the
    vocabularies of a text model (a decoder step's target vocabulary sits in a Constant)."""
    g = model.graph
    tables = {t.name: list(t.dims) for t in g.initializer}
    tables.update({n.output[0]: list(a.t.dims) for n in g.node if n.op_type == "Constant" and n.output
                   for a in n.attribute if a.name == "value" and a.HasField("t")})
    consumers: dict[str, list] = {}
    for n in g.node:
        for i, name in enumerate(n.input):
            consumers.setdefault(name, []).append((n, i))
    ints = [vi.name for vi in g.input if vi.type.tensor_type.elem_type in (onnx.TensorProto.INT64,
                                                                           onnx.TensorProto.INT32)]
    sizes: set[int] = set()
    frontier, seen = list(ints), set()
    while frontier and len(seen) < 256:
        value = frontier.pop()
        if value in seen:
            continue
        seen.add(value)
        for n, i in value_uses(value, consumers):
            if n.op_type == "Gather" and i == 1 and n.input[0] in tables:
                dims = tables[n.input[0]]
                axis = int(_attr(n, "axis", 0))
                if len(dims) >= 2 and -len(dims) <= axis < len(dims):
                    sizes.add(int(dims[axis]))
            elif n.op_type in _ID_PICKS and i == 0:
                frontier.extend(o for o in n.output if o)      # ids picked from ids (a decoder's last token)
    return tuple(sorted(sizes))


def _inputs_kind(model: onnx.ModelProto) -> tuple[bool, bool]:
    """(token ids among the inputs, an image among the inputs)."""
    try:
        specs = input_specs(model)
    except Exception:  # noqa: BLE001 - an input the feeds cannot describe: no evidence from it
        return False, False
    tokens = any(s.role == "token_ids" or (s.dtype.startswith("int") and _TOKEN_INPUT.search(s.name))
                 for s in specs)
    image = any(image_axes(s.name, tuple(s.shape or ()), s.dtype.startswith(("float", "bfloat")))
                for s in specs if s.shape is not None)
    return tokens, image


def _evidence(model: onnx.ModelProto) -> dict[str, Evidence]:
    """Per graph output: its producing op (through pass-through ops) and what that op says."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    shapes = _value_shapes(model)
    hw = _input_hw(model, shapes)
    picked = order_free_outputs(model)
    opset = _opset(model)
    tokens, image = _inputs_kind(model)
    vocab = _vocab_sizes(model)
    tokens = tokens or bool(vocab)
    found: dict[str, Evidence] = {}
    for out in model.graph.output:
        name, node, depth = out.name, producer.get(out.name), 0
        while node is not None and node.op_type in _PASS and node.input and depth < _MAX_DEPTH:
            name, node, depth = node.input[0], producer.get(node.input[0]), depth + 1
        free = picked.get(out.name)
        if node is None:
            found[out.name] = Evidence(order_free=free.describe() if free else None, input_hw=hw,
                                        out_shape=shapes.get(out.name), token_input=tokens, vocab=vocab,
                                        image_input=image)
            continue
        final, via = _final_op(model.graph, out.name)
        if final is not None and final != node.op_type and final == "Sigmoid":
            found[out.name] = Evidence("Sigmoid", node.name or node.op_type, None, shapes.get(node.output[0]),
                                        free.describe() if free else None, False, hw, shapes.get(out.name),
                                        tokens, vocab, image, None, via)
            continue
        op_shape = shapes.get(node.output[0])
        axis = None
        if node.op_type in ("Softmax", "LogSoftmax", "ArgMax", "ArgMin"):
            default = -1 if node.op_type in ("Softmax", "LogSoftmax") and opset >= 13 else (
                1 if node.op_type in ("Softmax", "LogSoftmax") else 0)
            axis = int(_attr(node, "axis", default))
            rank = len(op_shape) if op_shape is not None else None
            if node.op_type in ("ArgMax", "ArgMin"):
                in_shape = shapes.get(node.input[0])
                rank = len(in_shape) if in_shape is not None else None
                op_shape = in_shape if in_shape is not None else op_shape
            if axis < 0 and rank is not None:
                axis += rank
        l2 = node.op_type == "LpNormalization" or (node.op_type == "Div" and len(node.input) > 1 and _is_norm(
            producer, node.input[1]))
        recurrent = _recurrent_before(producer, out.name) if image and node.op_type in (_LINEAR | {
            "MatMulInteger", "Softmax", "LogSoftmax"}) else None
        found[out.name] = Evidence(node.op_type, node.name or node.op_type, axis, op_shape,
                                    free.describe() if free else None, l2, hw, shapes.get(out.name), tokens,
                                    vocab, image, recurrent)
    return found


def _is_norm(producer: Mapping[str, onnx.NodeProto], name: str) -> bool:
    """True when ``name`` is an L2 norm (ReduceL2, or Sqrt of a ReduceSumSquare/ReduceSum of squares)."""
    for _ in range(4):
        node = producer.get(name)
        if node is None:
            return False
        if node.op_type in ("ReduceL2",):
            return True
        if node.op_type == "Sqrt":
            inner = producer.get(node.input[0])
            return inner is not None and inner.op_type in ("ReduceSumSquare", "ReduceSum", "ReduceMean")
        if node.op_type not in ("Clip", "Max", "Add", "Expand", "Identity", "Cast"):
            return False
        name = node.input[0]
    return False


def is_yolo_head(shape: tuple) -> bool:
    """[N, 4 + classes, anchors] (or anchors first): the shape of a raw YOLO head."""
    s = tuple(shape or ())
    if len(s) != 3 or not all(isinstance(d, int) for d in s[1:]):
        return False
    small, large = min(s[1], s[2]), max(s[1], s[2])
    return 5 <= small <= 4 + 1000 and large >= 8 * small


def _open_raw_head(shape: tuple, ev: Evidence) -> bool:
    """[N, 4 + classes, anchors] with the anchor count left open, concatenated from box and score
    branches (an exporter's formula the studio does not evaluate)."""
    if len(shape) != 3 or ev.op != "Concat":
        return False
    small = [d for d in shape[1:] if isinstance(d, int)]
    return len(small) == 1 and 5 <= small[0] <= 4 + 1000


def infer_task(name: str, dtype: str, shape: tuple | None, ev: Evidence | None = None) -> OutputTask:
    """The task of one output from its dtype, dims, the graph's evidence ``ev`` and its name."""
    ev = ev or Evidence()
    shape = tuple(shape or ())
    dims = _dims(shape)
    sq = _squeezed(shape) if shape else ()
    last = sq[-1] if sq else None
    what = f"{dtype} {dims}"

    def task(kind: str, reason: str, **kw) -> OutputTask:
        return OutputTask(name, kind, reason, **kw)

    if dtype.startswith("seq(map(") and ev.op == "ZipMap":
        return task("classification", f"{dtype} class probabilities per row as maps (ai.onnx.ml ZipMap) → "
                                      "classification; compared value by value")
    if dtype.startswith(("seq(", "map(", "optional(")) or dtype in ("string", "undefined"):
        return task("other", f"{dtype} output: no task metric; compared value by value")
    if _is_int(dtype):
        if ev.op in ("ArgMax", "ArgMin"):
            spatial = [d for d in sq[1:] if d != 1]
            if len(sq) >= 3 or (len(spatial) >= 2 and all(isinstance(d, int) and d >= 8 for d in spatial)):
                return task("segmentation", f"{what} from {ev.op} over the class axis → per-pixel labels: "
                                            "segmentation (mask IoU)")
            return task("classification", f"{what} from {ev.op} → class ids: classification (top-1 agreement "
                                          "= equal ids)")
        if ev.op in _ML_CLASSIFIERS:
            return task("classification", f"{what} class labels of ai.onnx.ml {ev.op} → classification (top-1 "
                                          "agreement = equal labels)")
        if len(shape) == 3 and _SEG.search(name):
            return task("segmentation", f"{what} label map named '{name[:40]}' → segmentation (mask IoU)")
        why = f" picked by {ev.order_free}, compared as rows in any order" if ev.order_free else ""
        return task("integer", f"{what}{why}: compared exactly (mismatch rate)")
    if not _is_float(dtype):
        return task("other", f"{dtype} output: no task metric; compared value by value")
    box_rows = len(shape) >= 2 and isinstance(shape[-1], int) and 4 <= shape[-1] <= 7
    if ev.order_free and box_rows:
        return task("detection", f"{what} rows picked by {ev.order_free}, last dim {shape[-1]} → detection "
                                 "boxes: compared as rows in any order, mAP50 against the reference's boxes",
                    head="rows")
    if ev.order_free:
        return task("regression", f"{what} values picked by {ev.order_free}: compared as rows in any order")
    over_vocab = isinstance(last, int) and last >= 2 and last in ev.vocab and len(sq) in (2, 3) \
        and ev.op not in ("Sigmoid",)
    named = ev.token_input and len(shape) == 3 and isinstance(shape[-1], int) and bool(_LOGITS.search(name))
    if (over_vocab or named) and not _EMBED.search(name):
        why = (f"over the vocabulary of {last} its token ids index" if over_vocab
               else f"named '{name[:40]}', of a model fed token ids")
        return task("language-model", f"{what} next-token scores {why} → language-model logits: next-token "
                                      "agreement (argmax per position), perplexity on a text dataset",
                    classes=shape[-1] if isinstance(shape[-1], int) else None)
    if ev.recurrent and len(sq) in (2, 3) and ev.op not in ("Sigmoid",):
        return task("sequence", f"{what} per-step scores after {ev.recurrent} over an image input → CTC text "
                                "recognition: sequence (greedy CTC, CER; the declared shape may differ from the run's)")
    if (is_yolo_head(shape) or _open_raw_head(shape, ev)) and ev.op not in ("Softmax", "LogSoftmax"):
        return task("detection", f"{what} raw detection head (4 box values + class scores per anchor) → "
                                 "detection: decoded (score threshold, NMS), mAP50 against the reference's boxes",
                    head="raw")
    if ev.op in ("Softmax", "LogSoftmax"):
        return _softmax_task(name, dtype, shape, ev)
    positions = shape[1] if len(shape) == 3 and shape[-1] == 1 else shape[-1] if len(shape) == 3 and shape[1] == 1 \
        else None           # [N, L, 1] or [N, 1, L]: one channel over a time/space axis
    if positions is not None and positions != 1 and (not isinstance(positions, int) or positions >= 8) \
            and _SEG.search(name):
        sig = ev.op == "Sigmoid"
        at = "probabilities at 0.5" if sig else "logits at 0"
        return task("segmentation", f"{what} one channel per position over a time/space axis, named "
                                    f"'{name[:40]}' → a 1-D mask of {at}: segmentation",
                    classes=2, threshold=0.5 if sig else 0.0)
    if ev.op == "Sigmoid":
        via = f" ({ev.via})" if ev.via else ""
        if _single_score(shape) or len(shape) == 1:
            what_one = "one probability per frame" if len(shape) == 1 else "sigmoid score"
            return task("classification", f"{what} {what_one}{via} → binary classification (top-1 agreement = "
                                          "same side of 0.5)", classes=2, threshold=0.5)
        if len(shape) == 4 and shape[1] == 1:
            return task("segmentation", f"{what} one-channel sigmoid probability map [N, 1, H, W]{via} → mask at "
                                        "0.5: segmentation (mask IoU)", classes=2, threshold=0.5)
        if len(sq) <= 2 and isinstance(last, int) and last >= 2:
            return task("classification", f"{what} sigmoid scores over the last axis → (multi-label) "
                                          "classification: top-1 agreement", classes=last)
    if ev.l2_normalized and len(sq) in (1, 2):
        return task("embedding", f"{what} L2-normalized ({ev.op}) → embedding (cosine, recall@k)")
    if len(sq) == 3 and _SEQ.search(name):
        return task("sequence", f"{what} per-step scores named '{name[:40]}' → sequence (greedy CTC, CER)")
    if len(shape) == 4 and isinstance(shape[1], int) and 2 <= shape[1] <= 512 and all(
            isinstance(d, int) and d >= 8 for d in shape[2:]):
        hw = tuple(shape[2:])
        if _SEG.search(name) or ev.op == "Resize" or hw in ev.input_hw or not ev.input_hw:
            why = ("named '" + name[:40] + "'" if _SEG.search(name) else "upsampled by Resize" if ev.op == "Resize"
                   else "the input's height x width" if hw in ev.input_hw else "[N, C, H, W] class maps")
            return task("segmentation", f"{what} {why} → per-pixel classes over axis 1: segmentation (mask IoU)",
                        classes=shape[1])
        return task("regression", f"{what} feature map (not the input's size {ev.input_hw[0][0]}x"
                                  f"{ev.input_hw[0][1]}) → regression (cosine, max abs/rel)")
    if _EMBED.search(name) and len(sq) in (1, 2, 3) and isinstance(last, int) and last >= 16:
        return task("embedding", f"{what} named '{name[:40]}' → embedding (cosine, recall@k)")
    if _STATE_OUT.search(name):
        return task("regression", f"{what} named '{name[:40]}': a recurrent state or cache handed to the next "
                                  "call → regression (cosine, max abs/rel)")
    if ev.token_input and len(sq) == 3 and isinstance(last, int) and last >= 16:
        return task("embedding", f"{what} per-token hidden states of a model fed token ids → embedding (cosine)")
    if len(shape) == 4 and shape[1] == 1 and shape[2] == 1 and isinstance(shape[3], int) and shape[3] >= 16:
        return task("embedding", f"{what} a pooled [N, 1, 1, C] feature vector (NHWC) → embedding (cosine, "
                                 "recall@k)")
    if ev.image_input and len(shape) == 3 and isinstance(shape[-1], int) and shape[-1] >= 2 and (
            _LOGITS.search(name) or _SEQ.search(name)):
        return task("sequence", f"{what} per-step scores named '{name[:40]}' over an image input → CTC text "
                                "recognition: sequence (greedy CTC, CER)")
    if _single_score(shape) and re.search(r"logit", name, re.I):
        return task("classification", f"{what} one logit named '{name[:40]}' → binary classification "
                                      "(top-1 agreement = same sign)", classes=2, threshold=0.0)
    if _single_score(shape) and re.search(r"prob", name, re.I):
        return task("classification", f"{what} one probability named '{name[:40]}' → binary classification "
                                      "(top-1 agreement = same side of 0.5)", classes=2, threshold=0.5)
    if len(sq) <= 2 and isinstance(last, int) and last >= 2 and _CLASS.search(name):
        return task("classification", f"{what} class scores named '{name[:40]}' → classification",
                    classes=last)
    if len(shape) == 3 and shape[-1] == 3 and isinstance(shape[1], int) and 2 <= shape[1] <= 1000 \
            and _DETECT.search(name):
        return task("detection", f"{what} {shape[1]} slots x (score, centre, width) named '{name[:40]}' → 1-D "
                                 "detection (events along a signal); no 1-D mAP: compared by cosine")
    if len(sq) <= 2 and isinstance(last, int) and last >= 10 and ev.op in _LINEAR:
        return task("classification", f"{what} scores from {ev.op} (no softmax) → classification by its "
                                      "logits; set the task to embedding if these are features", classes=last)
    return task("regression", f"{what}" + (f" from {ev.op}" if ev.op else "")
                + ": no class axis, boxes or sequence → regression (cosine, max abs/rel)")


def _softmax_task(name: str, dtype: str, shape: tuple, ev: Evidence) -> OutputTask:
    what = f"{dtype} {_dims(shape)}"
    op = ev.op.lower()
    src = tuple(ev.op_shape or shape or ())
    axis = ev.axis if ev.axis is not None else len(src) - 1
    trailing_units = bool(src) and all(d == 1 for d in src[axis + 1:])
    sq = _squeezed(shape) if shape else ()
    classes = src[axis] if 0 <= axis < len(src) and isinstance(src[axis], int) else None
    n = f"{classes} " if classes else ""
    if trailing_units and len(sq) <= 2:
        where = "the last axis" if axis == len(src) - 1 else f"axis {axis} (trailing dims 1)"
        return OutputTask(name, "classification", f"{what} {op} over {where} → {n}class probabilities: "
                                                   "classification", classes=classes)
    if trailing_units and len(sq) == 3:
        return OutputTask(name, "sequence", f"{what} {op} over the last axis of [N, T, C] → per-step "
                                             "classes: sequence (greedy CTC, CER)", classes=classes)
    if axis == 1 and len(src) == 4:
        return OutputTask(name, "segmentation", f"{what} {op} over axis 1 of [N, C, H, W] → per-pixel "
                                                 "classes: segmentation (mask IoU)", classes=classes)
    return OutputTask(name, "regression", f"{what} {op} over axis {axis}: not a layout the task metrics read "
                                          "(set the task if it is one)")


# ---------------------------------------------------------------------------- models


def output_tasks(model: onnx.ModelProto, overrides: Mapping[str, str] | None = None, *,
                 stored: Mapping[str, str] | None = None,
                 shapes: Mapping[str, tuple] | None = None) -> dict[str, OutputTask]:
    """The task of every graph output of ``model`` (in order): inferred from the graph, then the
    project's ``stored`` choices, then this run's ``overrides`` ({output: kind}). ``shapes``: real
    output shapes (from a run) for dims the model leaves open."""
    check_overrides(model, {**dict(stored or {}), **dict(overrides or {})})
    ev = _evidence(model)
    found: dict[str, OutputTask] = {}
    for vi in model.graph.output:
        t = value_info(vi)
        e = ev.get(vi.name)
        shape = _known(_known(t.shape, e.out_shape if e else None, fill_only=True), (shapes or {}).get(vi.name))
        inferred = replace(infer_task(vi.name, t.dtype, shape, e), shape=shape)
        for source, chosen in (("project", stored), ("given", overrides)):
            kind = (chosen or {}).get(vi.name)
            if kind and kind != inferred.kind:
                inferred = _override(inferred, kind, source, t.dtype, shape, ev.get(vi.name))
            elif kind:
                inferred = replace(inferred, source=source)
        found[vi.name] = inferred
    return _scores_of_siblings(model, _sibling_heads(found))


def _scores_of_siblings(model: onnx.ModelProto, found: dict[str, OutputTask]) -> dict[str, OutputTask]:
    """An output a sibling output's Softmax/LogSoftmax/Sigmoid reads (``logits`` beside ``probs =
    softmax(logits)``) has that sibling's task: its scores decide the same classes (a Sigmoid's 0.5 is a
    logit's 0)."""
    producer = {o: n for n in model.graph.node for o in n.output if o}
    values = {}
    for vi in model.graph.output:
        _node, value = _through_pass(producer, vi.name)
        values.setdefault(value, vi.name)
    for vi in model.graph.output:
        node, _value = _through_pass(producer, vi.name)
        if node is None or node.op_type not in _SCORE_OPS or not node.input:
            continue
        scores = values.get(_through_pass(producer, node.input[0])[1])
        sib, t = found[vi.name], found.get(scores) if scores else None
        if t is None or scores == vi.name or t.source != "inferred" or t.kind != "regression" \
                or sib.kind in ("regression", "other"):
            continue
        threshold = 0.0 if sib.threshold is not None and node.op_type == "Sigmoid" else sib.threshold
        found[scores] = replace(t, kind=sib.kind, classes=sib.classes, threshold=threshold, head=sib.head,
                                reason=f"{t.reason.split(':')[0].split(' from ')[0]}: the scores sibling output "
                                       f"'{vi.name[:40]}' takes {node.op_type} of → its task, {sib.kind}")
    return found


def _sibling_heads(found: dict[str, OutputTask]) -> dict[str, OutputTask]:
    """An inferred [N, anchors, K] output beside a raw detection head over the same anchors is part of that
    head (PicoDet/GFL: class scores [1, 130, 10] beside box-distribution bins [1, 130, 32])."""
    anchors = {t.shape[1]: t.output for t in found.values() if t.kind == "detection" and t.head == "raw"
               and t.shape is not None and len(t.shape) == 3 and isinstance(t.shape[1], int)}
    for name, t in found.items():
        s = t.shape
        if t.source == "inferred" and t.kind == "regression" and s is not None and len(s) == 3 \
                and isinstance(s[1], int) and s[1] in anchors:
            found[name] = replace(t, kind="detection", head="raw",
                                  reason=f"{t.reason.split(':')[0]} over the {s[1]} anchors of detection head "
                                         f"'{anchors[s[1]][:40]}' → part of that head: detection")
    return found


def _known(declared: tuple | None, real: tuple | None, *, fill_only: bool = False) -> tuple | None:
    """Declared dims with open ones filled from ``real`` (a run's shape, or with ``fill_only`` an
    inferred one that may itself hold symbolic dims) of the same rank; ``real`` when nothing is declared."""
    if real is None:
        return declared
    if not fill_only:
        real = tuple(int(d) for d in real)
    if declared is None or len(declared) != len(real):
        return tuple(real) if (declared is None or not fill_only) else declared
    return tuple(d if isinstance(d, int) else (r if isinstance(r, int) or d is None else d)
                 for d, r in zip(declared, real))


def _override(inferred: OutputTask, kind: str, source: str, dtype: str, shape: tuple | None,
              ev: Evidence | None) -> OutputTask:
    who = "set by --task" if source == "given" else "chosen by the user"
    sq = _squeezed(tuple(shape or ())) if shape else ()
    threshold = classes = None
    if kind == "classification" and _single_score(tuple(shape or ())) and _is_float(dtype):
        threshold = 0.5 if ev is not None and ev.op == "Sigmoid" else 0.0
        classes = 2
    elif kind == "classification" and sq and isinstance(sq[-1], int):
        classes = sq[-1]
    head = None
    if kind == "detection":
        s = tuple(shape or ())
        head = inferred.head or ("rows" if s and isinstance(s[-1], int) and 4 <= s[-1] <= 7 else "raw")
    note = f"; a single score: binary, decided at {threshold:g}" if threshold is not None else \
        f"; {'box rows' if head == 'rows' else 'a raw per-anchor head'}" if head else ""
    return OutputTask(inferred.output, kind, f"{who}{note} (inferred: {inferred.kind})", source, classes, threshold,
                      inferred.shape, head)


def check_overrides(model: onnx.ModelProto, tasks: Mapping[str, str]) -> None:
    """One-line errors for an unknown output or kind in ``tasks``."""
    names = [o.name for o in model.graph.output]
    for output, kind in tasks.items():
        if output not in names:
            raise StudioError(f"--task: the model has no output {output[:60]!r}; its outputs: "
                              f"{', '.join(n[:40] for n in names[:8])}", code=ErrorCode.BAD_OPTION)
        if kind not in TASKS:
            raise StudioError(f"--task {output[:40]}={str(kind)[:30]}: the task is one of {', '.join(TASKS)}",
                              code=ErrorCode.BAD_OPTION)


def parse_task_options(values: Sequence[str] | None) -> dict[str, str]:
    """``["prob=classification", ...]`` (repeatable ``--task OUTPUT=KIND``) → {output: kind}."""
    out: dict[str, str] = {}
    for raw in values or ():
        output, sep, kind = str(raw).rpartition("=")
        kind = kind.strip().lower()
        if not sep or not output.strip():
            raise StudioError(f"--task takes OUTPUT=KIND (e.g. prob=classification), got {str(raw)[:60]!r}",
                              code=ErrorCode.BAD_OPTION)
        if kind not in TASKS:
            raise StudioError(f"--task {output[:40]}={kind[:30]}: the task is one of {', '.join(TASKS)}",
                              code=ErrorCode.BAD_OPTION)
        out[output.strip()] = kind
    return out


def order_free_for(model: onnx.ModelProto, tasks: Mapping[str, OutputTask] | None = None) -> dict:
    """``studio.core.order_free.order_free_outputs`` plus the outputs the user says are detection
    box rows: compared as rows in any order by every comparison."""
    found = dict(order_free_outputs(model))
    declared = {o.name: value_info(o).shape for o in model.graph.output}
    for name, t in (tasks or {}).items():
        shape = declared.get(name) or ()
        if t.kind == "detection" and name not in found and t.source != "inferred" and t.head == "rows" \
                and len(shape) >= 2:
            found[name] = OrderFree("task", "detection rows (the output's task)")
    return found


__all__ = ["OutputTask", "SETTING", "TASKS", "check_overrides", "infer_task", "order_free_for", "output_tasks",
           "parse_task_options"]
