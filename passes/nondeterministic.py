"""Which nodes are random or may keep state: one list for every pass.

A random op's output is a fresh draw on every run, so folding it freezes one
draw into a constant, merging two of them (CSE) makes two independent draws
one, and a pass that drops one silently changes what the model computes.
onnxscript's folder skips only RandomUniform/RandomNormal(Like) and
Multinomial (Bernoulli is missing: it was frozen into a constant); this list
adds Bernoulli, training-mode Dropout and every op outside the ONNX domains
(a custom op may be random or keep state, and nothing here can prove
otherwise). ONNX schemas carry no "deterministic" flag, so the list is ours.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir

from passes.ir_helpers import const_array

# ONNX-domain generators: every run draws new values.
RANDOM_OPS = frozenset({"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                        "Multinomial"})
# Domains whose ops are all pure functions of their inputs (ai.onnx.ml included).
PURE_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


def _onnxscript_list() -> frozenset[str]:
    """onnxscript's own non-deterministic list, so a later version that adds ops is followed."""
    try:
        from onnxscript.optimizer._constant_folding import _NON_DETERMINISTIC_OPS
    except Exception:          # private name: moved or renamed in another version
        return frozenset()
    return frozenset(str(op) for op in _NON_DETERMINISTIC_OPS)


ALL_RANDOM_OPS = RANDOM_OPS | _onnxscript_list()


def _dropout_trains(node: ir.Node, opset: int | None) -> bool:
    """Dropout draws a mask when training_mode is not a constant false and the ratio is not a
    constant 0 (opset >= 12), or when ``is_test`` is not 1 (opset < 7)."""
    if opset is not None and opset < 7:
        attr = node.attributes.get("is_test")
        return attr is None or attr.as_int() != 1
    if len(node.inputs) <= 2 or node.inputs[2] is None:
        return False
    mode = const_array(node.inputs[2], 16)
    if mode is not None and not bool(np.any(mode)):
        return False
    ratio = const_array(node.inputs[1], 16) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if ratio is not None and ratio.size == 1 and float(ratio.reshape(-1)[0]) == 0.0:
        return False
    return True


def nondeterministic_reason(node: ir.Node, opset: int | None = None) -> str | None:
    """Why ``node`` may give other values on another run (None: a pure function of its inputs)."""
    if node.domain not in PURE_DOMAINS:
        return f"op {node.op_type} of domain '{node.domain}' may be random or keep state"
    if node.op_type in ALL_RANDOM_OPS:
        return f"{node.op_type} is random"
    if node.op_type == "Dropout" and _dropout_trains(node, opset):
        return "Dropout in training mode is random"
    return None


def is_pure(node: ir.Node, opset: int | None = None) -> bool:
    return nondeterministic_reason(node, opset) is None


def random_op_counts(nodes) -> Counter:
    """How many random ONNX-domain ops (and training Dropouts) ``nodes`` hold: passes that
    rebuild the graph (onnxsim) are checked with it before and after."""
    out: Counter = Counter()
    for node in nodes:
        if node.domain in PURE_DOMAINS and nondeterministic_reason(node) is not None:
            out[node.op_type] += 1
    return out
