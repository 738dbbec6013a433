"""The memory plan and its reorder at scale (issue 31 item 8): near-linear work, and every engine
measurement within a time limit that ends in one line instead of a hang.

Mechanism, not time: the best fit and the greedy order count their steps (``work``), which must stay
linear on a 2,000- and an 8,000-input fan-in (the shape that was quadratic: 20,000 inputs took 176 s to
find nothing); and each gives the same answer as the quadratic implementations it replaced (kept here
as the oracle). The time-limit paths run with a limit far below what the engine needs."""

from __future__ import annotations

import random

import onnx
import pytest
from onnx import TensorProto, helper

from studio import api
from studio.inspect.memory_plan import (OpNode, Schedule, TensorLife, _aligned, greedy_order, best_fit, plan)
from tests.conftest import assert_user_message


# ----------------------------------------------------------------------------- the replaced implementations

def quadratic_best_fit(lives, alignment):
    """The previous best fit: a scan of every live block per tensor."""
    live, offsets, arena = [], {}, 0
    for t in sorted(lives, key=lambda x: x.start):
        size = _aligned(t.bytes, alignment)
        live = [b for b in live if b[2] >= t.start]
        if size <= 0:
            offsets[t.name] = 0
            continue
        best, waste, current = None, None, 0
        for off, sz, _ in live:
            if off >= current:
                gap = off - current
                if gap >= size and (waste is None or gap - size < waste):
                    best, waste = current, gap - size
            current = max(current, off + sz)
        tail = arena - current
        if tail >= size and (waste is None or tail - size < waste):
            best = current
        if best is None:
            best = current
        live.append((best, size, t.end))
        live.sort()
        offsets[t.name] = best
        arena = max(arena, best + size)
    return arena, offsets


def quadratic_greedy(s: Schedule):
    """The previous greedy order: every ready node re-costed against the set of nodes done, each step."""
    prod = {o: k for k, n in enumerate(s.nodes) for o in n.outputs if o}
    preds = [sorted({prod[x] for x in n.inputs if x in prod}) for n in s.nodes]
    consumers: dict[str, set[int]] = {}
    for k, n in enumerate(s.nodes):
        for x in n.inputs:
            consumers.setdefault(x, set()).add(k)
    keep = set(s.graph_outputs)

    def alloc(k):
        return sum(s.sizes.get(o, 0) for o in s.nodes[k].outputs if o)

    def frees(k, done):
        freed = sum(s.sizes.get(x, 0) for x in set(s.nodes[k].inputs)
                    if x not in keep and consumers.get(x, set()) - done <= {k})
        return freed + sum(s.sizes.get(o, 0) for o in s.nodes[k].outputs
                           if o and o not in keep and not consumers.get(o))

    waiting = [len(p) for p in preds]
    succ = [[] for _ in s.nodes]
    for k, ps in enumerate(preds):
        for p in ps:
            succ[p].append(k)
    ready = [k for k in range(len(s.nodes)) if waiting[k] == 0]
    done: set[int] = set()
    out = []
    while ready:
        k = min(ready, key=lambda r: (alloc(r) - frees(r, done), alloc(r), r))
        ready.remove(k)
        out.append(k)
        done.add(k)
        for c in succ[k]:
            waiting[c] -= 1
            if waiting[c] == 0:
                ready.append(c)
    return tuple(out)


# ----------------------------------------------------------------------------- graphs

def random_dag(rng: random.Random, n: int, inputs: int = 3) -> Schedule:
    names = [f"in{i}" for i in range(inputs)]
    nodes = []
    for k in range(n):
        reads = tuple(dict.fromkeys(rng.sample(names, rng.randint(1, min(3, len(names))))))
        outs = tuple(f"v{k}_{j}" for j in range(rng.choice((1, 1, 1, 2))))
        nodes.append(OpNode(k, f"n{k}", "Op", reads, outs))
        names.extend(outs)
    sizes = {x: rng.choice((0, 64, 256, 1000, 4096, 70000)) for x in names}
    produced = [o for nd in nodes for o in nd.outputs]
    outputs = tuple(rng.sample(produced, min(2, len(produced))))
    return Schedule(tuple(nodes), sizes, tuple(names[:inputs]), outputs)


def fan_in(n: int, size: int = 4096) -> Schedule:
    """n inputs, each negated, all summed: every negated value is live until the Sum."""
    nodes = [OpNode(i, f"neg{i}", "Neg", (f"x{i}",), (f"y{i}",)) for i in range(n)]
    nodes.append(OpNode(n, "sum", "Sum", tuple(f"y{i}" for i in range(n)), ("out",)))
    sizes = {f"x{i}": size for i in range(n)} | {f"y{i}": size for i in range(n)} | {"out": size}
    return Schedule(tuple(nodes), sizes, tuple(f"x{i}" for i in range(n)), ("out",))


def test_best_fit_equals_the_quadratic_scan():
    rng = random.Random(7)
    for case in range(300):
        lives = []
        for i in range(rng.randint(1, 60)):
            start = rng.randint(-1, 30)
            lives.append(TensorLife(f"t{i}", rng.choice((0, 1, 100, 256, 257, 1000, 5000, 65536)), start,
                                    start + rng.randint(0, 12), "activation"))
        for alignment in (1, 256):
            assert best_fit(lives, alignment) == quadratic_best_fit(lives, alignment), (case, alignment)


def test_greedy_order_equals_the_quadratic_one():
    rng = random.Random(11)
    for case in range(150):
        s = random_dag(rng, rng.randint(1, 40))
        assert greedy_order(s) == quadratic_greedy(s), case


@pytest.mark.parametrize("n", [2000, 8000])
def test_work_is_linear_on_a_fan_in(n):
    s = fan_in(n)
    work = [0]
    order = greedy_order(s, work)
    assert len(order) == n + 1 and order[-1] == n
    assert work[0] <= 2 * (n + 1)                     # each node pushed at most twice (ready, then cheaper)
    p = plan(s)
    lives = [t for t in p.tensors if t.kind == "activation"]
    fit = [0]
    arena, _ = best_fit(lives, 256, fit)
    assert arena == p.arena_bytes == n * 4096        # every negated value live at the Sum
    assert fit[0] <= 2 * len(lives)                  # one placement and at most one release each


# ----------------------------------------------------------------------------- the time limits

def _chain_model(path, n: int = 40):
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}") for i in range(n)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [1, 64])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_every_engine_measurement_ends_in_one_line_at_its_time_limit(tmp_path):
    r = api.memory_plan(api.load(_chain_model(tmp_path / "chain.onnx")), measure=True, engine_graph=False,
                        measure_timeout_s=0.05)
    assert [m.engine for m in r.measured] == ["onnxruntime", "openvino"]
    for m in r.measured:
        assert m.measured_bytes is None
        assert_user_message(m.error, "too large to measure in 0.05 s")
    assert r.plan.arena_bytes > 0                     # the plan itself is still there


def test_the_engine_graph_ends_in_one_line_at_its_time_limit(tmp_path):
    from studio.inspect.memory_report import ort_engine_plan, plan_feeds

    h = api.load(_chain_model(tmp_path / "chain.onnx", 3000))       # ORT needs far more than 0.05 s for it
    e = ort_engine_plan(h, plan_feeds(h)[0], timeout_s=0.05)
    assert e.plan is None
    assert_user_message(e.error, "too large to plan in 0.05 s")


def test_a_report_whose_engine_graph_timed_out_compares_nothing_with_it(tmp_path):
    r = api.memory_plan(api.load(_chain_model(tmp_path / "chain.onnx", 3000)), measure=True, measure_timeout_s=0.05)
    e = next(e for e in r.engine_plans if e.engine == "onnxruntime")
    assert e.plan is None and "too large to plan in 0.05 s" in e.error
    default = r.measured[0]
    assert default.engine == "onnxruntime" and default.predicted_bytes is None and default.relative_error is None
    assert any("not planned: too large to plan in 0.05 s" in n for n in r.notes)
