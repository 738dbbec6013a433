"""Call-counting spies for tests that assert a step is skipped or done once: the real function still runs."""

from __future__ import annotations

from typing import Any


def count_calls(monkeypatch: Any, owner: Any, name: str) -> list[tuple]:
    """Replace ``owner.name`` with a pass-through that records each call's positional arguments; the list
    it returns grows by one entry per call."""
    calls: list[tuple] = []
    real = getattr(owner, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls
