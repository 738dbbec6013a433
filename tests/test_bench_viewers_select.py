"""benchmarks/bench_viewers.py picks its models by size (``--sizes 325,10000``) or key, so one size runs alone
(Chromium on 2 shared cores: one size at a time)."""

from __future__ import annotations

from benchmarks.bench_viewers import DEFAULT, _args, select


def test_sizes_pick_the_small_real_pair_and_code_built_graphs():
    assert [k for k, _, _ in select([325, 10000], None)] == ["yolo", "llama", "10k"]
    assert [k for k, _, _ in select([100000], ["minilm", "yolo"])] == ["100k", "minilm", "yolo"]
    assert [k for k, _, _ in select([50000], None)] == ["50k"]          # any size: a code-built graph of it
    assert [k for k, _, _ in select(None, None)] == DEFAULT


def test_command_line():
    a = _args(["1", "--sizes", "325,10000", "--viewers", "studio,netron", "--timeout", "60"])
    assert a == {"reps": 1, "only": None, "sizes": [325, 10000], "viewers": ["studio", "netron"], "timeout_s": 60.0}
    assert _args(["yolo", "3k"])["only"] == ["yolo", "3k"] and _args([])["reps"] == 3
