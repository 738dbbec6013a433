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
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath

from studio.core.errors import ModelLoadError
from studio.core.paths import atomic_write_bytes, safe_child, safe_name

MAX_ZIP_MEMBERS = 1000
MAX_UNPACKED_BYTES = 8 * 2**30
MAX_RATIO = 200           # refuse members compressed more than 200:1 (zip bombs)


@dataclass(frozen=True)
class UploadedFile:
    name: str
    data: bytes


def _safe_member_path(name: str) -> PurePosixPath:
    p = PurePosixPath(name.replace("\\", "/"))
    if (not name or name.startswith("/") or "\x00" in name or any(part == ".." for part in p.parts)
            or (len(name) > 1 and name[1] == ":")):
        raise ModelLoadError(f"archive member '{safe_name(name)}' has an unsafe path (absolute or '..'); "
                             "refusing the archive")
    parts = [safe_name(part, default="_") for part in p.parts if part not in ("", ".")]
    if not parts:
        raise ModelLoadError("archive member with an empty name; refusing the archive")
    return PurePosixPath(*parts)


def _zip_members(data: bytes) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    try:
        zf = zipfile.ZipFile(BytesIO(data))
    except zipfile.BadZipFile:
        raise ModelLoadError("corrupt zip archive") from None
    infos = zf.infolist()
    if len(infos) > MAX_ZIP_MEMBERS:
        raise ModelLoadError(f"archive has {len(infos)} members, over the limit of {MAX_ZIP_MEMBERS}")
    total = 0
    out = []
    for info in infos:
        kind = stat.S_IFMT((info.external_attr >> 16) & 0xFFFF)
        if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
            raise ModelLoadError(f"archive member '{safe_name(info.filename)}' is a link or special file; "
                                 "refusing the archive")
        if info.is_dir():
            continue
        total += info.file_size
        if total > MAX_UNPACKED_BYTES:
            raise ModelLoadError("archive unpacks to more than 8 GiB; refusing it (zip bomb?)")
        if info.compress_size and info.file_size / info.compress_size > MAX_RATIO and info.file_size > 2**20:
            raise ModelLoadError(f"archive member '{safe_name(info.filename)}' is compressed "
                                 f"{info.file_size // info.compress_size}:1; refusing it (zip bomb?)")
        out.append((info, _safe_member_path(info.filename)))
    return out


def zip_members(data: bytes) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """The members of a zip with safe relative paths; refuses links, '..', absolute paths and bombs."""
    return _zip_members(data)


def unpack_zip(data: bytes, dest: Path) -> list[Path]:
    """Unpack a zip archive's regular files into ``dest``, validating every member first
    (no absolute or '..' paths, links, bombs or lying sizes). Returns the files written."""
    members = _zip_members(data)
    written: list[Path] = []
    with zipfile.ZipFile(BytesIO(data)) as zf:
        for info, rel in members:
            with zf.open(info) as src:
                # Read at most the declared size + 1 so a lying header cannot inflate more.
                blob = src.read(info.file_size + 1)
            if len(blob) > info.file_size:
                raise ModelLoadError("archive member larger than declared; refusing the archive")
            target = safe_child(dest, rel)
            atomic_write_bytes(target, blob)
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
