"""What every sample builder shares: the model envelope (producer name and version, IR version, opset
imports) and the seeded node/initializer accumulator a graph is built in.

Kept in one place so that the builders (:mod:`sample_models.build`, ``classifier``, ``detector``, ``decoders``)
write the same header, and a change to it is made once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

__all__ = ["PRODUCER_NAME", "PRODUCER_VERSION", "GraphParts", "sample_model"]

PRODUCER_NAME = "onnx-studio-samples"
PRODUCER_VERSION = "1.0"


def sample_model(
    graph: onnx.GraphProto,
    opset: int,
    doc: str,
    ir_version: int = 8,
    extra_opsets: Sequence[tuple[str, int]] = (),
) -> onnx.ModelProto:
    """``graph`` as a model with the samples' producer, ``opset`` for the default domain and ``extra_opsets``."""
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(
        graph,
        opset_imports=opsets,
        producer_name=PRODUCER_NAME,
        producer_version=PRODUCER_VERSION,
        doc_string=doc,
    )
    model.ir_version = ir_version
    return model


class GraphParts:
    """Nodes and initializers of a graph under construction, with the seeded generator its weights come from."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def init(self, name: str, array: np.ndarray) -> str:
        """Add ``array`` as the initializer ``name``; returns the name."""
        self.initializers.append(numpy_helper.from_array(np.array(array, order="C"), name))
        return name
