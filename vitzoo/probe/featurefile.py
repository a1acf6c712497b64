"""Cached features: one safetensors file per extraction (`vitzoo features`), read by `vitzoo probe`.

    feats = load_features("mnist.safetensors")
    feats.features          # float32 (N, D)
    feats.labels            # int64 (N,)
    feats.split_of("val")   # the rows of one split, as a Features
    feats.names             # file names (image folders), else None
    feats.settings          # model, weights, output, block, dtype, preprocessing, dataset, counts

The file holds the tensors `features`, `labels`, `split` (uint8: an index into `settings["splits"]`),
`index` (int64: each image's position in its split, so images left out as unreadable show) and,
for image folders, the file names as one UTF-8 buffer `names` with `name_offsets` (N + 1 ends, the
layout of vitzoo.data.files.PathTable: a million names cost no header space). Everything else is
in the metadata entry `vitzoo.features`, a JSON object (FORMAT names its version).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..atomic import write_safetensors
from ..errors import VitzooError
from ..jsonio import to_json

FORMAT = "vitzoo.features/1"
METADATA_KEY = "vitzoo.features"


class FeaturesFileError(VitzooError, ValueError):
    """A features file that cannot be used: the message names the file and the field."""


@dataclass(frozen=True)
class Features:
    """Embeddings of a dataset's images with their labels (see the module docstring)."""

    features: torch.Tensor  # float32 (N, D)
    labels: torch.Tensor  # int64 (N,)
    split: torch.Tensor  # uint8 (N,): index into settings["splits"]
    index: torch.Tensor  # int64 (N,): position of the image in its split
    classes: tuple[str, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    names: list[str] | None = None
    source: str = "features"  # the file, for messages

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def splits(self) -> list[str]:
        return list(self.settings.get("splits", []))

    def present_splits(self) -> list[str]:
        """The split names that have at least one row, in the order of `splits`."""
        counts = torch.bincount(self.split.long(), minlength=len(self.splits)).tolist()
        return [name for name, n in zip(self.splits, counts) if n]

    def rows(self, mask: torch.Tensor) -> Features:
        names = None if self.names is None else [n for n, keep in zip(self.names, mask.tolist()) if keep]
        return replace(
            self,
            features=self.features[mask],
            labels=self.labels[mask],
            split=self.split[mask],
            index=self.index[mask],
            names=names,
        )

    def split_of(self, name: str) -> Features:
        """The rows of split `name` ("train" or "val")."""
        if name not in self.splits:
            raise FeaturesFileError(f"{self.source}: no split {name!r}; it holds {', '.join(self.splits) or 'none'}")
        return replace(self.rows(self.split == self.splits.index(name)), source=f"{self.source} [{name}]")


def encode_names(names: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 buffer, int64 N + 1 offsets) of UTF-8 names (the file system's encoding)."""
    encoded = [os.fsencode(n) for n in names]
    offsets = torch.zeros(len(encoded) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor([len(b) for b in encoded], dtype=torch.int64), 0)
    buffer = torch.frombuffer(bytearray(b"".join(encoded)), dtype=torch.uint8) if offsets[-1] else torch.zeros(0)
    return buffer.to(torch.uint8), offsets


def decode_names(buffer: torch.Tensor, offsets: torch.Tensor) -> list[str]:
    data = bytes(buffer.numpy().tobytes())
    ends = offsets.tolist()
    return [os.fsdecode(data[a:b]) for a, b in itertools.pairwise(ends)]


def save_features(path: str | os.PathLike[str], feats: Features) -> Path:
    """Write `feats` to `path` atomically (see the module docstring for the layout)."""
    tensors = {
        "features": feats.features.float().contiguous(),
        "labels": feats.labels.long(),
        "split": feats.split.to(torch.uint8),
        "index": feats.index.long(),
    }
    if feats.names is not None:
        tensors["names"], tensors["name_offsets"] = encode_names(feats.names)
    settings = {**feats.settings, "format": FORMAT, "classes": list(feats.classes), "count": len(feats)}
    return write_safetensors(path, tensors, metadata={METADATA_KEY: to_json(settings)})


def load_features(path: str | os.PathLike[str]) -> Features:
    """Read a file `save_features` wrote; anything else is a FeaturesFileError naming the file and field."""
    from safetensors import SafetensorError, safe_open

    where = str(path)
    if not Path(path).is_file():
        raise FeaturesFileError(f"{where}: no such features file (write one with `vitzoo features`)")
    try:
        with safe_open(where, framework="pt") as f:
            metadata = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as err:
        raise FeaturesFileError(f"{where}: not a readable safetensors file ({err})") from err
    settings = _settings(where, metadata)
    return _checked(where, tensors, settings)


def _settings(where: str, metadata: dict[str, str]) -> dict[str, Any]:
    if METADATA_KEY not in metadata:
        raise FeaturesFileError(f"{where}: no {METADATA_KEY!r} metadata; not a file written by `vitzoo features`")
    try:
        settings = json.loads(metadata[METADATA_KEY])
    except ValueError as err:
        raise FeaturesFileError(f"{where}: metadata {METADATA_KEY!r} is not valid JSON ({err})") from err
    if not isinstance(settings, dict) or settings.get("format") != FORMAT:
        found = settings.get("format") if isinstance(settings, dict) else type(settings).__name__
        raise FeaturesFileError(f"{where}: metadata format {found!r}; expected {FORMAT!r}")
    for key, kind in (("classes", list), ("splits", list)):
        if not isinstance(settings.get(key), kind) or not all(isinstance(c, str) for c in settings[key]):
            raise FeaturesFileError(f"{where}: metadata field {key!r} must be a list of strings")
    return settings


# Each tensor: its kind of dtype and number of dimensions.
_TENSORS = {
    "features": ("floating point", 2),
    "labels": ("integer", 1),
    "split": ("integer", 1),
    "index": ("integer", 1),
}
# Integer dtypes whose every value converts exactly to int64 (uint16 and uint32 where this torch has
# them: torch 2.3 added them).
_INTEGERS = tuple(
    getattr(torch, name)
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
    if hasattr(torch, name)
)


def _check_tensor(where: str, key: str, tensor: torch.Tensor | None, kind: str, ndim: int) -> torch.Tensor:
    """`tensor` if it is there with `ndim` dimensions and a dtype of `kind`, else a FeaturesFileError."""
    if tensor is None or tensor.ndim != ndim:
        found = "missing" if tensor is None else f"of shape {tuple(tensor.shape)}"
        raise FeaturesFileError(f"{where}: tensor {key!r} is {found}; expected {ndim}-dimensional")
    fits = tensor.is_floating_point() if kind == "floating point" else tensor.dtype in _INTEGERS
    if not fits:
        raise FeaturesFileError(
            f"{where}: tensor {key!r} is {str(tensor.dtype).removeprefix('torch.')}; expected {kind} values"
        )
    return tensor


def _check_range(where: str, key: str, values: torch.Tensor, low: int, high: int | None, expected: str) -> None:
    """Refuse the first value of integer `values` outside [low, high), naming its row."""
    values = values.long()
    bad = values < low if high is None else (values < low) | (values >= high)
    if bool(bad.any()):
        row = int(bad.nonzero()[0, 0])
        raise FeaturesFileError(f"{where}: tensor {key!r} holds {int(values[row])} at row {row}; expected {expected}")


def _checked(where: str, tensors: dict[str, torch.Tensor], settings: dict[str, Any]) -> Features:
    for key, (kind, ndim) in _TENSORS.items():
        _check_tensor(where, key, tensors.get(key), kind, ndim)
    feats, labels, split = tensors["features"], tensors["labels"], tensors["split"]
    n, classes, splits = feats.shape[0], settings["classes"], settings["splits"]
    if feats.shape[1] == 0:
        raise FeaturesFileError(f"{where}: tensor 'features' has no columns; expected embeddings of at least 1 value")
    if not bool(torch.isfinite(feats).all()):
        raise FeaturesFileError(f"{where}: tensor 'features' must hold finite floating point values")
    for key in ("labels", "split", "index"):
        if len(tensors[key]) != n:
            raise FeaturesFileError(f"{where}: tensor {key!r} has {len(tensors[key])} rows, 'features' {n}")
    _check_range(
        where, "labels", labels, 0, len(classes), f"a class index in [0, {len(classes)}) of the metadata's classes"
    )
    _check_range(
        where, "split", split, 0, len(splits), f"an index in [0, {len(splits)}) of the metadata's splits {splits}"
    )
    _check_range(where, "index", tensors["index"], 0, None, "a position in its split (>= 0)")
    names = None
    if "names" in tensors:
        buffer = _check_tensor(where, "names", tensors["names"], "integer", 1)
        offsets = _check_tensor(where, "name_offsets", tensors.get("name_offsets"), "integer", 1).long()
        if buffer.dtype != torch.uint8 or len(offsets) != n + 1 or int(offsets[0]) or int(offsets[-1]) != len(buffer):
            raise FeaturesFileError(f"{where}: tensor 'name_offsets' does not match 'names' (uint8) and {n} rows")
        if bool((offsets.diff() < 0).any()):
            raise FeaturesFileError(
                f"{where}: tensor 'name_offsets' decreases; expected the ends of the names in order"
            )
        names = decode_names(buffer, offsets)
    return Features(
        features=feats.float(),
        labels=labels.long(),
        split=split.to(torch.uint8),
        index=tensors["index"].long(),
        classes=tuple(classes),
        settings=settings,
        names=names,
        source=where,
    )
