"""Labelled photos for dataset tests: real photos from scikit-image (a cat, coffee, a rocket), with crops
and flips for variety, one class folder each (the sample photos in sample_models/ are another set)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from tests.requirements import require_module

skimage_data = require_module("skimage.data")


def photo_folder(root: Path, n_per_class: int = 3) -> Path:
    """Real photos from scikit-image, with crops and flips for variety, in class folders."""
    photos = {"cat": skimage_data.chelsea(), "coffee": skimage_data.coffee(), "rocket": skimage_data.rocket()}
    for cls, img in photos.items():
        (root / cls).mkdir(parents=True)
        for i in range(n_per_class):
            h, w = img.shape[:2]
            crop = img[i * h // 10: h - i * h // 12, i * w // 9: w - i * w // 11]
            if i % 2:
                crop = crop[:, ::-1]
            Image.fromarray(np.ascontiguousarray(crop)).save(root / cls / f"{i}.{'png' if i % 2 else 'jpg'}")
    return root
