"""What can be run: every registered pass and preset with its one-line description."""

from __future__ import annotations

from passes.registry import known_passes, known_presets


def catalog() -> dict:
    """``{"passes": [{name, summary, transform, calls_engines, changes_interface}], "presets": [...]}``."""
    passes = []
    for name, cls in known_passes().items():
        if name.startswith("test-"):
            continue
        p = cls()
        passes.append({"name": name, "summary": cls.summary or p.describe(), "transform": p.describe(),
                       "runs_in_worker": bool(cls.calls_engines), "changes_interface": bool(cls.changes_interface)})
    presets = [{"name": p.name, "description": p.description, "passes": list(p.passes), "options": p.pass_options()}
               for p in known_presets().values()]
    return {"passes": passes, "presets": presets}
