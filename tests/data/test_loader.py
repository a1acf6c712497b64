"""vitzoo/data/loader.py: seeded order, resumable iteration, rank sharding."""

from __future__ import annotations

import torch

from vitzoo.data import BatchLoader, ImageTensors


def _data(n: int = 10) -> ImageTensors:
    images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 1, 2, 2).contiguous()
    return ImageTensors(images, torch.arange(n) % 3, ("a", "b", "c"), "toy")


def _ids(loader: BatchLoader, epoch: int, start: int = 0) -> list[int]:
    return [int(v) for x, _ in loader.iterate(epoch, start) for v in x[:, 0, 0, 0]]


def identity(x: torch.Tensor, g: torch.Generator | None = None) -> torch.Tensor:
    return x.float() + torch.rand(len(x), 1, 1, 1, generator=g) * 0  # uses the generator


def test_order_is_seeded_per_epoch_and_resumable() -> None:
    loader = BatchLoader(_data(), batch_size=3, transform=identity, shuffle=True, seed=5)
    e0, e1 = _ids(loader, 0), _ids(loader, 1)
    assert sorted(e0) == list(range(10)) and e0 != e1 and e0 == _ids(loader, 0)
    assert _ids(loader, 1, start=2) == e1[6:]  # resuming at step 2 skips exactly 2 batches
    assert len(loader) == 4


def test_ranks_partition_the_epoch_with_equal_step_counts() -> None:
    loaders = [
        BatchLoader(_data(), batch_size=2, transform=identity, shuffle=True, seed=1, rank=r, world_size=3)
        for r in range(3)
    ]
    shards = [_ids(loader, 0) for loader in loaders]
    assert all(len(s) == 4 for s in shards)  # 10 padded to 12, 4 each
    assert set().union(*shards) == set(range(10))
    evals = [
        BatchLoader(_data(), batch_size=2, transform=identity, shuffle=False, rank=r, world_size=3) for r in range(3)
    ]
    assert sorted(v for loader in evals for v in _ids(loader, 0)) == list(range(10))  # no padding for evaluation
