"""Segmentation data: images with masks of class indices, read offline; a bad file is one error naming it.

    data = vitzoo.data.masks.load_segmentation("scenes/")   # the layout is found from what the folder holds
    image, mask = data.read_pair(data.train[0])              # uint8 (3, H, W), uint8 (H, W); 255 = ignore

Layouts:

* plain: `DIR/{train,val}/images/*.jpg|*.jpeg|*.png` with `DIR/{train,val}/masks/*.png` of the same
  stem, grey (mode L) PNGs of class indices, 255 ignored;
* Pascal VOC: `DIR/JPEGImages/ID.jpg`, `DIR/SegmentationClass/ID.png` (palette PNGs: the palette
  index is the class, 255 the ignored border) and `DIR/ImageSets/Segmentation/{train,val}.txt`;
* ADE20K (ADEChallengeData2016): `DIR/images/{training,validation}/*.jpg` with
  `DIR/annotations/{training,validation}/*.png` (grey); 0 ("other") is ignored and the classes
  1..150 become 0..149 (mmseg's `reduce_zero_label`);
* a `datasets` dataset (`hf:SPEC`, or a folder written by `save_to_disk`): an image column and a
  mask column (both `datasets.Image`, any mode of class indices: grey or palette), a train split
  and an evaluation split (the first of validation, valid, val, test).

`DIR/classes.txt` (one name a line), when present, names the classes and fixes their count; else
VOC has its 21 names, ADE20K 150 classes, the others as many as the largest index in their masks.

Every pair is checked before anything is computed (the image's header, the whole mask): a missing
partner, a mask whose size differs from its image's, a value that is no class (not below the
class count, and not 255), a mask in the wrong mode (a colour image; a palette PNG where the layout
stores grey indices, or the reverse) and an unreadable file are each one error naming the file.
"""

from __future__ import annotations

import functools
import io
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch
from tqdm.auto import tqdm

from ..checks import Range
from ..errors import VitzooError
from .folder import FolderDataError, UnreadableImageError, decode_image, read_class_names, read_lines

IGNORE_INDEX = 255
# The class count (from a classes.txt, num_classes, or the masks' largest index): every class,
# even shifted by one as ADE20K's predictions are written, a uint8 value other than IGNORE_INDEX.
CLASS_COUNT = Range(
    int, low=1, high=IGNORE_INDEX - 1, noun="a class count", note=f"{IGNORE_INDEX} marks ignored pixels"
)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
CLASSES_FILE = "classes.txt"
LAYOUTS = ("plain", "voc", "ade20k", "datasets")
VOC_CLASSES = (
    "background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow",
    "diningtable", "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor",
)  # fmt: skip
ADE20K_CLASSES = 150
_MASK_COLUMNS = ("mask", "label", "annotation", "segmentation", "semantic_segmentation", "seg")
_ID = re.compile(r"[\w.-]+")
_WORDS = {"L": "a grey (mode L)", "P": "a palette (mode P)"}
_EXPECTED = {  # layout -> the mask modes it stores, and what it calls its folders
    "plain": ("L",),
    "voc": ("P",),
    "ade20k": ("L",),
    "datasets": ("L", "P"),
}

# A path, or a function opening the encoded bytes (a `datasets` row).
Source = str | Callable[[], str | BinaryIO]


class MaskDataError(VitzooError, FolderDataError):
    """A segmentation dataset, or one of its files, that cannot be used; the message names it."""


@dataclass(frozen=True)
class SegSample:
    """One image and its mask. `name` is the image's stem (its prediction is written as NAME.png);
    `image_file` and `mask_file` name them in messages."""

    name: str
    image: Source
    mask: Source
    image_file: str
    mask_file: str


@dataclass(frozen=True)
class SegData:
    """A segmentation dataset: its pairs per split, its classes, how its masks are stored."""

    source: str
    layout: str
    classes: tuple[str, ...]
    train: tuple[SegSample, ...]
    val: tuple[SegSample, ...]
    reduce_zero_label: bool = False  # ADE20K: 0 ignored, 1..K -> 0..K-1

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def read_image(self, sample: SegSample) -> torch.Tensor:
        """The image as uint8 RGB (3, H, W)."""
        from torchvision.transforms.v2 import functional as TF

        try:
            return decode_image(_opened(sample.image), TF.pil_to_tensor)
        except UnreadableImageError as err:
            raise MaskDataError(f"image {sample.image_file}: {err}") from err

    def read_mask(self, sample: SegSample) -> torch.Tensor:
        """The mask as uint8 class indices (H, W), IGNORE_INDEX where unlabelled, checked."""
        values = _raw_mask(sample, self.layout)
        _check_values(sample, values, self)
        if self.reduce_zero_label:
            values = np.where((values == 0) | (values == IGNORE_INDEX), IGNORE_INDEX, values - 1).astype(np.uint8)
        return torch.from_numpy(values)

    def read_pair(self, sample: SegSample) -> tuple[torch.Tensor, torch.Tensor]:
        image, mask = self.read_image(sample), self.read_mask(sample)
        _check_size(sample, tuple(image.shape[-2:]), tuple(mask.shape))
        return image, mask


# ------------------------------------------------------------------------------------ files
def _opened(source: Source) -> str | BinaryIO:
    return source if isinstance(source, str) else source()


def _raw_mask(sample: SegSample, layout: str) -> np.ndarray:
    """The mask's stored values (H, W) uint8; a mode the layout does not store is an error."""
    try:
        mode, values = decode_image(_opened(sample.mask), lambda img: (img.mode, np.array(img)), as_stored=True)
    except UnreadableImageError as err:
        raise MaskDataError(f"mask {sample.mask_file}: {err}") from err
    allowed = _EXPECTED[layout]
    if mode not in allowed:
        expected = " or ".join(_WORDS[m] for m in allowed)
        colour = "a colour image" if mode in ("RGB", "RGBA", "CMYK", "YCbCr", "LA", "PA") else "an image"
        found = f"{_WORDS[mode]} PNG" if mode in _WORDS else f"{colour} (mode {mode})"
        why = {
            "P": "; a palette PNG's indices need not be the classes: save np.array(mask) as mode L if they are",
            "L": "; VOC masks are palette PNGs whose indices are the classes: a grey one was converted from the "
            "colours (brightnesses, not classes), use the original",
        }.get(mode, "")
        raise MaskDataError(
            f"mask {sample.mask_file} is {found}; the {layout} layout expects {expected} PNG of class indices{why}"
        )
    return values


def _check_size(sample: SegSample, image: tuple[int, ...], mask: tuple[int, ...]) -> None:
    if image != mask:
        raise MaskDataError(
            f"mask {sample.mask_file} is {mask[1]}x{mask[0]} pixels but its image {sample.image_file} is "
            f"{image[1]}x{image[0]}; expected a mask of the image's size"
        )


def _check_values(sample: SegSample, values: np.ndarray, data: SegData) -> None:
    """Every value a class (after ADE20K's shift) or IGNORE_INDEX."""
    limit = data.num_classes + int(data.reduce_zero_label)  # the stored values that are classes
    present = np.flatnonzero(np.bincount(values.ravel(), minlength=256))
    bad = [int(v) for v in present if v >= limit and v != IGNORE_INDEX]
    if bad:
        shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
        valid = f"1..{limit - 1} (0 is ignored)" if data.reduce_zero_label else f"0..{limit - 1}"
        raise MaskDataError(
            f"mask {sample.mask_file} holds value(s) {shown}, but the dataset has {data.num_classes} classes: "
            f"expected {valid} or {IGNORE_INDEX} (ignored){_count_hint(data)}"
        )


def _count_hint(data: SegData) -> str:
    return f"; the class count comes from {data.source}/{CLASSES_FILE}" if data.layout in ("plain", "datasets") else ""


def _header_size(sample: SegSample) -> tuple[int, int]:
    """(H, W) of the image from its header alone."""
    from PIL import Image

    try:
        with Image.open(_opened(sample.image)) as img:
            return img.size[1], img.size[0]
    except Exception as err:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        reason = " ".join(str(err).split()) or type(err).__name__
        raise MaskDataError(f"image {sample.image_file}: cannot read it: {reason}") from err


def _class_names(folder: Path | None) -> tuple[str, ...] | None:
    path = None if folder is None else folder / CLASSES_FILE
    if path is None or not path.is_file():
        return None
    names = read_class_names(path, MaskDataError, what="distinct class name")
    _check_count(len(names), f"{path} names {len(names)} classes")  # first: the count bounds the work below
    first: dict[str, int] = {}
    for number, name in enumerate(names, 1):
        if first.setdefault(name, number) != number:
            raise MaskDataError(f"{path}, line {number}: {name!r} again; expected one distinct class name a line")
    return tuple(names)


def _check_count(count: int, what: str) -> None:
    """A class count within CLASS_COUNT, else one error starting with `what`."""
    if not CLASS_COUNT.contains(count):
        raise MaskDataError(f"{what}; expected {CLASS_COUNT.describe()}")


# ---------------------------------------------------------------------------------- layouts
def _files(folder: Path, suffixes: tuple[str, ...]) -> dict[str, Path]:
    """stem -> file of the regular files of `folder` (not recursive) ending in `suffixes`."""
    if not folder.is_dir():
        raise MaskDataError(f"{folder} is not a folder; expected it to hold the split's files")
    found: dict[str, Path] = {}
    for entry in sorted(os.scandir(folder), key=lambda e: e.name):
        if entry.name.startswith(".") or not entry.name.lower().endswith(suffixes) or not entry.is_file():
            continue
        stem = os.path.splitext(entry.name)[0]
        if stem in found:
            raise MaskDataError(
                f"{folder}: {found[stem].name} and {entry.name} share the name {stem!r}; expected one file per "
                "name (an image and its mask are paired by name)"
            )
        found[stem] = Path(entry.path)
    return found


def _paired(images_dir: Path, masks_dir: Path) -> tuple[SegSample, ...]:
    """Each image of `images_dir` with the PNG of the same stem in `masks_dir`."""
    images, masks = _files(images_dir, IMAGE_SUFFIXES), _files(masks_dir, (".png",))
    for lonely, what, partner in (
        (sorted(set(images) - set(masks)), "image", lambda s: f"no mask {masks_dir / (s + '.png')}"),
        (sorted(set(masks) - set(images)), "mask", lambda s: f"no image {images_dir / s}.jpg|.jpeg|.png"),
    ):
        if lonely:
            file = (images if what == "image" else masks)[lonely[0]]
            more = f" ({len(lonely) - 1} more {what}s are alone)" if len(lonely) > 1 else ""
            raise MaskDataError(f"{what} {file} has {partner(lonely[0])}; expected pairs of the same name{more}")
    if not images:
        raise MaskDataError(f"{images_dir} holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return tuple(SegSample(s, str(images[s]), str(masks[s]), str(images[s]), str(masks[s])) for s in sorted(images))


def _voc_split(root: Path, split: str) -> tuple[SegSample, ...]:
    listing = root / "ImageSets" / "Segmentation" / f"{split}.txt"
    if not listing.is_file():
        raise MaskDataError(f"{listing} is missing; expected the list of the {split} IDs, one a line")
    samples = []
    for number, line in enumerate(read_lines(listing, MaskDataError), 1):
        key = line.strip()
        if not key:
            continue
        if not _ID.fullmatch(key):
            raise MaskDataError(f"{listing}, line {number}: {key!r} is not an image ID; expected e.g. 2007_000032")
        image, mask = root / "JPEGImages" / f"{key}.jpg", root / "SegmentationClass" / f"{key}.png"
        for path, what in ((image, "image"), (mask, "mask")):
            if not path.is_file():
                raise MaskDataError(f"{listing}, line {number}: the {what} {path} of {key} is missing")
        samples.append(SegSample(key, str(image), str(mask), str(image), str(mask)))
    if not samples:
        raise MaskDataError(f"{listing} lists no images")
    return tuple(samples)


def find_layout(path: str | os.PathLike[str]) -> str:
    """Which of LAYOUTS the folder `path` holds ("hf:SPEC" is a `datasets` dataset)."""
    spec = os.fspath(path)
    if spec.startswith("hf:"):
        return "datasets"
    root = Path(spec).expanduser()
    if not root.is_dir():
        raise MaskDataError(f"{root} is not a folder; expected a segmentation dataset folder or hf:SPEC")
    checks = {
        "plain": ("train/images", "train/masks"),
        "voc": ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"),
        "ade20k": ("images/training", "annotations/training"),
    }
    for layout, folders in checks.items():
        if all((root / f).is_dir() for f in folders):
            return layout
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        return "datasets"
    raise MaskDataError(
        f"{root} holds no segmentation layout vitzoo reads; expected train/images + train/masks (and val/), "
        "Pascal VOC's JPEGImages + SegmentationClass + ImageSets/Segmentation, ADE20K's images/training + "
        "annotations/training, or a folder written by datasets' save_to_disk"
    )


def _cell(table: Any, row: int, column: str) -> str | BinaryIO:
    cell = table[row][column]
    return io.BytesIO(cell["bytes"]) if cell.get("bytes") is not None else cell["path"]


def _dataset_split(table: Any, image: str, mask: str, where: str) -> tuple[SegSample, ...]:
    """The rows of one split; a row's name is its image's file stem when datasets kept it."""
    samples = []
    for row in range(len(table)):
        item = table[row]
        for column in (image, mask):
            cell = item[column]
            if not cell or (cell.get("bytes") is None and not cell.get("path")):
                raise MaskDataError(f"{where} row {row}: the {column!r} cell is empty; expected an image")
        path = item[image].get("path")
        name = os.path.splitext(os.path.basename(path))[0] if path else f"{row:06d}"
        samples.append(
            SegSample(
                name,
                functools.partial(_cell, table, row, image),
                functools.partial(_cell, table, row, mask),
                f"{where} row {row} ({image!r})",
                f"{where} row {row} ({mask!r})",
            )
        )
    names = [s.name for s in samples]
    if len(set(names)) < len(names):  # file stems repeat: the row numbers name them
        samples = [SegSample(f"{i:06d}", s.image, s.mask, s.image_file, s.mask_file) for i, s in enumerate(samples)]
    if not samples:
        raise MaskDataError(f"{where} has no rows")
    return tuple(samples)


def _datasets_layout(
    spec: str, image_column: str | None, mask_column: str | None
) -> tuple[str, tuple[SegSample, ...], tuple[SegSample, ...]]:
    """(the source's name, train and evaluation samples) of a `datasets` dataset."""
    from . import hf

    datasets = hf._datasets()
    found, source = hf._open(spec)
    train, val, train_name, val_name = hf._choose_splits(found, source, None, None)
    if val is None:
        raise MaskDataError(
            f"hf:{source} has no evaluation split ({', '.join(hf.EVAL_SPLITS)}); segmentation is measured on one"
        )
    image = hf._column(train.features, datasets.Image, hf._IMAGE_COLUMNS, image_column, "image", source)
    mask = hf._column(train.features, datasets.Image, _MASK_COLUMNS, mask_column, "mask", source)
    if image == mask:
        raise MaskDataError(
            f"hf:{source}: the one Image column {image!r} would be both the images and the masks; expected an "
            "image column and a mask column"
        )
    raw = datasets.Image(decode=False)
    splits = []
    for data, name in ((train, train_name), (val, val_name)):
        if image not in data.features or mask not in data.features:
            raise MaskDataError(f"hf:{source}: split {name!r} lacks the column {image!r} or {mask!r}")
        table = data.select_columns([image, mask]).cast_column(image, raw).cast_column(mask, raw)
        splits.append(_dataset_split(table, image, mask, f"hf:{source} [{name}]"))
    return source, splits[0], splits[1]


def _layout_samples(
    spec: str, layout: str, image_column: str | None, mask_column: str | None
) -> tuple[str, tuple[SegSample, ...], tuple[SegSample, ...]]:
    if layout == "datasets":
        return _datasets_layout(spec.removeprefix("hf:"), image_column, mask_column)
    root = Path(spec).expanduser()
    if layout == "voc":
        return str(root), _voc_split(root, "train"), _voc_split(root, "val")
    if layout == "ade20k":
        pairs = [(root / "images" / s, root / "annotations" / s) for s in ("training", "validation")]
    else:
        pairs = [(root / s / "images", root / s / "masks") for s in ("train", "val")]
    return str(root), _paired(*pairs[0]), _paired(*pairs[1])


def _scan(samples: Sequence[SegSample], layout: str, progress: bool) -> tuple[list[int], int]:
    """Every pair's mode and sizes checked; (each mask's largest class value, the largest of all)."""
    largest = []
    for sample in tqdm(samples, desc="checking masks", unit="mask", leave=False, disable=not progress):
        values = _raw_mask(sample, layout)
        _check_size(sample, _header_size(sample), tuple(values.shape))
        present = np.flatnonzero(np.bincount(values.ravel(), minlength=256))
        classes = present[present != IGNORE_INDEX]
        largest.append(int(classes.max()) if classes.size else -1)
    return largest, max(largest, default=-1)


def load_segmentation(
    path: str | os.PathLike[str],
    *,
    num_classes: int | None = None,
    image_column: str | None = None,
    mask_column: str | None = None,
    progress: bool = True,
) -> SegData:
    """The segmentation dataset at `path` (a folder in one of LAYOUTS, or "hf:SPEC"), every pair
    checked (see the module docstring). `num_classes` fixes the class count where neither a
    classes.txt nor the layout does; the column names pick a `datasets` dataset's columns."""
    if num_classes is not None:
        _check_count(num_classes, f"num_classes={num_classes} is invalid")
    spec = os.fspath(path)
    layout = find_layout(spec)
    source, train, val = _layout_samples(spec, layout, image_column, mask_column)
    folder = Path(spec.removeprefix("hf:")).expanduser()
    names = _class_names(folder if folder.is_dir() else None)
    default = {"voc": VOC_CLASSES, "ade20k": tuple(str(i) for i in range(1, ADE20K_CLASSES + 1))}.get(layout)
    classes = names or default
    if num_classes is not None and classes is not None and len(classes) != num_classes:
        raise MaskDataError(f"num_classes={num_classes}, but {source} has {len(classes)} classes")
    samples = train + val
    largest, top = _scan(samples, layout, progress and len(samples) >= 500)
    if classes is None:
        count = num_classes if num_classes is not None else top + 1
        if count < 1:
            raise MaskDataError(f"{source}: every mask is all {IGNORE_INDEX} (ignored); expected labelled pixels")
        _check_count(count, f"{source}: the masks hold class {top}, so {count} classes")
        classes = tuple(str(i) for i in range(count))
    data = SegData(source, layout, classes, train, val, reduce_zero_label=layout == "ade20k")
    limit = data.num_classes + int(data.reduce_zero_label)
    for sample, value in zip(samples, largest):
        if value >= limit:
            _check_values(sample, _raw_mask(sample, layout), data)  # raises, naming the values
    return data
