"""Find text fields of a parsed model that are not valid UTF-8 (R38).

ONNX names, doc strings and metadata are protobuf ``string`` fields, but proto2 parsing
does not validate them: with raw bytes in them the Python runtime hands back ``bytes``
where every consumer expects ``str`` (sorting names, formatting messages, JSON), and
fails deep inside with a TypeError. The loader asks here once and refuses the model with
a one-line message naming the field (its position, not its text).
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _repeated(fd: FieldDescriptor) -> bool:
    flag = getattr(fd, "is_repeated", None)
    return bool(flag) if flag is not None else fd.label == FieldDescriptor.LABEL_REPEATED


def first_invalid_text(message: Message, root: str = "model") -> str | None:
    """Where the first non-UTF-8 ``string`` field is (``graph.node[3].name``), or None.

    Only string and message fields are visited (never tensor payloads), iteratively so
    nesting depth cannot overflow the stack."""
    stack: list[tuple[Message, str]] = [(message, root)]
    while stack:
        msg, where = stack.pop()
        for fd, value in msg.ListFields():
            if fd.type == _STRING:
                values = value if _repeated(fd) else (value,)
                for i, v in enumerate(values):
                    if isinstance(v, bytes):
                        return f"{where}.{fd.name}" + (f"[{i}]" if _repeated(fd) else "")
            elif fd.type == _MESSAGE:
                if _repeated(fd):
                    stack.extend((item, f"{where}.{fd.name}[{i}]") for i, item in enumerate(value))
                else:
                    stack.append((value, f"{where}.{fd.name}"))
    return None
