"""Hugging Face `datasets` image datasets, read offline and decoded into memory like an image folder.

    splits = vitzoo.data.load_data("hf", path="pets_saved/", store_size=256)   # Dataset(Dict).save_to_disk
    splits = vitzoo.data.load_data("hf", path="beans", store_size=256)         # in the local datasets cache
    vitzoo finetune deit_s16.fb_in1k --data hf:pets_saved/ [--hf-split-train train --hf-split-val test]

What `hf:SPEC` names, in this order:

* a directory written by `Dataset.save_to_disk` / `DatasetDict.save_to_disk`: `datasets.load_from_disk`;
* any other directory (say a Hub dataset repository downloaded as files: parquet, images with a
  metadata file): `datasets.load_dataset(directory)`, which infers the splits from the file names;
* otherwise a dataset name (`org/name`), found in the local `datasets` cache only
  (`HF_DATASETS_CACHE`): loading never goes to the network, as under `HF_DATASETS_OFFLINE=1`, so a
  dataset that was never downloaded is one clear error rather than a wait on retries.

Splits: `train` (or the one named), evaluation on the first of `validation`, `valid`, `val`, `test`
(or the one named); a dataset with no evaluation split is split like a folder without `val/` (a
seeded per-class fraction, `val_split`, default 0.2). Columns: the image is the one column whose
feature is `datasets.Image`, the label the one `datasets.ClassLabel` (which gives the class names);
either can be named when there are several.

Decoding stays vitzoo's: the image column is read with `Image(decode=False)`, so `datasets` hands
over the encoded bytes (or a file path) and PIL only ever opens them inside `decode_image`
(decompression-bomb limit, 8-bit conversion, a reason for every failure). From there the images
are stored exactly as a folder's (folder.py): training images as `store_size` squares, evaluation
images through the model's evaluation resize and crop (`eval_for`); unreadable ones are skipped
with a warning naming the row and why (`strict`: raise). Streaming from disk (stream.py) reads image
files; a `datasets` dataset too large for memory is refused with the way out (save it as a folder).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .folder import (
    MAX_DECODED_BYTES,
    CorruptImageError,
    Decoder,
    UnreadableImageError,
    decode_image,
    decoded_bytes,
    split_off_val,
    store_decoders,
)
from .tensors import DataSplits, ImageTensors

__all__ = ["EVAL_SPLITS", "HFDataError", "hf_num_classes", "load_hf_dataset"]

EVAL_SPLITS = ("validation", "valid", "val", "test")  # tried in this order when no split is named
_IMAGE_COLUMNS = ("image", "img")  # preferred when a dataset has several Image columns
_LABEL_COLUMNS = ("label", "labels")


class HFDataError(ValueError):
    """A `datasets` dataset that cannot be used as given; the message names it and the fix."""


def _datasets() -> Any:
    try:
        import datasets
    except ImportError as err:
        raise HFDataError("--data hf:... needs the Hugging Face datasets library: pip install 'vitzoo[hf]'") from err
    return datasets


@contextlib.contextmanager
def _offline(datasets: Any) -> Iterator[None]:
    """`datasets` in offline mode for the duration. Its config reads HF_DATASETS_OFFLINE when it is
    imported, so setting the variable now would be too late: the flag it became is set instead
    (HF_HUB_OFFLINE since datasets 3, HF_DATASETS_OFFLINE before)."""
    names = [name for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE") if hasattr(datasets.config, name)]
    saved = {name: getattr(datasets.config, name) for name in names}
    try:
        for name in names:
            setattr(datasets.config, name, True)
        yield
    finally:
        for name, value in saved.items():
            setattr(datasets.config, name, value)


def _open(spec: str) -> tuple[Any, str]:
    """(the Dataset or DatasetDict that `spec` names, a description of it for messages)."""
    datasets = _datasets()
    path = Path(spec).expanduser()
    if path.is_dir():
        saved = (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()
        try:
            with _offline(datasets):
                if saved:
                    return datasets.load_from_disk(str(path)), str(path)
                return datasets.load_dataset(str(path)), str(path)
        # datasets raises many types here (FileNotFoundError, ValueError, DataFilesNotFoundError...)
        except Exception as err:
            how = "load_from_disk" if saved else "load_dataset"
            raise HFDataError(f"hf:{spec}: datasets.{how} cannot read {path}: {' '.join(str(err).split())}") from err
    # What cannot be a dataset name ("name" or "org/name") was meant as a path.
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise HFDataError(
            f"hf:{spec}: {path} is not a directory; expected a folder written by Dataset(Dict).save_to_disk, "
            "a folder of dataset files, or a dataset name in the local datasets cache"
        )
    try:
        with _offline(datasets):
            return datasets.load_dataset(spec), spec
    except (ConnectionError, FileNotFoundError) as err:  # offline, and nothing cached under that name
        raise HFDataError(
            f"hf:{spec}: no such directory, and dataset {spec!r} is not in the local datasets cache "
            f"({datasets.config.HF_DATASETS_CACHE}); vitzoo reads datasets offline: download it first "
            f"(datasets.load_dataset({spec!r}) where there is a network) or give the folder save_to_disk wrote"
        ) from err
    except Exception as err:
        reason = " ".join(str(err).split())
        raise HFDataError(f"hf:{spec}: datasets.load_dataset cannot read it from the local cache: {reason}") from err


def _choose_splits(
    found: Any, source: str, train: str | None, val: str | None
) -> tuple[Any, Any | None, str, str | None]:
    """(train Dataset, evaluation Dataset or None to split train, their names)."""
    datasets = _datasets()
    if isinstance(found, datasets.Dataset):  # save_to_disk of a single Dataset: one split
        if train not in (None, "train") or val is not None:
            raise HFDataError(
                f"hf:{source} is a single Dataset without named splits; drop --hf-split-train/--hf-split-val "
                "(a seeded --val-split fraction becomes the evaluation split)"
            )
        return found, None, "train", None
    available = list(found.keys())
    listing = ", ".join(available) or "none"
    for name in (train, val):
        if name is not None and name not in available:
            raise HFDataError(f"hf:{source} has no split {name!r}; its splits: {listing}")
    if train is None:
        if "train" not in available:
            raise HFDataError(
                f"hf:{source} has no 'train' split; name the one to train on with --hf-split-train (splits: {listing})"
            )
        train = "train"
    if val is None:
        val = next((name for name in EVAL_SPLITS if name in available and name != train), None)
    if val == train:
        raise HFDataError(
            f"hf:{source}: the training and evaluation splits are both {train!r}; name two different ones"
        )
    return found[train], (found[val] if val is not None else None), train, val


def _column(features: Any, kind: type, preferred: tuple[str, ...], given: str | None, what: str, source: str) -> str:
    """The column holding `kind` features (datasets.Image or ClassLabel)."""
    described = ", ".join(f"{name} ({type(f).__name__})" for name, f in features.items())
    if given is not None:
        if given not in features or not isinstance(features[given], kind):
            raise HFDataError(f"hf:{source}: column {given!r} is not a {kind.__name__} column; columns: {described}")
        return given
    matches = [name for name, feature in features.items() if isinstance(feature, kind)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        hint = (
            "cast the label column to datasets.ClassLabel(names=[...]) first (ds.cast_column)"
            if what == "label"
            else "cast the column holding the images to datasets.Image() first (ds.cast_column)"
        )
        raise HFDataError(f"hf:{source} has no {kind.__name__} column for the {what}; columns: {described}; {hint}")
    chosen = next((name for name in preferred if name in matches), None)
    if chosen is None:
        raise HFDataError(
            f"hf:{source} has several {kind.__name__} columns ({', '.join(matches)}); "
            f"name the {what} one with --hf-{what}-column"
        )
    return chosen


def _decode_rows(
    data: Any,
    rows: list[int],
    image_column: str,
    label_column: str,
    classes: tuple[str, ...],
    decode: Decoder,
    size: tuple[int, int],
    strict: bool,
    source: str,
) -> tuple[ImageTensors, list[int]]:
    """(the readable images of `rows`, decoded to uint8 (3, *size), the rows kept). The skip policy
    of folder.py's decoding: a warning per unreadable image, a count, a class left empty is an error."""
    images = torch.empty((len(rows), 3, *size), dtype=torch.uint8)
    labels = torch.empty(len(rows), dtype=torch.long)
    kept: list[int] = []
    skipped = 0
    table = data.select_columns([image_column, label_column])
    for row in tqdm(rows, desc=f"decoding {source}", unit="img", leave=False, disable=len(rows) < 500):
        item = table[row]
        encoded, label = item[image_column], item[label_column]
        name = f"{source} row {row}" + (f" ({encoded['path']})" if encoded and encoded.get("path") else "")
        try:
            if not encoded or (encoded.get("bytes") is None and not encoded.get("path")):
                raise UnreadableImageError("the image cell is empty")
            file = io.BytesIO(encoded["bytes"]) if encoded.get("bytes") is not None else encoded["path"]
            images[len(kept)] = decode_image(file, decode)
        except UnreadableImageError as err:
            if strict:
                raise CorruptImageError(f"cannot decode image {name}: {err} (strict mode)") from err
            warnings.warn(f"skipping unreadable image {name}: {err}", stacklevel=2)
            skipped += 1
            continue
        labels[len(kept)] = label
        kept.append(row)
    if skipped:
        warnings.warn(f"{source}: skipped {skipped} unreadable image(s) of {len(rows)}", stacklevel=2)
    counts = torch.bincount(labels[: len(kept)], minlength=len(classes)).tolist()
    lost = [c for c, n in zip(classes, counts) if n == 0]
    if lost:
        raise HFDataError(
            f"{source}: class(es) {', '.join(map(repr, lost))} have no readable image in this split "
            "(every one was skipped as unreadable, see the warnings, or the split has none)"
        )
    n = len(kept)
    return ImageTensors(images[:n].clone(), labels[:n].clone(), classes, source), kept


def _labelled_rows(data: Any, label_column: str, source: str) -> list[int]:
    """All rows, refusing a split whose rows are unlabelled (ClassLabel -1, e.g. a hidden test set)."""
    labels = torch.as_tensor(data[label_column], dtype=torch.long)
    missing = int((labels < 0).sum())
    if missing:
        raise HFDataError(
            f"{source}: {missing} of {len(labels)} rows have no label (-1); evaluate on a labelled split "
            "(--hf-split-val NAME) or split the training one (--hf-split-val none)"
        )
    return list(range(len(labels)))


def _columns(
    datasets: Any,
    train: tuple[Any, str],
    val: tuple[Any, str | None],
    image_column: str | None,
    label_column: str | None,
    source: str,
) -> tuple[str, str, tuple[str, ...]]:
    """(image column, label column, class names) of the (split, name) `train`, which the
    evaluation split `val` (None when there is none) must share."""
    (data, train_name), (val_data, val_name) = train, val
    image = _column(data.features, datasets.Image, _IMAGE_COLUMNS, image_column, "image", source)
    label = _column(data.features, datasets.ClassLabel, _LABEL_COLUMNS, label_column, "label", source)
    classes = tuple(data.features[label].names)
    if len(classes) < 2:
        raise HFDataError(
            f"hf:{source}: label column {label!r} has {len(classes)} class; classification needs at least 2"
        )
    if val_data is not None and (
        image not in val_data.features
        or label not in val_data.features
        or list(val_data.features[label].names) != list(classes)
    ):
        raise HFDataError(
            f"hf:{source}: split {val_name!r} does not have the columns of {train_name!r} "
            f"({image!r} images, {label!r} with classes {list(classes)})"
        )
    return image, label, classes


def load_hf_dataset(
    spec: str,
    *,
    store_size: int,
    train_split: str | None = None,
    eval_split: str | None = None,
    image_column: str | None = None,
    label_column: str | None = None,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
    eval_for: Any = None,
    memory_budget: int = MAX_DECODED_BYTES,
    eval_train: bool = False,
) -> DataSplits:
    """A `datasets` image dataset (see the module docstring) as in-memory train/val splits.

    `eval_split="none"` splits the training split even when the dataset has an evaluation one.
    `store_size`, `val_split`, `seed`, `strict` and `eval_for` mean what they mean for
    `load_image_folder`. `eval_train` (with `eval_for`): the training images are stored the
    evaluation way too, as feature extraction (vitzoo.probe) needs them."""
    datasets = _datasets()
    if val_split is not None and not 0 < val_split < 1:
        raise HFDataError(f"val_split={val_split} is invalid; expected a fraction in (0, 1)")
    found, source = _open(spec)
    no_eval = eval_split == "none"
    train, val, train_name, val_name = _choose_splits(found, source, train_split, None if no_eval else eval_split)
    if no_eval:
        val, val_name = None, None
    image_column, label_column, classes = _columns(
        datasets, (train, train_name), (val, val_name), image_column, label_column, source
    )
    train_decode, val_decode, val_size = store_decoders(store_size, eval_for)
    train_size = (store_size, store_size)
    if eval_train and eval_for is not None:
        train_decode, train_size = val_decode, val_size
    n_train, n_val = len(train), len(val) if val is not None else 0
    needed = decoded_bytes(n_train, n_val, store_size, val_size)
    if needed > memory_budget:
        raise HFDataError(
            f"hf:{source}: {n_train + n_val} images decoded would take {needed / 1024**3:.1f} GiB, more than the "
            f"in-memory budget of {memory_budget / 1024**3:.1f} GiB, and a datasets dataset is only read into "
            "memory; write its images out as an image folder (class subfolders) and use --data folder PATH, "
            "which streams from disk, or use a smaller --img-size"
        )

    # No decoding outside decode_image: the image column read as {"bytes", "path"}.
    raw = datasets.Image(decode=False)
    train = train.cast_column(image_column, raw)
    train_source = f"hf:{source} [{train_name}]"
    train_rows = _labelled_rows(train, label_column, train_source)
    if val is not None:
        val = val.cast_column(image_column, raw)
        val_source = f"hf:{source} [{val_name}]"
        val_rows = _labelled_rows(val, label_column, val_source)
        columns = (image_column, label_column, classes)
        train_set, _ = _decode_rows(train, train_rows, *columns, train_decode, train_size, strict, train_source)
        val_set, _ = _decode_rows(val, val_rows, *columns, val_decode, val_size, strict, val_source)
        return DataSplits(train=train_set, val=val_set, name="hf", kind="natural")

    # One split: a seeded per-class fraction for evaluation, as for a folder without val/.
    columns = (image_column, label_column, classes)
    everything, kept = _decode_rows(train, train_rows, *columns, train_decode, train_size, strict, train_source)

    def decode_for_eval(indices: list[int], val_source: str) -> ImageTensors:
        # decoded again, the evaluation way (readable a moment ago: strict)
        val_rows = [kept[i] for i in indices]
        return _decode_rows(train, val_rows, *columns, val_decode, val_size, True, val_source)[0]

    train_set, val_set = split_off_val(
        everything, val_split, seed, train_source, None if eval_for is None else decode_for_eval
    )
    return DataSplits(train=train_set, val=val_set, name="hf", kind="natural")


def hf_num_classes(spec: str, *, train_split: str | None = None, label_column: str | None = None) -> int:
    """The number of classes of `spec`'s label column, read from its features (nothing decoded)."""
    datasets = _datasets()
    found, source = _open(spec)
    train, _, _, _ = _choose_splits(found, source, train_split, None)
    column = _column(train.features, datasets.ClassLabel, _LABEL_COLUMNS, label_column, "label", source)
    return int(train.features[column].num_classes)
