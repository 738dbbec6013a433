"""How close two arrays are: the one implementation of cosine similarity, max abs / max rel /
relative L2 error, what NaN and Inf count as, and the exact comparison of integers and booleans.
``studio.core.compare`` (verdicts under tolerances, per named output: verify, check, precision,
layer-wise, export) and ``studio.data.metrics`` (task metrics over samples) build on it; nothing
else computes these figures.

The rules, for a reference ``ref`` and a candidate ``got`` of one shape (a shape difference is the
caller's to report, before any of this):

* Values are compared as float64 whatever the two dtypes (float16 against float32, an integer
  candidate of a float reference): a dtype difference is the caller's to report, never a numeric
  error here.
* NaN at the same positions on both sides agrees (a NaN by design: a masked mean, a padded row);
  NaN on one side only is a mismatch (``nan_mismatches``).
* Inf agrees with Inf of the same sign; Inf on one side only, or of the other sign, is a mismatch
  (``inf_mismatches``).
* The figures are over the positions finite on both sides: ``max_abs`` = max |got - ref|;
  ``max_rel`` = max |got - ref| / max(|ref|, 1e-6 * max(1, max |ref|)) (a reference value near zero
  is measured against the output's own scale, not blown up to 1e9 by a tiny denominator);
  ``rel_l2`` = ||got - ref|| / ||ref|| (0 when both are zero, inf when only the reference is);
  ``cosine`` = <got, ref> / (||got|| ||ref||), 1.0 for two zero vectors and 0.0 for one. With no
  finite pair (an empty tensor, or only agreeing NaN/Inf) the errors are 0.0 and the cosine is None:
  no direction was measured, and a report says "n/a", never a default.
* A score over samples (``*_score``) needs a number for every sample: a NaN/Inf mismatch scores
  the worst (cosine 0.0, error inf); a sample whose values all agree with none finite scores as
  equal (cosine 1.0, error 0.0).
* A class ranking (:func:`top_classes`, for top-1/top-5 agreement) never lets NaN win; ties go to
  the lower index.
* Integers and booleans are compared exactly (:func:`count_unequal`): a count of values that
  differ, never a distance (two class ids are not "664 apart"); NaN equals NaN there too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Closeness", "FinitePairs", "closeness", "cosine_matrix", "cosine_similarity", "count_unequal",
           "finite_pairs", "top_classes"]

_REL_FLOOR = 1e-6          # max_rel's denominator: at least this fraction of the output's scale (>= 1)


@dataclass(frozen=True)
class FinitePairs:
    """The values finite on both sides (float64, flat, in position order) and the NaN/Inf
    positions that disagree: what every figure is computed from."""

    ref: np.ndarray
    got: np.ndarray
    size: int                  # all positions
    nan_mismatches: int        # NaN on exactly one side
    inf_mismatches: int        # Inf on one side only, or of the other sign (NaN positions aside)

    @property
    def specials_agree(self) -> bool:
        return not self.nan_mismatches and not self.inf_mismatches


def _flat64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64, copy=False).reshape(-1)


def finite_pairs(ref, got) -> FinitePairs:
    """``ref`` and ``got`` (one shape) under the NaN/Inf rules of the module doc."""
    b, a = np.asarray(ref), np.asarray(got)
    if a.shape != b.shape:
        raise ValueError(f"shape {list(a.shape)} != reference {list(b.shape)}")
    fb, fa = _flat64(b), _flat64(a)
    nan_b, nan_a = np.isnan(fb), np.isnan(fa)
    nan_bad = int(np.count_nonzero(nan_a != nan_b))
    special = (np.isinf(fa) | np.isinf(fb)) & ~(nan_a | nan_b)
    inf_bad = int(np.count_nonzero(fa[special] != fb[special]))
    finite = np.isfinite(fa) & np.isfinite(fb)
    return FinitePairs(fb[finite], fa[finite], int(fb.size), nan_bad, inf_bad)


def cosine_similarity(ref, got) -> float:
    """Cosine of two finite vectors (any shape, flattened): 1.0 for two zero vectors, 0.0 for one."""
    b, a = _flat64(ref), _flat64(got)
    nb2, na2 = float(np.dot(b, b)), float(np.dot(a, a))
    if na2 == 0.0 and nb2 == 0.0:
        return 1.0
    if na2 == 0.0 or nb2 == 0.0:
        return 0.0
    # sqrt(|a|^2 |b|^2): exactly |a|^2 when a == b, so equal vectors give exactly 1.0
    den = math.sqrt(na2 * nb2) if math.isfinite(na2 * nb2) else math.sqrt(na2) * math.sqrt(nb2)
    return min(1.0, max(-1.0, float(np.dot(a, b)) / den))


def cosine_matrix(ref_rows, got_rows) -> np.ndarray:
    """Cosine of every row of ``got_rows`` [N, D] with every row of ``ref_rows`` [M, D], [N, M]
    (retrieval: which reference is nearest), with :func:`cosine_similarity`'s zero rules; NaN
    where a row holds NaN or Inf (no direction)."""
    r = np.asarray(ref_rows).astype(np.float64, copy=False)
    g = np.asarray(got_rows).astype(np.float64, copy=False)
    nr2, ng2 = np.einsum("ij,ij->i", r, r), np.einsum("ij,ij->i", g, g)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        sims = np.clip((g @ r.T) / np.sqrt(ng2[:, None] * nr2[None, :]), -1.0, 1.0)
    zr, zg = nr2[None, :] == 0, ng2[:, None] == 0
    return np.where(zr & zg, 1.0, np.where(zr | zg, 0.0, sims))


@dataclass(frozen=True)
class Closeness:
    """The figures of one candidate against its reference (module doc: the rules)."""

    size: int
    nan_mismatches: int
    inf_mismatches: int
    compared: int               # positions finite on both sides: what the figures are over
    max_abs: float
    max_rel: float
    rel_l2: float
    cosine: float | None        # None: no finite pair, no direction measured

    @property
    def specials_agree(self) -> bool:
        return not self.nan_mismatches and not self.inf_mismatches

    @property
    def cosine_score(self) -> float:
        if not self.specials_agree:
            return 0.0
        return 1.0 if self.cosine is None else self.cosine

    @property
    def max_abs_score(self) -> float:
        return self.max_abs if self.specials_agree else float("inf")

    @property
    def max_rel_score(self) -> float:
        return self.max_rel if self.specials_agree else float("inf")

    @classmethod
    def of(cls, pairs: FinitePairs) -> Closeness:
        b, a = pairs.ref, pairs.got
        diff = np.abs(a - b)
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = np.maximum(np.abs(b), _REL_FLOOR * max(1.0, float(np.abs(b).max(initial=0.0))))
        max_rel = float((diff / scale).max()) if diff.size else 0.0
        ref_norm = float(np.linalg.norm(b))
        rel_l2 = float(np.linalg.norm(diff)) / ref_norm if ref_norm else (0.0 if max_abs == 0 else float("inf"))
        cos = cosine_similarity(b, a) if b.size else None
        return cls(pairs.size, pairs.nan_mismatches, pairs.inf_mismatches, int(b.size), max_abs, max_rel, rel_l2,
                   cos)


def closeness(ref, got) -> Closeness:
    """The figures of ``got`` against ``ref`` (one shape; ValueError otherwise)."""
    return Closeness.of(finite_pairs(ref, got))


def count_unequal(ref, got) -> int:
    """Values that differ, compared exactly (integers, booleans; NaN equals NaN where either side is
    a float): the measure for outputs that are not approximations."""
    b, a = np.asarray(ref).reshape(-1), np.asarray(got).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(f"{a.size} values against {b.size} in the reference")
    same = a == b
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        same |= np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64))
    return int(np.count_nonzero(~same))


def top_classes(scores, k: int = 1) -> np.ndarray:
    """The ``k`` best classes of each row of ``scores`` (last axis), best first, [..., C] -> [..., k]:
    NaN never wins, ties go to the lower index."""
    s = np.asarray(scores)
    if s.dtype.kind not in "iubf":           # bfloat16 and other extension dtypes
        s = s.astype(np.float64)
    if s.dtype.kind == "f":
        s = np.where(np.isnan(s), -np.inf, s)
    if k == 1:
        return np.argmax(s, axis=-1)[..., None]
    return np.argsort(-s, axis=-1, kind="stable")[..., :k]
