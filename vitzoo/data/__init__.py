"""Datasets for fine-tuning: MNIST, Fashion-MNIST, the embedded MNIST sample and image folders,
decoded once into uint8 tensors and augmented a batch at a time, or, for folders too large for
memory, decoded from disk a batch at a time by DataLoader workers (stream.py).

    splits = vitzoo.data.load_data("mnist-sample")                 # offline, ships with vitzoo
    splits = vitzoo.data.load_data("fashion-mnist", data_dir="~/data")
    splits = vitzoo.data.load_data("folder", path="pets/", store_size=256)   # streamed if too large
    splits = vitzoo.data.load_data("folder", path="imagenet/", stream=True)
    splits = vitzoo.data.load_data("hf", path="beans_saved/", store_size=256)  # Hugging Face datasets, offline
    train_tf = vitzoo.data.BatchTransform(spec=InputSpec.from_model(model), train=True)
    loader = vitzoo.data.make_loader(splits.train, transform=train_tf, batch_size=64, shuffle=True)
    x = vitzoo.data.eval_transform(model)(PIL.Image.open("cat.jpg"))   # the weights' preprocessing
"""

from __future__ import annotations

import os
from typing import Any

from .augment import BatchTransform, ImageAugment
from .files import ImageFiles
from .folder import CorruptImageError, FolderDataError, find_image_files, load_image_folder, store_size_for
from .hf import HFDataError, load_hf_dataset
from .idx import IdxFormatError, read_idx, write_idx
from .loader import BatchLoader
from .mnist import (
    DEFAULT_DATA_DIR,
    FASHION_CLASSES,
    MNIST_CLASSES,
    SAMPLE_DIR,
    DatasetNotFoundError,
    load_mnist,
    load_mnist_sample,
)
from .stream import StreamLoader, default_workers, make_loader
from .tensors import DataSplits, ImageTensors
from .transforms import InputSpec, convert_channels, eval_finish, eval_geometry, eval_transform

DATASETS = ("mnist-sample", "mnist", "fashion-mnist", "folder", "hf")


def load_data(
    name: str,
    *,
    path: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    download: bool = True,
    store_size: int = 256,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
    eval_for: Any = None,
    stream: bool | None = None,
) -> DataSplits:
    """One entry point for every dataset name in DATASETS ("folder" and "hf" need `path`). `eval_for`
    (a model or PretrainedCfg): store a folder's evaluation images the way that model's
    `eval_transform` prepares them (see load_image_folder). `stream`: a folder is streamed from
    disk (True), decoded into memory (False), or whichever its size calls for (None). "hf": a
    Hugging Face `datasets` dataset (a save_to_disk folder or a cached name, read offline), its
    splits and columns found automatically (`load_hf_dataset` names them), always in memory."""
    if stream and name != "folder":
        raise ValueError(f"stream=True applies to image folders; dataset {name!r} is always decoded into memory")
    if name == "mnist-sample":
        return load_mnist_sample()
    if name in ("mnist", "fashion-mnist"):
        return load_mnist(name, data_dir, download=download)
    if name == "folder":
        if path is None:
            raise ValueError("dataset 'folder' needs a path: --data folder PATH")
        return load_image_folder(
            path, store_size=store_size, val_split=val_split, seed=seed, strict=strict, eval_for=eval_for, stream=stream
        )
    if name == "hf":
        if path is None:
            raise ValueError("dataset 'hf' needs a path or dataset name: --data hf:PATH_OR_NAME")
        return load_hf_dataset(
            os.fspath(path), store_size=store_size, val_split=val_split, seed=seed, strict=strict, eval_for=eval_for
        )
    raise ValueError(f"unknown dataset {name!r}; expected one of {', '.join(DATASETS)}")


__all__ = [
    "DATASETS",
    "DEFAULT_DATA_DIR",
    "FASHION_CLASSES",
    "MNIST_CLASSES",
    "SAMPLE_DIR",
    "BatchLoader",
    "BatchTransform",
    "CorruptImageError",
    "DataSplits",
    "DatasetNotFoundError",
    "FolderDataError",
    "HFDataError",
    "IdxFormatError",
    "ImageAugment",
    "ImageFiles",
    "ImageTensors",
    "InputSpec",
    "StreamLoader",
    "convert_channels",
    "default_workers",
    "eval_finish",
    "eval_geometry",
    "eval_transform",
    "find_image_files",
    "load_data",
    "load_hf_dataset",
    "load_image_folder",
    "load_mnist",
    "load_mnist_sample",
    "make_loader",
    "read_idx",
    "store_size_for",
    "write_idx",
]
