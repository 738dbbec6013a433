"""The studio's own validator for tensor data, run before any engine sees a model.

External data is the main file-disclosure path of ONNX (a chain of CVEs), and
engines disagree on what they refuse, so every TensorProto (initializers,
sparse tensors, tensor attributes, subgraphs, functions) is checked here:
locations must be plain relative paths to regular files that stay inside the
model's folder by every kind of link, offsets and lengths must lie inside the
file, and declared sizes must be possible before anything is allocated.
"""

from __future__ import annotations

import os
import stat
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
from onnx import ModelProto, TensorProto, helper

from studio.core.error_codes import ErrorCode
from studio.core.errors import StudioError, UnsafeModelError
from studio.core.protowalk import iter_tensors
from studio.core.paths import check_regular_file

ALLOWED_EXTERNAL_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})
# Anything declaring more than this many elements is refused outright (2^40 = 1 Ti).
MAX_DECLARED_ELEMENTS = 2**40
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


@dataclass(frozen=True)
class ExternalRef:
    """One validated external-data reference."""

    tensor: str
    file: Path        # resolved, inside the model folder
    offset: int
    length: int


@dataclass(frozen=True)
class TensorScan:
    """What the validator saw: external references and the bytes each file must hold."""

    external: tuple[ExternalRef, ...]
    external_bytes: int
    inline_bytes: int
    tensors: int


def itemsize_of(data_type: int) -> int | None:
    """Bytes per element of an ONNX dtype, or None for strings / unknown types.

    Sub-byte types (int4, float4) report 1; callers divide by ``elements_per_byte``.
    """
    if data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(data_type)
    except (KeyError, ValueError, TypeError):
        return None
    return int(np.dtype(np_dtype).itemsize)


def packed_nbytes(data_type: int, elements: int) -> int | None:
    """Storage bytes for ``elements`` of ``data_type`` in raw_data (sub-byte types packed)."""
    size = itemsize_of(data_type)
    if size is None:
        return None
    sub_byte = {getattr(TensorProto, n) for n in ("INT4", "UINT4", "FLOAT4E2M1", "INT2", "UINT2")
                if hasattr(TensorProto, n)}
    if data_type in sub_byte:
        per_byte = 4 if data_type in {getattr(TensorProto, n, -1) for n in ("INT2", "UINT2")} else 2
        return (elements + per_byte - 1) // per_byte
    return elements * size


def _typed_entries(data_type: int, elements: int) -> int:
    """How many entries the typed *_data fields must hold for ``elements`` values."""
    if data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return 2 * elements
    names = {TensorProto.DataType.Name(data_type)} if data_type in TensorProto.DataType.values() else set()
    if names & {"INT4", "UINT4", "FLOAT4E2M1"}:
        return (elements + 1) // 2
    if names & {"INT2", "UINT2"}:
        return (elements + 3) // 4
    return elements


def declared_elements(t: TensorProto, where: str) -> int:
    """Element count from dims, refusing negative dims and absurd sizes (no overflow in Python)."""
    n = 1
    for d in t.dims:
        if d < 0:
            raise UnsafeModelError(f"declared tensor size invalid: {where} has a negative dim ({d})")
        n *= d
    if n > MAX_DECLARED_ELEMENTS:
        raise UnsafeModelError(f"declared tensor size too large: {where} declares {n:.3g} elements")
    return n


def _inside(child: Path, root: Path) -> bool:
    try:
        child.relative_to(root)
        return True
    except ValueError:
        return False


def check_location(location: str, model_dir: Path, where: str, *, hard_link_ok: bool = False) -> Path:
    """The resolved file an external-data ``location`` names: a plain relative path to a regular file
    inside ``model_dir`` reached through no symbolic link, else UnsafeModelError. ``hard_link_ok``: for a
    size count that reads nothing (the pipeline's own checkpoints hard-link their private weight copies)."""
    bad = (not location or "\x00" in location or location.startswith(("/", "\\", "~"))
           or PureWindowsPath(location).drive or PureWindowsPath(location).is_absolute()
           or any(part == ".." for part in PurePosixPath(location.replace("\\", "/")).parts))
    if bad:
        raise UnsafeModelError(f"external data location of {where} is not a plain relative path "
                               "inside the model folder; refusing to read it")
    root = model_dir.resolve()
    # Walk component by component with lstat: no symlink may appear on the way,
    # so a link cannot point the read anywhere else.
    current = root
    for part in PurePosixPath(location.replace("\\", "/")).parts:
        if part in ("", "."):
            continue
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            raise UnsafeModelError(f"external data file for {where} is missing "
                                   f"('{PurePosixPath(location).name}' next to the model); upload it "
                                   "together with the model") from None
        except OSError as exc:
            raise UnsafeModelError(f"external data file for {where} cannot be read ({exc.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeModelError(f"external data location of {where} goes through a symbolic link; "
                                   "refusing to follow it")
    st = os.stat(current)
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeModelError(f"external data location of {where} is not a regular file")
    if st.st_nlink > 1 and not hard_link_ok:
        raise UnsafeModelError(f"external data file of {where} is a hard link; copy the file instead")
    resolved = current.resolve()
    if not _inside(resolved, root):
        raise UnsafeModelError(f"external data location of {where} resolves outside the model folder")
    return resolved


def _parse_external(t: TensorProto, where: str) -> dict[str, str]:
    entries: dict[str, str] = {}
    for kv in t.external_data:
        if kv.key not in ALLOWED_EXTERNAL_KEYS:
            raise UnsafeModelError(f"external data of {where} has an invalid key "
                                   f"'{kv.key[:40]}' (allowed: location, offset, length, checksum)")
        entries[kv.key] = kv.value
    return entries


def _int_field(entries: dict[str, str], key: str, where: str) -> int | None:
    if key not in entries:
        return None
    try:
        value = int(entries[key])
    except ValueError:
        raise UnsafeModelError(f"external data {key} of {where} is not an integer") from None
    if value < 0:
        raise UnsafeModelError(f"external data {key} of {where} is negative")
    return value


def validate_tensors(model: ModelProto, model_dir: Path | None) -> TensorScan:
    """Check every tensor of ``model``; raise UnsafeModelError on the first bad one.

    ``model_dir`` is the folder of the model file; None means the model came
    without a folder (bytes), in which case any external reference is refused.
    """
    refs: list[ExternalRef] = []
    inline = external = count = 0
    file_sizes: dict[Path, int] = {}
    for t, where in iter_tensors(model):
        count += 1
        n = declared_elements(t, where)
        nbytes = packed_nbytes(t.data_type, n)
        if t.data_location == TensorProto.EXTERNAL or len(t.external_data):
            if model_dir is None:
                raise UnsafeModelError(f"{where} uses external data but the model was given without its "
                                       "folder; upload the model together with its data files (or a zip)")
            entries = _parse_external(t, where)
            target = check_location(entries.get("location", ""), model_dir, where)
            size = file_sizes.setdefault(target, target.stat().st_size)
            offset = _int_field(entries, "offset", where) or 0
            length = _int_field(entries, "length", where)
            if length is None:
                length = size - offset
            if offset > size or offset + length > size:
                raise UnsafeModelError(f"external data out of range: {where} reads bytes "
                                       f"[{offset}, {offset + length}) of a {size}-byte file")
            if nbytes is not None and length < nbytes:
                raise UnsafeModelError(f"declared tensor size invalid: {where} declares {nbytes} bytes "
                                       f"but its external data holds {length}")
            refs.append(ExternalRef(t.name, target, offset, length))
            external += length
            continue
        if t.HasField("raw_data") or t.raw_data:
            if nbytes is not None and len(t.raw_data) != nbytes:
                raise UnsafeModelError(f"declared tensor size invalid: {where} declares {nbytes} bytes "
                                       f"but holds {len(t.raw_data)}")
            inline += len(t.raw_data)
            continue
        held = sum(len(getattr(t, f)) for f in _TYPED_FIELDS)
        expected = _typed_entries(t.data_type, n)
        if held < expected:
            kind = "strings" if t.data_type == TensorProto.STRING else "elements"
            raise UnsafeModelError(f"declared tensor size invalid: {where} declares {n} {kind} "
                                   f"but holds {held} values")
        inline += (nbytes or 0)
    return TensorScan(tuple(refs), external, inline, count)


# ---------------------------------------------------------------------------- .npy / .npz files from users
#
# A user's array file is read header first: its dtype must be numbers (an object array is a
# pickle, never loaded; strings and records are refused), and shape x itemsize must fit both a
# memory limit and the bytes the file really holds, all before anything is allocated. A caller's
# ``check`` sees (name, header) in between, to hold the shape against the model's input.

MAX_ARRAY_BYTES = 2 * 2**30
_MAX_NPY_HEADER = 10_000


@dataclass(frozen=True)
class ArrayHeader:
    """What an .npy header declares."""

    shape: tuple[int, ...]
    dtype: np.dtype
    fortran: bool
    nbytes: int


def _size_text(n: int) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def read_npy_header(fh, available: int, *, label: str, max_bytes: int = MAX_ARRAY_BYTES) -> ArrayHeader:
    """The header of the .npy stream ``fh`` (``available`` bytes long), checked: numeric dtype, shape x
    itemsize within ``max_bytes`` and within the data the stream holds. Leaves ``fh`` at the data."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh, max_header_size=_MAX_NPY_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(fh, max_header_size=_MAX_NPY_HEADER)
        else:
            raise StudioError(f"{label} uses .npy format version {version[0]}.{version[1]}; save it with numpy.save",
                              code=ErrorCode.BAD_INPUT)
    except StudioError:
        raise
    except (ValueError, TypeError, OSError, EOFError, SyntaxError, MemoryError, RecursionError,
            zipfile.BadZipFile, zlib.error):
        raise StudioError(f"{label} is not a readable .npy (its header is damaged); save it with numpy.save",
                          code=ErrorCode.BAD_INPUT) from None
    dtype = np.dtype(dtype)
    if dtype.hasobject:
        raise StudioError(f"{label} holds Python objects (a pickle); only numeric arrays are read and pickles are "
                          "never loaded", code=ErrorCode.BAD_INPUT)
    if dtype.kind in "SU":
        raise StudioError(f"{label} holds strings ({dtype.str}); only numeric arrays are read",
                          code=ErrorCode.BAD_INPUT)
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise StudioError(f"{label} holds {dtype.str} records; only plain numeric arrays are read",
                          code=ErrorCode.BAD_INPUT)
    elements = 1
    for d in shape:
        elements *= int(d)
    nbytes = elements * dtype.itemsize
    if nbytes > max_bytes:
        raise StudioError(f"{label} declares shape {list(shape)} {dtype.name} = {_size_text(nbytes)}, over the "
                          f"{_size_text(max_bytes)} memory limit for one array; nothing was allocated",
                          code=ErrorCode.TOO_LARGE)
    try:
        held = available - fh.tell()
    except (OSError, AttributeError):
        held = available
    if held < nbytes:
        raise StudioError(f"{label} is truncated: its header declares {_size_text(nbytes)} of data "
                          f"({list(shape)} {dtype.name}), the file holds {_size_text(max(held, 0))}",
                          code=ErrorCode.BAD_INPUT)
    return ArrayHeader(tuple(int(d) for d in shape), dtype, bool(fortran), nbytes)


def read_npy_data(fh, header: ArrayHeader, *, label: str) -> np.ndarray:
    """The array whose checked ``header`` was just read from ``fh``: exactly ``nbytes`` read into one
    buffer (a short read is 'truncated'), in native byte order."""
    buf = bytearray(header.nbytes)
    view, got = memoryview(buf), 0
    while got < header.nbytes:
        n = fh.readinto(view[got:])
        if not n:
            raise StudioError(f"{label} is truncated: {_size_text(got)} of {_size_text(header.nbytes)} of data",
                              code=ErrorCode.BAD_INPUT)
        got += n
    arr = np.frombuffer(buf, header.dtype).reshape(header.shape, order="F" if header.fortran else "C")
    return arr if header.dtype.isnative else arr.astype(header.dtype.newbyteorder("="))


def load_npy(path: Path, *, label: str, max_bytes: int = MAX_ARRAY_BYTES, check=None) -> np.ndarray:
    """A user's .npy, header first (:func:`read_npy_header`); ``check(header)`` may refuse it before
    anything is allocated (the model's input shape). Never unpickles."""
    st = check_regular_file(Path(path), max_bytes=None, label=label)
    try:
        with open(path, "rb") as fh:
            header = read_npy_header(fh, st.st_size, label=label, max_bytes=max_bytes)
            if check is not None:
                check(header)
            return read_npy_data(fh, header, label=label)
    except OSError as exc:
        raise StudioError(f"{label} cannot be read ({exc.strerror or type(exc).__name__})",
                          code=ErrorCode.BAD_INPUT) from None


def load_npz(path: Path, *, label: str, max_bytes: int = MAX_ARRAY_BYTES, check=None) -> dict[str, np.ndarray]:
    """A user's .npz, every member header first: each array and all of them together within
    ``max_bytes``; ``check(key, header)`` may refuse one before it is allocated. A lying or
    corrupt archive (CRC error) is one line. Never unpickles."""
    out: dict[str, np.ndarray] = {}

    def visit(key: str, header: ArrayHeader, fh, item: str) -> None:  # noqa: ANN001 - a zip member stream
        if check is not None:
            check(key, header)
        out[key] = read_npy_data(fh, header, label=item)

    _walk_npz(Path(path), label, max_bytes, visit)
    return out


def npz_headers(path: Path, *, label: str, max_bytes: int = MAX_ARRAY_BYTES) -> dict[str, ArrayHeader]:
    """Every member header of an .npz, checked as :func:`load_npz` does, without reading the data."""
    out: dict[str, ArrayHeader] = {}
    _walk_npz(Path(path), label, max_bytes, lambda key, header, fh, item: out.__setitem__(key, header))
    return out


def _walk_npz(path: Path, label: str, max_bytes: int, visit) -> None:  # noqa: ANN001 - visit(key, header, fh, item)

    check_regular_file(path, max_bytes=None, label=label)
    total = 0
    key = ""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir()]
            if len(infos) > 10_000:
                raise StudioError(f"{label} holds {len(infos)} arrays, over the limit of 10000",
                                  code=ErrorCode.TOO_LARGE)
            if not infos:
                raise StudioError(f"{label} holds no arrays", code=ErrorCode.BAD_INPUT)
            for info in infos:
                key = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                item = f"{label}, array '{key[:60]}'"
                with zf.open(info) as fh:
                    header = read_npy_header(fh, info.file_size, label=item, max_bytes=max_bytes - total)
                    total += header.nbytes
                    visit(key, header, fh, item)
    except StudioError as exc:
        if exc.code == ErrorCode.TOO_LARGE and total > 0 and "memory limit" in str(exc):
            raise StudioError(f"{exc} (all arrays of the file together: {_size_text(max_bytes)})",
                              code=ErrorCode.TOO_LARGE) from None
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        why = "a CRC error" if "CRC" in str(exc) else "corrupt data"
        where = f" in array '{key[:60]}'" if key else ""
        raise StudioError(f"{label} is not a readable .npz ({why}{where}); save it with numpy.savez",
                          code=ErrorCode.BAD_INPUT) from None
    except (NotImplementedError, RuntimeError, ValueError):
        raise StudioError(f"{label} is not a readable .npz (encrypted or an unsupported compression)",
                          code=ErrorCode.BAD_INPUT) from None
    except OSError as exc:
        raise StudioError(f"{label} cannot be read ({exc.strerror or type(exc).__name__})",
                          code=ErrorCode.BAD_INPUT) from None
