"""Subgraphs and composition: extract the part between chosen tensors, split at a cut into two
models, merge another model in front of (or after) this one through an I/O map."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import onnx_ir as ir

from studio.core.protowalk import unique_name
from studio.edit import graph as g
from studio.edit.script import EditError, EditOp
from studio.edit.state import SEQUENCE, STRUCTURE, VALUES, EditState
from studio.core.model_io import load_for_passes
from studio.core.model import load
from studio.core.model_io import Linker, save_checkpoint


def _needed_inputs(graph: ir.Graph, outputs: list[ir.Value], stop: set[ir.Value]) -> list[ir.Value]:
    """Graph inputs (not initializers) the outputs need when the walk stops at ``stop``, in input order."""
    seen: set[ir.Value] = set()
    todo = list(outputs)
    while todo:
        v = todo.pop()
        if v in seen or v in stop:
            continue
        seen.add(v)
        producer = v.producer()
        if producer is None:
            continue
        todo.extend(x for x in producer.inputs if x is not None)
        for attr in producer.attributes.values():      # outer values read inside subgraphs
            subs = [attr.value] if attr.type == ir.AttributeType.GRAPH else (
                list(attr.value) if attr.type == ir.AttributeType.GRAPHS else [])
            for sub in subs:
                for n in ir.traversal.RecursiveGraphIterator(sub):
                    todo.extend(x for x in n.inputs if x is not None and x.graph is graph)
    return [v for v in graph.inputs if v in seen and not v.is_initializer()]


def _model_like(model: ir.Model, graph: ir.Graph) -> ir.Model:
    return ir.Model(graph, ir_version=model.ir_version, producer_name=model.producer_name,
                    producer_version=model.producer_version, domain=model.domain, model_version=model.model_version,
                    functions=list(model.functions.values()), metadata_props=dict(model.metadata_props))


def _extract(model: ir.Model, inputs: list[str], outputs: list[str], op: EditOp, *, separate: bool = True) -> ir.Model:
    graph = model.graph
    g.infer_types(model)            # the new graph's inputs and outputs need their types
    values = g.main_values(graph)
    ins = [g.value(graph, n, op, values=values) for n in inputs]
    outs = [g.value(graph, n, op, values=values) for n in outputs]
    undefined = [v.name for v in _needed_inputs(graph, outs, set(ins)) if v not in ins]
    if undefined:
        raise EditError(f"{op.where()}: the cut leaves input '{undefined[0][:80]}' undefined (the outputs need it); "
                        "add it to the inputs, or cut after it")
    walked = set(_walked(graph, outs, stop=set(ins)))
    unused = [v.name for v in ins if v not in walked]
    if unused:
        raise EditError(f"{op.where()}: input '{unused[0][:80]}' is not on any path to the chosen outputs")
    if separate:
        _check_separates(ins, walked, op)
    sub = ir.convenience.extract(graph, ins, outs)
    _keep_order(graph, sub)
    return _model_like(model, sub)


def _check_separates(ins: list[ir.Value], kept: set[ir.Value], op: EditOp) -> None:
    """A cut separates the graph when no chosen input is computed (through nodes left out) from the kept
    part: from another chosen input or a value a kept node makes. Otherwise the extracted model takes as
    a free input what the original derives from its other inputs, and its numbers mean nothing. One walk
    up from the inputs, with one visited set: linear in the graph."""
    chosen = set(ins)
    seen: set[ir.Value] = set()
    for x in ins:
        producer = x.producer()
        todo = [(v, producer) for v in (producer.inputs if producer is not None else ()) if v is not None]
        while todo:
            v, via = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in chosen or (v in kept and v.producer() is not None):
                raise EditError(f"{op.where()}: the cut does not separate the graph: input '{x.name[:60]}' is computed "
                                f"from '{v.name[:60]}' (through node '{(via.name or via.op_type)[:60]}', left out of "
                                "the part), which the part also reads; cut at one of them only, or keep the nodes "
                                "between them")
            p = v.producer()
            if p is not None:
                todo.extend((u, via) for u in p.inputs if u is not None)


def _keep_order(graph: ir.Graph, sub: ir.Graph) -> None:
    """Initializers in the original's order: onnx-ir's extract collects them in a set, so without
    this the same script wrote a differently ordered file on each run (UI and CLI must agree)."""
    order = {name: i for i, name in enumerate(graph.initializers)}
    values = sorted(sub.initializers.values(), key=lambda v: order.get(v.name, len(order)))
    for v in values:
        sub.initializers.pop(v.name)
    for v in values:
        sub.register_initializer(v)


def _walked(graph: ir.Graph, outputs: list[ir.Value], stop: set[ir.Value] | None = None) -> list[ir.Value]:
    """Values the outputs are computed from, walking up (not past ``stop``): linear in the graph."""
    seen, todo = [], list(outputs)
    marks: set[ir.Value] = set()
    stop = stop or set()
    while todo:
        v = todo.pop()
        if v in marks:
            continue
        marks.add(v)
        seen.append(v)
        if v.producer() is not None and v not in stop:
            todo.extend(x for x in v.producer().inputs if x is not None)
    return seen


def extract(state: EditState, op: EditOp) -> None:
    """Keep only the subgraph between the chosen input and output tensors (onnx-ir's extract)."""
    choice = op.args.get("metadata", "keep")
    if choice not in ("keep", "drop"):
        raise EditError(f"{op.where()}: metadata is 'keep' or 'drop' (the source model's metadata properties)")
    before = state.model.graph.num_nodes()
    state.model = _extract(state.model, list(op.args["inputs"]), list(op.args["outputs"]), op)
    props = list(state.model.metadata_props)
    if choice == "drop":
        state.model.metadata_props.clear()
    said = (f"; the source's metadata {'kept' if choice == 'keep' else 'dropped'} ({len(props)} properties: "
            f"{', '.join(props[:6])}{' ...' if len(props) > 6 else ''})") if props else ""
    state.did(STRUCTURE, f"extracted {state.model.graph.num_nodes()} of {before} nodes between "
              f"{', '.join(op.args['inputs']) or '(no inputs)'} and {', '.join(op.args['outputs'])}" + said)


def split(state: EditState, op: EditOp) -> None:
    """Two models: the original inputs up to the cut tensors, and from the cut (plus any
    original inputs still needed) to the original outputs."""
    graph = state.model.graph
    cut = [g.value(graph, n, op) for n in op.args["cut"]]
    outs = list(graph.outputs)
    first_inputs = _needed_inputs(graph, cut, set())
    second_inputs = cut + [v for v in _needed_inputs(graph, outs, set(cut)) if v not in cut]
    walked = set(_walked(graph, outs))
    off = [v.name for v in cut if v not in walked]
    if off:
        raise EditError(f"{op.where()}: cut tensor '{off[0][:80]}' is on no path to the outputs")
    if any(v.is_graph_output() for v in cut) and len(cut) == len(outs):
        raise EditError(f"{op.where()}: the cut is the model's outputs; nothing is left for the second part")
    first = _extract(state.model, [v.name for v in first_inputs], [v.name for v in cut], op)
    # the second part takes the cut and the original inputs still needed: consistent when run after the first
    second = _extract(state.model, [v.name for v in second_inputs], [v.name for v in outs], op, separate=False)
    state.model = first
    state.extra.append(second)
    state.did(STRUCTURE, f"split at {', '.join(v.name for v in cut)}: {first.graph.num_nodes()} + "
              f"{second.graph.num_nodes()} nodes")


def _compatible(a: ir.Value, b: ir.Value) -> bool:
    if a.dtype != b.dtype:
        return False
    if a.shape is None or b.shape is None:
        return True
    if len(a.shape) != len(b.shape):
        return False
    return all(not (isinstance(x, int) and isinstance(y, int)) or x == y for x, y in zip(a.shape, b.shape))


def merge(state: EditState, op: EditOp) -> None:
    """Merge another model with this one: ``before`` (default), the other model's outputs feed this
    model's inputs as the io_map pairs say; ``after``, this model's outputs feed the other's.
    Colliding names of the other model get ``prefix`` (default 'merged/')."""
    other_path = state.script.path(op.args["model"])
    other = load_for_passes(load(other_path).path)     # validated like any model (external data paths...)
    before = op.args.get("position", "before") == "before"
    first, second = (other, state.model) if before else (state.model, other)
    g.infer_types(first)
    g.infer_types(second)
    for domain in set(first.opset_imports) & set(second.opset_imports):
        a, b = first.opset_imports[domain], second.opset_imports[domain]
        if a != b:
            raise EditError(f"{op.where()}: the models import {domain or 'ai.onnx'} at versions {a} and {b}; convert "
                            "one first (optimize --passes convert-opset --set convert-opset.target=N)")
    pairs = []
    f_out = {v.name: v for v in first.graph.outputs}
    s_in = {v.name: v for v in second.graph.inputs if not v.is_initializer()}
    for out_name, in_name in op.args["io_map"]:
        if out_name not in f_out:
            raise EditError(f"{op.where()}: '{out_name[:80]}' is not an output of the first model"
                            f"{g.edit_hint(out_name, list(f_out))}")
        if in_name not in s_in:
            raise EditError(f"{op.where()}: '{in_name[:80]}' is not an input of the second model"
                            f"{g.edit_hint(in_name, list(s_in))}")
        a, b = f_out[out_name], s_in[in_name]
        if not _compatible(a, b):
            raise EditError(f"{op.where()}: the io_map connects '{out_name[:60]}' ({g.type_text(a)}) to "
                            f"'{in_name[:60]}' ({g.type_text(b)}); the types or shapes do not match")
        pairs.append((a, b))
    prefix = op.args.get("prefix") or "merged/"
    _prefix_collisions(other, state.model, prefix,
                       keep={b.name for _, b in pairs} if before else {a.name for a, _ in pairs})
    shared, renamed_fns = _functions_apart(other, state.model, prefix)
    fg, sg = first.graph, second.graph
    with tempfile.TemporaryDirectory(prefix="studio-merge-") as tmp:
        parts = _snapshot(first, second, Path(tmp)) if state.verify else None
        f_nodes, s_nodes = list(fg), list(sg)
        f_inits, s_inits = list(fg.initializers.values()), list(sg.initializers.values())
        f_inputs, s_inputs = list(fg.inputs), list(sg.inputs)
        f_outputs, s_outputs = list(fg.outputs), list(sg.outputs)
        fg.remove(f_nodes)
        sg.remove(s_nodes)
        fg.initializers.clear()
        sg.initializers.clear()
        fg.inputs.clear(), sg.inputs.clear(), fg.outputs.clear(), sg.outputs.clear()
        linked_in = {b for _, b in pairs}
        linked_out = {a for a, _ in pairs}
        io_names = [(a.name, b.name) for a, b in pairs]
        for a, b in pairs:
            b.replace_all_uses_with(a)
        merged = ir.Graph(f_inputs + [v for v in s_inputs if v not in linked_in],
                          [v for v in f_outputs if v not in linked_out] + s_outputs,
                          nodes=f_nodes + s_nodes, initializers=f_inits + s_inits,
                          opset_imports={**first.opset_imports, **second.opset_imports}, name=state.model.graph.name)
        model = _model_like(state.model, merged)
        for fn in other.functions.values():
            model.functions.setdefault(fn.identifier(), fn)     # a clash left is the same function
        check = None
        if parts is not None:
            from studio.edit.verify import sequence  # cycle: the studio.edit package imports this module

            check = sequence(*parts, model, io_names, Path(tmp), pool_key=state.pool_key)
            if not check.ok:
                raise EditError(f"{op.where()}: the merged model does not compute the two models run in sequence "
                                f"({check.message[:200]}); refused, nothing was written")
    state.model = model
    fn_note = "".join([f"; {len(renamed_fns)} local functions of {other_path.name} renamed apart "
                       f"({', '.join(renamed_fns[:3])})" if renamed_fns else "",
                       f"; {len(shared)} identical local functions shared" if shared else ""])
    state.did(SEQUENCE if check is not None and check.status == "passed" else VALUES,
              f"merged {other_path.name} {'before' if before else 'after'} the model "
              f"({len(f_nodes)} + {len(s_nodes)} nodes, {len(pairs)} connections){fn_note}"
              + ("" if check is None else f"; {check.message}" if check.status == "passed" else
                 f"; merge check {check.verdict}"))


def _snapshot(first: ir.Model, second: ir.Model, work: Path) -> tuple:
    """The two parts as checkpoints before they are joined (the oracle's inputs: each run on its own)."""
    linker = Linker(work)
    return tuple(save_checkpoint(m, work / f"part{i}.onnx", data_dir=work, linker=linker)
                 for i, m in enumerate((first, second), 1))


def _function_bytes(fn: ir.Function) -> bytes:
    proto = ir.serde.serialize_function(fn)
    proto.doc_string = ""
    return proto.SerializeToString(deterministic=True)


def _calls(model: ir.Model):
    """Every node of the model: its graphs, their subgraphs and its local functions' bodies."""
    yield from ir.traversal.RecursiveGraphIterator(model.graph)
    for fn in model.functions.values():
        yield from ir.traversal.RecursiveGraphIterator(fn)


def _functions_apart(other: ir.Model, model: ir.Model, prefix: str) -> tuple[list[str], list[str]]:
    """The other model's local functions that clash with this model's by (domain, name, overload): shared
    when their bodies are the same, renamed (every call in the other model followed) when not. Until a
    fixed point: a function whose body calls a renamed one is no longer the same function."""
    taken = {(d, n) for d, n, _ in (*model.functions, *other.functions)}
    stem = re.sub(r"\W+", "_", prefix).strip("_") or "merged"
    renamed: list[str] = []
    while True:
        clash = [k for k in other.functions if k in model.functions
                 and _function_bytes(other.functions[k]) != _function_bytes(model.functions[k])]
        if not clash:
            break
        new_ids = {}
        for key in clash:
            fn = other.functions.pop(key)
            k, name = 1, f"{stem}_{fn.name}"
            while (fn.domain, name) in taken:
                k += 1
                name = f"{stem}_{fn.name}_{k}"
            taken.add((fn.domain, name))
            fn.name = name
            other.functions[fn.identifier()] = fn
            new_ids[key] = name
            renamed.append(f"{key[0]}.{key[1]} -> {name}")
        for n in _calls(other):
            new = new_ids.get((n.domain, n.op_type, n.overload))
            if new is not None:
                n.op_type = new
    shared = [k for k in other.functions if k in model.functions]      # the same body: one copy is kept
    return [f"{d}.{n}" for d, n, _ in shared], renamed


def _prefix_collisions(other: ir.Model, model: ir.Model, prefix: str, keep: set[str]) -> None:
    """The other model's values (inputs, initializers, node outputs, subgraphs') and node names that this
    model also uses get ``prefix``, and stay unique if the prefixed name is taken too."""
    taken_values = set(g.all_values(model.graph)) - keep
    other_values = g.all_values(other.graph)
    used = set(taken_values) | set(other_values)
    for name, v in other_values.items():
        if name in taken_values:
            v.name = unique_name(used, prefix + name)
    taken_nodes = g.node_names(model.graph)
    for n in ir.traversal.RecursiveGraphIterator(other.graph):
        if n.name and n.name in taken_nodes:
            n.name = prefix + n.name
