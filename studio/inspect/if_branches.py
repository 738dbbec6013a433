"""Shapes after an If whose branch is chosen by the input *values*, measured for every branch.

Silero VAD picks its 16 kHz or 8 kHz branch from the ``sr`` input's value, so inference leaves the If's
outputs symbolic (``unk__50``) and a single seeded run would measure only the branch its seed chose. Here
each combination of such Ifs' conditions (at most :data:`MAX_FORCED_IFS` Ifs, so at most 8 runs) is forced
in ONNX Runtime, on the model as written otherwise: a shape all combinations give is the shape whatever the
input values; where they differ, it stays open and the note says so.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass

from onnx import ModelProto, TensorProto, helper

from studio.inspect.value_dependence import value_dependent_shapes

MAX_FORCED_IFS = 3                   # 2**3 runs at most


@dataclass(frozen=True)
class BranchShapes:
    """Shapes every forced combination agreed on, and the names where they differ."""

    settled: dict[str, tuple[int, ...]]
    differ: tuple[str, ...]
    runs: int


def value_chosen_ifs(model: ModelProto, varying: set[str]) -> list[int]:
    """Indices of main-graph If nodes whose outputs' shapes vary with the input values."""
    return [i for i, n in enumerate(model.graph.node)
            if n.op_type == "If" and n.domain in ("", "ai.onnx") and any(o in varying for o in n.output if o)]


def forced(model: ModelProto, choice: Mapping[int, bool]) -> ModelProto:
    """A copy of ``model`` whose If nodes at the given indices read a constant condition."""
    out = ModelProto()
    out.CopyFrom(model)
    constants = []
    for index, value in choice.items():
        name = f"__studio_forced_condition_{index}"
        out.graph.node[index].input[0] = name
        constants.append(helper.make_node("Constant", [], [name],
                                          value=helper.make_tensor(name, TensorProto.BOOL, [], [bool(value)])))
    for node in reversed(constants):            # first: the graph stays in topological order
        out.graph.node.insert(0, node)
    return out


def measurable(model: ModelProto, ifs: list[int], known: set[str], names: set[str]) -> set[str]:
    """Of ``names``, those whose shape no longer depends on the input values once the Ifs are forced
    (checked on every combination: a branch can hold its own value-dependent op)."""
    left = set(names)
    for values in itertools.product((True, False), repeat=len(ifs)):
        left -= value_dependent_shapes(forced(model, dict(zip(ifs, values))), known)
    return left


def agree(runs: list[Mapping[str, tuple[int, ...]]], names: set[str]) -> BranchShapes:
    """What every run measured the same, and where they differ."""
    settled, differ = {}, []
    for name in sorted(names):
        seen = {tuple(r[name]) for r in runs if name in r}
        if len(seen) == 1 and all(name in r for r in runs):
            settled[name] = seen.pop()
        elif seen:
            differ.append(name)
    return BranchShapes(settled, tuple(differ), len(runs))
