"""Inputs for a corpus model from its manifest facts: the stated shapes, dtypes read from the graph.

Floats are U[0,1) (seeded), integers (and floats given a range, such as magika v1's byte values) uniform
within the manifest's ``ranges`` (integers default to 0..9), booleans
true, and ``values`` fix scalar inputs such as silero's ``sr``: inputs outside what a person said is
valid would take another branch or index out of a table, so the run would measure nothing real.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from benchmarks.corpus import CorpusModel


def graph_inputs(path: Path) -> dict[str, np.dtype]:
    """The model's real inputs (initializers listed as inputs, IR < 4, left out): name -> numpy dtype."""
    model = onnx.load(str(path), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    return {i.name: np.dtype(helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type))
            for i in model.graph.input if i.name not in inits}


def feeds_for(model: CorpusModel, path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """One feed per graph input, of the manifest's shape; a graph input the manifest lacks is an error."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for name, dtype in graph_inputs(path).items():
        if name not in model.inputs:
            raise KeyError(f"{model.name}: the manifest gives no shape for input {name}")
        shape = model.inputs[name]
        if name in model.values:
            feeds[name] = np.full(shape, model.values[name], dtype=dtype)
        elif dtype == np.bool_:
            feeds[name] = np.ones(shape, dtype=bool)
        elif name in model.ranges or np.issubdtype(dtype, np.integer):
            lo, hi = model.ranges.get(name, (0, 9))
            feeds[name] = rng.integers(lo, hi + 1, size=shape).astype(dtype)
        else:
            feeds[name] = rng.random(shape, dtype=np.float32).astype(dtype)
    return feeds
