"""ImageNet-style folders: one subfolder per class, found with torchvision's ImageFolder rules.

    root/train/<class>/*.jpg + root/val/<class>/*.jpg      the given split
    root/<class>/*.jpg          + val_split=0.2                 a seeded, per-class split

Every image is decoded once (PIL), converted to RGB, resized so its shorter side is `store_size`
and centre-cropped to a `store_size` square, and kept as uint8 in memory (see tensors.py). The
training augmentation later takes random crops out of that square, evaluation its centre.
An image that cannot be decoded is skipped with a warning naming it (the count is reported), or
raises under `strict=True`.
"""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .tensors import DataSplits, ImageTensors

MAX_DECODED_BYTES = 4 * 1024**3  # decoded uint8 pixels kept in memory; beyond this, refuse clearly


class FolderDataError(ValueError):
    """A folder dataset that cannot be used as given; the message names the folder and the fix."""


class CorruptImageError(FolderDataError):
    """An unreadable image under strict=True."""


def _list_classes(directory: Path) -> tuple[list[str], list[tuple[str, int]]]:
    from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

    classes = sorted(e.name for e in os.scandir(directory) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise FolderDataError(
            f"{directory} has no class subfolders; expected {directory}/<class name>/<images> "
            "(or train/ and val/ folders that each hold class subfolders)"
        )
    samples = make_dataset(str(directory), {c: i for i, c in enumerate(classes)}, IMG_EXTENSIONS, allow_empty=True)
    counts = torch.bincount(torch.tensor([t for _, t in samples], dtype=torch.long), minlength=len(classes))
    empty = [c for c, n in zip(classes, counts.tolist()) if n == 0]
    if empty:
        raise FolderDataError(
            f"{directory}: class folder(s) {', '.join(map(repr, empty))} hold no images "
            f"(extensions {', '.join(IMG_EXTENSIONS)}); add images or remove the folder(s)"
        )
    return classes, samples


def _decode(path: str, store_size: int) -> torch.Tensor:
    """One image -> uint8 (3, S, S): RGB, shorter side resized to S, centre square."""
    from PIL import Image
    from torchvision.transforms.v2 import functional as TF

    with Image.open(path) as img:
        img = img.convert("RGB")  # also forces the full decode, so truncated files fail here
        tensor = TF.pil_to_tensor(img)
    tensor = TF.resize(tensor, [store_size], interpolation=TF.InterpolationMode.BICUBIC, antialias=True)
    return TF.center_crop(tensor, [store_size, store_size])


def _decode_all(
    samples: list[tuple[str, int]], classes: list[str], store_size: int, strict: bool, source: str
) -> ImageTensors:
    needed = len(samples) * 3 * store_size * store_size
    if needed > MAX_DECODED_BYTES:
        raise FolderDataError(
            f"{source}: {len(samples)} images at {store_size}x{store_size} need {needed / 1024**3:.1f} GiB decoded, "
            f"more than the {MAX_DECODED_BYTES / 1024**3:.0f} GiB this in-memory loader allows; "
            "use a smaller --img-size or fewer images"
        )
    images = torch.empty((len(samples), 3, store_size, store_size), dtype=torch.uint8)
    labels = torch.empty(len(samples), dtype=torch.long)
    kept, skipped = 0, []
    for path, target in tqdm(samples, desc=f"decoding {source}", unit="img", leave=False, disable=len(samples) < 500):
        try:
            images[kept] = _decode(path, store_size)
        except Exception as err:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
            if strict:
                raise CorruptImageError(f"cannot decode image {path}: {err} (strict mode)") from err
            warnings.warn(f"skipping unreadable image {path}: {err}", stacklevel=2)
            skipped.append(path)
            continue
        labels[kept] = target
        kept += 1
    if skipped:
        warnings.warn(f"{source}: skipped {len(skipped)} unreadable image(s) of {len(samples)}", stacklevel=2)
    if kept == 0:
        raise FolderDataError(f"{source}: none of the {len(samples)} images could be decoded")
    return ImageTensors(images[:kept].clone(), labels[:kept].clone(), tuple(classes), source)


def _stratified_split(data: ImageTensors, val_split: float, seed: int) -> tuple[ImageTensors, ImageTensors]:
    """Per class, a seeded random `val_split` fraction (at least one image) goes to validation."""
    generator = torch.Generator().manual_seed(seed)
    train_idx, val_idx = [], []
    for c in range(data.num_classes):
        idx = torch.nonzero(data.labels == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=generator)]
        n_val = min(max(1, round(len(idx) * val_split)), len(idx) - 1)
        if n_val <= 0:
            raise FolderDataError(
                f"{data.source}: class {data.classes[c]!r} has {len(idx)} readable image(s); "
                "a train/val split needs at least 2 per class"
            )
        val_idx.append(idx[:n_val])
        train_idx.append(idx[n_val:])
    return (
        data.subset(torch.cat(train_idx).sort().values, f"{data.source} (train split)"),
        data.subset(torch.cat(val_idx).sort().values, f"{data.source} (val split, {val_split:.0%})"),
    )


def load_image_folder(
    root: str | os.PathLike[str],
    *,
    store_size: int,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
) -> DataSplits:
    """Decode an ImageFolder tree into train/val `ImageTensors` of uint8 (3, store_size, store_size)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FolderDataError(f"image folder {root} does not exist or is not a directory")
    if val_split is not None and not 0 < val_split < 1:
        raise FolderDataError(f"val_split={val_split} is invalid; expected a fraction in (0, 1)")
    has_train, has_val = (root / "train").is_dir(), (root / "val").is_dir()
    if has_val and not has_train:
        raise FolderDataError(f"{root} has a val/ folder but no train/ folder; expected both (or class folders only)")

    if has_train and has_val:
        classes, samples = _list_classes(root / "train")
        val_classes, val_samples = _list_classes(root / "val")
        if val_classes != classes:
            missing, extra = sorted(set(classes) - set(val_classes)), sorted(set(val_classes) - set(classes))
            raise FolderDataError(
                f"{root}: train/ and val/ must have the same class folders; "
                f"missing in val/: {missing or 'none'}, only in val/: {extra or 'none'}"
            )
        _check_classes(classes, root / "train")
        train = _decode_all(samples, classes, store_size, strict, f"{root}/train")
        val = _decode_all(val_samples, classes, store_size, strict, f"{root}/val")
    else:
        if has_train and val_split is None:
            raise FolderDataError(
                f"{root} has a train/ folder but no val/ folder; add {root}/val/<class>/... "
                "or pass a validation fraction (--val-split 0.2) to split train/ with a seed"
            )
        directory = root / "train" if has_train else root
        classes, samples = _list_classes(directory)
        _check_classes(classes, directory)
        everything = _decode_all(samples, classes, store_size, strict, str(directory))
        train, val = _stratified_split(everything, 0.2 if val_split is None else val_split, seed)
    return DataSplits(train=train, val=val, name="folder", kind="natural")


def _check_classes(classes: list[str], directory: Path) -> None:
    if len(classes) < 2:
        raise FolderDataError(
            f"{directory} has only one class folder ({classes[0]!r}); classification needs at least 2 classes"
        )


def store_size_for(img_size: int, crop_pct: float) -> int:
    """The stored square side: the model input divided by crop_pct (224 / 0.875 = 256), the
    resize-then-centre-crop rule of the pretrained configs."""
    return math.floor(img_size / crop_pct)
