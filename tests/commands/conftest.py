"""Fixtures of the command tests: the tiny models `vitzoo finetune` / `vitzoo eval` train and
evaluate, and one torch thread for those runs (tests/train/conftest.py says why)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
import torch

from vitzoo import registry

from .training import TRAIN_TESTS

sys.path.insert(0, str(TRAIN_TESTS))
from _worker import register_tiny, register_tiny_rgb


@pytest.fixture
def tiny_models() -> Iterator[None]:
    register_tiny()
    register_tiny_rgb()
    yield
    for name in ("test_tiny_vit", "test_tiny_rgb"):
        if name in registry.snapshot():
            registry.unregister(name)


@pytest.fixture
def one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
