"""Fixtures of the probe tests: one torch thread (the machines running the suite are shared, and
several threads contending for two cores make small tensor work many times slower), a saved
vit_mnist_tiny with random weights, and clustered embeddings to classify."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import vitzoo


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved vit_mnist_tiny (random weights, seeded): `--weights DIR` for the commands."""
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("weights") / "tiny"
    vitzoo.save_pretrained(vitzoo.create("vit_mnist_tiny"), out)
    return out


def clustered(n_train: int = 400, n_test: int = 150, dim: int = 16, classes: int = 5, seed: int = 0):
    """(train x, train y, test x, test y): noisy points around one centre per class (continuous
    values: no two distances tie)."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g)
    y = torch.randint(0, classes, (n_train + n_test,), generator=g)
    x = centres[y] + 1.5 * torch.randn(n_train + n_test, dim, generator=g)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]
