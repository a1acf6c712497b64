"""Writing WebDataset shards from an image folder (`vitzoo shards FOLDER OUT`; docs/shards.md).

    write_shards("pets/", "pets-shards/", max_size=1 << 30)

Each image file is stored as it is (no re-encoding) as `KEY.EXT` with its class index as `KEY.cls`,
KEY the sample's number; the samples in a seeded random order, so every shard mixes the classes
(a shuffle buffer alone cannot mix shards written class by class). A shard is closed before it
would pass `max_size` bytes or `max_count` samples, and each is written under a temporary name and
renamed when complete: an interrupted run leaves whole shards only. A folder with train/ and val/
gives OUT/train/ and OUT/val/; the class names go to OUT/classes.txt, where `vitzoo.data.shards`
looks for them.
"""

from __future__ import annotations

import os
import random
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..atomic import atomic_path
from ..checks import nested
from .folder import FolderDataError, list_classes, unwritable_class_name
from .shards import CLASSES_NAME, IMAGE_EXTENSIONS, ShardDataError

__all__ = ["ShardSummary", "write_shards"]

_BLOCK = 512  # a tar header, and the unit member data is padded to


@dataclass(frozen=True)
class ShardSummary:
    """What one split became: its folder, shard files, samples and bytes written."""

    split: str
    folder: str
    shards: list[str]
    samples: int
    bytes: int


def _member_bytes(size: int) -> int:
    return _BLOCK + -(-size // _BLOCK) * _BLOCK


def _add(tar: tarfile.TarFile, name: str, path: str | None, data: bytes | None = None) -> None:
    """One member, from a file or from bytes, with a fixed time and owner (same input, same tar)."""
    info = tarfile.TarInfo(name)
    info.mtime, info.mode, info.uname, info.gname = 0, 0o644, "", ""
    if path is not None:
        info.size = os.path.getsize(path)
        with open(path, "rb") as file:
            tar.addfile(info, file)
    else:
        assert data is not None
        info.size = len(data)
        tar.addfile(info, _BytesReader(data))


class _BytesReader:
    """The file-like object tarfile reads member data from."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def read(self, n: int = -1) -> bytes:
        end = len(self.data) if n < 0 else self.at + n
        chunk, self.at = self.data[self.at : end], min(end, len(self.data))
        return chunk


def _groups(samples: list[tuple[str, int]], max_size: int, max_count: int) -> list[list[tuple[int, str, int]]]:
    """The samples (numbered) cut into shards of at most `max_size` bytes and `max_count` samples
        (a single sample larger than `max_size` gets a shard of its own); the size counts tar's headers,
    its padding of each member to 512 bytes and of the file to a 10 KiB record."""
    shards: list[list[tuple[int, str, int]]] = [[]]
    used = 2 * _BLOCK  # the end-of-archive blocks
    for number, (path, label) in enumerate(samples):
        size = _member_bytes(os.path.getsize(path)) + _member_bytes(len(str(label)))
        padded = -(-(used + size) // tarfile.RECORDSIZE) * tarfile.RECORDSIZE  # tarfile pads the file to a record
        if shards[-1] and (padded > max_size or len(shards[-1]) >= max_count):
            shards.append([])
            used = 2 * _BLOCK
        shards[-1].append((number, path, label))
        used += size
    return shards


def _write_split(samples: list[tuple[str, int]], out: Path, split: str, max_size: int, max_count: int) -> ShardSummary:
    from tqdm.auto import tqdm

    groups = _groups(samples, max_size, max_count)
    width = max(6, len(str(len(groups) - 1)))
    written, total = [], 0
    with tqdm(total=len(samples), desc=f"writing {split or 'shards'}", unit="image") as bar:
        for index, group in enumerate(groups):
            path = out / f"shard-{index:0{width}d}.tar"
            with atomic_path(path) as tmp, tarfile.open(tmp, mode="w", format=tarfile.USTAR_FORMAT) as tar:
                for number, image, label in group:
                    key = f"{number:09d}"
                    extension = Path(image).suffix.lower().lstrip(".")
                    _add(tar, f"{key}.{extension}", image)
                    _add(tar, f"{key}.cls", None, str(label).encode())
                    bar.update(1)
            written.append(os.fspath(path))
            total += path.stat().st_size
    return ShardSummary(split or "all", os.fspath(out), written, len(samples), total)


def _check_out(out: Path, overwrite: bool) -> None:
    """Refuse an OUT that holds anything, unless `overwrite`: then its old shards go first (a
    directory read as `wds:OUT` would otherwise mix them with the new ones)."""
    if out.exists() and not out.is_dir():
        raise ShardDataError(f"{out} exists and is not a directory; expected a new or empty output folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not overwrite:
        raise ShardDataError(
            f"{out} is not empty; choose a new output folder or pass --overwrite to replace its shards"
        )
    for folder in (out, out / "train", out / "val"):
        if folder.is_dir():
            for old in folder.glob("shard-*.tar"):
                old.unlink()


def write_shards(
    folder: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    max_size: int = 1 << 30,
    max_count: int = 100_000,
    seed: int = 0,
    overwrite: bool = False,
) -> list[ShardSummary]:
    """Write the image folder `folder` (class folders, or train/ and val/ of them) as shards in
    `out` (see the module docstring). Returns one summary per split written."""
    if max_size < tarfile.RECORDSIZE or max_count < 1:
        raise ValueError(
            f"max_size={max_size}, max_count={max_count}; expected max_size >= {tarfile.RECORDSIZE} and max_count >= 1"
        )
    root, target = Path(folder).expanduser(), Path(out).expanduser()
    if not root.is_dir():
        raise FolderDataError(f"image folder {root} does not exist or is not a directory")
    if nested(root, target):
        raise ShardDataError(
            f"output folder {target} and image folder {root} are the same or one holds the other; "
            "expected an output folder outside the image folder (shards written there would become its input)"
        )
    splits = ["train", "val"] if (root / "train").is_dir() and (root / "val").is_dir() else [""]
    listed = {split: list_classes(root / split if split else root) for split in splits}
    classes = listed[splits[0]][0]
    for names, _ in listed.values():
        if names != classes:
            raise FolderDataError(f"{root}: train/ and val/ must have the same class folders")
    for name in classes:
        why = unwritable_class_name(name)
        if why is not None:
            raise FolderDataError(
                f"{root}: class folder {name!r} cannot be named in {CLASSES_NAME} ({why}), which holds one name "
                "a line, surrounding whitespace dropped; rename the folder"
            )
    unsupported = sorted(
        {Path(p).suffix.lower() for _, s in listed.values() for p, _ in s} - {f".{e}" for e in IMAGE_EXTENSIONS}
    )
    if unsupported:
        raise FolderDataError(
            f"{root}: images with extensions {', '.join(unsupported)} cannot be stored as shard members"
        )
    _check_out(target, overwrite)
    summaries = []
    for split, (_, samples) in listed.items():
        random.Random(seed).shuffle(samples)
        summaries.append(_write_split(samples, target / split if split else target, split, max_size, max_count))
    with atomic_path(target / CLASSES_NAME) as tmp:
        tmp.write_text("".join(f"{name}\n" for name in classes), encoding="utf-8")
    return summaries
