"""Turn uploaded bytes (one .onnx, several files, or a zip bundle) into a folder
of files on disk, refusing anything that could write outside it.

Uploads land in a fresh folder under the workspace; names are reduced to safe
base names (zip members may keep safe sub-folders, since external-data
locations can point into them). Zip bombs, links and path tricks are refused
before anything is extracted.
"""

from __future__ import annotations

import stat
import zipfile
import zlib
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath

from studio.core.errors import ModelLoadError
from studio.core.paths import atomic_write_bytes, atomic_writer, safe_child, safe_name

MAX_ZIP_MEMBERS = 1000
MAX_UNPACKED_BYTES = 8 * 2**30
MAX_RATIO = 200           # refuse members compressed more than 200:1 (zip bombs)
#: Below this many unpacked bytes in all, the whole-archive ratio is not judged (small text compresses well).
TOTAL_RATIO_FLOOR = 16 * 2**20
_CHUNK = 1 << 20


@dataclass(frozen=True)
class UploadedFile:
    name: str
    data: bytes


@dataclass(frozen=True)
class ZipLimits:
    """What an archive may unpack to: members, bytes per member and in all, and the compression
    ratio per member and over the whole archive (300 members of 1 MiB from a 0.36 MB zip pass a
    per-member check alone)."""

    max_members: int = MAX_ZIP_MEMBERS
    max_member_bytes: int = MAX_UNPACKED_BYTES
    max_total_bytes: int = MAX_UNPACKED_BYTES
    max_ratio: int = MAX_RATIO


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _safe_member_path(name: str) -> PurePosixPath:
    p = PurePosixPath(name.replace("\\", "/"))
    if (not name or name.startswith(("/", "\\")) or "\x00" in name or any(part == ".." for part in p.parts)
            or (len(name) > 1 and name[1] == ":")):
        raise ModelLoadError(f"archive member '{safe_name(name)}' has an unsafe path (absolute or '..'); "
                             "refusing the archive")
    parts = [safe_name(part, default="_") for part in p.parts if part not in ("", ".")]
    if not parts:
        raise ModelLoadError("archive member with an empty name; refusing the archive")
    return PurePosixPath(*parts)


def _open_zip(source: bytes | Path) -> tuple[zipfile.ZipFile, int]:
    """The archive opened from bytes or a file (never read whole into memory), and its size."""
    try:
        if isinstance(source, (bytes, bytearray)):
            return zipfile.ZipFile(BytesIO(source)), len(source)
        return zipfile.ZipFile(Path(source)), Path(source).stat().st_size
    except (zipfile.BadZipFile, zlib.error, EOFError, ValueError, NotImplementedError):
        raise ModelLoadError("corrupt zip archive (not a readable zip file)") from None
    except OSError as exc:
        raise ModelLoadError(f"the zip archive cannot be read ({exc.strerror or type(exc).__name__})") from None


def _check_members(zf: zipfile.ZipFile, archive_bytes: int,
                   limits: ZipLimits) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    infos = zf.infolist()
    if len(infos) > limits.max_members:
        raise ModelLoadError(f"archive has {len(infos)} members, over the limit of {limits.max_members}")
    total = 0
    out = []
    for info in infos:
        kind = stat.S_IFMT((info.external_attr >> 16) & 0xFFFF)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise ModelLoadError(f"archive member '{safe_name(info.filename)}' is a link or special file; "
                                 "refusing the archive")
        rel = _safe_member_path(info.filename)
        if info.is_dir():
            continue
        if info.file_size > limits.max_member_bytes:
            raise ModelLoadError(f"archive member '{safe_name(info.filename)}' unpacks to "
                                 f"{_gib(info.file_size)}, over the limit of {_gib(limits.max_member_bytes)} "
                                 "per member; refusing the archive")
        total += info.file_size
        if total > limits.max_total_bytes:
            raise ModelLoadError(f"archive unpacks to more than {_gib(limits.max_total_bytes)}; refusing it "
                                 "(zip bomb?)")
        if info.compress_size and info.file_size / info.compress_size > limits.max_ratio and info.file_size > 2**20:
            raise ModelLoadError(f"archive member '{safe_name(info.filename)}' is compressed "
                                 f"{info.file_size // info.compress_size}:1; refusing it (zip bomb?)")
        out.append((info, rel))
    if total > TOTAL_RATIO_FLOOR and total > limits.max_ratio * max(archive_bytes, 1):
        raise ModelLoadError(f"archive of {archive_bytes / 1e6:.2f} MB unpacks to {_gib(total)} "
                             f"({total // max(archive_bytes, 1)}:1 over the whole archive, limit "
                             f"{limits.max_ratio}:1); refusing it (zip bomb?)")
    return out


def zip_members(data: bytes | Path, limits: ZipLimits = ZipLimits()) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """The members of a zip with safe relative paths; refuses links, '..', absolute and backslash
    paths, and bombs (per member and over the whole archive)."""
    zf, size = _open_zip(data)
    with zf:
        return _check_members(zf, size, limits)


def unpack_zip(data: bytes | Path, dest: Path, limits: ZipLimits = ZipLimits()) -> list[Path]:
    """Unpack a zip archive's regular files into ``dest``, validating every member first
    (no absolute, '..' or backslash paths, links, bombs or lying sizes). Members are streamed
    (never held whole in memory); a CRC error or a corrupt member is one line. Returns the files."""
    zf, size = _open_zip(data)
    written: list[Path] = []
    with zf:
        for info, rel in _check_members(zf, size, limits):
            target = safe_child(dest, rel)
            name = safe_name(info.filename)
            try:
                with zf.open(info) as src, atomic_writer(target) as dst:
                    left = info.file_size
                    while True:
                        # Read at most the declared size + 1 so a lying header cannot inflate more.
                        chunk = src.read(min(_CHUNK, left + 1))
                        if not chunk:
                            break
                        left -= len(chunk)
                        if left < 0:
                            raise ModelLoadError(f"archive member '{name}' is larger than declared; "
                                                 "refusing the archive")
                        dst.write(chunk)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                why = "CRC error" if "CRC" in str(exc) else "corrupt data"
                raise ModelLoadError(f"archive member '{name}' is corrupt ({why}); refusing the archive") from None
            except (NotImplementedError, RuntimeError):     # an unknown compression method, a password
                raise ModelLoadError(f"archive member '{name}' is encrypted or uses an unsupported "
                                     "compression; refusing the archive") from None
            written.append(target)
    return written


def write_upload(files: list[UploadedFile], dest: Path) -> Path:
    """Write uploaded files into ``dest`` (an empty folder) and return the .onnx path.

    A single zip is unpacked (validated first); several files are written side
    by side under their base names. Exactly one .onnx file must result.
    """
    if not files:
        raise ModelLoadError("nothing was uploaded")
    dest.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for f in files:
        if f.data[:2] == b"PK" and f.name.lower().endswith(".zip"):
            written.extend(unpack_zip(f.data, dest))
        else:
            target = safe_child(dest, safe_name(PurePosixPath(f.name.replace("\\", "/")).name,
                                                default="model.onnx"))
            atomic_write_bytes(target, f.data)
            written.append(target)
    models = [p for p in written if p.suffix.lower() == ".onnx"]
    if len(models) == 1:
        return models[0]
    if not models:
        # A single file without the .onnx suffix: let the loader sniff it.
        if len(written) == 1:
            return written[0]
        raise ModelLoadError("no .onnx file among the uploaded files; include the model itself")
    raise ModelLoadError(f"{len(models)} .onnx files uploaded together; upload one model (plus its data files)")
