"""`BatchLoader`: batches out of in-memory uint8 tensors, augmented a whole batch at a time.

Replaces DataLoader + DistributedSampler for data that fits in memory: no worker processes
(which on 2 cores would only compete with the model), no per-image Python work. Order and
augmentation are pure functions of (seed, epoch, step, rank), so:

* `--seed` makes runs repeatable, and
* a run resumed at step k of epoch e gets the same batches as one that never stopped
  (`iterate(epoch, start_step=k)`), with no generator state to save.

Under DistributedDataParallel every rank takes its own slice of the same epoch permutation
(padded by wrapping around so all ranks run the same number of steps, as DistributedSampler does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from .tensors import ImageTensors

Transform = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


def mix_seeds(*values: int) -> int:
    """A 63-bit seed from several ints (a simple multiplicative hash; only needs to decorrelate)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = ((h ^ (v & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
    return h & 0x7FFFFFFFFFFFFFFF


class BatchLoader:
    def __init__(
        self,
        data: ImageTensors,
        *,
        batch_size: int,
        transform: Transform,
        shuffle: bool,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        pad_to_equal: bool | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size} is invalid; expected an int >= 1")
        if len(data) == 0:
            raise ValueError(f"{data.source} is empty; expected at least one image")
        self.data, self.batch_size, self.transform = data, batch_size, transform
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        # Training ranks must step in lockstep (DDP all-reduces every step): pad. Evaluation
        # shards must not repeat images (counts are summed across ranks): don't.
        self.pad_to_equal = shuffle if pad_to_equal is None else pad_to_equal

    def indices(self, epoch: int) -> torch.Tensor:
        """This rank's image indices for `epoch`, in order."""
        n = len(self.data)
        if self.shuffle:
            order = torch.randperm(n, generator=torch.Generator().manual_seed(mix_seeds(self.seed, epoch)))
        else:
            order = torch.arange(n)
        if self.world_size > 1:
            if self.pad_to_equal:
                total = -(-n // self.world_size) * self.world_size
                order = torch.cat([order, order[: total - n]]) if total > n else order
            order = order[self.rank :: self.world_size]
        return order

    def __len__(self) -> int:
        return -(-len(self.indices(0)) // self.batch_size)

    def num_images(self) -> int:
        return len(self.indices(0))

    def iterate(self, epoch: int = 0, start_step: int = 0) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _, _, x, y in self.iterate_indexed(epoch, start_step):
            yield x, y

    def iterate_indexed(
        self, epoch: int = 0, start_step: int = 0
    ) -> Iterator[tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
        """(step, image indices, input batch, labels) for steps start_step, start_step + 1, ... of `epoch`."""
        order = self.indices(epoch)
        for step in range(start_step, -(-len(order) // self.batch_size)):
            idx = order[step * self.batch_size : (step + 1) * self.batch_size]
            generator = torch.Generator().manual_seed(mix_seeds(self.seed, epoch, step, self.rank, 1))
            yield step, idx, self.transform(self.data.images[idx], generator), self.data.labels[idx]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self.iterate(0)
