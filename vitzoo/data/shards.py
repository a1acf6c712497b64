"""WebDataset shards as a dataset (`--data wds:SPEC`; docs/shards.md): tar files whose members are
grouped into samples by key (`KEY.jpg` / `.png` / `.webp` + `KEY.cls` or `KEY.json`), the class
names in `classes.txt` beside the shards.

    splits = vitzoo.data.load_shards("shards/")                        # train/ + val/, or split off
    splits = vitzoo.data.load_shards("shards/shard-{000000..000127}.tar")
    loader = vitzoo.data.make_loader(splits.train, transform=tf, batch_size=256, shuffle=True)

Every shard is scanned once when loaded (tar headers and the small label members; no image is
decoded), so the samples are listed as `ShardSamples`: an `ImageFiles` whose images are byte ranges
of the shards. vitzoo/data/stream.py then streams them as it streams a folder (workers decode and
augment, seeds from (seed, epoch, step, rank, place in batch), unreadable images replaced by
another of the class and counted), with one difference, the training order (`epoch_order`):

* the shards in a seeded order per epoch, their samples concatenated, padded by wrapping around to
  a multiple of the number of ranks (as DistributedSampler pads), and each rank a contiguous run of
  that sequence: every sample once per epoch, the same number of steps on every rank, whatever the
  shard sizes (a shard at a rank boundary is shared between the two ranks at a sample);
* then a seeded shuffle buffer over the rank's run (`shuffle_buffer` samples), as WebDataset's
  `shuffle(n)` mixes a stream.

The order is a pure function of (seed, epoch, rank, world size), computed from the index without
reading a byte, and workers read a batch's images by offset: a run resumed at step k of an epoch
reads exactly the batches an uninterrupted one would, from step k on, and the number of workers
changes nothing. Errors in the shards (missing, not a tar, truncated, a sample without an image or
label, a label out of range) are found by the scan, on every rank alike, and raise one
`ShardDataError` naming the shard and the key.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import random
import re
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch

from .files import ImageFiles, PathTable
from .folder import FolderDataError, UnreadableImageError, decode_image, read_class_names, read_lines, split_off_val
from .loader import mix_seeds
from .tensors import DataSplits

__all__ = [
    "CLASSES_NAME",
    "ShardDataError",
    "ShardSamples",
    "build_samples",
    "expand_shards",
    "load_shards",
    "read_shards",
    "shard_num_classes",
]

CLASSES_NAME = "classes.txt"  # the class names, one a line, beside the shards (or in their parent folder)
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "ppm", "pgm", "bmp", "tif", "tiff")  # torchvision's
DEFAULT_SHUFFLE_BUFFER = 1000
_MAX_LABEL_BYTES = 1 << 16  # a .cls or .json member is read whole: bound it
_BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")
# The shards a brace pattern may name: far more than any dataset's, few enough to list at once.
MAX_SHARDS = 1_000_000
# Without a classes.txt the classes are named by index up to the largest label, which would size
# that list (and the model's head) by whatever a label member says. Real label sets are far
# smaller (ImageNet-21k's is among the largest); a larger one names its classes in a classes.txt.
MAX_INDEX_CLASSES = 2**20


S = TypeVar("S", bound="ShardSamples")


class ShardDataError(FolderDataError):
    """Shards that cannot be used as given; the message names the shard, the key and the fix."""


def expand_shards(spec: str, suffix: str = ".tar") -> list[Path]:
    """The shard files `spec` names: a brace pattern (`dir/shard-{000000..000127}.tar`, every
    `{a..b}` expanded with its zero padding), a glob (`dir/train-*.parquet`, sorted), a list file
    (`.txt`, one shard a line, relative to
    the list's folder), a directory (its `*.tar`, or files with another `suffix`, sorted) or one file."""
    matches = list(_BRACE.finditer(spec))
    if matches:
        ranges = _brace_ranges(spec, matches)
        names = [""]
        last = 0
        for m, (first, end) in zip(matches, ranges):
            width = len(m.group(1))
            numbers = [str(i).zfill(width) for i in range(first, end + 1)]
            names = [n + spec[last : m.start()] + x for n in names for x in numbers]
            last = m.end()
        return [Path(n + spec[last:]).expanduser() for n in names]
    path = Path(spec).expanduser()
    if any(c in path.name for c in "*?["):
        found = sorted(path.parent.glob(path.name))
        if not found:
            raise ShardDataError(f"no shard matches {spec}")
        return found
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.suffix == suffix and p.is_file())
        if not found:
            raise ShardDataError(f"{path} holds no {suffix} shards; expected files like {path}/shard-000000{suffix}")
        return found
    if path.suffix == ".txt" and path.is_file():
        lines = [line.strip() for line in read_lines(path, ShardDataError)]
        return [path.parent / line for line in lines if line and not line.startswith("#")]
    return [path]


def _brace_ranges(spec: str, matches: list[re.Match[str]]) -> list[tuple[int, int]]:
    """(first, last) of every `{a..b}` of a pattern, refused when one is empty or the names they
    make together (the product of their lengths) are more than MAX_SHARDS, before any is made."""
    ranges, total = [], 1
    for m in matches:
        try:
            first, end = int(m.group(1)), int(m.group(2))
        except ValueError:  # more digits than Python converts
            first, end = 1, 0
        if end < first:
            raise ShardDataError(
                f"shard pattern {spec!r}: range {m.group(0)} is empty or unreadable; expected {{FIRST..LAST}}"
            )
        ranges.append((first, end))
        total *= end - first + 1
    if total > MAX_SHARDS:
        raise ShardDataError(
            f"shard pattern {spec!r} names more than {MAX_SHARDS} shards (its ranges multiplied); "
            "expected fewer, or a list file (.txt) of the shards"
        )
    return ranges


def _key_and_extension(name: str) -> tuple[str, str]:
    """WebDataset's grouping rule: the key is the path up to the first dot of the file name, the
    extension everything after it (lower case)."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    return (f"{folder}/{stem}" if folder else stem), extension.lower() if dot else ""


@dataclass
class _Sample:
    key: str
    members: dict[str, tarfile.TarInfo]


def _label(tar: tarfile.TarFile, shard: Path, sample: _Sample) -> int:
    """The class index of a sample: its `.cls` member (an integer as text), else its `.json`
    member (an integer, or an object with "label" or "cls")."""
    extension = "cls" if "cls" in sample.members else "json" if "json" in sample.members else None
    if extension is None:
        raise ShardDataError(
            f"shard {shard}: sample {sample.key!r} has no label (members: {', '.join(sorted(sample.members))}); "
            f"expected {sample.key}.cls or {sample.key}.json"
        )
    info = sample.members[extension]
    if info.size > _MAX_LABEL_BYTES:
        raise ShardDataError(
            f"shard {shard}: label {sample.key}.{extension} is {info.size} bytes; expected a small one"
        )
    handle = tar.extractfile(info)
    raw = handle.read() if handle is not None else b""
    try:
        value: Any = json.loads(raw)
        if isinstance(value, dict):
            value = value.get("label", value.get("cls"))
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not an integer")
    except (ValueError, RecursionError) as err:
        reason = "it nests deeper than Python parses" if isinstance(err, RecursionError) else err
        raise ShardDataError(
            f"shard {shard}: label {sample.key}.{extension} is not a class index ({reason}); "
            'expected an integer (a .json: {"label": N})'
        ) from None
    return value


def _samples_of(tar: tarfile.TarFile, shard: Path, size: int) -> Iterator[_Sample]:
    """The samples of an open tar, members grouped by key in the order stored. A key met again
    (after other keys, or a member of its sample repeated) is an error: WebDataset refuses the
    second, and keeping either would drop a sample without a word."""
    current: _Sample | None = None
    seen: set[str] = set()
    for info in tar:
        if not info.isfile():
            continue
        key, extension = _key_and_extension(info.name)
        if info.offset_data + info.size > size:
            raise ShardDataError(
                f"shard {shard} is truncated: member {info.name!r} (sample {key!r}) ends at byte "
                f"{info.offset_data + info.size} of a {size}-byte file; rewrite the shard"
            )
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = _Sample(key, {})
            again = key in seen
            seen.add(key)
        else:
            again = extension in current.members
        if again:
            raise ShardDataError(
                f"shard {shard}: key {key!r} is used twice (again at member {info.name!r}); "
                "expected each sample's key once per shard"
            )
        current.members[extension] = info
    if current is not None:
        yield current


def _scan_shard(shard: Path) -> list[tuple[str, str, int, int, int]]:
    """(key, image extension, image offset, image size, label) of every sample of one shard."""
    try:
        size = shard.stat().st_size
        tar = tarfile.open(shard, mode="r:")
    except FileNotFoundError:
        raise ShardDataError(f"shard {shard} does not exist; check the --data wds: pattern or list") from None
    except (tarfile.TarError, OSError) as err:
        raise ShardDataError(
            f"shard {shard} is not an uncompressed tar file ({err}); vitzoo reads .tar shards"
        ) from None
    found = []
    with tar:
        try:
            for sample in _samples_of(tar, shard, size):
                image = next((e for e in IMAGE_EXTENSIONS if e in sample.members), None)
                if image is None:
                    raise ShardDataError(
                        f"shard {shard}: sample {sample.key!r} has no image (members: "
                        f"{', '.join(sorted(sample.members))}); expected {sample.key}.jpg, .png or .webp"
                    )
                info = sample.members[image]
                found.append((sample.key, image, info.offset_data, info.size, _label(tar, shard, sample)))
        except (tarfile.TarError, EOFError, OSError) as err:
            last = f" after sample {found[-1][0]!r}" if found else ""
            raise ShardDataError(f"shard {shard} is truncated or damaged{last} ({err}); rewrite the shard") from None
    return found


def _class_names(shards: Sequence[Path], rows: Sequence[tuple[int, str, int, int, int]]) -> tuple[str, ...]:
    """The names in classes.txt beside the first shard (or in its parent folder); without one,
    the class indices as names, up to the largest label (`index_classes`)."""
    folder = shards[0].parent
    for candidate in (folder / CLASSES_NAME, folder.parent / CLASSES_NAME):
        if candidate.is_file():
            names = read_class_names(candidate, ShardDataError)
            top = max(rows, key=lambda row: row[2])
            if top[2] >= len(names):
                raise ShardDataError(
                    f"{candidate} names {len(names)} classes but shard {shards[top[0]]}: sample {top[1]!r} has "
                    f"label {top[2]}; expected one name per class index"
                )
            return tuple(names)
    return index_classes(shards, rows, f"name the classes in a {CLASSES_NAME} beside the shards")


def index_classes(shards: Sequence[Path], rows: Sequence[tuple[int, str, int, int, int]], fix: str) -> tuple[str, ...]:
    """The class indices as names ("0", "1", ...) up to the largest label of `rows` (shard index,
    sample name, label, ...), for shards whose classes are not named: more than MAX_INDEX_CLASSES
    is refused naming the sample (`fix` says how to name the classes instead)."""
    top = max(rows, key=lambda row: row[2])
    if top[2] >= MAX_INDEX_CLASSES:
        raise ShardDataError(
            f"shard {shards[top[0]]}: sample {top[1]!r} has label {top[2]}; without class names the classes "
            f"are numbered up to the largest label, at most {MAX_INDEX_CLASSES} of them: {fix}"
        )
    return tuple(str(i) for i in range(max(top[2] + 1, 0)))


@dataclass(frozen=True, eq=False)
class ShardSamples(ImageFiles):
    """The samples of some shards, listed (see the module docstring): `paths` holds each sample's
    name for messages (`SHARD:KEY.EXT`), `shard_files` the shards, and per sample its shard's
    index, and the byte offset and size of its image."""

    shard_files: tuple[str, ...] = ()
    shard_of: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER

    def subset(self, index: torch.Tensor, source: str | None = None) -> ShardSamples:
        keep = np.sort(index.numpy())  # kept in shard order: a shard's samples stay together
        return dataclasses.replace(
            self,
            paths=self.paths.take(keep.tolist()),
            labels=self.labels[torch.from_numpy(keep)],
            source=source or self.source,
            shard_of=self.shard_of[keep],
            offsets=self.offsets[keep],
            sizes=self.sizes[keep],
        )

    def read_image(self, index: int, decode: Callable[[Any], torch.Tensor]) -> torch.Tensor:
        """`decode_image` on sample `index`'s image bytes, read by offset from its shard."""
        shard, offset, size = (
            self.shard_files[int(self.shard_of[index])],
            int(self.offsets[index]),
            int(self.sizes[index]),
        )
        try:
            with open(shard, "rb") as file:
                file.seek(offset)
                data = file.read(size)
        except OSError as err:
            raise UnreadableImageError(f"cannot read its shard: {err.strerror or type(err).__name__}") from err
        if len(data) != size:
            raise UnreadableImageError(f"its shard ends before the image's {size} bytes (truncated after the scan)")
        return decode_image(io.BytesIO(data), decode)

    def epoch_order(self, epoch: int, seed: int, rank: int, world_size: int) -> torch.Tensor:
        """This rank's sample indices for training `epoch` (see the module docstring)."""
        n_shards = len(self.shard_files)
        starts = np.searchsorted(self.shard_of, np.arange(n_shards + 1))
        shards = torch.randperm(n_shards, generator=torch.Generator().manual_seed(mix_seeds(seed, epoch, 3)))
        order = np.concatenate([np.arange(starts[s], starts[s + 1]) for s in shards.tolist()])
        per_rank = -(-len(order) // world_size)
        order = np.resize(order, per_rank * world_size)  # wraps around: the padding repeats the first samples
        mine = order[rank * per_rank : (rank + 1) * per_rank].tolist()
        return torch.tensor(
            shuffle_buffer(mine, self.shuffle_buffer, mix_seeds(seed, epoch, rank, 4)), dtype=torch.int64
        )


def shuffle_buffer(items: Sequence[int], size: int, seed: int) -> list[int]:
    """WebDataset's shuffle of a stream: a buffer of `size` items; each new item takes the place
    of a random one, which goes out; the rest leave in random order at the end."""
    rng = random.Random(seed)
    buffer: list[int] = []
    out: list[int] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        j = rng.randrange(size)
        out.append(buffer[j])
        buffer[j] = item
    rng.shuffle(buffer)
    return out + buffer


def _scan(shards: tuple[Path, ...]) -> list[list[tuple[str, str, int, int, int]]]:
    """Every shard's samples."""
    from tqdm.auto import tqdm

    return [_scan_shard(s) for s in tqdm(shards, desc="scanning shards", unit="shard", disable=len(shards) < 8)]


def _stamp(shard: Path) -> tuple[int, int]:
    try:
        st = shard.stat()
    except FileNotFoundError:
        raise ShardDataError(f"shard {shard} does not exist; check the --data wds: pattern or list") from None
    return st.st_size, st.st_mtime_ns


def read_shards(
    spec: str, *, source: str | None = None, strict: bool = False, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
) -> ShardSamples:
    """The samples of the shards `spec` names (see `expand_shards`), scanned and checked. Kept for
    the process (num_classes, then load) while the files are unchanged."""
    shards = tuple(expand_shards(spec))
    return _read(shards, tuple(_stamp(s) for s in shards), spec, source or spec, strict, shuffle_buffer)


@functools.lru_cache(maxsize=8)
def _read(
    shards: tuple[Path, ...], stamps: tuple[tuple[int, int], ...], spec: str, source: str, strict: bool, buffer: int
) -> ShardSamples:
    """read_shards, cached by the shards' sizes and modification times (`stamps`): the samples are
    kept in arrays (ShardSamples), the scan's Python objects are not."""
    scanned = _scan(shards)
    rows = [
        (i, f"{key}.{ext}", label, offset, size)
        for i, found in enumerate(scanned)
        for key, ext, offset, size, label in found
    ]
    if not rows:
        raise ShardDataError(f"{spec}: the shards hold no samples; expected KEY.jpg + KEY.cls members")
    classes = _class_names(shards, rows)
    return build_samples(ShardSamples, shards, rows, classes, source=source, strict=strict, shuffle_buffer=buffer)


def build_samples(
    kind: type[S],
    shards: Sequence[Path],
    rows: Sequence[tuple[int, str, int, int, int]],
    classes: Sequence[str],
    *,
    source: str,
    strict: bool,
    shuffle_buffer: int,
    **extra: Any,
) -> S:
    """`kind` (ShardSamples or a subclass) from rows (shard index, sample name, label, offset,
    size), every label checked to be a class index."""
    bad = next((row for row in rows if not 0 <= row[2] < len(classes)), None)  # Python ints: any size
    if bad is not None:
        raise ShardDataError(
            f"shard {shards[bad[0]]}: sample {bad[1]!r} has label {bad[2]}; "
            f"expected a class index in [0, {len(classes) - 1}]"
        )
    labels = np.array([row[2] for row in rows], dtype=np.int64)
    return kind(
        PathTable([f"{shards[row[0]]}:{row[1]}" for row in rows]),
        torch.from_numpy(labels),
        tuple(classes),
        source,
        strict,
        tuple(os.fspath(s) for s in shards),
        np.array([row[0] for row in rows], dtype=np.int64),
        np.array([row[3] for row in rows], dtype=np.int64),
        np.array([row[4] for row in rows], dtype=np.int64),
        shuffle_buffer,
        **extra,
    )


def split_folders(spec: str) -> tuple[str, str] | None:
    """(train, val) shard folders when `spec` is a directory with train/ and val/ subfolders."""
    root = Path(spec).expanduser()
    if (root / "train").is_dir():
        if not (root / "val").is_dir():
            return None
        return os.fspath(root / "train"), os.fspath(root / "val")
    return None


def load_shards(
    spec: str,
    *,
    val_split: float | None = None,
    seed: int = 0,
    strict: bool = False,
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    read: Callable[..., ShardSamples] = read_shards,
    find_splits: Callable[[str], tuple[str, str] | None] = split_folders,
    name: str = "wds",
) -> DataSplits:
    """The train and evaluation splits of shards: a directory with train/ and val/ shard folders,
    or shards (pattern, list, directory) of which a seeded per-class `val_split` fraction (default
    0.2) is held out for evaluation, as for an image folder. `read`, `find_splits` and `name`: those
    of another kind of shard (vitzoo/data/parquet_shards.py)."""
    if shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer={shuffle_buffer} is invalid; expected an int >= 1")
    dirs = find_splits(spec)
    train: ImageFiles
    val: ImageFiles
    if dirs is not None:
        train = read(dirs[0], strict=strict, shuffle_buffer=shuffle_buffer)
        val = read(dirs[1], strict=strict, shuffle_buffer=shuffle_buffer)
        if val.classes != train.classes:
            raise ShardDataError(
                f"{spec}: train/ and val/ have different classes ({len(train.classes)} and {len(val.classes)}); "
                f"name them in a {CLASSES_NAME} beside the shards (without one, the largest label of each split counts)"
            )
    else:
        root = Path(spec).expanduser()
        where = os.fspath(root / "train") if (root / "train").is_dir() else spec
        everything = read(where, strict=strict, shuffle_buffer=shuffle_buffer)
        train, val = split_off_val(everything, val_split, seed, spec)
    if train.num_classes < 2:
        raise ShardDataError(f"{spec}: the shards hold {train.num_classes} class; classification needs at least 2")
    return DataSplits(train=train, val=val, name=name, kind="natural")


def shard_num_classes(spec: str) -> int:
    """The number of classes: classes.txt's names, else the largest label + 1 (scans the shards)."""
    dirs = split_folders(spec)
    root = Path(spec).expanduser()
    return read_shards(
        dirs[0] if dirs else os.fspath(root / "train") if (root / "train").is_dir() else spec
    ).num_classes
