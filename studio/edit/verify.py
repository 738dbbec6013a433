"""Verification and the report of an applied edit.

Three ways, chosen by what the operations promise (``studio.edit.state``):
- every operation keeps values (renames, identity-like bypasses, inserted Identity): the
  pipeline's ``studio.verification.verifier.Verifier`` against the original, the renamed interface mapped back;
- the interface changes but tensors keep their values (extract, split, add/remove outputs,
  delete): the original is run with the edited model's inputs and outputs exposed, and the
  edited model, fed the original's values at its inputs, must reproduce the original's values
  at its outputs;
- values change on purpose (attributes, dtypes, weights, merges): not compared, said so.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from pathlib import Path

import onnx_ir as ir

from studio.edit import graph as g
from studio.edit.state import KEEPS, PINNED, SEQUENCE, STRUCTURE, VALUES
from studio.core.model_io import from_proto, to_proto
from studio.core.model_io import Linker, save_checkpoint
from studio.verification.verifier import Verifier
from studio.core.model_io import load_for_passes
from studio.verification.verifier import run_sets, searched_dims
from studio.core.compare import Verification, VerifyStatus, compare_outputs
from studio.core.errors import StudioError, ort_cause
from studio.core.feeds import input_specs, random_feeds, unnamed_dim_key


DOES_NOT_LOAD = "does not load"      # a Verification.reason: the edited model fails at load, numbers aside


def _passed(method: str, message: str) -> Verification:
    return Verification(VerifyStatus.PASSED, message, method=method)


def _failed(method: str, message: str) -> Verification:
    return Verification(VerifyStatus.FAILED, message, method=method)


def _skipped(reason: str, method: str, message: str) -> Verification:
    """Numbers not compared (the edit changes values on purpose, or the original cannot run): said why."""
    return Verification(VerifyStatus.SKIPPED, message, reason=reason, method=method)


def interface(model: ir.Model) -> dict[str, list[str]]:
    """Inputs and outputs as 'name: dtype[shape]' lines."""
    return {"inputs": [f"{v.name}: {g.type_text(v)}" for v in model.graph.inputs if not v.is_initializer()],
            "outputs": [f"{v.name}: {g.type_text(v)}" for v in model.graph.outputs]}


def node_changes(before: list[tuple[str, str]], after: list[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """Nodes removed and added, as 'name (Op)', by (name, op type) with multiplicity."""
    a, b = Counter(before), Counter(after)
    removed = [f"{n or '(unnamed)'} ({t})" for (n, t), k in (a - b).items() for _ in range(k)]
    added = [f"{n or '(unnamed)'} ({t})" for (n, t), k in (b - a).items() for _ in range(k)]
    return removed, added


def node_list(model: ir.Model) -> list[tuple[str, str]]:
    return [(n.name or "", n.op_type) for n in ir.traversal.RecursiveGraphIterator(model.graph)]


def _with_original_io(model: ir.Model, renamed: dict[str, str], source: Path) -> ir.Model:
    """A copy whose graph inputs/outputs carry the original's names again (for the Verifier). Its
    external tensors are the source's (only value-keeping edits come here), so they are read from the
    source's folder: the proto round trip keeps their relative locations, not where they lie."""
    from onnx_ir import external_data as ir_external


    copy = from_proto(to_proto(model))
    ir_external.set_base_dir(copy.graph, str(source.parent))
    io = list(dict.fromkeys([*copy.graph.inputs, *copy.graph.outputs]))
    targets = [(v, renamed.get(v.name, v.name)) for v in io]
    for i, (v, _) in enumerate(targets):       # two steps: a swap (boxes <-> scores) must not collide half-way
        v.name = f"\0studio_edit_io{i}"
    values = g.all_values(copy.graph)
    for v, old in targets:
        clash = values.get(old)
        if clash is not None and clash is not v:
            clash.name = f"{old}__studio_edit_shadow"
        v.name = old
    return copy


def _checkpoint(model: ir.Model, path: Path, source: Path, workdir: Path):
    return save_checkpoint(model, path, data_dir=source.parent, linker=Linker(workdir))


def verify(source: Path, models: tuple[ir.Model, ...], kinds: tuple[str, ...], notes: tuple[str, ...],
           renamed: dict[str, str], *, pool_key: str = "default") -> Verification:
    """Verify the edited models against the original file at ``source`` (see the module doc)."""
    if SEQUENCE in kinds:
        checked = [n for n, k in zip(notes, kinds) if k == SEQUENCE]
        if set(kinds) <= {KEEPS, SEQUENCE}:
            return _passed("sequence", "; ".join(n.split("; ")[-1] for n in checked)[:400])
        return _skipped("the merge was checked against its parts in sequence; the script's other "
                        "operations change values or the interface", "sequence",
                        "numbers of the other operations not compared")
    if VALUES in kinds:
        first = notes[kinds.index(VALUES)]
        return _skipped("values change on purpose (" + first[:120] + ")", "none",
                        "numbers not compared: the script changes values on purpose")
    dims: dict[str, int] | None = {}
    if PINNED in kinds:
        dims = _pinned_dims_of(source, models, renamed)
        if dims is None:
            first = notes[kinds.index(PINNED)]
            return _skipped("an input's shape changes beyond pinning its free dims (" + first[:200] + ")",
                            "none", "numbers not compared: a pin of free dims alone is verified at its sizes")
    with tempfile.TemporaryDirectory(prefix="studio-edit-") as tmp:
        work = Path(tmp)
        if all(k in (KEEPS, PINNED) for k in kinds) and len(models) == 1:
            return _numeric(source, models[0], renamed, work, pool_key, dims=dims or None)
        return _reproduce(source, models, renamed, work, pool_key, dims=dims or None)


def _pinned_dims_of(source: Path, models: tuple[ir.Model, ...], renamed: dict[str, str]) -> dict[str, int] | None:
    """The pins of every edited model together (a split's parts may pin the same dim), or None when
    one is not a pin of free dims or two parts pin a dim to different sizes."""
    dims: dict[str, int] = {}
    for m in models:
        mine = _pinned_dims(source, m, renamed)
        if mine is None or any(dims.get(k, v) != v for k, v in mine.items()):
            return None
        dims.update(mine)
    return dims


def _pinned_dims(source: Path, model: ir.Model, renamed: dict[str, str]) -> dict[str, int] | None:
    """The sizes the edit pinned, as ``dims`` of the original (its named free dims -> the edited model's
    numbers; an unnamed dim by its ``INPUT[AXIS]`` key), or None when a change is not a pin of a free dim (a
    fixed size changed, or one name pinned to two sizes)."""
    import onnx

    original = {i.name: i for i in onnx.load(str(source), load_external_data=False).graph.input}
    dims: dict[str, int] = {}
    for v in model.graph.inputs:
        if v.is_initializer():
            continue
        before = original.get(renamed.get(v.name, v.name))
        if before is None or v.shape is None:
            continue
        old = list(before.type.tensor_type.shape.dim)
        new = list(v.shape)
        if len(old) != len(new):
            return None
        for axis, (d_old, d_new) in enumerate(zip(old, new)):
            size = d_new if isinstance(d_new, int) else None
            if d_old.HasField("dim_value"):
                if size != d_old.dim_value:
                    return None
            elif size is not None:
                # an unnamed free dim (Silero's input [?, ?]) is pinned too, under its INPUT[AXIS] key
                key = d_old.dim_param or unnamed_dim_key(before.name, axis)
                if dims.get(key, size) != size:
                    return None
                dims[key] = size
    return dims


def _numeric(source: Path, model: ir.Model, renamed: dict[str, str], work: Path, pool_key: str,
             dims: dict[str, int] | None = None) -> Verification:
    ckpt = _checkpoint(_with_original_io(model, renamed, source), work / "candidate.onnx", source, work)
    result = Verifier(source, dims=dims, pool_key=pool_key).verify(ckpt, allow_fixed_dims=bool(dims))
    refused = _optimizer_refuses(ckpt, pool_key) if dims and result.numeric_status == "passed" else None
    if refused is not None:
        return Verification(VerifyStatus.FAILED, f"does not load in ONNX Runtime with its optimizer on (its default): "
                            f"{refused} (with it off the outputs match at "
                            f"{', '.join(f'{k}={v}' for k, v in dims.items())}); pin fewer dims",
                            reason=DOES_NOT_LOAD, method="numeric")
    if dims and not result.interface_ok and result.checker_ok and result.numeric_status == "passed":
        # a pin: the numbers agree at the pinned sizes; what inference then declared elsewhere is said, not hidden
        numbers = result.numeric.summary() if result.numeric is not None else "the outputs match"
        return _passed("numeric", f"at {', '.join(f'{k}={v}' for k, v in dims.items())}: {numbers}; "
                       f"the edited model's inferred interface differs: {result.message}")
    if dims and not result.ok:
        # a pin not shown equal at its sizes (outputs left open by inference, a run that fails there): said,
        # as before the pin was verified, not refused
        return _skipped(f"the pinned model was not shown equal at "
                        f"{', '.join(f'{k}={v}' for k, v in dims.items())} ({result.message[:200]})", "none",
                        "numbers not compared")
    at = f"at {', '.join(f'{k}={v}' for k, v in dims.items())}: " if dims else ""
    return dataclasses.replace(result, method="numeric", message=at + result.message)


def _optimizer_refuses(ckpt, pool_key: str) -> str | None:
    """Why ONNX Runtime with its basic optimizations refuses the pinned model at load, or None. Its constant
    folding and shape inference read the static sizes a pin writes (every If branch included), which the
    verification's optimizer-off session never does (corpus silero_vad_v5 at input [1, 512]: its 8 kHz
    branch's LSTM 'First input tensor must have rank 3'), so a pin that reads 'passed' may not load as
    users run it."""
    try:
        run_sets(ckpt.path, [], full=False, limits=None, pool_key=pool_key, data_dir=ckpt.data_dir,
                 stage="the pinned model in ONNX Runtime with its optimizer on", level="basic")
    except StudioError as exc:
        return ort_cause(exc, 300)
    return None


def _reproduce(source: Path, models: tuple[ir.Model, ...], renamed: dict[str, str], work: Path,
               pool_key: str, dims: dict[str, int] | None = None) -> Verification:
    """Run the original with the edited models' boundary tensors exposed; each edited model, fed the
    original's values at its inputs, must give the original's values at its outputs. ``dims``: free
    dims the edit pinned, so the original runs at the sizes the edited models take."""
    original = load_for_passes(source)
    g.infer_types(original)
    values = g.main_values(original.graph)
    wanted = []
    for m in models:
        for v in [*m.graph.inputs, *m.graph.outputs]:
            name = renamed.get(v.name, v.name)
            if name in values and name not in wanted and not values[name].is_initializer():
                wanted.append(name)
    have = {v.name for v in original.graph.outputs}
    for name in wanted:
        if name not in have and values[name].dtype is not None:
            original.graph.outputs.append(values[name])
    exposed = _checkpoint(original, work / "exposed.onnx", source, work)
    specs = input_specs(to_proto(original))
    feeds = random_feeds(specs, dims=dims, seed=0)
    ref = run_sets(exposed.path, [feeds], full=False, limits=None, pool_key=pool_key, data_dir=exposed.data_dir,
                   stage="reference tensors (original on ORT, edit boundaries exposed)")
    searched = ""
    if ref.outputs[0] is None:
        # seeded sizes the original refuses (a reflect Pad on 16 samples, corpus silero_vad): the sizes the
        # input search finds, as the Verifier does for value-keeping edits
        import onnx

        found = searched_dims(source, onnx.load(str(source), load_external_data=False), feeds, dims=dims,
                              limits=None, pool_key=pool_key)
        if found is not None:
            feeds = random_feeds(specs, dims=found[0], seed=0)
            ref = run_sets(exposed.path, [feeds], full=False, limits=None, pool_key=pool_key,
                           data_dir=exposed.data_dir, stage="reference tensors (original on ORT, searched inputs)")
            searched = f"on searched inputs ({found[1]}): "
    if ref.outputs[0] is None:
        return _skipped(f"ONNX Runtime cannot run the original ({ref.errors[0]})", "reproduce",
                        "numbers not compared")
    seen = ref.outputs[0]
    compared = 0
    for i, m in enumerate(models):
        ins = [v for v in m.graph.inputs if not v.is_initializer()]
        missing = [v.name for v in ins if renamed.get(v.name, v.name) not in seen]
        if missing:
            return _skipped(f"input '{missing[0]}' is not a tensor of the original", "reproduce",
                            "numbers not compared")
        part_feeds = {v.name: seen[renamed.get(v.name, v.name)] for v in ins}
        ckpt = _checkpoint(m, work / f"part{i + 1}.onnx", source, work)
        got = run_sets(ckpt.path, [part_feeds], full=False, limits=None, pool_key=pool_key, data_dir=ckpt.data_dir,
                       stage="verification (edited model on ORT)")
        if got.outputs[0] is None:
            return _failed("reproduce", f"the edited model cannot run in ONNX Runtime: {got.errors[0]}")
        refused = _optimizer_refuses(ckpt, pool_key) if dims else None
        if refused is not None:
            return Verification(VerifyStatus.FAILED, f"part {i + 1} does not load in ONNX Runtime with its optimizer "
                                f"on (its default): {refused} (pinned {', '.join(f'{k}={v}' for k, v in dims.items())})"
                                "; pin fewer dims", reason=DOES_NOT_LOAD, method="reproduce")
        expect = {v.name: seen[renamed.get(v.name, v.name)] for v in m.graph.outputs
                  if renamed.get(v.name, v.name) in seen}
        if not expect:
            continue
        cmp = compare_outputs(expect, {k: got.outputs[0][k] for k in expect})
        if not cmp:
            return _failed("reproduce", f"part {i + 1} does not reproduce the original: {cmp.summary()}")
        compared += len(expect)
    if not compared:
        return _skipped("no output of the edit is a tensor of the original", "reproduce",
                        "numbers not compared")
    at = f"at {', '.join(f'{k}={v}' for k, v in dims.items())}: " if dims else ""
    return _passed("reproduce", f"{at}{searched}{compared} outputs reproduce the original's tensors on the same "
                   "inputs (ONNX Runtime CPU)")


def sequence(first, second, merged: ir.Model, io_map: list[tuple[str, str]], work: Path, *,
             pool_key: str = "default") -> Verification:
    """A merge against its oracle: the first part run on seeded inputs, its outputs fed through ``io_map``
    into the second part, and the merged model on the same inputs must give both parts' outputs by name.
    ``first`` and ``second`` are checkpoints of the parts taken just before they were joined."""
    import onnx


    ckpt = save_checkpoint(merged, work / "merged.onnx", data_dir=work, linker=Linker(work))
    feeds = random_feeds(input_specs(onnx.load(str(ckpt.path), load_external_data=False)), seed=0)

    def run(c, f: dict, what: str):
        res = run_sets(c.path, [f], full=False, limits=None, pool_key=pool_key, data_dir=c.data_dir,
                       stage=f"merge check ({what} on ORT)", repeat_first=what != "merged model")
        random.update(res.nondeterministic)
        return res.outputs[0], res.errors[0]

    random: set[str] = set()      # outputs of a part that differ between two runs (random ops)

    def inputs_of(c) -> list[str]:
        m = onnx.load(str(c.path), load_external_data=False)
        inits = {t.name for t in m.graph.initializer}
        return [i.name for i in m.graph.input if i.name not in inits]

    got_first, err = run(first, {k: feeds[k] for k in inputs_of(first) if k in feeds}, "first part")
    if got_first is None:
        return _skipped(f"ONNX Runtime cannot run the first part ({err})", "sequence",
                        "numbers not compared")
    link = {b: a for a, b in io_map}
    second_feeds = {k: got_first[link[k]] if k in link else feeds.get(k) for k in inputs_of(second)}
    got_second, err = run(second, {k: v for k, v in second_feeds.items() if v is not None}, "second part")
    if got_second is None:
        return _skipped(f"ONNX Runtime cannot run the second part ({err})", "sequence",
                        "numbers not compared")
    if random:
        return _skipped(f"a part is nondeterministic ({', '.join(sorted(random)[:3])} differ between "
                        "two runs)", "sequence", "numbers not compared")
    got, err = run(ckpt, feeds, "merged model")
    if got is None:
        return _failed("sequence", f"the merged model cannot run in ONNX Runtime: {err}")
    want = {**{k: v for k, v in got_first.items() if k not in {a for a, _ in io_map}}, **got_second}
    missing = [k for k in want if k not in got]
    if missing:
        return _failed("sequence", f"output '{missing[0][:80]}' of the parts is not an output of "
                       "the merged model")
    cmp = compare_outputs(want, {k: got[k] for k in want})
    if not cmp:
        return _failed("sequence", f"the merged model differs from its parts run in sequence: "
                       f"{cmp.summary()}")
    return _passed("sequence", f"{len(want)} outputs equal the two parts run in sequence "
                   "(ONNX Runtime CPU)")
