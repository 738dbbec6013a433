"""Shared by the agreement tests: a model-level verdict from ``check`` against
what really happens when the engine adapter loads and runs the model."""

from __future__ import annotations

from pathlib import Path

from studio.core.errors import StudioError
from studio.core.feeds import input_specs, random_feeds

RUNS = ("runs", "runs with warnings")


def reality(engine: str, path: Path) -> tuple[bool | None, str]:
    """(ran, message) via ``get_engine(engine).run`` on seeded feeds; None when no feeds can be made."""
    import onnx

    from studio.core.engines import get_engine

    model = onnx.load_model(str(path), load_external_data=False)
    try:
        feeds = random_feeds(input_specs(model), seed=0)
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
