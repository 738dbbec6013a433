"""The real-model corpus for tests: ``corpus_model("nudenet_320n") -> Path`` and the manifest's facts.

The models live outside the checkout (benchmarks/corpus: ``make corpus`` fetches them; ``make test``
runs it first). The suite sandboxes HOME/XDG, so the folder comes from ``ONNX_STUDIO_CORPUS``, which
tests/sandbox.py sets from the real cache before sandboxing. A missing model skips the test locally,
and fails it under CI (``CI=true``: nothing required may skip, R55).

    from tests.corpus import corpus_model, corpus_manifest
    path = corpus_model("magika_standard_v3_3")
    facts = corpus_manifest()["magika_standard_v3_3"]     # .inputs, .outputs, .dims, .kept_aside ...
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import pytest

from benchmarks.corpus import ACCEPTED_TASKS, CorpusModel, corpus_dir, load_manifest
from tests.requirements import strict

__all__ = ["ACCEPTED_TASKS", "CorpusModel", "corpus_manifest", "corpus_memory_report", "corpus_model", "corpus_names",
           "corpus_params", "corpus_feeds"]


@lru_cache(maxsize=1)
def corpus_manifest() -> dict[str, CorpusModel]:
    """Every corpus model's manifest entry by stable name (benchmarks/corpus/manifest.toml)."""
    return load_manifest()


def corpus_names(*, kept_aside: bool | None = False) -> list[str]:
    """Stable names; by default the models heuristics may be tuned on (``kept_aside=None``: all of them)."""
    return [n for n, m in corpus_manifest().items() if kept_aside is None or m.kept_aside == kept_aside]


def corpus_model(name: str) -> Path:
    """The path of corpus model ``name`` (with or without ``.onnx``). Missing: skip, or fail under CI."""
    name = name.removesuffix(".onnx")
    if name not in corpus_manifest():
        raise KeyError(f"{name} is not in benchmarks/corpus/manifest.toml")
    m = corpus_manifest()[name]
    path = corpus_dir() / m.filename
    if path.is_file() and path.stat().st_size == m.bytes:
        return path
    reason = f"corpus model {name} is not fetched in {corpus_dir()} (run `make corpus`)"
    if strict():
        pytest.fail(f"CI: {reason}", pytrace=False)
    pytest.skip(reason)


def corpus_params(*, kept_aside: bool | None = False) -> list:
    """``pytest.param(name, id=name)`` for every model, for ``@pytest.mark.parametrize("name", ...)``."""
    return [pytest.param(n, id=n) for n in corpus_names(kept_aside=kept_aside)]


def corpus_feeds(name: str, seed: int = 0) -> dict:
    """Inputs of the manifest's shapes: floats U[0,1), integers within the stated range, fixed scalars."""
    from benchmarks.corpus.feeds import feeds_for

    return feeds_for(corpus_manifest()[name.removesuffix(".onnx")], corpus_model(name), seed=seed)


@lru_cache(maxsize=None)
def corpus_memory_report(name: str):
    """``api.memory_plan(api.load(model), measure=True)`` of a corpus model: its plans and each engine's measured
    block (a child process per engine, seconds each on resnet50). The report is frozen, so the tests that read the
    same model's (resnet50: ORT as run in test_memory_as_run, OpenVINO as compiled in test_memory_ov_compiled)
    share one per worker."""
    from studio import api

    return api.memory_plan(api.load(corpus_model(name)), measure=True)
