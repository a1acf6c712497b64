"""Sharded safetensors as transformers and the Hub write them: the file names, `max_shard_size`,
and the writer.

    model.safetensors.index.json        {"metadata": {"total_size": N}, "weight_map": {tensor: shard}}
    model-00001-of-00003.safetensors    the tensors the index assigns to it, and so on

Weights up to `max_shard_size` stay one `model.safetensors`. A save is written in two phases
(`write_weights`): every file as a temporary beside its final name first, then, once all are
whole on disk, the renames that put them in place, in an order that never pairs an old index with
new shards; what a previous save left in the other form goes last. An error (or a kill) before the
renames leaves the folder as it was. Reading (the index checked, each shard against it) is
vitzoo/weights/files.py's job. Layer 0: imports only `atomic`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import torch

from .atomic import atomic_path, fill_safetensors, json_text

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
# The largest shard asked for: the largest file the Hugging Face Hub takes (its per-file limit,
# and transformers 5's default shard size). A shard is what goes up as one file; above this a
# push would fail at the Hub after uploading it, and no ViT needs one file larger for a local save.
MAX_SHARD_SIZE_TEXT = "50GB"
MAX_SHARD_SIZE = 50 * 10**9
# ASCII digits only ("²" is a digit to str.isdigit, not here); a number of up to 30 digits before
# its point, enough to say any size out of range without reading a huge number.
_SIZE = re.compile(r"\s*(?P<number>[0-9]{1,30}(?:\.[0-9]{1,30})?)\s*(?P<unit>[A-Za-z]*)\s*", re.ASCII)
# The key of the save id (save_pretrained's) in each file's safetensors metadata and the index's
# "metadata": which save a file belongs to, told apart from an earlier save's left by an interrupted one.
SAVE_ID_KEY = "vitzoo.save_id"


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
    """Bytes from an int, a string of digits or a string such as "5GB", "500MB", "2GiB" (units as
    transformers and huggingface_hub spell them, any case: decimal KB..TB, binary KiB..TiB, or B),
    from 1 byte to MAX_SHARD_SIZE. Anything else is one error naming `what` (the argument or flag)
    and what is expected."""
    expected = (
        "expected a number of bytes, or a number and a unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB) such as "
        f"'5GB', from 1 byte to {MAX_SHARD_SIZE_TEXT} (the largest file the Hugging Face Hub takes)"
    )
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}={_shown(value)} is invalid; {expected}")
    size = value if isinstance(value, int) else _bytes_in(value)
    if size is None or not 1 <= size <= MAX_SHARD_SIZE:
        raise ValueError(f"{what}={_shown(value)} is invalid; {expected}")
    return size


def _bytes_in(text: str) -> int | None:
    """The bytes a size string says (exact: no float that overflows or rounds), None if it says none."""
    found = _SIZE.fullmatch(text)
    unit = SIZE_UNITS.get(found["unit"].upper() or "B") if found else None
    if found is None or unit is None:
        return None
    return int(Decimal(found["number"]) * unit)


def _shown(value: Any) -> str:
    """`value` as an error message shows it: its repr, cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return "an int of more than 30 digits"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
    save_id: str | None = None,
    then: Mapping[str, str] | None = None,
) -> list[Path]:
    """Write `tensors` into `directory` as `name`, or as its shards and index when they pass
    `max_shard_size`, and the files `then` ({file name: text}, e.g. save_pretrained's config.json)
    after them; returns the files written (the index after its shards, `then` last). `save_id`
    goes into every weights file's metadata (SAVE_ID_KEY), telling this save's files from another's.

    Two phases: every file is first written as a temporary beside its final name (and flushed to
    disk); only then are they renamed into place, and what an earlier save of `name` left in the
    other form removed. An error (or a kill) before the renames changes nothing in `directory`.
    The renames: sharded, the old index first (no reader pairs it with new shards of the same
    names), then the shards, the index, and an old single file and unnamed shards; single, the
    file, then an old index and its shards; `then` after all of them."""
    max_bytes = parse_shard_size(max_shard_size)
    directory = Path(directory)
    stamp = {SAVE_ID_KEY: save_id} if save_id else {}
    metadata = {**(metadata or {}), **stamp} or None
    sizes = {key: t.numel() * t.element_size() for key, t in tensors.items()}
    plan = plan_shards(sizes, max_bytes)
    index = directory / index_name(name)
    with ExitStack() as stack:  # left in the reverse of the order in which it was entered
        written = [_stage_text(stack, directory / file, text) for file, text in (then or {}).items()]
        if len(plan) == 1:
            stack.enter_context(_after_renames(functools.partial(_remove_sharded, index, name)))
            return [_stage_safetensors(stack, directory / name, tensors, metadata), *written]
        names = [shard_name(name, k, len(plan)) for k in range(1, len(plan) + 1)]
        stack.enter_context(_after_renames(functools.partial(_remove_single, directory / name, names)))
        weight_map = {key: shard for shard, keys in zip(names, plan) for key in keys}
        index_data = {"metadata": {"total_size": sum(sizes.values()), **stamp}, "weight_map": weight_map}
        _stage_text(stack, index, json_text(index_data))
        shards = [
            _stage_safetensors(stack, directory / shard, {key: tensors[key] for key in keys}, metadata)
            for shard, keys in zip(names, plan)
        ]
        stack.enter_context(_after_renames(functools.partial(index.unlink, missing_ok=True)))
        return [*shards, index, *written]


@contextmanager
def _after_renames(action: Callable[[], Any]) -> Iterator[None]:
    """`action()` when the block it guards ends without an error (write_weights' removals)."""
    yield
    action()


def _stage_safetensors(stack: ExitStack, path: Path, tensors: StateDict, metadata: dict[str, str] | None) -> Path:
    tmp = stack.enter_context(atomic_path(path))
    fill_safetensors(tmp, tensors, metadata)
    _flush(tmp)
    return path


def _stage_text(stack: ExitStack, path: Path, text: str) -> Path:
    tmp = stack.enter_context(atomic_path(path))
    tmp.write_text(text, encoding="utf-8")
    _flush(tmp)
    return path


def _flush(path: Path) -> None:
    """Write `path`'s data to disk now, so that the renames that put it in place are quick."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _remove_sharded(index: Path, name: str) -> None:
    """Delete an earlier save's index of `name` and its shards (by their names), in that order."""
    index.unlink(missing_ok=True)
    _remove_shards(index.parent, name, keep=())


def _remove_single(single: Path, keep: list[str]) -> None:
    """Delete an earlier save's single file and the shards of its name other than `keep`."""
    single.unlink(missing_ok=True)
    _remove_shards(single.parent, single.name, keep)


def _remove_shards(directory: Path, name: str, keep: Collection[str]) -> None:
    """Delete the shards of `name` (by their names) in `directory` other than `keep`."""
    for entry in os.scandir(directory):
        if entry.name not in keep and _is_shard_of(entry.name, name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
