"""Crops of photos at many aspect ratios: a small real classification folder for NaFlex training.

    vitzoo.data.photo_crops.build_photo_crops("crops/", train=40, val=12, seed=0)
    vitzoo finetune vit_ti16 --data folder crops/ --naflex --max-patches 64

One class per photo of scikit-image (`skimage.data`, a dev and test dependency), each sample a
random crop of it: area 10-60% of the photo, aspect ratio (width / height) log-uniform in
`aspect`, scaled so that its longer side is drawn from `sides` pixels. Training and validation
crops come from the same photos (the task: which photo a crop was cut from) but are drawn
independently. Written as an ImageFolder tree (train/<class>/*.png and val/<class>/*.png),
deterministic from the seed, built beside `out` and renamed into place (a stopped build leaves
nothing half-written under that name).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .synthetic_seg import SceneBuildError, building_folder, load_photos

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")


def _crop(
    rng: np.random.Generator, photo: np.ndarray, aspect: tuple[float, float], sides: tuple[int, int]
) -> np.ndarray:
    """One random crop of `photo` (see the module docstring) as uint8 RGB (h, w, 3)."""
    from PIL import Image

    height, width = photo.shape[:2]
    ratio = math.exp(rng.uniform(math.log(aspect[0]), math.log(aspect[1])))
    area = rng.uniform(0.1, 0.6) * height * width
    crop_h = max(1, min(height, round(math.sqrt(area / ratio))))
    crop_w = max(1, min(width, round(crop_h * ratio)))
    top, left = int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1))
    longer = int(rng.integers(sides[0], sides[1] + 1))
    scale = longer / max(crop_h, crop_w)
    size = (max(1, round(crop_w * scale)), max(1, round(crop_h * scale)))
    crop = Image.fromarray(photo[top : top + crop_h, left : left + crop_w])
    return np.asarray(crop.resize(size, Image.Resampling.BICUBIC, reducing_gap=None))


def build_photo_crops(
    out: str | os.PathLike[str],
    *,
    train: int = 40,
    val: int = 12,
    photos: tuple[str, ...] = PHOTOS,
    aspect: tuple[float, float] = (1 / 3, 3.0),
    sides: tuple[int, int] = (48, 128),
    seed: int = 0,
) -> Path:
    """Write `train` and `val` crops per photo of `photos` into the new folder `out` (see the
    module docstring). Returns `out`."""
    from PIL import Image

    for name, value in (("train", train), ("val", val)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SceneBuildError(f"{name}={value!r} is invalid; expected an int >= 1")
    if len(photos) < 2:
        raise SceneBuildError(f"photos={photos!r}: expected at least two photos (one class each)")
    if not (0 < aspect[0] <= aspect[1] and 1 <= sides[0] <= sides[1]):
        raise SceneBuildError(f"aspect={aspect!r}, sides={sides!r}: expected 0 < low <= high for each")
    images = load_photos(photos)
    rng = np.random.default_rng(seed)
    with building_folder(out) as building:
        for split, count in (("train", train), ("val", val)):
            for name, photo in zip(photos, images):
                (building / split / name).mkdir(parents=True)
                for i in range(count):
                    Image.fromarray(_crop(rng, photo, aspect, sides)).save(building / split / name / f"{i:04d}.png")
    return Path(out).expanduser()
