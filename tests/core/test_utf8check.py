"""``first_invalid_text`` names the first non-UTF-8 text field of a parsed model in its walk order, with the
field's place written out only for the field it returns (issue 35 item 2: writing every message's place was
most of the walk on a 10k-node model). Oracle: the walk as first written, places as text all along, on a
model with If bodies, attributes, metadata and functions, with one, two or three fields made invalid."""

from __future__ import annotations

import itertools

import onnx
from google.protobuf.descriptor import FieldDescriptor
from onnx import TensorProto, helper

from studio.core.utf8check import first_invalid_text

BAD = b"\xff\xfe\x80(\xa0\xe2(z"            # 8 bytes, not UTF-8


def _reference(message, root: str = "model") -> str | None:
    stack = [(message, root)]
    while stack:
        msg, where = stack.pop()
        for fd, value in msg.ListFields():
            many = fd.is_repeated
            if fd.type == FieldDescriptor.TYPE_STRING:
                for i, v in enumerate(value if many else (value,)):
                    if isinstance(v, bytes):
                        return f"{where}.{fd.name}" + (f"[{i}]" if many else "")
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                if many:
                    stack.extend((item, f"{where}.{fd.name}[{i}]") for i, item in enumerate(value))
                else:
                    stack.append((value, f"{where}.{fd.name}"))
    return None


def _marked() -> tuple[bytes, list[str]]:
    """A model whose every text field holds its own 8-character mark, serialized, and the marks."""
    vi = helper.make_tensor_value_info
    branch = helper.make_graph([helper.make_node("Neg", ["x"], ["b"], name="neg"),
                                helper.make_node("Relu", ["b"], ["t"], name="relu")], "then", [],
                               [vi("t", TensorProto.FLOAT, [2])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"], name="id")], "else", [],
                              [vi("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Greater", ["x", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch, else_branch=other),
             helper.make_node("Resize", ["y", "", "scales"], ["z"], name="rs", mode="nearest")]
    graph = helper.make_graph(nodes, "g", [vi("x", TensorProto.FLOAT, [2])], [vi("z", TensorProto.FLOAT, [2])],
                              [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                               helper.make_tensor("scales", TensorProto.FLOAT, [1], [1.0])])
    fn = helper.make_function("local", "F", ["a"], ["o"], [helper.make_node("Relu", ["a"], ["o"], name="fr")],
                              [helper.make_opsetid("", 17)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], functions=[fn])
    helper.set_model_props(model, {"author": "me", "licence": "x"})
    model.doc_string = "doc"
    marks = iter(f"M{i:07d}" for i in itertools.count())
    made: list[str] = []

    def mark(msg) -> None:
        for fd, value in msg.ListFields():
            if fd.type == FieldDescriptor.TYPE_STRING:
                if fd.is_repeated:
                    for i in range(len(value)):
                        value[i] = next(marks)
                        made.append(value[i])
                else:
                    setattr(msg, fd.name, next(marks))
                    made.append(getattr(msg, fd.name))
            elif fd.type == FieldDescriptor.TYPE_MESSAGE:
                for item in (value if fd.is_repeated else [value]):
                    mark(item)

    mark(model)
    return model.SerializeToString(), made


def _spoiled(data: bytes, marks: list[str]) -> onnx.ModelProto:
    for m in marks:
        data = data.replace(m.encode(), BAD)
    return onnx.ModelProto.FromString(data)


def test_a_valid_model_has_no_invalid_text():
    data, marks = _marked()
    assert len(marks) > 40 and first_invalid_text(onnx.ModelProto.FromString(data)) is None


def test_the_place_of_a_field_in_a_body_is_written_out():
    data, marks = _marked()
    model = onnx.ModelProto.FromString(data)
    then = next(i for i, a in enumerate(model.graph.node[1].attribute) if len(a.g.node) == 2)
    relu = model.graph.node[1].attribute[then].g.node[1]
    place = f"model.graph.node[1].attribute[{then}].g.node[1]"
    assert first_invalid_text(_spoiled(data, [relu.input[0]])) == f"{place}.input[0]"
    assert first_invalid_text(_spoiled(data, [relu.name])) == f"{place}.name"
    assert first_invalid_text(_spoiled(data, [model.metadata_props[1].value])) == "model.metadata_props[1].value"


def test_one_two_or_three_invalid_fields_name_the_reference_walks_first():
    data, marks = _marked()
    cases = [[m] for m in marks] + [list(p) for p in itertools.combinations(marks[::3], 2)] \
        + [[marks[i], marks[-1 - i], marks[len(marks) // 2]] for i in range(10)]
    for chosen in cases:
        model = _spoiled(data, chosen)
        assert first_invalid_text(model) == _reference(model) is not None, chosen
