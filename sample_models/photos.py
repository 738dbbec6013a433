"""Real photos for datasets: 4 subjects x 3 views (crops and flips), 96x96 PNG.

Built from scikit-image's bundled sample images, which are free to use: ``chelsea``
(CC0, Stefan van der Walt), ``coffee`` (CC0, Rachel Michetti), ``rocket`` (SpaceX,
public domain) and ``astronaut`` (NASA, public domain). The PNGs are committed in
``sample_models/photos/<subject>/`` (folder name = label, the ImageFolder convention);
``python -m sample_models.photos`` rebuilds them where scikit-image is installed.
"""

from __future__ import annotations

import pathlib
import sys

import numpy as np

SUBJECTS = ("chelsea", "coffee", "rocket", "astronaut")
SIDE = 96
PHOTO_DIR = pathlib.Path(__file__).resolve().parent / "photos"


def _views(img: np.ndarray) -> list[np.ndarray]:
    h, w = img.shape[:2]
    s = min(h, w)
    centre = img[(h - s) // 2:(h + s) // 2, (w - s) // 2:(w + s) // 2]
    tight = img[h // 8: h - h // 8, w // 8: w - w // 8]
    return [centre, tight[:, ::-1], img]


def build_photos(out: pathlib.Path = PHOTO_DIR) -> list[pathlib.Path]:
    import skimage.data
    from PIL import Image

    written = []
    for name in SUBJECTS:
        img = getattr(skimage.data, name)()
        (out / name).mkdir(parents=True, exist_ok=True)
        for i, view in enumerate(_views(img)):
            path = out / name / f"{i}.png"
            Image.fromarray(np.ascontiguousarray(view)).convert("RGB").resize((SIDE, SIDE), Image.BILINEAR).save(
                path, optimize=True)
            written.append(path)
    return written


if __name__ == "__main__":
    for p in build_photos():
        print(f"wrote {p} ({p.stat().st_size} bytes)")
    sys.exit(0)
