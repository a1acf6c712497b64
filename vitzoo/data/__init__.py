"""Datasets for fine-tuning: MNIST, Fashion-MNIST, the embedded MNIST sample and image folders,
decoded once into uint8 tensors and augmented a batch at a time, or, for folders too large for
memory, decoded from disk a batch at a time by DataLoader workers (stream.py).

    splits = vitzoo.data.load_data("mnist-sample")                 # offline, ships with vitzoo
    splits = vitzoo.data.load_data("fashion-mnist", data_dir="~/data")
    splits = vitzoo.data.load_data("folder", path="pets/", store_size=256)   # streamed if too large
    splits = vitzoo.data.load_data("folder", path="imagenet/", stream=True)
    splits = vitzoo.data.load_data("hf", path="beans_saved/", store_size=256)  # Hugging Face datasets, offline
    splits = vitzoo.data.load_data("wds", path="shards/")         # WebDataset shards, streamed (shards.py)
    splits = vitzoo.data.load_data("parquet", path="beans/data/")  # a datasets dataset's parquet files, the same way
    train_tf = vitzoo.data.BatchTransform(spec=InputSpec.from_model(model), train=True)
    loader = vitzoo.data.make_loader(splits.train, transform=train_tf, batch_size=64, shuffle=True)
    x = vitzoo.data.eval_transform(model)(PIL.Image.open("cat.jpg"))   # the weights' preprocessing
"""

from __future__ import annotations

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
from .shards import ShardDataError, ShardSamples, load_shards
from .spec import DATASETS, DataSpec, load_data
from .stream import StreamLoader, default_workers, make_loader
from .tensors import DataSplits, ImageTensors
from .transforms import InputSpec, convert_channels, eval_finish, eval_geometry, eval_transform

__all__ = [
    "DATASETS",
    "DEFAULT_DATA_DIR",
    "FASHION_CLASSES",
    "MNIST_CLASSES",
    "SAMPLE_DIR",
    "BatchLoader",
    "BatchTransform",
    "CorruptImageError",
    "DataSpec",
    "DataSplits",
    "DatasetNotFoundError",
    "FolderDataError",
    "HFDataError",
    "IdxFormatError",
    "ImageAugment",
    "ImageFiles",
    "ImageTensors",
    "InputSpec",
    "ShardDataError",
    "ShardSamples",
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
    "load_shards",
    "make_loader",
    "read_idx",
    "store_size_for",
    "write_idx",
]
