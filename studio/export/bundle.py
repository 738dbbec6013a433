"""The bundle on disk: ``<out>/<model>-<sha8>/`` and ``<out>/<model>-<sha8>.zip``.

The folder is written under a temporary name in the output folder and renamed
into place when complete (``studio.core.outputs.publish_folder``), so a half-written
bundle is never mistaken for a finished one. What sat at the final name before is
replaced only when it is an earlier bundle (its manifest says so) holding no input of
the run; a link, a file or a folder the studio did not write is refused. The zip is
written beside the folder the same way (temp file, rename).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from studio.core import outputs
from studio.core.model import sha256_file
from studio.core.paths import distinct_name

STORE_ABOVE = 16 * 2**20        # weights barely compress: store big files, deflate the rest


def bundle_name(model_name: str, sha256: str) -> str:
    return f"{distinct_name(model_name, default='model', max_len=60)}-{sha256[:8]}"


def prepare_output(out_dir: Path) -> Path:
    """The chosen output folder, created if missing; refuses a file, a FIFO or a device there."""
    return outputs.check_folder(out_dir)


def staging_dir(out_dir: Path, name: str, kind: str) -> Path:
    """A fresh private folder in the output folder (``.<name>.<kind>-<random>``)."""
    return outputs.scratch_dir(out_dir, f".{name[:60]}.{kind}-")


def is_bundle(folder: Path) -> bool:
    """True for a folder an export wrote: its manifest.json says ``format: onnx-studio-export/...``."""
    manifest = folder / "manifest.json"
    try:
        if manifest.is_symlink() or not manifest.is_file() or manifest.stat().st_size > 256 * 2**20:
            return False
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and str(doc.get("format", "")).startswith("onnx-studio-export/")


def check_final(final: Path) -> None:
    """Before the export starts: the bundle's folder may be replaced (absent, or a studio bundle
    that holds no input); a link, a file or a foreign folder there is refused."""
    outputs.check_publish(final, owned=is_bundle)


def publish_modes(path: Path) -> None:
    """Temp files are private (0600) while written; a finished bundle is readable like any
    other file the user writes (umask applied), scripts stay executable."""
    mask = outputs.current_umask()
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
    """Move the finished bundle to its final name (``studio.core.outputs.publish_folder``): an old
    bundle there is replaced, anything else is refused; concurrent exports follow one another."""
    publish_modes(staging)
    return outputs.publish_folder(staging, final, owned=is_bundle)


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
    with outputs.open_output(target, "wb") as fh, zipfile.ZipFile(fh, "w", allowZip64=True) as z:
        for root, dirs, files in os.walk(bundle):
            dirs.sort()
            for f in sorted(files):
                p = Path(root) / f
                if p.is_symlink() or not p.is_file():
                    continue
                arc = f"{bundle.name}/{p.relative_to(bundle).as_posix()}"
                method = zipfile.ZIP_STORED if p.stat().st_size > STORE_ABOVE else zipfile.ZIP_DEFLATED
                z.write(p, arc, compress_type=method)
    return target
