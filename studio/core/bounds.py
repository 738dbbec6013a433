"""The domains of the integers a user gives (dims, lengths, batches, counts, memory sizes) and the one
check of them, so that an absurd number (0, negative, 10^400) is one line naming the item and its
domain before any work, never an ``OverflowError`` in a float conversion or an allocation of
gigabytes (RELIABILITY R64).

Why these limits: every engine the studio drives keeps a dim in an int64, and a tensor shape product
in one too; OpenVINO and TensorRT keep many dims in int32. A dim or a token count beyond 2^31 - 1 is
never a real setting (it is at least 2 GiB of a single byte axis), and a memory size beyond 2^63 - 1
bytes does not exist.
"""

from __future__ import annotations

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

MAX_DIM = 2**31 - 1              # a dim value, a length, a batch, a count of heads or layers
MAX_MEMORY_BYTES = 2**63 - 1     # a memory size in bytes (int64)


class OutOfRange(StudioError):
    """A number the user (or a file beside the model) gave is outside its domain."""

    code = ErrorCode.OUT_OF_RANGE


def number_text(value: object, max_chars: int = 24) -> str:
    """A number as it can be shown in one short line: a 401-digit integer is "a 401-digit number"."""
    if isinstance(value, int) and not isinstance(value, bool):
        digits = len(str(abs(value))) if abs(value) < 10**4000 else 4000
        if digits > max_chars - 4:
            return f"a {digits}{'+' if digits >= 4000 else ''}-digit {'negative ' if value < 0 else ''}number"
        return f"{value:,}"
    text = repr(value)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def bounded_int(value: object, item: str, low: int = 1, high: int = MAX_DIM) -> int:
    """``value`` when it is an integer in ``low..high``; else :class:`OutOfRange` naming ``item`` and the domain."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OutOfRange(f"{item} must be an integer from {low:,} to {high:,}, got {number_text(value)}")
    if not low <= value <= high:
        raise OutOfRange(f"{item} is {number_text(value)}: it must be from {low:,} to {high:,}")
    return value
