"""Read a ``.npy`` header before reading its array, so that a file is refused in one line before any
allocation (RELIABILITY R64, issue 31 item 6): a header may declare 8 GiB in a 100-byte file, or lie
about 4 TiB; ``np.load`` trusts it and allocates (``_ArrayMemoryError``), or unpickles an object array.

One reader for every place that takes a user's ``.npy`` (an edit's new weights, a dataset's tensor
samples, an ``.npz`` member): the header is parsed with ``numpy.lib.format`` (its own size bounded),
the dtype must be a plain number or bool (object/pickled, string, structured and, unless asked for,
complex arrays are refused), shape x itemsize is computed in Python integers and checked against the
caller's limit and against the bytes the file really holds (a truncated file), all before a byte of
the array is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from studio.core.bounds import number_text
from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError

MAX_HEADER_BYTES = 10_000          # numpy's own default bound on the header's dict text


class NpyError(StudioError):
    """A ``.npy`` file (or ``.npz`` member) that cannot be used; nothing was allocated for it."""

    code = ErrorCode.BAD_NPY


@dataclass(frozen=True)
class NpyHeader:
    """What the header declares, checked: the array's shape and dtype, where its bytes start, how many."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool
    offset: int
    nbytes: int


def _size_text(n: int) -> str:
    if n >= 2**60:
        return f"{number_text(n)} bytes"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def read_header(fh: BinaryIO, size: int, label: str, *, max_bytes: int, complex_ok: bool = False) -> NpyHeader:
    """The checked header of the ``.npy`` stream ``fh`` (at its start) of ``size`` bytes in all.

    Raises :class:`NpyError` naming ``label`` for: not a .npy, an unknown format version, an object,
    string or structured dtype (complex too unless ``complex_ok``), a negative or absurd shape, more
    than ``max_bytes`` of data, or fewer bytes in the file than the header declares."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        reader = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
        if reader is None:
            if version == (3, 0):
                reader = fmt.read_array_header_2_0      # 3.0 differs only in the header's text encoding
            else:
                raise NpyError(f"{label}: .npy format version {version[0]}.{version[1]} is not supported")
        shape, fortran, dtype = reader(fh, max_header_size=MAX_HEADER_BYTES)
    except NpyError:
        raise
    except (ValueError, EOFError, OSError, SyntaxError, TypeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:120]
        raise NpyError(f"{label} is not a readable .npy file ({first})") from None
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise NpyError(f"{label} holds Python objects (a pickled array); only numeric arrays are read, never "
                       "unpickled: save it with a numeric dtype")
    if dtype.kind in "SUV" or dtype.names is not None or dtype.subdtype is not None:
        raise NpyError(f"{label} holds {dtype} values (text or records); a numeric array is needed")
    if dtype.kind == "c" and not complex_ok:
        raise NpyError(f"{label} holds complex values ({dtype}); they would lose their imaginary part: "
                       "give a real array")
    if dtype.kind not in "biufc":
        raise NpyError(f"{label} holds {dtype} values; a numeric array is needed")
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise NpyError(f"{label}: its header declares an invalid shape {str(shape)[:60]}")
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes > max_bytes:
        raise NpyError(f"{label}: its header declares {_size_text(nbytes)} ({'x'.join(map(str, shape))[:60]} "
                       f"{dtype}), over the limit of {_size_text(max_bytes)}; nothing was read")
    offset = fh.tell()
    if size - offset < nbytes:
        raise NpyError(f"{label} is truncated: its header declares {_size_text(nbytes)} of data but the file "
                       f"holds {_size_text(max(size - offset, 0))}")
    return NpyHeader(tuple(shape), dtype, bool(fortran), offset, nbytes)


def load_npy(path: Path, label: str, *, max_bytes: int, complex_ok: bool = False) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, read only after :func:`read_header` accepted it (so at
    most ``max_bytes`` are allocated, never an unpickled object)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(0)
            header = read_header(fh, size, label, max_bytes=max_bytes, complex_ok=complex_ok)
            count = math.prod(header.shape)
            data = np.fromfile(fh, dtype=header.dtype, count=count) if count else np.empty(0, header.dtype)
    except OSError as exc:
        raise NpyError(f"{label} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if data.size != count:
        raise NpyError(f"{label} is truncated: {data.size} of {count} values could be read")
    return data.reshape(header.shape, order="F" if header.fortran_order else "C")
