"""Datasets by name: `load_data(name, ...)`, and what `--data` names, parsed once into a DataSpec
(a built-in dataset, an image folder or a Hugging Face dataset).

    spec = DataSpec.parse(["folder", "pets/"])      # or ["mnist"], ["hf:beans_saved"], ["pets/"]
    spec.num_classes()                              # from the folder names / the ClassLabel, nothing decoded
    splits = spec.load(eval_for=model, seed=0)      # decoded (or streamed) for that model's input size

`vitzoo finetune` and `vitzoo eval` build the model from `num_classes()` before the images are
decoded, because the model's input size decides the size the images are stored at.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..pretrained_cfg import PretrainedCfg, pretrained_cfg_of
from .folder import FolderDataError, load_image_folder, store_size_for
from .hf import hf_num_classes, load_hf_dataset
from .mnist import load_mnist, load_mnist_sample
from .parquet_shards import load_parquet_shards, parquet_num_classes
from .shards import load_shards, shard_num_classes
from .tensors import DataSplits

BUILTIN = ("mnist-sample", "mnist", "fashion-mnist")
# The names `--data` takes: the built-in datasets, "folder PATH", "hf:PATH_OR_NAME" and
# "wds:SHARDS" (WebDataset shards: a pattern, a list file or a directory; vitzoo/data/shards.py) and
# "parquet:SHARDS" (a `datasets` dataset's parquet files, streamed the same way; parquet_shards.py).
DATASETS = (*BUILTIN, "folder", "hf", "wds", "parquet")
_SHARDS = {"wds": "WebDataset .tar shards", "parquet": "parquet files of a Hugging Face dataset"}
# The stored side of a dataset that is not fitted to a model (the digits keep their own size).
DEFAULT_STORE_SIZE = 256


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
    if stream and name not in ("folder", *_SHARDS):
        raise ValueError(f"stream=True applies to image folders; dataset {name!r} is always decoded into memory")
    if name in _SHARDS:
        if path is None or stream is False:
            raise ValueError(f"dataset {name!r} needs shards (--data {name}:SHARDS) and is always streamed from them")
        load = load_shards if name == "wds" else load_parquet_shards
        return load(os.fspath(path), val_split=val_split, seed=seed, strict=strict)
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


@dataclass(frozen=True)
class DataSpec:
    """One dataset: `name` is a DATASETS entry, `path` the folder or the Hugging Face dataset
    ("folder" and "hf" only). The hf_* fields choose splits and columns of a Hugging Face dataset
    (None: found automatically)."""

    name: str
    path: str | None = None
    hf_train_split: str | None = None
    hf_eval_split: str | None = None
    hf_image_column: str | None = None
    hf_label_column: str | None = None

    @property
    def kind(self) -> str:
        """ "builtin", "folder", "hf", "wds" or "parquet"."""
        return "builtin" if self.name in BUILTIN else self.name

    @classmethod
    def parse(cls, values: Sequence[str], **hf_options: str | None) -> DataSpec:
        """`--data` words -> a DataSpec: NAME, "folder PATH", "hf:PATH_OR_NAME", or a bare directory
        (an image folder). A ValueError names what is wrong and the expected form."""
        name, rest = values[0], list(values[1:])
        if name.startswith("hf:") or name == "hf":
            where = name[3:]
            if not where or rest:
                raise ValueError(
                    "--data hf:PATH_OR_NAME takes one argument, the dataset after 'hf:' (e.g. hf:saved_dir)"
                )
            return cls("hf", where, **hf_options)
        kind, _, where = name.partition(":")
        if kind in _SHARDS:
            if not where or rest:
                raise ValueError(
                    f"--data {kind}:SHARDS takes one argument, the {_SHARDS[kind]} after '{kind}:' "
                    "(a pattern dir/shard-{000000..000127}, a glob, a list file or a directory)"
                )
            return cls(kind, where)
        if name not in DATASETS:
            if len(values) == 1 and Path(name).is_dir():
                return cls("folder", name)  # a bare directory means an image folder
            raise ValueError(f"--data {name!r} is unknown; expected one of {', '.join(DATASETS)} (folder needs a PATH)")
        if name == "folder":
            if len(rest) != 1:
                raise ValueError("--data folder needs exactly one PATH: --data folder path/to/images")
            return cls(name, rest[0])
        if rest:
            raise ValueError(
                f"--data {name} takes no path (got {' '.join(rest)}); use --data-dir for where its files are"
            )
        return cls(name)

    def num_classes(self) -> int:
        """The number of classes without decoding anything: a folder's class folders, a Hugging
        Face dataset's ClassLabel feature, ten for the digit datasets."""
        if self.name == "hf" and self.path is not None:
            return hf_num_classes(self.path, train_split=self.hf_train_split, label_column=self.hf_label_column)
        if self.name in _SHARDS and self.path is not None:
            return (shard_num_classes if self.name == "wds" else parquet_num_classes)(self.path)
        if self.name != "folder" or self.path is None:
            return 10
        root = Path(self.path).expanduser()
        base = root / "train" if (root / "train").is_dir() else root
        if not base.is_dir():
            raise FolderDataError(f"image folder {root} does not exist or is not a directory")
        return sum(1 for e in base.iterdir() if e.is_dir() and not e.name.startswith("."))

    def store_size(self, model: Any = None) -> int:
        """The side images are stored at: a folder's or a Hugging Face dataset's fitted to `model`'s
        input size and crop (what InputSpec.from_model falls back to without a pretrained_cfg)."""
        if self.kind == "builtin":
            return DEFAULT_STORE_SIZE
        cfg = (pretrained_cfg_of(model) if model is not None else None) or PretrainedCfg()
        return store_size_for(max(cfg.input_size[1:]), cfg.crop_pct)

    def load(
        self,
        *,
        eval_for: Any = None,
        data_dir: str | None = None,
        download: bool = True,
        val_split: float | None = None,
        seed: int = 0,
        strict: bool = False,
        stream: bool | None = None,
        eval_train: bool = False,
    ) -> DataSplits:
        """The train and evaluation splits, stored for `eval_for` (a model: see `store_size`, and a
        folder's evaluation images prepared the way vitzoo.data.eval_transform makes them for it).
        `eval_train`: a Hugging Face dataset's training images stored the evaluation way too (a
        streamed folder prepares every split so). The other arguments are load_data's."""
        if self.name == "hf":
            assert self.path is not None  # parse gives "hf" with its dataset
            return load_hf_dataset(
                self.path,
                store_size=self.store_size(eval_for),
                train_split=self.hf_train_split,
                eval_split=self.hf_eval_split,
                image_column=self.hf_image_column,
                label_column=self.hf_label_column,
                val_split=val_split,
                seed=seed,
                strict=strict,
                eval_for=eval_for,
                eval_train=eval_train,
            )
        return load_data(
            self.name,
            path=self.path,
            data_dir=data_dir,
            download=download,
            store_size=self.store_size(eval_for),
            val_split=val_split,
            seed=seed,
            strict=strict,
            eval_for=eval_for,
            stream=stream,
        )
