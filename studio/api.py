"""The facade: everything a user can do, as typed functions over result objects.

The CLI (``studio.cli``) and the Streamlit pages (``studio.ui``) call only
these functions and render what they return; ``--json`` prints the same
objects. Heavy work lives in ``studio.core``, ``studio.inspect``,
``diagnostics``, ``passes``, ``profilers`` and ``studio.export``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from studio.core.model import ModelHandle
from studio.core.model import load as _load
from studio.core.workspace import Workspace
from studio.inspect.summary import ModelSummary, summarize

__all__ = ["ModelHandle", "ModelSummary", "Workspace", "compare", "inspect", "load", "make_inputs", "precision"]


def load(path: str | Path) -> ModelHandle:
    """Load and validate an ONNX model file (external data stays on disk)."""
    return _load(path)


def inspect(handle: ModelHandle, dims: Mapping[str, int] | None = None, *,
            pool_key: str = "default") -> ModelSummary:
    """Summary, op histogram, I/O, params, FLOPs, memory estimate, nodes and edge shapes.

    Shape inference runs in a sandbox worker of ``pool_key`` (one per browser session)."""
    return summarize(handle, dims, pool_key=pool_key)


# ---------------------------------------------------------------------------- precision and verification
# (imports are local: the accuracy/precision layers pull in plotly-free but heavier modules)

def _path_of(model: ModelHandle | str | Path) -> Path:
    """A validated model path: handles are already validated; paths go through ``load``."""
    return model.path if isinstance(model, ModelHandle) else _load(model).path


def make_inputs(handle: ModelHandle, *, inputs: str | Path | None = None, images: str | Path | None = None,
                count: int = 1, dims: Mapping[str, int] | None = None, seed: int = 0, preprocess=None):
    """Feeds for ``handle``: a user .npz, an image folder, or ``count`` seeded random sets (a FeedSet)."""
    from studio.core.feeds import make_feeds

    return make_feeds(handle.proto, inputs=Path(inputs) if inputs else None, images=Path(images) if images else None,
                      count=count, dims=dims, seed=seed, preprocess=preprocess)


def compare(a: ModelHandle | str | Path, b: ModelHandle | str | Path, *, engine: str = "ort",
            engine_b: str | None = None, feeds=None, inputs: str | Path | None = None,
            images: str | Path | None = None, count: int = 2, dims: Mapping[str, int] | None = None,
            ov_precision: str = "f32", ov_precision_b: str | None = None, tolerance=None, layerwise: bool = False,
            layer_threshold: float | None = None, labels: tuple[str, str] | None = None,
            pool_key: str = "default", on_tick=None):
    """Compare model ``a`` on ``engine`` with model ``b`` on ``engine_b`` (default: the same) on the
    same inputs: shapes first, then max abs/rel, L2, cosine, top-1/top-5 agreement per output
    (a ``ModelComparison``, truthy when everything matches). ``layerwise`` adds the first
    diverging layer and per-layer errors (``result.layerwise.node_errors()``)."""
    from studio.accuracy.compare_models import compare_models
    from studio.core.engines import RunOptions

    pa, pb = _path_of(a), _path_of(b)
    if feeds is None and (inputs or images):
        feeds = make_inputs(a if isinstance(a, ModelHandle) else _load(pa), inputs=inputs, images=images,
                            count=count, dims=dims)
    labels = labels or ((a.name if isinstance(a, ModelHandle) else pa.name),
                        (b.name if isinstance(b, ModelHandle) else pb.name))
    return compare_models(pa, pb, engine=engine, engine_b=engine_b, feeds=feeds,
                          options=RunOptions(precision=ov_precision),
                          options_b=RunOptions(precision=ov_precision_b or ov_precision), tolerance=tolerance,
                          labels=labels, dims=dims, count=count, pool_key=pool_key, on_tick=on_tick,
                          layerwise=layerwise,
                          layerwise_options={"layer_threshold": layer_threshold} if layer_threshold else None)


def precision(handle: ModelHandle | str | Path, *, variants=None, calibration: str | Path | None = None,
              inputs: str | Path | None = None, samples: int = 8, target_cosine: float = 0.99,
              out_dir: str | Path | None = None, dims: Mapping[str, int] | None = None, preprocess=None,
              latency_budget_s: float = 60.0, pool_key: str = "default", on_progress=None, on_tick=None):
    """Build fp16/bf16/INT8 variants, compare each with fp32 and time them side by side; the
    ``PrecisionReport`` recommends the fastest variant meeting ``target_cosine`` that is faster
    than fp32 (fp32 itself when none is)."""
    from studio.precision.variants import evaluate_variants

    return evaluate_variants(_path_of(handle), variants=variants, out_dir=Path(out_dir) if out_dir else None,
                             calibration=Path(calibration) if calibration else None,
                             inputs=Path(inputs) if inputs else None, samples=samples, preprocess=preprocess,
                             dims=dims, target_cosine=target_cosine, latency_budget_s=latency_budget_s,
                             pool_key=pool_key, on_progress=on_progress, on_tick=on_tick)
