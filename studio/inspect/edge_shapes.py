"""Every edge's shape as numbers, and right, once the input dims are set.

The order of trust: ONNX shape inference on a copy whose inputs are pinned to the
set dims (the exporter's ``value_info`` stripped) first; then the dim formulas the
exporter wrote into ``value_info`` (``floor(height/2 - 1/2) + 1``), which are only a
*hint*; then one real ONNX Runtime run at those dims, which measures what inference
left open and checks every value a formula filled in. The run wins on disagreement,
and each wrong formula is named (tensor, axis, formula, its value, the real value):
exporters do write wrong ones (an Ultralytics NMS-free head says 58 where ONNX
Runtime produces 60), and a static model written from them breaks TopK at run time.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from onnx import ModelProto, TensorProto

from studio.core.types import TensorInfo, shape_text, value_info
from studio.inspect.shapes import ShapeTable
from studio.core.dim_hints import model_derived_dims, resolve_derived
from studio.core.feeds import unnamed_dim_key
from studio.core.dimexpr import evaluate
from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds
from studio.core.sandbox import run_job
from studio.inspect.value_dependence import value_dependent_shapes
from studio.inspect.if_branches import MAX_FORCED_IFS, agree, forced, measurable, value_chosen_ifs
from studio.core.errors import engine_message
from studio.inspect.shapes import declared_table

MAX_RUN_FILL_BYTES = 1536 * 2**20    # weights read into the worker to measure shapes by a run
MAX_NAMED_MISMATCHES = 50            # wrong formulas kept by name (the count is always exact)


# ---------------------------------------------------------------------------- pinned inputs

@dataclass(frozen=True)
class PinnedInputs:
    """The concrete shape of every model input at the user's dims (a dim not set counts
    as 1, and is listed in ``unset``), the one set of shapes inference and the run share."""

    shapes: dict[str, tuple[int, ...]]
    keys: tuple[str, ...]           # every free input dim: its name, or INPUT[AXIS] for an unnamed one
    unset: tuple[str, ...]          # free dims with no value given (taken as 1)
    unknown_rank: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.unset and not self.unknown_rank

    def env(self, dims: Mapping[str, int]) -> dict[str, int]:
        """Values of every free input dim, by the keys formulas and feeds use."""
        return {**{k: 1 for k in self.keys}, **{k: int(v) for k, v in dims.items()}}


def pinned_inputs(model: ModelProto, dims: Mapping[str, int] | None) -> PinnedInputs:
    dims = dict(dims or {})
    # a derived dim (past + sequence) takes its parts' value; one the user contradicts is a one-line error
    derived = model_derived_dims(model)
    in_use = {**{part: 1 for d in derived for part in d.parts}, **dims}      # an unset part counts as 1
    dims = {**resolve_derived(derived, dims, in_use), **dims}
    init = {t.name for t in model.graph.initializer}
    shapes: dict[str, tuple[int, ...]] = {}
    keys: list[str] = []
    unset: list[str] = []
    unknown_rank: list[str] = []
    for vi in model.graph.input:
        if vi.name in init or vi.type.WhichOneof("value") != "tensor_type":
            continue
        info = value_info(vi)
        if info.shape is None:
            unknown_rank.append(vi.name)
            continue
        out = []
        for axis, d in enumerate(info.shape):
            if isinstance(d, int):
                out.append(d)
                continue
            key = d if isinstance(d, str) else unnamed_dim_key(vi.name, axis)
            if key not in keys:
                keys.append(key)
            if key in dims:
                out.append(int(dims[key]))
            else:
                if key not in unset:
                    unset.append(key)
                out.append(1)
        shapes[vi.name] = tuple(out)
    return PinnedInputs(shapes, tuple(keys), tuple(unset), tuple(unknown_rank))


# ---------------------------------------------------------------------------- formulas: a hint

RANK_AXIS = -1          # a FormulaMismatch of the rank itself, not of one axis


@dataclass(frozen=True)
class FormulaMismatch:
    """A dim the exporter's ``value_info`` states that is not what the model computes."""

    tensor: str
    axis: int
    formula: str                    # the dim_param as written (or the stale number)
    formula_value: int | None       # what it evaluates to at the set dims
    real_value: int                 # what ONNX inference / ONNX Runtime gives
    source: str                     # "ONNX shape inference" | "ONNX Runtime run"

    def text(self) -> str:
        if self.axis == RANK_AXIS:
            return (f"'{self.tensor[:80]}': the file declares rank {self.formula_value} ({self.formula[:120]}); "
                    f"{self.source} gives rank {self.real_value}")
        if self.formula == str(self.formula_value):
            said = f"the file declares {self.formula_value}"
        else:
            said = f"the exporter's dim formula '{self.formula[:120]}' = {self.formula_value}"
        return f"'{self.tensor[:80]}' axis {self.axis}: {said}; {self.source} gives {self.real_value}"

    def to_dict(self) -> dict:
        return {"tensor": self.tensor, "axis": self.axis, "formula": self.formula,
                "formula_value": self.formula_value, "real_value": self.real_value, "source": self.source}


@dataclass(frozen=True)
class Resolved:
    """Shapes as numeric as inference and the formulas allow; which dims came from formulas."""

    table: ShapeTable
    hinted: dict[str, tuple[tuple[int, str, int], ...]] = field(default_factory=dict)  # name -> (axis, formula, value)
    mismatches: tuple[FormulaMismatch, ...] = ()


def _formula_value(dim, env: Mapping[str, int]) -> int | None:
    return evaluate(dim, env) if isinstance(dim, str) else None


def resolve_table(declared: ShapeTable, concrete: ShapeTable | None, env: Mapping[str, int]) -> Resolved:
    """Per value: what pinned inference computed; where it stopped, the exporter's formula
    evaluated at ``env`` (recorded as a hint to check); a formula or number the file declares
    that disagrees with inference is a mismatch (inference wins)."""
    values: dict[str, TensorInfo] = {}
    hinted: dict[str, tuple[tuple[int, str, int], ...]] = {}
    mismatches: list[FormulaMismatch] = []
    cvals = concrete.values if concrete is not None else {}
    for name in {**declared.values, **cvals}:
        c, d = cvals.get(name), declared.values.get(name)
        if c is not None and c.is_static and type(c.shape) is tuple and (d is None or d.shape == c.shape):
            values[name] = c    # inferred whole, declared alike or not at all: nothing to fill or check (a copy before)
            continue
        info = c or d
        cs = None if c is None else c.shape
        ds = None if d is None else d.shape
        base = cs if cs is not None else ds
        if base is None:
            values[name] = info
            continue
        alt = ds if ds is not None and len(ds) == len(base) else None
        if cs is not None and ds is not None and len(cs) != len(ds):
            # the file declares another rank than the model computes (ddddocr's output '387' [1, seqlen] is
            # [W/8, 1, 8210]): axis -1 stands for the rank
            mismatches.append(FormulaMismatch(name, RANK_AXIS, shape_text(ds), len(ds), len(cs), "ONNX shape inference"))
        out, hints = [], []
        for axis, dim in enumerate(base):
            said = alt[axis] if alt is not None else None
            if isinstance(dim, int):
                if cs is not None and said is not None and said != dim and (
                        isinstance(said, int) or _formula_value(said, env) is not None):
                    fv = said if isinstance(said, int) else _formula_value(said, env)
                    if fv != dim:
                        mismatches.append(FormulaMismatch(name, axis, str(said), fv, dim, "ONNX shape inference"))
                out.append(dim)
                continue
            value = None
            for cand in (said, dim):
                if isinstance(cand, int):
                    value, formula = cand, str(cand)
                    break
                fv = _formula_value(cand, env)
                if fv is not None:
                    value, formula = fv, cand
                    break
            if value is None:
                out.append(dim)
            else:
                out.append(value)
                hints.append((axis, formula, value))
        if hints:
            hinted[name] = tuple(hints)
        values[name] = TensorInfo(info.name, info.dtype, tuple(out), info.kind, info.elem_type)
    err = (concrete.error if concrete is not None else None) or declared.error
    return Resolved(ShapeTable(values, err), hinted, tuple(mismatches))


def _more_known(a: tuple, b: tuple) -> bool:
    """``a`` states at least as much as ``b`` at every axis (a number, or a name where ``b`` has none)."""
    return all(isinstance(x, int) or (isinstance(x, str) and not isinstance(y, int)) or (x is None and y is None)
               for x, y in zip(a, b))


def open_values(table: ShapeTable, names: set[str]) -> list[str]:
    """Tensors (of ``names``) whose shape is still unknown or not fully numeric; a value of
    unknown type counts (it may be a tensor), sequences and maps do not (no run measures them)."""
    out = []
    for n in sorted(names):
        t = table.values.get(n)
        if t is None or (t.kind in ("tensor", "unknown") and not t.is_static):
            out.append(n)
    return out


# ---------------------------------------------------------------------------- the one real run

def measure_shapes(model: ModelProto, feeds: Mapping, names: list[str], *,
                   weights_folder: Path | None = None) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, dtype) of ``names`` (main-graph values) as ONNX Runtime produces them on ``feeds``;
    ``model`` has its weights in memory, or in external files under ``weights_folder`` (ORT reads them
    there), and is not modified. Optimizations off: the values measured are the graph's own, not those
    of a rewritten graph."""
    import onnx
    import onnxruntime as ort

    view = ModelProto()
    view.CopyFrom(model)
    existing = {o.name for o in view.graph.output}
    for name in names:
        if name not in existing:
            view.graph.output.append(onnx.ValueInfoProto(name=name))   # ORT takes the type from the graph
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if weights_folder is not None:
        so.add_session_config_entry("session.model_external_initializers_file_folder_path", str(weights_folder))
    sess = ort.InferenceSession(view.SerializeToString(), so, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in sess.get_outputs() if o.name in set(names)]
    got = sess.run(wanted, dict(feeds))
    return {n: (tuple(int(d) for d in v.shape), str(v.dtype)) for n, v in zip(wanted, got)
            if isinstance(v, np.ndarray)}


def run_feeds(model: ModelProto, pinned: PinnedInputs, dims: Mapping[str, int], seed: int = 0):
    """Seeded inputs of exactly the pinned shapes (the studio's usual value ranges per input)."""
    feeds = random_feeds(input_specs(model), pinned.env(dims), seed=seed)
    for name, shape in pinned.shapes.items():
        got = getattr(feeds.get(name), "shape", None)
        if got is not None and tuple(got) != shape:
            raise StudioError(f"seeded input '{name[:60]}' came out {list(got)}, not the pinned {list(shape)}")
    return feeds


from studio.core.jobs import JobContext, JobOutput, job  # noqa: E402  (the worker side of the run)


@job("inspect.run_shapes")
def run_shapes_job(args: dict, arrays: dict, ctx: JobContext) -> JobOutput:
    """Shapes of ``names`` as ONNX Runtime produces them on seeded inputs of the pinned shapes."""
    import onnx

    path = Path(args["model_path"])
    model = onnx.load_model(str(path), load_external_data=False)
    pinned = PinnedInputs({k: tuple(v) for k, v in args["input_shapes"].items()}, tuple(args["keys"]), ())
    feeds = run_feeds(model, pinned, args["dims"])
    if args.get("forced_ifs"):              # one combination of value-chosen If branches (if_branches.py)
        model = forced(model, {int(k): bool(v) for k, v in args["forced_ifs"].items()})
    ctx.set_stage("ONNX Runtime run for shapes")
    # external weights stay in their files, ORT reads them from the model's folder: loaded into the proto
    # they were held ~4 times (proto, its copy, the serialized bytes, the session: 1.80x a 1.48 GiB decoder)
    shapes = measure_shapes(model, feeds, list(args["names"]), weights_folder=path.parent if args.get("external")
                            else None)
    return JobOutput(data={"shapes": {n: list(s) for n, (s, _) in shapes.items()},
                           "dtypes": {n: d for n, (_, d) in shapes.items()}})


@dataclass(frozen=True)
class EdgeShapes:
    """The resolved table, and how it was reached."""

    table: ShapeTable
    note: str | None = None                       # what the run measured or why it could not
    mismatches: tuple[FormulaMismatch, ...] = ()  # exporter formulas that are wrong (named, at most 50)
    mismatch_count: int = 0
    unconfirmed: int = 0                          # values whose numbers are formulas no run checked


def _typed(name: str, dtype: str | None) -> TensorInfo:
    """A value inference never typed (an old Dropout's mask), typed by what the run produced."""
    from onnx import helper

    try:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype or "float32"))
    except (TypeError, ValueError, KeyError):
        elem = 0
    return TensorInfo(name, dtype or "undefined", None, "tensor", int(elem))


def settle_if_branches(model_path: Path, model: ModelProto, pinned: PinnedInputs, dims: Mapping[str, int],
                       inferred: set[str], names: set[str], table: ShapeTable, *,
                       pool_key: str = "default") -> tuple[ShapeTable, set[str], str | None]:
    """Measure ``names`` (shapes that vary with the input values) under every combination of the
    value-chosen Ifs' branches (:mod:`studio.inspect.if_branches`): the shapes all runs agree on are
    settled. Returns the table with them, their names, and a note; nothing changes when no If chooses."""
    varying = value_dependent_shapes(model, inferred)
    ifs = value_chosen_ifs(model, varying)
    if not ifs or len(ifs) > MAX_FORCED_IFS:
        return table, set(), None
    wanted = measurable(model, ifs, inferred, names)
    if not wanted:
        return table, set(), None
    external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
    runs, failed = [], 0
    for values in itertools.product((True, False), repeat=len(ifs)):
        try:
            res = run_job("inspect.run_shapes", {"model_path": str(model_path), "names": sorted(wanted),
                                                  "dims": pinned.env(dims), "keys": list(pinned.keys),
                                                  "input_shapes": {k: list(v) for k, v in pinned.shapes.items()},
                                                  "external": external,
                                                  "forced_ifs": {str(i): v for i, v in zip(ifs, values)}},
                          stage="ONNX Runtime runs of each If branch", pool_key=pool_key)
        except StudioError:          # this branch cannot run at these shapes (Silero's 8 kHz one at 512
            failed += 1               # samples): no input value reaches it here
            continue
        runs.append({n: tuple(int(d) for d in sh) for n, sh in res.data["shapes"].items()})
    if not runs:
        return table, set(), None               # the ordinary note (left open) stands
    result = agree(runs, wanted)
    values = dict(table.values)
    for name, shape in result.settled.items():
        old = values.get(name) or _typed(name, None)
        values[name] = TensorInfo(old.name, old.dtype, shape, old.kind, old.elem_type)
    total = result.runs + failed
    where = (f"each of its {total} branch combinations" if not failed else
             f"the {result.runs} of its {total} branch combinations that run at these shapes")
    note = (f"{len(result.settled)} shape(s) after an If chosen by the input values measured in {where}"
            + (": the same in all" if result.runs > 1 else ""))
    if result.differ:
        note += f"; {len(result.differ)} differ between branches (left open)"
    return ShapeTable(values, table.error), set(result.settled), note


def check_by_run(model_path: Path, model: ModelProto, resolved: Resolved, pinned: PinnedInputs,
                 dims: Mapping[str, int], *, total_bytes: int, pool_key: str = "default") -> EdgeShapes:
    """One real ONNX Runtime run at the pinned inputs measures the main graph's values that
    inference left open and those a formula filled in; the run's shapes win, and every
    formula they contradict is named. Values whose shape depends on the input *values*
    (NonZero, an Expand to a fed shape) are not measured: seeded data would make their size up."""
    table = resolved.table
    produced = {o for n in model.graph.node for o in n.output if o} | {o.name for o in model.graph.output}
    hinted = set(resolved.hinted) & produced
    parts: list[str] = []
    mismatches = list(resolved.mismatches)

    def done(tbl: ShapeTable, unconfirmed: int) -> EdgeShapes:
        return EdgeShapes(tbl, "; ".join(parts) or None, tuple(mismatches[:MAX_NAMED_MISMATCHES]),
                          len(mismatches), unconfirmed)

    if not hinted and not open_values(table, produced):
        # Every shape known, none from a formula: nothing to measure, and which values vary with the inputs'
        # values changes nothing below (their walk was a quarter of a 10k-node model's inspect).
        return done(table, 0)
    inferred = {n for n, t in table.values.items() if t.is_static} - hinted      # pinned inference computed them
    varying = value_dependent_shapes(model, inferred) & produced
    open_varying = set(open_values(table, varying)) | (hinted & varying)
    if open_varying and pinned.complete and total_bytes <= MAX_RUN_FILL_BYTES:
        table, settled, note = settle_if_branches(model_path, model, pinned, dims, inferred, open_varying, table,
                                                  pool_key=pool_key)
        varying -= settled
        hinted -= settled
        if note:
            parts.append(note)
    todo = sorted((set(open_values(table, produced)) | hinted) - varying)
    varying_shown = len(set(open_values(table, varying)) | (hinted & varying))
    if varying_shown:
        parts.append(f"{varying_shown} shape(s) depend on the input values (not measured: left open or as declared)")
    if not todo:
        return done(table, len(hinted & varying))
    why = None
    if not pinned.complete:
        why = "set every input dim to measure them"
    elif total_bytes > MAX_RUN_FILL_BYTES:
        why = "the model is too large to measure them by a run here"
    res = None
    if why is None:
        external = any(t.data_location == TensorProto.EXTERNAL for t in model.graph.initializer)
        try:
            res = run_job("inspect.run_shapes", {"model_path": str(model_path), "names": todo,
                                                  "dims": pinned.env(dims), "keys": list(pinned.keys),
                                                  "input_shapes": {k: list(v) for k, v in pinned.shapes.items()},
                                                  "external": external},
                          stage="ONNX Runtime run for shapes", pool_key=pool_key)
        except StudioError as exc:
            why = f"a run to measure them failed ({engine_message(exc, 300)})"
    if res is None:
        still_open = len(set(open_values(table, produced)) - varying)
        unchecked = len(hinted - varying)
        told = ([f"{still_open} shape(s) left open"] if still_open else []) + (
            [f"{unchecked} taken from the exporter's dim formulas, unchecked"] if unchecked else [])
        if told:
            parts.insert(0, ", ".join(told) + f": {why}")
        return done(table, len(hinted))
    measured = {n: tuple(int(d) for d in s) for n, s in res.data["shapes"].items()}
    values = dict(table.values)
    declared = declared_table(model).values
    for name, shape in measured.items():
        old = values.get(name) or _typed(name, res.data.get("dtypes", {}).get(name))
        said = declared[name].shape if name in declared else None
        if said is not None and len(said) != len(shape) and not any(
                m.tensor == name and m.axis == RANK_AXIS for m in mismatches):     # inference may have named it
            mismatches.append(FormulaMismatch(name, RANK_AXIS, shape_text(said), len(said), len(shape),
                                              "ONNX Runtime run"))
        for axis, formula, value in resolved.hinted.get(name, ()):
            if axis < len(shape) and shape[axis] != value:
                mismatches.append(FormulaMismatch(name, axis, formula, value, shape[axis], "ONNX Runtime run"))
        values[name] = TensorInfo(old.name, old.dtype, shape, old.kind, old.elem_type)
    filled = ShapeTable(values, table.error)
    left = open_values(filled, set(todo))
    checked = len(hinted & set(measured))
    wrong = len({m.tensor for m in mismatches if m.source == "ONNX Runtime run"})
    note = f"{len(measured)} shape(s) measured by an ONNX Runtime run"
    if checked:
        note += f" ({checked} of them as the file declared or its dim formulas said: {wrong} wrong)"
    if left:
        note += f"; {len(left)} still open (the run does not produce them)"
    parts.insert(0, note)
    return done(filled, len(hinted - set(measured)))


def resolve_edges(model_path: Path, model: ModelProto, symbolic: ShapeTable, concrete: ShapeTable | None,
                  pinned: PinnedInputs, dims: Mapping[str, int], *, total_bytes: int,
                  pool_key: str = "default") -> EdgeShapes:
    """Pinned inference, formulas as a hint, the run as the judge (see the module doc).
    ``symbolic``: inference on the model as written, which keeps the exporter's formulas."""
    said = dict(declared_table(model).values)
    for name, info in symbolic.values.items():   # inference's own symbols and numbers, else what the file says
        old = said.get(name)
        if old is None or old.shape is None or (info.shape is not None and len(info.shape) == len(old.shape)
                                                and _more_known(info.shape, old.shape)):
            said[name] = info
    resolved = resolve_table(ShapeTable(said, symbolic.error), concrete, pinned.env(dims))
    return check_by_run(model_path, model, resolved, pinned, dims, total_bytes=total_bytes, pool_key=pool_key)
