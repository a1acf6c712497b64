"""Small models and data for the training tests (seconds, not minutes, on 2 CPU cores)."""

from __future__ import annotations

import pytest
import torch

import vitzoo
from vitzoo.data import DataSplits, load_mnist_sample

TINY = dict(
    patch_size=7, conv_stem=(), embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0, class_token=True, global_pool="token"
)


def tiny_model(seed: int = 0, **overrides) -> torch.nn.Module:
    torch.manual_seed(seed)
    return vitzoo.create("vit_mnist", **{**TINY, **overrides})


@pytest.fixture(scope="session")
def small_splits() -> DataSplits:
    """400 training and 200 test digits of the embedded sample, class-balanced."""
    full = load_mnist_sample()
    train_idx = torch.cat([torch.nonzero(full.train.labels == c).flatten()[:40] for c in range(10)]).sort().values
    val_idx = torch.cat([torch.nonzero(full.val.labels == c).flatten()[:20] for c in range(10)]).sort().values
    return DataSplits(
        train=full.train.subset(train_idx), val=full.val.subset(val_idx), name="mnist-sample", kind="digits"
    )


@pytest.fixture(autouse=True, scope="session")
def one_thread():
    """These models are tiny: a second intra-op thread buys nothing, and on a shared 2-core
    machine OpenMP threads that wait on each other make every step many times slower."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
