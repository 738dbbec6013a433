"""``api.engines()`` / ``onnx-studio engines --json`` give every fact of an engine's row a user or a tool
reads; only the wiring (modules, classes, jobs the studio calls) stays inside. A field added to the row
and forgotten in ``to_dict`` fails here."""

from __future__ import annotations

from dataclasses import fields

from studio import api
from studio.core.engines.table import ENGINES, EngineRow

# Named by hand: how the studio reaches the engine, not what the engine is.
WIRING = {"module", "adapter", "runner", "jobs", "info_job", "limits", "code", "cli"}


def test_every_row_fact_is_in_the_json():
    facts = {f.name for f in fields(EngineRow)} - WIRING
    for row in api.engines():
        assert facts <= set(row), sorted(facts - set(row))
    rows = {r["name"]: r for r in api.engines()}
    for engine in ENGINES:
        assert rows[engine.name]["process_thread_pool"] is engine.process_thread_pool
        assert rows[engine.name]["default_check"] is engine.default_check
    assert rows["onnxruntime"]["cli"] == "ort"          # the spelling command hints use (the wiring field's value)
