"""Digits on photos: a small real segmentation dataset, built on the spot from what packages ship.

    vitzoo.data.synthetic_seg.build_digit_scenes("scenes/", train=200, val=50, seed=0)
    vitzoo segment vit_mnist scenes/ --weights BACKBONE --size 192 --crop 56 --out runs/seg

The backgrounds are crops of the photos scikit-image ships in its wheel (`skimage.data`, a dev and
test dependency: `pip install scikit-image`), the training scenes' from other photos than the
validation scenes'. The objects are real MNIST digits of the sample embedded in vitzoo (training
scenes take its training digits, validation scenes its test digits), 1 to `max_digits` a scene,
scaled, given a colour that stands out from the background and blended in by their own
intensity; a digit's mask is its pixels of intensity >= 128 (after scaling): the pixels where the
digit's colour outweighs the photo's. Class 0 is the background, class 1 + d the digit d.

Written in the plain layout of vitzoo.data.masks (train/ and val/, each with images/ and masks/
PNGs of the same name, and classes.txt), deterministic from the seed. The folder is built beside
`out` and renamed into place, so a stopped build leaves nothing half-written under that name.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import VitzooError
from .masks import CLASSES_FILE
from .tensors import ImageTensors

TRAIN_PHOTOS = (
    "astronaut", "brick", "camera", "coffee", "coins", "grass", "gravel", "hubble_deep_field",
    "immunohistochemistry", "moon", "rocket",
)  # fmt: skip
VAL_PHOTOS = ("chelsea", "clock", "page", "retina")
CLASSES = ("background", *(str(d) for d in range(10)))
_LUMA = np.array([0.299, 0.587, 0.114])
_MIN_CONTRAST = 80  # grey levels between a digit's colour and its background, so a grey model sees it
_DIGIT = 28
_DIM = 0.6  # the photos' brightness, so that bright digits stand out on any of them


class SceneBuildError(VitzooError, ValueError):
    """The digits-on-photos dataset cannot be built as asked; the message says why."""


def load_photos(names: tuple[str, ...]) -> list[np.ndarray]:
    """scikit-image's photos as uint8 RGB (H, W, 3) (also the NaFlex crops of data/photo_crops.py)."""
    try:
        from skimage import data
    except ImportError as err:
        raise SceneBuildError(
            "building a dataset of scikit-image's photos (digits on photos, photo crops) needs scikit-image: "
            "pip install scikit-image"
        ) from err
    photos = []
    for name in names:
        img = np.asarray(getattr(data, name)())
        img = (img * 255).astype(np.uint8) if img.dtype == bool else img.astype(np.uint8)
        photos.append(np.repeat(img[..., None], 3, axis=2) if img.ndim == 2 else img[..., :3])
    return photos


def _background(rng: np.random.Generator, photo: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A random crop of `photo` with the aspect ratio of `size`, 40-100% of the largest, resized."""
    from PIL import Image

    height, width = size
    largest = min(photo.shape[0], photo.shape[1] * height / width)
    crop_h = max(1, int(largest * rng.uniform(0.4, 1.0)))
    crop_w = max(1, round(crop_h * width / height))
    top = int(rng.integers(0, photo.shape[0] - crop_h + 1))
    left = int(rng.integers(0, photo.shape[1] - crop_w + 1))
    crop = Image.fromarray(photo[top : top + crop_h, left : left + crop_w])
    return np.asarray(crop.resize((width, height), Image.Resampling.BILINEAR), dtype=np.float32) * _DIM


def _place(
    rng: np.random.Generator, side: int, size: tuple[int, int], boxes: list[tuple[int, int, int]]
) -> tuple[int, int]:
    """A top-left corner for a `side` square inside `size`, clear of the earlier digits' squares
    (y, x, side) when one of a few draws is."""
    for _ in range(20):
        y, x = int(rng.integers(0, size[0] - side + 1)), int(rng.integers(0, size[1] - side + 1))
        if all(y + side <= by or by + bs <= y or x + side <= bx or bx + bs <= x for by, bx, bs in boxes):
            break
    return y, x


def _colour(rng: np.random.Generator, region: np.ndarray) -> np.ndarray:
    """A random colour brighter than the region behind it by _MIN_CONTRAST grey levels (bright
    strokes on a darker ground, as in MNIST), else white."""
    behind = float(region.reshape(-1, 3).mean(axis=0) @ _LUMA)
    for _ in range(20):
        colour = rng.integers(0, 256, 3).astype(np.float32)
        if float(colour @ _LUMA) >= behind + _MIN_CONTRAST:
            return colour
    return np.full(3, 255.0, dtype=np.float32)


def _paste(
    rng: np.random.Generator,
    image: np.ndarray,
    mask: np.ndarray,
    digit: np.ndarray,
    label: int,
    at: tuple[int, int, int],
) -> None:
    """Blend the uint8 digit (28, 28), scaled to a `side` square, into `image` (float RGB) at (y, x)
    by its own intensity, in a colour that stands out, and label its pixels in `mask`."""
    from PIL import Image

    y, x, side = at
    pixels = Image.fromarray(digit).resize((side, side), Image.Resampling.BILINEAR)
    alpha = np.asarray(pixels, dtype=np.float32)[..., None] / 255
    region = image[y : y + side, x : x + side]
    image[y : y + side, x : x + side] = region * (1 - alpha) + _colour(rng, region) * alpha
    mask[y : y + side, x : x + side][alpha[..., 0] >= 0.5] = label


def _scene(
    rng: np.random.Generator, photos: list[np.ndarray], digits: Any, settings: dict[str, Any]
) -> tuple[np.ndarray, np.ndarray]:
    """One (uint8 RGB image, uint8 mask) pair."""
    size, (low, high) = settings["size"], settings["scale"]
    image = _background(rng, photos[int(rng.integers(len(photos)))], size)
    mask = np.zeros(size, dtype=np.uint8)
    boxes: list[tuple[int, int, int]] = []
    for _ in range(int(rng.integers(1, settings["max_digits"] + 1))):
        index = int(rng.integers(len(digits.labels)))
        side = min(round(_DIGIT * rng.uniform(low, high)), *size)
        y, x = _place(rng, side, size, boxes)
        boxes.append((y, x, side))
        _paste(rng, image, mask, digits.images[index, 0].numpy(), 1 + int(digits.labels[index]), (y, x, side))
    return np.rint(image).clip(0, 255).astype(np.uint8), mask


def digit_tiles(split: str = "train", *, side: int = _DIGIT, seed: int = 0) -> ImageTensors:
    """The classification counterpart of the scenes: every digit of the MNIST sample's `split`
    ("train" or "val", its test digits) pasted as in a scene, scaled to `side` pixels, on a square
    crop of the same photos as that split's scenes; grey ImageTensors (N, 1, side, side) labelled
    with the digits.
    A backbone trained on them has seen digits on photos (plain MNIST's black ground does not
    prepare it for them), but never a scene, a mask or a validation photo."""
    import torch
    from PIL import Image

    from .mnist import load_mnist_sample

    if split not in ("train", "val"):
        raise SceneBuildError(f"split={split!r} is invalid; expected 'train' or 'val'")
    sample = load_mnist_sample()
    digits, names = (sample.train, TRAIN_PHOTOS) if split == "train" else (sample.val, VAL_PHOTOS)
    assert isinstance(digits, ImageTensors)
    photos = load_photos(names)
    rng = np.random.default_rng(seed)
    tiles = np.empty((len(digits.labels), 1, side, side), dtype=np.uint8)
    scratch = np.zeros((side, side), dtype=np.uint8)
    for i in range(len(digits.labels)):
        image = _background(rng, photos[int(rng.integers(len(photos)))], (side, side))
        _paste(rng, image, scratch, digits.images[i, 0].numpy(), 1, (0, 0, side))
        tiles[i, 0] = np.asarray(Image.fromarray(np.rint(image).clip(0, 255).astype(np.uint8)).convert("L"))
    source = f"digit tiles ({split})"
    return ImageTensors(torch.from_numpy(tiles), digits.labels.clone(), digits.classes, source)


@contextmanager
def building_folder(out: str | os.PathLike[str]) -> Iterator[Path]:
    """A scratch folder beside `out` to build in, renamed to `out` when the block ends without an
    error (else removed): `out` must be new or an empty folder, and is never left half-written."""
    target = Path(out).expanduser()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise SceneBuildError(f"{target} exists and is not an empty folder; expected a new folder to build into")
    building = target.parent / f".{target.name}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    try:
        building.mkdir(parents=True)
        yield building
        if target.exists():
            target.rmdir()  # empty, checked above
        building.rename(target)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _check(train: int, val: int, size: tuple[int, int], scale: tuple[float, float], max_digits: int) -> None:
    for name, value in (("train", train), ("val", val), ("max_digits", max_digits)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SceneBuildError(f"{name}={value!r} is invalid; expected an int >= 1")
    if len(size) != 2 or any(isinstance(s, bool) or not isinstance(s, int) or s < _DIGIT for s in size):
        raise SceneBuildError(f"size={size!r} is invalid; expected (height, width) in pixels, each >= {_DIGIT}")
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] or _DIGIT * scale[0] < 4:
        raise SceneBuildError(f"scale={scale!r} is invalid; expected (low, high) with 0 < low <= high, digits >= 4 px")


def build_digit_scenes(
    out: str | os.PathLike[str],
    *,
    train: int = 200,
    val: int = 50,
    size: tuple[int, int] = (96, 128),
    scale: tuple[float, float] = (1.0, 1.5),
    max_digits: int = 3,
    seed: int = 0,
) -> Path:
    """Write `train` and `val` scenes of `size` (height, width) pixels into the new folder `out`
    (see the module docstring); digits are 28 px times a factor drawn from `scale`. Returns `out`."""
    from PIL import Image

    from .mnist import load_mnist_sample

    _check(train, val, tuple(size), tuple(scale), max_digits)  # type: ignore[arg-type]
    sample = load_mnist_sample()
    settings = {"size": tuple(size), "scale": tuple(scale), "max_digits": max_digits}
    rng = np.random.default_rng(seed)
    with building_folder(out) as building:
        for split, count, names, digits in (
            ("train", train, TRAIN_PHOTOS, sample.train),
            ("val", val, VAL_PHOTOS, sample.val),
        ):
            photos = load_photos(names)
            for folder in ("images", "masks"):
                (building / split / folder).mkdir(parents=True)
            for i in range(count):
                image, mask = _scene(rng, photos, digits, settings)
                Image.fromarray(image).save(building / split / "images" / f"scene_{i:04d}.png")
                Image.fromarray(mask).save(building / split / "masks" / f"scene_{i:04d}.png")
        (building / CLASSES_FILE).write_text("\n".join(CLASSES) + "\n", encoding="utf-8")
    return Path(out).expanduser()
