"""`ImageFiles`: a split as image files on disk and their labels, decoded only when a batch needs them.

The streaming counterpart of `ImageTensors` (tensors.py), with the same reading interface (`len`,
`labels`, `classes`, `num_classes`, `source`, `subset`, `class_counts`), so the engine can ask
either for its size and classes. vitzoo/data/stream.py turns it into batches.

The paths are kept in one byte buffer plus offsets (`PathTable`) rather than in a list of Python
strings: DataLoader workers are forked from the training process, and merely reading a list of
strings updates each object's reference count, which copies every page holding one into each
worker. With a million paths that is tens of megabytes per worker, growing as an epoch goes on;
a NumPy buffer is never written, so its pages stay shared.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["ImageFiles", "PathTable"]


class PathTable:
    """An immutable sequence of file paths stored as one UTF-8 (file system encoding) buffer."""

    def __init__(self, paths: Sequence[str]) -> None:
        encoded = [os.fsencode(p) for p in paths]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        self._offsets = np.concatenate([np.zeros(1, dtype=np.int64), np.cumsum(lengths)])
        self._buffer = np.frombuffer(b"".join(encoded), dtype=np.uint8)

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, index: int) -> str:
        if not -len(self) <= index < len(self):
            raise IndexError(f"path index {index} out of range for {len(self)} paths")
        index %= len(self)
        start, end = self._offsets[index], self._offsets[index + 1]
        return os.fsdecode(self._buffer[start:end].tobytes())

    def take(self, indices: Sequence[int]) -> PathTable:
        return PathTable([self[int(i)] for i in indices])

    def nbytes(self) -> int:
        return int(self._buffer.nbytes + self._offsets.nbytes)


@dataclass(frozen=True, eq=False)
class ImageFiles:
    """One split of an image folder, listed but not decoded (see the module docstring)."""

    paths: PathTable
    labels: torch.Tensor  # int64 (N,)
    classes: tuple[str, ...]  # class index -> name
    source: str  # where it came from, for messages and run records
    strict: bool = False  # an unreadable image stops the run instead of being skipped

    def __post_init__(self) -> None:
        if self.labels.dtype != torch.int64 or self.labels.ndim != 1 or len(self.labels) != len(self.paths):
            raise ValueError(
                f"{self.source}: {len(self.paths)} paths but labels {self.labels.dtype} {tuple(self.labels.shape)}; "
                f"expected int64 ({len(self.paths)},)"
            )
        if len(self.labels) and (int(self.labels.min()) < 0 or int(self.labels.max()) >= len(self.classes)):
            raise ValueError(
                f"{self.source}: labels range over [{int(self.labels.min())}, {int(self.labels.max())}], "
                f"expected [0, {len(self.classes) - 1}] for {len(self.classes)} classes"
            )

    @classmethod
    def from_samples(
        cls, samples: Sequence[tuple[str, int]], classes: Sequence[str], source: str, *, strict: bool = False
    ) -> ImageFiles:
        """From [(path, class index)], as `vitzoo.data.folder` lists a split. A kept symbolic link
        (one to an image file in its own class folder) is stored as the file it names, so that
        loading can refuse any link met later (vitzoo/data/stream.py opens without following one):
        the folder may change between listing and the epoch that reads a file."""
        paths = [os.path.realpath(p) if os.path.islink(p) else p for p, _ in samples]
        labels = torch.tensor([label for _, label in samples], dtype=torch.int64)
        return cls(PathTable(paths), labels, tuple(classes), source, strict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def subset(self, index: torch.Tensor, source: str | None = None) -> ImageFiles:
        return ImageFiles(
            self.paths.take(index.tolist()), self.labels[index], self.classes, source or self.source, self.strict
        )

    def class_counts(self) -> list[int]:
        return torch.bincount(self.labels, minlength=self.num_classes).tolist()
