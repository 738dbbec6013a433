"""Uploaded input data (an .npz of input values, or images for calibration) written
into a job folder under generated names: the uploaded file names are never used
as paths, and sizes and counts are bounded before anything is written."""

from __future__ import annotations

from pathlib import Path

from studio.core.errors import StudioError
from studio.core.feeds import IMAGE_SUFFIXES
from studio.core.paths import atomic_write_bytes

MAX_NPZ_BYTES = 2 * 2**30
MAX_IMAGES = 256
MAX_IMAGE_BYTES = 64 * 2**20


def save_npz_upload(data: bytes, folder: Path) -> Path:
    """An uploaded .npz, checked to be a zip (what numpy writes), saved as ``inputs.npz``."""
    if len(data) > MAX_NPZ_BYTES:
        raise StudioError(f"inputs file is {len(data) / 2**30:.1f} GiB, over the {MAX_NPZ_BYTES // 2**30} GiB limit")
    if not data.startswith(b"PK"):
        raise StudioError("inputs file is not an .npz (save it with numpy.savez)")
    target = Path(folder) / "inputs.npz"
    atomic_write_bytes(target, data)
    return target


def save_npy_upload(data: bytes, folder: Path, name: str = "weights.npy") -> Path:
    """An uploaded .npy (an edit's new initializer values), checked by its magic, saved in ``folder``."""
    if len(data) > MAX_NPZ_BYTES:
        raise StudioError(f".npy file is {len(data) / 2**30:.1f} GiB, over the {MAX_NPZ_BYTES // 2**30} GiB limit")
    if not data.startswith(b"\x93NUMPY"):
        raise StudioError("the file is not an .npy (save it with numpy.save)")
    target = Path(folder) / (Path(str(name)).stem[:60].replace("/", "_") + ".npy")
    atomic_write_bytes(target, data)
    return target


def save_image_uploads(files: list[tuple[str, bytes]], folder: Path) -> Path:
    """Uploaded images saved as ``images/img0000.png``...; returns the folder."""
    if not files:
        raise StudioError("no images uploaded")
    if len(files) > MAX_IMAGES:
        raise StudioError(f"{len(files)} images uploaded; at most {MAX_IMAGES} are used for calibration")
    out = Path(folder) / "images"
    out.mkdir(parents=True, exist_ok=True)
    for i, (name, data) in enumerate(files):
        suffix = Path(str(name)).suffix.lower()
        if suffix not in IMAGE_SUFFIXES:
            raise StudioError(f"'{Path(str(name)).name[:60]}' is not an image (.png/.jpg/.bmp/.ppm)")
        if len(data) > MAX_IMAGE_BYTES:
            raise StudioError(f"image {i + 1} is larger than {MAX_IMAGE_BYTES // 2**20} MiB")
        atomic_write_bytes(out / f"img{i:04d}{suffix}", data)
    return out
