"""Shared by the agreement tests: a model-level verdict from ``check`` against
what really happens when the engine adapter loads and runs the model."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds

RUNS = ("runs", "runs with warnings")
# "not run": compiled, but no input the studio tried ran it -- reality fails on the seeded inputs too.


def reality(engine: str, path: Path, ran_on: Mapping[str, Any] | None = None) -> tuple[bool | None, str]:
    """(ran, message) via ``get_engine(engine).run`` on seeded feeds, or on the inputs the check
    says it ran on (``EngineVerdict.ran_on``: the input search's sizes and values); None when no
    feeds can be made."""
    import onnx

    from diagnostics.input_search import Recipe, recipe_feeds
    from studio.core.engines import get_engine

    model = onnx.load_model(str(path), load_external_data=False)
    try:
        specs = input_specs(model)
        feeds = (recipe_feeds(specs, Recipe(ran_on["dims"], ran_on["values"])) if ran_on and "dims" in ran_on
                 else random_feeds(specs, seed=0))
    except StudioError as exc:
        return None, f"no seeded feeds: {exc}"
    if any(isinstance(v, list) for v in feeds.values()):
        return None, "sequence inputs cannot cross the sandbox boundary"
    try:
        get_engine(engine).run(path.resolve(), feeds)
        return True, "ran"
    except StudioError as exc:
        return False, str(exc)


def verdict_ok(verdict: str) -> bool:
    return verdict in RUNS
