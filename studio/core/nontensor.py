"""Graph inputs and outputs that are not tensors (sequences, maps, optionals).

scikit-learn classifiers exported by skl2onnx return ``seq(map(int64, float))``
(ZipMap); other models take or return sequences and optionals. ONNX Runtime runs
them; OpenVINO and TensorRT take tensors only, and say so in a converter message
naming an internal op (``util::SequenceMark``) or a value_info. The studio says
it in one line, naming the value and the usual way out.
"""

from __future__ import annotations

from onnx import ModelProto

from studio.core.types import TensorInfo, type_info


def non_tensor_io(model: ModelProto) -> list[tuple[str, TensorInfo]]:
    """("input" | "output", info) of each main-graph input/output that is not a tensor."""
    out: list[tuple[str, TensorInfo]] = []
    for role, values in (("input", model.graph.input), ("output", model.graph.output)):
        for vi in values:
            if vi.type.WhichOneof("value") not in (None, "tensor_type"):
                out.append((role, type_info(vi.name, vi.type)))
    return out


def tensor_only_refusal(model: ModelProto, engine_label: str) -> str | None:
    """One line saying why ``engine_label`` cannot take this model's interface, or None."""
    found = non_tensor_io(model)
    if not found:
        return None
    role, info = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    way_out = ("export the classifier without ZipMap (skl2onnx: options={'zipmap': False})"
               if "map(" in info.dtype else "give the model tensor inputs and outputs")
    return (f"{engine_label} takes tensors only: {role} '{info.name[:60]}' is a {info.dtype}{more}; "
            f"deploy it with ONNX Runtime, or {way_out}")


__all__ = ["non_tensor_io", "tensor_only_refusal"]
