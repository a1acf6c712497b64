"""MNIST, Fashion-MNIST and the MNIST sample embedded in the package.

Three ways to get the data, in this order:

1. `load_mnist_sample()`: 4,000 training and 1,000 test digits of real MNIST shipped inside the
   package (vitzoo/data/mnist_sample/, see its PROVENANCE.md), so a fresh install trains offline.
2. `load_mnist(name, data_dir=...)` with the raw IDX files already in `data_dir` (plain or .gz; in
   `data_dir`, `data_dir/raw` or torchvision's `data_dir/<MNIST|FashionMNIST>/raw`): read directly.
3. Otherwise, with `download=True`, torchvision's dataset class downloads them into `data_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from .idx import read_idx
from .tensors import DataSplits, ImageTensors

SAMPLE_DIR = Path(__file__).resolve().parent / "mnist_sample"
DEFAULT_DATA_DIR = Path(os.environ.get("VITZOO_DATA_DIR", "~/.cache/vitzoo/data")).expanduser()

MNIST_CLASSES = tuple(str(d) for d in range(10))
FASHION_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
# dataset name -> (torchvision class name, its folder under the root, class names)
_DATASETS = {
    "mnist": ("MNIST", "MNIST", MNIST_CLASSES),
    "fashion-mnist": ("FashionMNIST", "FashionMNIST", FASHION_CLASSES),
}
_FILES = {  # split -> (images, labels) file stems, as published
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


class DatasetNotFoundError(FileNotFoundError):
    """The dataset's files are not where they were looked for, and could not be downloaded."""


def _find(directories: list[Path], stem: str) -> Path | None:
    for directory in directories:
        for name in (stem, stem + ".gz"):
            if (directory / name).is_file():
                return directory / name
    return None


def _read_split(directories: list[Path], split: str, classes: tuple[str, ...], source: str) -> ImageTensors | None:
    image_file, label_file = (_find(directories, stem) for stem in _FILES[split])
    if image_file is None or label_file is None:
        return None
    images, labels = read_idx(image_file), read_idx(label_file)
    if images.ndim != 3 or images.dtype != torch.uint8:
        raise ValueError(
            f"{image_file}: expected uint8 images of shape (N, rows, cols), got {images.dtype} {tuple(images.shape)}"
        )
    if labels.ndim != 1 or len(labels) != len(images):
        raise ValueError(
            f"{label_file}: expected {len(images)} labels to match {image_file.name}, got shape {tuple(labels.shape)}"
        )
    return ImageTensors(images.unsqueeze(1), labels.long(), classes, f"{source} {split} ({image_file.parent})")


def load_mnist_sample() -> DataSplits:
    """The embedded real-MNIST sample: 4,000 training and 1,000 test digits (28x28, uint8)."""
    train = _read_split([SAMPLE_DIR], "train", MNIST_CLASSES, "mnist-sample")
    test = _read_split([SAMPLE_DIR], "test", MNIST_CLASSES, "mnist-sample")
    if train is None or test is None:
        raise DatasetNotFoundError(
            f"the embedded MNIST sample is missing from {SAMPLE_DIR} (a broken install?); "
            "reinstall vitzoo or pass --data mnist --data-dir DIR"
        )
    return DataSplits(train=train, val=test, name="mnist-sample", kind="digits")


def load_mnist(name: str, data_dir: str | os.PathLike[str] | None = None, *, download: bool = True) -> DataSplits:
    """MNIST ("mnist") or Fashion-MNIST ("fashion-mnist"): train split and the official test split."""
    if name not in _DATASETS:
        raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(_DATASETS)}")
    tv_class, folder, classes = _DATASETS[name]
    root = Path(data_dir).expanduser() if data_dir is not None else DEFAULT_DATA_DIR
    directories = [root, root / "raw", root / folder / "raw"]
    splits = {split: _read_split(directories, split, classes, name) for split in _FILES}
    found_train, found_test = splits["train"], splits["test"]
    if found_train is not None and found_test is not None:
        return DataSplits(train=found_train, val=found_test, name=name, kind="digits")

    looked = ", ".join(str(d) for d in directories)
    wanted = ", ".join(stem + "[.gz]" for pair in _FILES.values() for stem in pair)
    if not download:
        raise DatasetNotFoundError(f"{name}: did not find {wanted} in any of: {looked}")
    import torchvision.datasets

    dataset_class = getattr(torchvision.datasets, tv_class)
    try:
        loaded = {split: dataset_class(root=str(root), train=(split == "train"), download=True) for split in _FILES}
    except (RuntimeError, OSError) as err:  # torchvision raises RuntimeError after trying all mirrors
        raise DatasetNotFoundError(
            f"{name}: the raw files ({wanted}) are not in any of: {looked}, and downloading them failed "
            f"({str(err).strip().splitlines()[0]}). Offline, copy the files into one of those folders "
            f"and pass --data-dir {root}"
        ) from err
    train, test = (
        ImageTensors(d.data.unsqueeze(1).to(torch.uint8), d.targets.long(), classes, f"{name} {s} ({root})")
        for s, d in loaded.items()
    )
    return DataSplits(train=train, val=test, name=name, kind="digits")
