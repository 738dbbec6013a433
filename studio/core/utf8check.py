"""Find text fields of a parsed model that are not valid UTF-8 (R38).

ONNX names, doc strings and metadata are protobuf ``string`` fields, but proto2 parsing
does not validate them: with raw bytes in them the Python runtime hands back ``bytes``
where every consumer expects ``str`` (sorting names, formatting messages, JSON), and
fails deep inside with a TypeError. The loader asks here once and refuses the model with
a one-line message naming the field (its position, not its text).
"""

from __future__ import annotations

from itertools import repeat

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE
# What the walk does with a field, by descriptor (a model has a few dozen kinds of field, visited ~50k times).
_SKIP, _TEXT, _TEXTS, _CHILD, _CHILDREN = range(5)
_ACTIONS: dict[FieldDescriptor, int] = {}


def _repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def _action(fd: FieldDescriptor) -> int:
    many = _repeated(fd)
    act = (_TEXTS if many else _TEXT) if fd.type == _STRING else (_CHILDREN if many else _CHILD) \
        if fd.type == _MESSAGE else _SKIP
    _ACTIONS[fd] = act
    return act


def first_invalid_text(message: Message, root: str = "model") -> str | None:
    """Where the first non-UTF-8 ``string`` field is (``graph.node[3].name``), or None.

    Only string and message fields are visited (never tensor payloads), iteratively so
    nesting depth cannot overflow the stack. A message's place is kept as a link to its parent's
    (parent place, field name, index or None) and written out only for the field returned: a 10k-node
    model's ~12k places were most of the walk's time as text."""
    stack: list[tuple[Message, tuple | None]] = [(message, None)]
    actions = _ACTIONS
    while stack:
        msg, place = stack.pop()
        for fd, value in msg.ListFields():
            act = actions.get(fd)
            if act is None:
                act = _action(fd)
            if act == _CHILDREN:
                n = len(value)
                stack.extend(zip(value, zip(repeat(place, n), repeat(fd.name, n), range(n))))
            elif act == _CHILD:
                stack.append((value, (place, fd.name, None)))
            elif act == _TEXTS:
                if bytes in map(type, value):      # one pass in C; the index only when one is found
                    return _where(root, (place, fd.name, [type(v) for v in value].index(bytes)))
            elif act == _TEXT and type(value) is bytes:
                return _where(root, (place, fd.name, None))
    return None


def _where(root: str, place: tuple | None) -> str:
    """``root.graph.node[3].name`` for a chain of (parent place, field name, index or None)."""
    parts: list[str] = []
    while place is not None:
        place, name, i = place
        parts.append(f".{name}" if i is None else f".{name}[{i}]")
    return root + "".join(reversed(parts))
