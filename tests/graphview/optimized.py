"""A hand-made "optimized" CNN for the diff tests, until the passes issue lands:
every BatchNormalization folded into its Conv with numpy, Identity and
inference-mode Dropout removed, and pipeline records in the lineage format
(``Version.provenance["pipeline"]``). ``rename=True`` also renames every node
and intermediate tensor, as some tools do, so only structure can match."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def fold_conv_bn(model: onnx.ModelProto, *, rename: bool = False) -> tuple[onnx.ModelProto, list[dict]]:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in g.node:
        for t in n.input:
            consumers.setdefault(t, []).append(n)
    producer = {o: n for n in g.node for o in n.output}
    fused, removed = [], []
    drop: set[int] = set()
    replace: dict[int, onnx.NodeProto] = {}
    for n in g.node:
        if n.op_type != "BatchNormalization":
            continue
        conv = producer.get(n.input[0])
        if conv is None or conv.op_type != "Conv" or len(consumers[conv.output[0]]) != 1:
            continue
        gamma, beta, mean, var = (numpy_helper.to_array(inits[t]) for t in n.input[1:5])
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        w = numpy_helper.to_array(inits[conv.input[1]])
        b = numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 else np.zeros(w.shape[0], w.dtype)
        scale = gamma / np.sqrt(var + eps)
        w2 = (w * scale[:, None, None, None]).astype(np.float32)
        b2 = ((b - mean) * scale + beta).astype(np.float32)
        wn, bn = f"{conv.name}.fused_weight", f"{conv.name}.fused_bias"
        g.initializer.extend([numpy_helper.from_array(w2, wn), numpy_helper.from_array(b2, bn)])
        new = helper.make_node("Conv", [conv.input[0], wn, bn], [n.output[0]], name=conv.name)
        new.attribute.extend(conv.attribute)
        replace[id(conv)] = new
        drop.add(id(n))
        fused.append({"kind": "fused", "nodes": [n.name, conv.name],
                      "detail": f"BatchNormalization folded into {conv.name}"})
    nodes = [replace.get(id(n), n) for n in g.node if id(n) not in drop]
    # Identity and inference Dropout: rewire consumers to their input.
    alias: dict[str, str] = {}
    kept = []
    outputs = {o.name for o in g.output}
    for n in nodes:
        if n.op_type in ("Identity", "Dropout") and n.output[0] not in outputs:
            alias[n.output[0]] = alias.get(n.input[0], n.input[0])
            removed.append({"kind": "removed", "nodes": [n.name], "detail": f"{n.op_type} is a no-op"})
            continue
        for i, t in enumerate(n.input):
            if t in alias:
                n.input[i] = alias[t]
        kept.append(n)
    used = {t for n in kept for t in n.input}
    live = [t for t in g.initializer if t.name in used]
    del g.node[:]
    g.node.extend(kept)
    del g.initializer[:]
    g.initializer.extend(live)
    del g.value_info[:]
    if rename:
        graph_io = {i.name for i in g.input} | outputs | {t.name for t in g.initializer}
        names: dict[str, str] = {}
        for i, n in enumerate(g.node):
            n.name = f"node_{i}"
            for j, o in enumerate(n.output):
                if o not in graph_io:
                    names[o] = f"t{i}_{j}"
                    n.output[j] = names[o]
        for n in g.node:
            for j, t in enumerate(n.input):
                n.input[j] = names.get(t, t)
    onnx.checker.check_model(m, full_check=True)
    records = [{"name": "fuse-conv-bn", "modified": bool(fused), "changes": fused},
               {"name": "eliminate-identity", "modified": bool(removed), "changes": removed}]
    return m, records
