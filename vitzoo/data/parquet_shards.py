"""Hugging Face `datasets` parquet files as shards (`--data parquet:SHARDS`; docs/shards.md): the
files a dataset repository on the Hub holds (`data/train-00000-of-00004.parquet`, ...) or that
`Dataset.to_parquet` writes, streamed the way WebDataset shards are (vitzoo/data/shards.py).

    splits = vitzoo.data.load_data("parquet", path="beans/data/")      # train-* and validation-*

Each file is a shard and each row a sample. Loading reads the files' metadata and their label
column only (no image); the image column is read a row group at a time by the DataLoader workers
(the last few row groups a worker read are kept), and its bytes are decoded by `decode_image`. The
columns are found from the `datasets` features stored in the file (an `Image` column, a
`ClassLabel` column, whose names are the classes), or named "image" / "img" and "label" / "labels".
A directory gives its `train-*.parquet` for training and its `validation-*`, `valid-*`, `val-*` or
`test-*` files for evaluation (`datasets`' file naming); train/ and val/ folders, or a seeded
`val_split` of the samples, as for tar shards.

Read with pyarrow rather than `datasets.load_dataset("parquet", streaming=True)`: its
`split_dataset_by_node` makes every rank read every row when the file count does not divide by
the number of ranks, and its resumable state holds no shuffle-buffer content (it is refilled on
resume), so a resumed run would not see the same batches.
"""

from __future__ import annotations

import functools
import io
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .folder import UnreadableImageError, decode_image
from .shards import (
    DEFAULT_SHUFFLE_BUFFER,
    ShardDataError,
    ShardSamples,
    build_samples,
    expand_shards,
    index_classes,
    load_shards,
    split_folders,
)
from .tensors import DataSplits

__all__ = ["ParquetSamples", "load_parquet_shards", "parquet_num_classes"]

_IMAGE_COLUMNS = ("image", "img")
_LABEL_COLUMNS = ("label", "labels")
_EVAL_PREFIXES = ("validation", "valid", "val", "test")


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError as err:
        raise ImportError("--data parquet: needs pyarrow: pip install 'vitzoo[hf]'") from err
    return pq


@dataclass(frozen=True, eq=False)
class ParquetSamples(ShardSamples):
    """Rows of parquet files: `offsets` holds each sample's row group, `sizes` its row in it."""

    image_column: str = "image"

    def read_image(self, index: int, decode: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        path, group, row = self.shard_files[int(self.shard_of[index])], int(self.offsets[index]), int(self.sizes[index])
        try:
            cell = _row_group(path, group, self.image_column)[row]
        except Exception as err:  # pyarrow raises its own types (ArrowInvalid, OSError, ...)
            raise UnreadableImageError(f"cannot read its row group: {' '.join(str(err).split())}") from err
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        if not isinstance(data, bytes):
            raise UnreadableImageError("the row holds no image bytes (an image stored as a path is not read)")
        return decode_image(io.BytesIO(data), decode)


@functools.lru_cache(maxsize=4)
def _row_group(path: str, group: int, column: str) -> list[Any]:
    """One row group's image column, kept for the next rows of the same group."""
    return _pyarrow().ParquetFile(path).read_row_group(group, columns=[column]).column(0).to_pylist()


def _features(schema: Any) -> dict[str, Any]:
    """The `datasets` features a parquet file stores in its metadata ({} when none)."""
    raw = (schema.metadata or {}).get(b"huggingface")
    try:
        return dict(json.loads(raw)["info"]["features"]) if raw else {}
    except (ValueError, KeyError, TypeError):
        return {}


def _pick(names: Sequence[str], features: dict[str, Any], kind: str, preferred: tuple[str, ...]) -> str | None:
    typed = [n for n in names if isinstance(features.get(n), dict) and features[n].get("_type") == kind]
    for n in (*typed, *preferred):
        if n in names:
            return n
    return None


def _scan_file(path: Path) -> tuple[str, str, list[str] | None, list[tuple[int, int, int]]]:
    """(image column, label column, class names or None, [(label, row group, row)]) of one file."""
    pq = _pyarrow()
    try:
        handle = pq.ParquetFile(path)
    except FileNotFoundError:
        raise ShardDataError(f"shard {path} does not exist; check the --data parquet: pattern or list") from None
    except Exception as err:
        raise ShardDataError(f"shard {path} is not a readable parquet file ({' '.join(str(err).split())})") from None
    names, features = handle.schema_arrow.names, _features(handle.schema_arrow)
    image = _pick(names, features, "Image", _IMAGE_COLUMNS)
    label = _pick(names, features, "ClassLabel", _LABEL_COLUMNS)
    if image is None or label is None:
        raise ShardDataError(
            f"shard {path}: columns {', '.join(names)}; expected an image column (Image feature, or 'image') "
            "and a label column (ClassLabel feature, or 'label')"
        )
    classes = (features.get(label) or {}).get("names")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise ShardDataError(f"shard {path}: the ClassLabel names of column {label!r} are not a list of strings")
    rows: list[tuple[int, int, int]] = []
    for group in range(handle.metadata.num_row_groups):
        try:
            values = handle.read_row_group(group, columns=[label]).column(0).to_pylist()
        except Exception as err:  # pyarrow raises its own types (ArrowInvalid, OSError, ...)
            raise ShardDataError(
                f"shard {path}: row group {group} of column {label!r} is damaged ({' '.join(str(err).split())}); "
                "rewrite the file"
            ) from None
        for row, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ShardDataError(f"shard {path}: row {len(rows)} has label {value!r}; expected a class index")
            rows.append((value, group, row))
    return image, label, classes, rows


def read_parquet(
    spec: str, *, source: str | None = None, strict: bool = False, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
) -> ParquetSamples:
    """The rows of the parquet files `spec` names (a pattern, list file, directory or one file)."""
    files = expand_shards(spec, suffix=".parquet")
    scanned = [_scan_file(f) for f in files]
    columns = {(image, label) for image, label, _, _ in scanned}
    if len(columns) > 1:
        raise ShardDataError(f"{spec}: the files name their image and label columns differently: {sorted(columns)}")
    rows = [(i, f"row {n}", *row) for i, (_, _, _, found) in enumerate(scanned) for n, row in enumerate(found)]
    if not rows:
        raise ShardDataError(f"{spec}: the parquet files hold no rows")
    names: Sequence[str] | None = scanned[0][2]
    if names is None:
        names = index_classes(files, rows, "store the label column as a datasets ClassLabel, which names them")
    image_column = scanned[0][0]
    return build_samples(
        ParquetSamples,
        files,
        rows,
        names,
        source=source or spec,
        strict=strict,
        shuffle_buffer=shuffle_buffer,
        image_column=image_column,
    )


def parquet_splits(spec: str) -> tuple[str, str] | None:
    """(train, val) of a directory: train/ and val/ folders, or `datasets`' file names (train-*
    and the first of validation-*, valid-*, val-*, test-*) as glob patterns."""
    folders = split_folders(spec)
    if folders is not None:
        return folders
    root = Path(spec).expanduser()
    if not root.is_dir():
        return None
    if not any(root.glob("train*.parquet")):
        return None
    for prefix in _EVAL_PREFIXES:
        if any(root.glob(f"{prefix}*.parquet")):
            return os.fspath(root / "train*.parquet"), os.fspath(root / f"{prefix}*.parquet")
    return None


def load_parquet_shards(
    spec: str,
    *,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
) -> DataSplits:
    """The train and evaluation splits of parquet files (see the module docstring)."""
    return load_shards(
        spec,
        val_split=val_split,
        seed=seed,
        strict=strict,
        shuffle_buffer=shuffle_buffer,
        read=read_parquet,
        find_splits=parquet_splits,
        name="parquet",
    )


def parquet_num_classes(spec: str) -> int:
    """The number of classes: the ClassLabel's names, else the largest label + 1."""
    splits = parquet_splits(spec)
    return read_parquet(splits[0] if splits else spec).num_classes
