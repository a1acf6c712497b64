"""Sharded safetensors as transformers and the Hub write them: the file names, `max_shard_size`,
and the writer.

    model.safetensors.index.json        {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
    model-00001-of-00003.safetensors    the tensors the index assigns to it, and so on

Weights up to `max_shard_size` stay one `model.safetensors`. Each file is written atomically; the
index, written after its shards, is what makes them a checkpoint. Reading (the index checked, each
shard against it) is vitzoo/weights/files.py's job. Layer 0: imports only `atomic`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from .atomic import write_json, write_safetensors

StateDict = dict[str, torch.Tensor]

SAFETENSORS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".index.json"
# What a model is split at unless asked otherwise: huggingface_hub's default, and transformers'
# before version 5 (which moved to "50GB"); smaller files resume and mirror better.
DEFAULT_MAX_SHARD_SIZE = "5GB"
SIZE_UNITS = {
    "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40,
}  # fmt: skip
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def index_name(weights_name: str) -> str:
    """The index of a sharded `weights_name`: "model.safetensors" -> "model.safetensors.index.json"."""
    return weights_name + INDEX_SUFFIX


def is_index(name: str) -> bool:
    """Whether a file name is a safetensors index (vitzoo reads no other kind of shards)."""
    return name.endswith(SAFETENSORS_SUFFIX + INDEX_SUFFIX)


def shard_name(weights_name: str, k: int, n: int) -> str:
    """The k-th (from 1) of n shards of `weights_name`: "model-00001-of-00003.safetensors"."""
    return f"{weights_name.removesuffix(SAFETENSORS_SUFFIX)}-{k:05d}-of-{n:05d}{SAFETENSORS_SUFFIX}"


def _is_shard_of(name: str, weights_name: str) -> bool:
    stem = re.escape(weights_name.removesuffix(SAFETENSORS_SUFFIX))
    return re.fullmatch(stem + r"-[0-9]{5}-of-[0-9]{5}" + re.escape(SAFETENSORS_SUFFIX), name) is not None


def parse_shard_size(value: int | str, what: str = "max_shard_size") -> int:
    """Bytes from an int or a string such as "5GB", "500MB", "2GiB" (units as transformers and
    huggingface_hub spell them, any case: decimal KB..TB, binary KiB..TiB, or B)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}={value!r} is invalid; expected bytes as an int or a string such as '5GB'")
    if isinstance(value, int):
        size = value
    else:
        found = _SIZE.fullmatch(value)
        unit = found.group(2).upper() if found else ""
        if found is None or unit not in SIZE_UNITS:
            units = ", ".join(SIZE_UNITS)
            raise ValueError(f"{what}={value!r} is invalid; expected a number and a unit ({units}), e.g. '5GB'")
        size = int(float(found.group(1)) * SIZE_UNITS[unit])
    if size <= 0:
        raise ValueError(f"{what}={value!r} is invalid; expected a positive size")
    return size


def plan_shards(sizes: dict[str, int], max_bytes: int) -> list[list[str]]:
    """The keys of each shard, in order: a shard takes keys until the next would pass `max_bytes`;
    a tensor larger than that has a shard of its own (huggingface_hub's rule)."""
    shards: list[list[str]] = [[]]
    filled = 0
    for key, size in sizes.items():
        if shards[-1] and filled + size > max_bytes:
            shards.append([])
            filled = 0
        shards[-1].append(key)
        filled += size
    return shards


def write_weights(
    directory: str | os.PathLike[str],
    tensors: StateDict,
    *,
    name: str = "model" + SAFETENSORS_SUFFIX,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    metadata: dict[str, str] | None = None,
) -> list[Path]:
    """Write `tensors` into `directory` as `name`, or as its shards and index when they pass
    `max_shard_size`; returns the files written (the index last). What a previous save of `name`
    left there in the other form is removed, so no reader finds stale weights: an old index goes
    before the shards that may overwrite its own, an old single file after the new index is whole."""
    max_bytes = parse_shard_size(max_shard_size)
    directory = Path(directory)
    sizes = {key: t.numel() * t.element_size() for key, t in tensors.items()}
    plan = plan_shards(sizes, max_bytes)
    index = directory / index_name(name)
    if len(plan) == 1:
        written = [write_safetensors(directory / name, tensors, metadata=metadata)]
        index.unlink(missing_ok=True)
        _remove_shards(directory, name, keep=set())
        return written
    index.unlink(missing_ok=True)
    names = [shard_name(name, k, len(plan)) for k in range(1, len(plan) + 1)]
    written = []
    for shard, keys in zip(names, plan):
        written.append(write_safetensors(directory / shard, {key: tensors[key] for key in keys}, metadata=metadata))
    weight_map = {key: shard for shard, keys in zip(names, plan) for key in keys}
    written.append(write_json(index, {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}))
    (directory / name).unlink(missing_ok=True)
    _remove_shards(directory, name, keep=set(names))
    return written


def _remove_shards(directory: Path, name: str, keep: set[str]) -> None:
    """Delete the shards of `name` (by their names) in `directory` other than `keep`."""
    for entry in os.scandir(directory):
        if entry.name not in keep and _is_shard_of(entry.name, name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
