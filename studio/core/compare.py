"""Compare two sets of outputs: shapes first, then values by what they are.
A ``Comparison`` is truthy when everything matches (Polygraphy's habit); each
output records the ``mode`` it was judged in:

* ``tolerance`` / ``cosine``: floats, with dtype-aware tolerances (or a cosine
  criterion for quantized/reduced precision); the figures and the NaN/Inf rules
  are ``studio.core.closeness``'s (NaN or Inf on one side only fails);
* ``exact``: integers and booleans, judged by the count and rate of values that
  differ (``closeness.count_unequal``; never a max-abs);
* ``strings``: equal or not;
* ``rows in any order``: outputs a TopK/NonMaxSuppression picked
  (``studio.core.order_free``): box-like rows (last dim 4..7) matched greedily
  by value, other rows compared as sorted multisets, TopK results sorted along
  their axis; two engines that find the same rows in another order are equal;
* non-tensor outputs (sequences, maps, optionals: ZipMap's ``seq(map)``) become
  one entry per element (``name[i]``, ``name[key]``, ``name[len]``, ``name[keys]``),
  each judged as above; a length or key mismatch is a failure.

Padding rows (``rows``): a token output ([batch, sequence, ...]) of a model with an attention mask can
be judged on the rows whose mask is 1 only, when its caller asks (the precision flow, gate in
``studio.accuracy.compare_models.padding_masks``); the whole-output cosine is kept beside it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from studio.core.closeness import Closeness, count_unequal, finite_pairs, top_classes
from studio.core.order_free import OrderFree


@dataclass(frozen=True)
class Tolerance:
    """|a - b| <= atol + rtol * |b|, where atol grows with the reference's RMS
    (``atol_scale``) so large-valued outputs are not held to tiny absolute errors.
    ``min_cosine`` (when set) must also hold: the criterion for quantized models."""

    rtol: float
    atol: float
    atol_scale: float = 0.0
    min_cosine: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


EXACT = Tolerance(0.0, 0.0)
DEFAULT_TOLERANCES: dict[str, Tolerance] = {
    "float64": Tolerance(1e-7, 1e-9, 1e-7),
    "float32": Tolerance(1e-4, 1e-5, 1e-4),
    "float16": Tolerance(1e-2, 1e-3, 1e-2),
    "bfloat16": Tolerance(2e-2, 1e-2, 2e-2),
}
QUANTIZED = Tolerance(0.1, 1e-2, 0.1, min_cosine=0.98)
# fp16/bf16 compute with float32 I/O: elementwise errors grow with depth, the direction must hold.
REDUCED_PRECISION = Tolerance(2e-2, 1e-3, 2e-2, min_cosine=0.999)


# A reference output whose RMS is below float32's absolute tolerance is numerically zero: cosine is not judged.
NOISE_FLOOR_RMS = DEFAULT_TOLERANCES["float32"].atol


def _no_looser_than(tol: Tolerance, bound: Tolerance) -> Tolerance:
    """``tol`` with each elementwise term capped at ``bound``'s (its cosine criterion kept)."""
    return Tolerance(min(tol.rtol, bound.rtol), min(tol.atol, bound.atol), min(tol.atol_scale, bound.atol_scale),
                     tol.min_cosine)


def tolerance_for(dtype: np.dtype | str, *, quantized: bool = False, loose: bool = False) -> Tolerance:
    """Default tolerance for an output dtype. ``quantized``: cosine-based criterion;
    ``loose``: 10x float tolerances (reduced-precision engines such as OpenVINO bf16)."""
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if quantized:
        return QUANTIZED
    tol = DEFAULT_TOLERANCES.get(name)
    if tol is None:
        return EXACT
    if loose:
        return Tolerance(tol.rtol * 10, tol.atol * 10, tol.atol_scale * 10, 0.99)
    return tol


@dataclass(frozen=True)
class OutputDiff:
    name: str
    ref_shape: tuple[int, ...] | None
    got_shape: tuple[int, ...] | None
    ref_dtype: str
    got_dtype: str
    match: bool
    max_abs: float | None = None
    max_rel: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    mismatch_fraction: float | None = None
    top1_agreement: float | None = None
    top5_overlap: float | None = None          # mean |top5(ref) ∩ top5(got)| / 5 (classifier-like)
    tolerance: Tolerance | None = None
    note: str = ""
    mode: str = "tolerance"                    # how it was judged (module doc)
    mismatches: int | None = None              # values that differ (exact) or lie outside the tolerance
    task: str = ""                             # the output's task (studio.data.tasks), when known
    # rows left out (their attention mask is 0) and the mask input's name; the whole-output cosine beside
    # ``cosine`` (which is then over the kept rows only)
    rows_left_out: int = 0
    rows_mask: str = ""
    cosine_whole: float | None = None
    # the reference is numerically zero (RMS under NOISE_FLOOR_RMS): judged value by value, its cosine is noise
    noise_floor: bool = False

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["tolerance"] = self.tolerance.to_dict() if self.tolerance else None
        return d


@dataclass(frozen=True)
class Comparison:
    outputs: dict[str, OutputDiff] = field(default_factory=dict)
    missing: tuple[str, ...] = ()     # in the reference, not in the candidate
    extra: tuple[str, ...] = ()       # in the candidate, not in the reference

    def __bool__(self) -> bool:
        return not self.missing and all(d.match for d in self.outputs.values())

    @property
    def ok(self) -> bool:
        return bool(self)

    @property
    def first_failure(self) -> OutputDiff | None:
        return next((d for d in self.outputs.values() if not d.match), None)

    @property
    def min_cosine(self) -> float | None:
        vals = [d.cosine for d in self.outputs.values() if d.cosine is not None and not d.noise_floor]
        return min(vals) if vals else None

    @property
    def max_abs(self) -> float:
        """The largest absolute difference over all compared outputs (0.0 when none has one)."""
        return max((d.max_abs or 0.0 for d in self.outputs.values()), default=0.0)

    def summary(self) -> str:
        """One line: what matched, or the first output that did not and why."""
        if self.missing:
            return f"missing outputs: {', '.join(self.missing)[:200]}"
        bad = self.first_failure
        if bad is None:
            worst = self.max_abs
            cos = self.min_cosine
            special = sorted({"non-tensor elements" if "element" in d.mode else d.mode.split(" (")[0]
                              for d in self.outputs.values() if d.mode not in ("tolerance", "cosine", "strings")}
                             | ({"reference at float noise level, judged value by value"}
                                if any(d.noise_floor for d in self.outputs.values()) else set()))
            return f"{len(self.outputs)} outputs match (max abs {worst:.3g}" + (
                f", min cosine {cos:.6f}" if cos is not None else "") + (
                f"; {', '.join(special)}" if special else "") + ")"
        return f"output '{bad.name[:80]}' differs: {bad.note}"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary(), "missing": list(self.missing), "extra": list(self.extra),
                "outputs": {k: v.to_dict() for k, v in self.outputs.items()}}


def _flatten(name: str, value) -> list[tuple[str, object]]:
    if isinstance(value, (list, tuple)):
        items = [(f"{name}[len]", np.asarray(len(value)))]
        for i, v in enumerate(value):
            items.extend(_flatten(f"{name}[{i}]", v))
        return items
    if isinstance(value, Mapping):
        items = [(f"{name}[keys]", np.asarray(sorted(map(str, value))))]
        for k in sorted(value, key=str):
            items.extend(_flatten(f"{name}[{k}]", value[k]))
        return items
    if value is None:
        return [(f"{name}[absent]", np.asarray(True))]
    return [(name, np.asarray(value))]


def _kept_rows(rows: tuple[str, np.ndarray] | None, a: np.ndarray) -> np.ndarray | None:
    """The boolean [batch, sequence] rows of ``a`` to keep (mask != 0), or None to compare it whole: no mask,
    a mask that is not 2-D over ``a``'s first two dims, or one that leaves out nothing or everything."""
    if rows is None:
        return None
    keep = np.asarray(rows[1]) != 0
    if keep.ndim != 2 or a.ndim < 2 or keep.shape != a.shape[:2] or keep.all() or not keep.any():
        return None
    return keep


def _structured(value) -> bool:
    return value is None or isinstance(value, (list, tuple, Mapping))


def _top1(a: np.ndarray, b: np.ndarray, task=None) -> float | None:
    """Agreement of argmax over the class axis, for classifier-like outputs (``task``: the output's
    ``studio.data.tasks.OutputTask``; a one-score binary classifier agrees on the side of its threshold,
    an output of another task has no top-1)."""
    if task is not None and task.kind == "language-model" and a.shape == b.shape and a.ndim >= 2 and a.size:
        return float(np.mean(top_classes(a.reshape(-1, a.shape[-1])) == top_classes(b.reshape(-1, b.shape[-1]))))
    if task is not None and task.kind != "classification":
        return None
    if task is not None and a.shape == b.shape and a.size:
        if task.threshold is not None:
            return float(np.mean((a.reshape(-1) > task.threshold) == (b.reshape(-1) > task.threshold)))
        lead = a.shape[0] if a.ndim > 1 else 1
        return _top1(a.reshape(lead, -1), b.reshape(lead, -1)) if a.size // lead >= 2 else None
    if a.ndim not in (1, 2) or a.shape[-1] < 2 or a.shape != b.shape:
        return None
    return float(np.mean(top_classes(a.reshape(-1, a.shape[-1])) == top_classes(b.reshape(-1, b.shape[-1]))))


def _top5(a: np.ndarray, b: np.ndarray) -> float | None:
    """Mean overlap of the top-5 classes over the last axis, for classifier-like outputs."""
    if a.ndim not in (1, 2) or a.shape[-1] < 10 or a.shape != b.shape or a.dtype.kind not in "fiu":
        return None
    ta, tb = top_classes(a.reshape(-1, a.shape[-1]), 5), top_classes(b.reshape(-1, b.shape[-1]), 5)
    return float(np.mean([len(set(x) & set(y)) / 5 for x, y in zip(ta.tolist(), tb.tolist())]))


def _is_exact(ref: np.ndarray, quantized: bool) -> bool:
    """Integers and booleans are compared exactly; 8-bit tensors of a quantized model are
    quantized values (a step is expected), judged like floats."""
    if ref.dtype.kind == "b":
        return True
    return ref.dtype.kind in "iu" and not (quantized and ref.dtype.itemsize == 1)


# Under quantized criteria an integer output computed from floats (an ArgMax label) may flip
# where two classes are near-tied; at most this fraction of its values may differ. Integer
# pass-throughs (token ids, masks) are untouched by quantization and stay equal anyway.
QUANTIZED_INT_MISMATCH = 0.01


def _exact(base: dict, a: np.ndarray, b: np.ndarray, mode: str, allowed: float = 0.0) -> OutputDiff:
    """Mismatch count and rate (``allowed``: the rate still accepted): equal values, NaN equal
    to NaN where a float candidate has it."""
    n = count_unequal(b, a)
    rate = n / a.size if a.size else 0.0
    ok = n == 0 or rate <= allowed
    note = "" if n == 0 else f"{n} of {a.size} values differ ({100 * rate:.3g}%" + (
        f", at most {100 * allowed:g}% may)" if allowed else ")")
    return OutputDiff(**base, match=ok, mismatch_fraction=rate, mismatches=n, tolerance=EXACT, note=note,
                      mode=mode)


_MAX_GREEDY_ROWS = 512        # the pairwise distances of 512 rows x 7 columns: 15 MB


def _match_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Candidate rows ``a`` reordered to pair with reference rows ``b``: the closest pairs
    first (max abs difference over the row, NaN = far), each row used once."""
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    dist = np.abs(fb[:, None, :] - fa[None, :, :])
    both_nan = np.isnan(fb)[:, None, :] & np.isnan(fa)[None, :, :]
    dist = np.where(both_nan, 0.0, np.nan_to_num(dist, nan=np.inf, posinf=np.inf)).max(axis=2)
    order = np.full(len(b), -1)
    used_a, used_b = np.zeros(len(a), bool), np.zeros(len(b), bool)
    for flat in np.argsort(dist, axis=None, kind="stable"):
        i, j = divmod(int(flat), len(a))
        if not used_b[i] and not used_a[j]:
            order[i], used_b[i], used_a[j] = j, True, True
    return a[order]


def _sorted_rows(x: np.ndarray) -> np.ndarray:
    rows = x.reshape(len(x), -1)
    return rows[np.lexsort(rows.T[::-1])] if rows.shape[1] else rows


def _align(a: np.ndarray, b: np.ndarray, order: OrderFree) -> tuple[np.ndarray, np.ndarray, str]:
    """(candidate, reference) brought into one order, and the mode's name."""
    src = order.describe()
    if order.axis is not None and -a.ndim <= order.axis < a.ndim:
        return (np.sort(a, axis=order.axis), np.sort(b, axis=order.axis),
                f"rows in any order (sorted along axis {order.axis}; from {src})")
    last = a.shape[-1] if a.ndim >= 2 else 0
    if a.ndim >= 2 and 4 <= last <= 7 and b.dtype.kind == "f":
        ra, rb = a.reshape(-1, last), b.reshape(-1, last)
        if len(rb) <= _MAX_GREEDY_ROWS:
            return (_match_rows(ra, rb).reshape(b.shape), b,
                    f"rows in any order (box-like rows matched greedily; from {src})")
    if a.ndim == 0:
        return a, b, f"elementwise (scalar; from {src})"
    return (_sorted_rows(a).reshape(a.shape), _sorted_rows(b).reshape(b.shape),
            f"rows in any order (sorted multisets of rows; from {src})")


def compare_arrays(name: str, ref, got, tol: Tolerance | None = None, *, quantized: bool = False,
                   order: OrderFree | None = None, task=None,
                   rows: tuple[str, np.ndarray] | None = None) -> OutputDiff:
    """One output: exact for integers/booleans, strings equal, floats within tolerance
    (NaN-aware); ``order``: rows a TopK/NMS picked, compared in any order; ``task``: the output's
    ``studio.data.tasks.OutputTask`` (which agreement figures apply); ``rows``: (mask input, its
    values) whose zeros mark padding rows over the output's first two dims, left out of a float
    output's figures when the shapes agree (:func:`_kept_rows`). A figure with no value to
    compute it on (an empty output, only NaN) is None with the reason, never a default."""
    a, b = np.asarray(got), np.asarray(ref)      # a: candidate, b: reference
    base = dict(name=name, ref_shape=tuple(b.shape), got_shape=tuple(a.shape), ref_dtype=b.dtype.name,
                got_dtype=a.dtype.name, task=getattr(task, "kind", "") or "")
    if a.shape != b.shape:
        return OutputDiff(**base, match=False, note=f"shape {list(a.shape)} != reference {list(b.shape)}")
    if b.dtype.kind in "OUS" or a.dtype.kind in "OUS":
        same = a.dtype.kind == b.dtype.kind and bool(np.all(a == b))
        return OutputDiff(**base, match=same, note="" if same else "string values differ", mode="strings")
    mode = ""
    if order is not None and a.size:
        a, b, mode = _align(a, b, order)
    if _is_exact(b, quantized):
        return _exact(base, a, b, mode or "exact", QUANTIZED_INT_MISMATCH if quantized else 0.0)
    tol = tol or tolerance_for(b.dtype, quantized=quantized)
    mode = mode or ("cosine" if tol.min_cosine is not None else "tolerance")
    if a.size == 0:
        return OutputDiff(**base, match=True, max_abs=None, max_rel=None, cosine=None, tolerance=tol, mode=mode,
                          mismatches=0, note="empty output on both sides: no values to compare (cosine n/a)")
    keep = _kept_rows(rows, a) if order is None else None
    padding: dict = {}
    if keep is not None:     # the whole output's cosine stays beside the kept rows' (the user sees both)
        padding = dict(rows_left_out=int(keep.size - np.count_nonzero(keep)), rows_mask=rows[0],
                       cosine_whole=Closeness.of(finite_pairs(b, a)).cosine)
        a, b = a[keep], b[keep]
    pairs = finite_pairs(b, a)
    if pairs.nan_mismatches:
        n = pairs.nan_mismatches
        return OutputDiff(**base, **padding, match=False, tolerance=tol, mode=mode, mismatches=n,
                          mismatch_fraction=n / pairs.size,
                          note=f"NaN at {n} positions that differ from the reference")
    inf_ok = not pairs.inf_mismatches
    fig = Closeness.of(pairs)
    max_abs, max_rel, cos = fig.max_abs, fig.max_rel, fig.cosine      # cos None: only NaN/Inf (equal)
    fa, fb = pairs.got, pairs.ref
    rms = float(np.sqrt(np.mean(fb * fb))) if fb.size else 0.0
    at_noise_floor = tol.min_cosine is not None and rms < NOISE_FLOOR_RMS
    if at_noise_floor:
        # No direction to keep, and a reduced-precision tolerance passes anything of the reference's size
        # (a text detector's mask on random inputs, values <= 1e-3 under INT8's atol 1e-2, passed an INT8
        # variant at cosine 0.00): the values must be as close as float32's own tolerance asks, near zero too.
        tol = _no_looser_than(tol, DEFAULT_TOLERANCES["float32"])
    atol = max(tol.atol, tol.atol_scale * rms)
    bad = np.abs(fa - fb) > atol + tol.rtol * np.abs(fb)
    mismatch = float(bad.mean()) if bad.size else 0.0
    ok = inf_ok and not bad.any()
    if tol.min_cosine is not None and not at_noise_floor:
        # Quantized/reduced precision: a few elements may move; the whole must keep its direction.
        ok = inf_ok and (cos is None or cos >= tol.min_cosine) and (quantized or mismatch <= 1e-3)
    note = ""
    if at_noise_floor:
        # A reference that is numerically zero (a detector's seeded heat map, ~1e-7) has no direction to keep:
        # its cosine is rounding noise (a faithful LiteRT conversion read 0.83), so every value must be within
        # the tolerance instead.
        mode = "tolerance" if mode == "cosine" else mode
        note = (f"reference RMS {rms:.2g} is at float32 noise level: judged value by value, cosine "
                f"{'n/a' if cos is None else f'{cos:.3f}'} not meaningful")
    if not inf_ok:
        note = "infinities differ from the reference"
    elif not ok:
        note = (f"max abs {max_abs:.3g}, max rel {max_rel:.3g}, cosine {'n/a' if cos is None else f'{cos:.6f}'}, "
                f"{100 * mismatch:.2f}% of values outside rtol={tol.rtol:g} atol={atol:.3g}")
        if at_noise_floor:
            note += (f"; the reference is near zero on these inputs (RMS {rms:.2g}), so only float32's own "
                     "tolerance shows the output kept: judge it on real inputs")
    return OutputDiff(**base, **padding, match=ok, max_abs=max_abs, max_rel=max_rel, rel_l2=fig.rel_l2, cosine=cos,
                      mismatch_fraction=mismatch, top1_agreement=_top1(a, b, task),
                      top5_overlap=_top5(a, b) if task is None or task.kind == "classification" else None,
                      tolerance=tol, note=note, mode=mode, mismatches=int(np.count_nonzero(bad)),
                      noise_floor=bool(fb.size) and rms < NOISE_FLOOR_RMS)


def compare_outputs(reference: Mapping[str, object], candidate: Mapping[str, object],
                    tol: Tolerance | Mapping[str, Tolerance] | None = None, *, quantized: bool = False,
                    order_free: Mapping[str, OrderFree] | None = None,
                    tasks: Mapping[str, object] | None = None,
                    rows: Mapping[str, tuple[str, np.ndarray]] | None = None) -> Comparison:
    """Compare every reference output (order kept) with the candidate's. ``order_free``
    (``studio.data.tasks.order_free_for`` of the reference model): outputs compared as rows in
    any order; ``tasks``: {output: studio.data.tasks.OutputTask}, the figures each output gets;
    ``rows``: {output: (mask input, mask values)} whose padding rows are left out (:func:`compare_arrays`)."""
    diffs: dict[str, OutputDiff] = {}
    missing = tuple(k for k in reference if k not in candidate)
    extra = tuple(k for k in candidate if k not in reference)
    for name, ref in reference.items():
        if name not in candidate:
            continue
        t = tol.get(name) if isinstance(tol, Mapping) else tol
        got = candidate[name]
        if not _structured(ref) and not _structured(got):
            diffs[name] = compare_arrays(name, ref, got, t, quantized=quantized, order=(order_free or {}).get(name),
                                         task=(tasks or {}).get(name), rows=(rows or {}).get(name))
            continue
        # Non-tensor outputs: one entry per element, lengths and keys compared exactly.
        kind = "map" if isinstance(ref, Mapping) else "optional" if ref is None else "sequence"
        ref_items, got_items = _flatten(name, ref), dict(_flatten(name, got))
        for sub, r in ref_items:
            if sub not in got_items:
                diffs[sub] = OutputDiff(sub, tuple(np.shape(r)), None, np.asarray(r).dtype.name, "-", False,
                                        note="missing in the candidate (sequence/map structure differs)",
                                        mode=kind)
                continue
            d = compare_arrays(sub, r, got_items[sub], t, quantized=quantized)
            diffs[sub] = dataclasses.replace(d, mode=f"{kind} element, {d.mode}")
        for sub in got_items:
            if sub not in diffs and sub.startswith(name):
                diffs[sub] = OutputDiff(sub, None, tuple(np.shape(got_items[sub])), "-", "", False, mode=kind,
                                        note="only in the candidate (sequence/map structure differs)")
    return Comparison(diffs, missing, extra)


def _worst(values: list, pick) -> object:
    vals = [v for v in values if v is not None]
    return pick(vals) if vals else None


def merge_comparisons(comparisons: list[Comparison]) -> Comparison:
    """One Comparison over several feed sets: per output the worst of each metric
    (max errors, min cosine) and the mean top-k agreement; a mismatch anywhere fails."""
    if not comparisons:
        return Comparison()
    if len(comparisons) == 1:
        return comparisons[0]
    outputs: dict[str, OutputDiff] = {}
    for name in dict.fromkeys(k for c in comparisons for k in c.outputs):
        diffs = [c.outputs[name] for c in comparisons if name in c.outputs]
        first_bad = next((d for d in diffs if not d.match), None)
        base = first_bad or diffs[0]
        mean = lambda xs: float(np.mean(xs))  # noqa: E731
        # a set whose reference is numerically zero has a cosine of noise: the worst cosine is the others'
        directed = [d for d in diffs if not d.noise_floor] or diffs
        outputs[name] = OutputDiff(
            name, base.ref_shape, base.got_shape, base.ref_dtype, base.got_dtype, first_bad is None,
            max_abs=_worst([d.max_abs for d in diffs], max), max_rel=_worst([d.max_rel for d in diffs], max),
            rel_l2=_worst([d.rel_l2 for d in diffs], max), cosine=_worst([d.cosine for d in directed], min),
            mismatch_fraction=_worst([d.mismatch_fraction for d in diffs], max),
            top1_agreement=_worst([d.top1_agreement for d in diffs], mean),
            top5_overlap=_worst([d.top5_overlap for d in diffs], mean), tolerance=base.tolerance,
            note=first_bad.note if first_bad else "", mode=base.mode,
            mismatches=_worst([d.mismatches for d in diffs], max), task=base.task,
            rows_left_out=sum(d.rows_left_out for d in diffs),
            rows_mask=next((d.rows_mask for d in diffs if d.rows_mask), ""),
            cosine_whole=_worst([d.cosine_whole if d.rows_left_out else d.cosine for d in diffs], min)
            if any(d.rows_left_out for d in diffs) else None,
            noise_floor=all(d.noise_floor for d in diffs))
    missing = tuple(dict.fromkeys(m for c in comparisons for m in c.missing))
    extra = tuple(dict.fromkeys(m for c in comparisons for m in c.extra))
    return Comparison(outputs, missing, extra)


class VerifyStatus(StrEnum):
    """How checking a transformed model against its original ended: one vocabulary for the optimizer's
    per-pass check (``studio.verification.verifier``), an edit (``studio.edit.verify``) and an exported artifact
    (``studio.export``); docs/architecture.md section 4b gives each producer's mapping. A member is
    its string (what ``--json`` shows)."""

    PASSED = "passed"              # compared, and within the criterion (structure sound)
    FAILED = "failed"              # compared or checked, and different or broken: the result is refused
    SKIPPED = "skipped"            # structure checked, numbers not compared on purpose or because the
                                   # original cannot be run here (``reason`` says which)
    NOT_VERIFIED = "not verified"  # this machine cannot run the artifact or its reference (no GPU, custom ops)
    ERROR = "error"                # the engine could not load or run the artifact it was given


@dataclass(frozen=True)
class Verification:
    """A transformed model checked against its original (one type for passes, edits and export).

    ``status`` is the verdict; ``reason`` says why numbers were not compared (SKIPPED, NOT_VERIFIED, or a
    FAILED whose numbers were not reached); ``comparison`` holds them when they were. The optimizer's
    fields (``interface_ok``, ``checker``, ``seconds``, ``nondeterministic``) are kept by every producer
    that knows them; ``numeric_status`` is the numbers' part alone in the optimizer's long-standing form."""

    status: VerifyStatus
    message: str                       # one line for people
    engine: str | None = None          # what ran the candidate ("onnxruntime 1.32.0"), when known
    criteria: str = ""                 # the tolerance used, in words
    comparison: Comparison | None = None
    checker: str | None = None         # onnx.checker full check: "passed", the problem, or None (not run)
    reason: str = ""                   # why the numbers were not compared ("" when they were)
    method: str = "numeric"            # numeric | reproduce | sequence | none: how the numbers were checked
    interface_ok: bool = True          # input/output names, order, dtypes and shapes kept
    seconds: float = 0.0
    nondeterministic: tuple[str, ...] = ()   # outputs of the original that differ between two runs

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", VerifyStatus(self.status))    # a word outside the vocabulary: ValueError

    @property
    def ok(self) -> bool:
        """Nothing found wrong: passed, or structure sound with the numbers not compared (SKIPPED)."""
        return self.status in (VerifyStatus.PASSED, VerifyStatus.SKIPPED)

    @property
    def failed(self) -> bool:
        return self.status in (VerifyStatus.FAILED, VerifyStatus.ERROR)

    @property
    def verdict(self) -> str:
        """The status with its reason, for people: "passed", "skipped: values change on purpose (...)"."""
        return f"{self.status.value}: {self.reason}" if self.reason else self.status.value

    @property
    def checker_ok(self) -> bool:
        return self.checker in (None, "passed")

    @property
    def numeric(self) -> Comparison | None:
        return self.comparison

    @property
    def numeric_status(self) -> str:
        """The numbers alone: "passed" | "failed" | "skipped: <why>" (the optimizer's --json field)."""
        if self.reason:
            return f"skipped: {self.reason}"
        if self.comparison is not None:
            return "passed" if self.comparison else "failed"
        return "failed" if self.failed else "passed" if self.status is VerifyStatus.PASSED else "skipped: not compared"

    def to_dict(self) -> dict:
        """The one JSON form (every producer's earlier keys kept; ``numeric`` is the optimizer's name for
        ``comparison``)."""
        comparison = self.comparison.to_dict() if self.comparison is not None else None
        return {"status": self.status.value, "message": self.message, "reason": self.reason, "method": self.method,
                "ok": self.ok, "engine": self.engine, "criteria": self.criteria, "checker": self.checker,
                "interface_ok": self.interface_ok, "checker_ok": self.checker_ok,
                "numeric_status": self.numeric_status, "nondeterministic": list(self.nondeterministic),
                "seconds": round(self.seconds, 3), "comparison": comparison, "numeric": comparison}
