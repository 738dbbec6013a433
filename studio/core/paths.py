"""Path hygiene: what the studio reads must be a regular file, what it writes
stays inside the chosen output folder, and user-chosen names become safe names.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

from studio.core.errors import PathError
from studio.core.outputs import open_output, register_input, write_bytes, write_text

# Default cap for files the studio reads whole (a single-file ONNX is < 2 GiB).
DEFAULT_MAX_READ_BYTES = 2**31

_SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, *, default: str = "model", max_len: int = 80) -> str:
    """Turn any user- or model-supplied string into a file-name component.

    Never returns '', '.', '..', a hidden name or anything with a separator.
    """
    cleaned = _SAFE_NAME.sub("_", name.replace("\x00", "")).strip("._-")
    cleaned = cleaned[:max_len].strip("._-")
    return cleaned or default


def distinct_name(name: str, *, default: str = "model", max_len: int = 80) -> str:
    """``safe_name`` for folder and file names derived from model, tensor or op names: when
    sanitizing changed the name, a short hash of the original is appended, so names that collide
    after sanitizing (``a/b``, ``a_b``, ``a:b``, ``.``) still get distinct folders (R38)."""
    cleaned = safe_name(name, default=default, max_len=max_len)
    if cleaned == name:
        return cleaned
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned[:max(1, max_len - 9)]}-{digest}"


def check_regular_file(path: Path, *, max_bytes: int | None = DEFAULT_MAX_READ_BYTES,
                       label: str = "file") -> os.stat_result:
    """Refuse devices, FIFOs, sockets, directories, missing files and oversize files.

    Uses ``stat`` (following links) after ``lstat`` so a link to a device is caught
    too. Returns the stat of the target.
    """
    name = path.name or str(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise PathError(f"{label} '{name}' does not exist") from None
    except PermissionError:
        raise PathError(f"{label} '{name}' is not readable (permission denied)") from None
    except OSError as exc:
        raise PathError(f"{label} '{name}' cannot be read ({exc.strerror or exc})") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise PathError(f"{label} '{name}' is a directory; give the path of a .onnx file")
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise PathError(f"{label} '{name}' is {kind}; only regular files can be opened")
    if max_bytes is not None and st.st_size > max_bytes:
        raise PathError(f"{label} '{name}' is {st.st_size / 2**30:.1f} GiB, over the "
                        f"{max_bytes / 2**30:.1f} GiB limit")
    return st


def user_data_path(value: str | Path, *, label: str = "input data") -> Path:
    """A data path the user typed (calibration images, an .npz), made absolute against the
    current folder *here*: workers run in their own scratch folder, where a relative path
    means nothing. A path that does not exist is refused up front, naming it."""
    text = str(value).strip()
    if not text:
        raise PathError(f"{label}: the path is empty")
    path = Path(text).expanduser()
    resolved = path if path.is_absolute() else Path.cwd() / path
    resolved = Path(os.path.normpath(resolved))
    if not resolved.exists():
        raise PathError(f"{label} '{text[:200]}' does not exist")
    register_input(resolved, *(islice(resolved.rglob("*"), 2000) if resolved.is_dir() else ()))   # never an output
    return resolved


def is_within(path: Path, root: Path) -> bool:
    """True when ``path`` resolves (through every link) to somewhere inside ``root``."""
    try:
        path.resolve(strict=False).relative_to(root.resolve(strict=False))
    except (ValueError, OSError):
        return False
    return True


def confine(user_path: str | Path, root: Path, *, label: str = "path") -> Path:
    """Resolve a user-typed path against ``root`` and refuse anything that leaves it.

    ``~`` is not expanded, absolute paths must already lie inside ``root``, and a
    symlink whose target is outside ``root`` is refused.
    """
    raw = str(user_path)
    if not raw or "\x00" in raw:
        raise PathError(f"{label} is empty or contains a NUL byte")
    candidate = Path(raw)
    if not candidate.is_absolute():
        candidate = root / candidate
    if not is_within(candidate, root):
        raise PathError(f"{label} '{Path(raw).name or raw}' is outside the workspace root; "
                        "pick a file inside it or upload the file")
    return candidate.resolve()


def safe_child(out_dir: Path, relative: str | Path) -> Path:
    """Join ``relative`` under ``out_dir``, refusing absolute parts, '..' and NUL."""
    rel = Path(relative)
    if rel.is_absolute() or any(part in ("..", "") for part in rel.parts) or "\x00" in str(rel):
        raise PathError(f"output name '{safe_name(str(relative))}' is not a plain relative name")
    target = out_dir / rel
    if not is_within(target, out_dir):
        raise PathError(f"output name '{safe_name(str(relative))}' would leave the output folder")
    return target


@contextmanager
def atomic_writer(target: Path, mode: str = "wb") -> Iterator:
    """Kept for existing callers: ``studio.core.outputs.open_output`` (the one write path)."""
    with open_output(target, mode) as fh:
        yield fh


def atomic_write_bytes(target: Path, data: bytes) -> None:
    write_bytes(target, data)


def atomic_write_text(target: Path, text: str) -> None:
    write_text(target, text)
