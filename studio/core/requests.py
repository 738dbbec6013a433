"""Typed requests: what the user asked an operation for, as plain frozen data (issue 34, item 2).

Why one module: every door into an operation (the CLI, a page, a batch stage, a remote target) builds
the same request, so none of them can drop an option the others pass. A request is serializable
(``to_dict``/``from_dict``, JSON-able: it travels to a Dask worker whole and is stored as the provenance
of what it produced) and prints its own command line (``cli_options`` for ``api.cli_command``).

What is *not* in a request is where and how this process runs it: the output folder, the sandbox pool,
progress callbacks, a dataset already opened from a project (the request names it). Those are arguments
of the call that runs the request, so a request means the same thing on every machine.

A leaf module (stdlib and ``studio.core.errors`` only): the front ends may import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from studio.core.errors import StudioError

__all__ = ["PrecisionRequest", "request_from_dict"]

R = TypeVar("R")

# ImagePreprocess's defaults (studio.core.feeds): only the fields that differ are kept in a request, so the
# page (no preprocessing chosen) and the CLI (the defaults spelled out) build equal requests.
PREPROCESS_DEFAULTS: Mapping[str, Any] = {"size": None, "layout": "auto", "mean": (0.485, 0.456, 0.406),
                                          "std": (0.229, 0.224, 0.225), "scale": 1 / 255.0, "bgr": False}


def _pairs(value: Mapping | Any, cast=None) -> tuple[tuple[str, Any], ...]:
    """A mapping as sorted (key, value) pairs: hashable, comparable, and the same whatever the order given."""
    items = value.items() if isinstance(value, Mapping) else (value or ())
    return tuple(sorted((str(k), cast(v) if cast else _frozen(v)) for k, v in items))


def _frozen(v: Any) -> Any:
    return tuple(_frozen(x) for x in v) if isinstance(v, (list, tuple)) else v


def _plain(v: Any) -> Any:
    """JSON-able: tuples become lists, pairs become a dict at the top level (see ``to_dict``)."""
    return [_plain(x) for x in v] if isinstance(v, tuple) else v


@dataclass(frozen=True)
class PrecisionRequest:
    """``precision``: build variants, compare each with fp32, time them side by side, recommend one.

    ``calibration``/``inputs`` are paths as the user gave them (the files travel beside a remote request);
    ``goal`` is the task-metric goal (``top1-agreement>=0.99``) judged on ``dataset`` (a project dataset's
    name); ``target_cosine`` is the goal without one. ``block_size``..``ratio`` shape the weight-only
    variants; ``generation_steps`` is how many greedy tokens a decoder is judged over."""

    variants: tuple[str, ...] | None = None           # None: the model's default set (``auto``)
    calibration: str | None = None
    calibration_method: str = "minmax"
    samples: int = 8
    inputs: str | None = None
    target_cosine: float = 0.99
    goal: str | None = None
    dataset: str | None = None
    tasks: tuple[tuple[str, str], ...] = ()           # output -> task kind, chosen by the user
    dims: tuple[tuple[str, int], ...] = ()
    preprocess: tuple[tuple[str, Any], ...] = ()      # ImagePreprocess fields that differ from its defaults
    latency_budget_s: float = 60.0
    block_size: str = "auto"
    symmetric: bool = True
    accuracy_level: int = 0
    ratio: float = 1.0
    generation_steps: int = 8

    def __post_init__(self) -> None:
        put = object.__setattr__
        if self.variants is not None:
            put(self, "variants", tuple(str(v) for v in self.variants))
        for name in ("calibration", "inputs", "goal", "dataset"):
            value = getattr(self, name)
            put(self, name, str(value) if value not in (None, "") else None)
        put(self, "tasks", _pairs(self.tasks, str))
        put(self, "dims", _pairs(self.dims, int))
        put(self, "preprocess", tuple((k, v) for k, v in _pairs(self.preprocess)
                                      if _frozen(PREPROCESS_DEFAULTS.get(k, object())) != v))
        put(self, "block_size", str(self.block_size))
        for name, cast in (("samples", int), ("accuracy_level", int), ("generation_steps", int),
                           ("target_cosine", float), ("latency_budget_s", float), ("ratio", float),
                           ("symmetric", bool)):
            put(self, name, cast(getattr(self, name)))

    @property
    def weight_options(self) -> dict[str, Any]:
        """The weight-only options as ``studio.precision.weight_only`` takes them."""
        return {"block_size": self.block_size, "symmetric": self.symmetric, "accuracy_level": self.accuracy_level,
                "ratio": self.ratio}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able; ``PrecisionRequest.from_dict(r.to_dict()) == r``."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = ({k: _plain(v) for k, v in value} if f.name in ("tasks", "dims", "preprocess")
                           else _plain(value))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PrecisionRequest:
        return request_from_dict(cls, data)

    def cli_options(self, *, files: bool = True) -> list[tuple[str, object]]:
        """The ``onnx-studio precision`` options that build this request (defaults left out), for
        ``api.cli_command``. ``files=False`` leaves out ``--calibration``/``--inputs`` (a page names its
        uploads with its own words)."""
        d = PrecisionRequest()
        pre = dict(self.preprocess)
        size = pre.get("size")
        return [("--variants", list(self.variants) if self.variants else None),
                ("--calibration", self.calibration if files else None),
                ("--calibration-method", self.calibration_method if self.calibration_method != d.calibration_method
                 else None),
                ("--samples", self.samples if self.samples != d.samples else None),
                ("--inputs", self.inputs if files else None),
                ("--target-cosine", self.target_cosine if self.target_cosine != d.target_cosine else None),
                ("--dataset", self.dataset), ("--goal", self.goal), ("--task", dict(self.tasks)),
                ("--dim", dict(self.dims)),
                ("--image-size", f"{size[0]}x{size[1]}" if size else None),
                ("--layout", pre.get("layout")),
                ("--mean", list(pre["mean"]) if "mean" in pre else None),
                ("--std", list(pre["std"]) if "std" in pre else None),
                ("--bgr", bool(pre.get("bgr"))),
                ("--budget", self.latency_budget_s if self.latency_budget_s != d.latency_budget_s else None),
                ("--block-size", self.block_size if self.block_size != d.block_size else None),
                ("--asymmetric", not self.symmetric),
                ("--accuracy-level", self.accuracy_level or None),
                ("--ratio", self.ratio if self.ratio != d.ratio else None),
                ("--steps", self.generation_steps if self.generation_steps != d.generation_steps else None)]


def request_from_dict(cls: type[R], data: Mapping[str, Any]) -> R:
    """A request from its ``to_dict`` form: unknown keys and wrong shapes are one line (BAD-REQUEST), never
    dropped, so a request from a newer client is refused rather than run with options missing."""
    if not isinstance(data, Mapping):
        raise StudioError(f"a {cls.__name__} must be a mapping, got {type(data).__name__}", code="BAD-REQUEST")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise StudioError(f"{cls.__name__} has no option(s) {', '.join(unknown)[:80]}; known: "
                          f"{', '.join(sorted(known))[:300]}", code="BAD-REQUEST")
    try:
        return cls(**dict(data))
    except (TypeError, ValueError) as exc:
        raise StudioError(f"{cls.__name__}: {str(exc).splitlines()[0][:200]}", code="BAD-REQUEST") from None
