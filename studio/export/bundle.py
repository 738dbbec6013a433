"""The bundle on disk: ``<out>/<model>-<sha8>/`` and ``<out>/<model>-<sha8>.zip``.

The folder is written under a temporary name in the output folder and renamed
into place when complete, so a half-written bundle is never mistaken for a
finished one, and whatever sat at the final name before (an old bundle, a
planted symlink) is removed without following a single link. The zip is
written beside the folder the same way (temp file, rename).
"""

from __future__ import annotations

import os
import shutil
import uuid
import zipfile
from pathlib import Path

from studio.core.errors import PathError
from studio.core.paths import atomic_writer, safe_name
from studio.export.files import sha256_file

STORE_ABOVE = 16 * 2**20        # weights barely compress: store big files, deflate the rest


def bundle_name(model_name: str, sha256: str) -> str:
    return f"{safe_name(model_name, default='model', max_len=60)}-{sha256[:8]}"


def prepare_output(out_dir: Path) -> Path:
    """The chosen output folder, created if missing; refuses a file or a link to elsewhere's file."""
    out = Path(out_dir)
    if "\x00" in str(out):
        raise PathError("output folder name contains a NUL byte")
    if out.exists() and not out.is_dir():
        raise PathError(f"output '{out.name}' exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out.resolve()


def staging_dir(out_dir: Path, name: str, kind: str) -> Path:
    """A fresh private folder in the output folder (``.<name>.<kind>-<random>``)."""
    d = out_dir / f".{name}.{kind}-{uuid.uuid4().hex[:10]}"
    d.mkdir(mode=0o700)
    return d


def _remove_path(path: Path) -> None:
    """Remove a file, a link (not its target) or a folder tree (links inside are removed, not followed)."""
    if path.is_symlink() or path.is_file():
        os.unlink(path)
    elif path.is_dir():
        aside = path.with_name(f".{path.name}.old-{uuid.uuid4().hex[:10]}")
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def publish_modes(path: Path) -> None:
    """Temp files are private (0600) while written; a finished bundle is readable like any
    other file the user writes (umask applied), scripts stay executable."""
    mask = _umask()
    if path.is_file():
        os.chmod(path, (0o777 if os.access(path, os.X_OK) else 0o666) & ~mask)
        return
    for root, dirs, files in os.walk(path):
        os.chmod(root, 0o777 & ~mask)
        for f in files:
            p = Path(root) / f
            if not p.is_symlink():
                os.chmod(p, (0o777 if p.suffix in (".py", ".sh") else 0o666) & ~mask)


def finalize(staging: Path, final: Path) -> Path:
    """Move the finished bundle to its final name, replacing what was there."""
    publish_modes(staging)
    if final.exists() or final.is_symlink():
        _remove_path(final)
    os.replace(staging, final)
    return final


def inventory(bundle: Path, skip: tuple[str, ...] = ("manifest.json",)) -> list[dict]:
    """Every regular file in the bundle: relative path, bytes, sha256 (links are not followed)."""
    rows = []
    for root, dirs, files in os.walk(bundle):
        dirs.sort()
        for f in sorted(files):
            p = Path(root) / f
            rel = p.relative_to(bundle).as_posix()
            if rel in skip or p.is_symlink() or not p.is_file():
                continue
            rows.append({"path": rel, "bytes": p.stat().st_size, "sha256": sha256_file(p)})
    return rows


def write_zip(bundle: Path, target: Path) -> Path:
    """Zip the bundle folder (its name as the top folder) atomically to ``target``."""
    with atomic_writer(target, "wb") as fh, zipfile.ZipFile(fh, "w", allowZip64=True) as z:
        for root, dirs, files in os.walk(bundle):
            dirs.sort()
            for f in sorted(files):
                p = Path(root) / f
                if p.is_symlink() or not p.is_file():
                    continue
                arc = f"{bundle.name}/{p.relative_to(bundle).as_posix()}"
                method = zipfile.ZIP_STORED if p.stat().st_size > STORE_ABOVE else zipfile.ZIP_DEFLATED
                z.write(p, arc, compress_type=method)
    publish_modes(target)
    return target
