"""Fixtures of the command tests: the tiny models `vitzoo finetune` / `vitzoo eval` train and
evaluate, one torch thread for those runs (tests/train/conftest.py says why), and vitzoo.optimize
tuning short runs cheaply (`tune_short_runs`)."""

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


@pytest.fixture
def tune_short_runs(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list[tuple[int, ...]]:
    """vitzoo.optimize tunes a run of any length, with the model as given its one candidate (nothing
    compiled) timed over one call a round (the tuning costs a few calls), its choices cached under tmp_path. Yields the shapes
    of the batches the tuned runner served (padded ones at the tuned size)."""
    from vitzoo import inference
    from vitzoo.inference import candidates, choose, timing

    monkeypatch.setattr(choose, "MIN_CALLS", 1)
    monkeypatch.setattr(candidates, "candidate_names", lambda device="cpu": ["eager"])
    monkeypatch.setenv("VITZOO_CACHE", str(tmp_path / "optimize-cache"))

    monkeypatch.setattr(choose, "MIN_RUN_S", 0.0)
    monkeypatch.setattr(timing, "ROUND_S", 0.0)  # each timing one call, not ~0.2 s of calls
    served: list[tuple[int, ...]] = []
    run = inference.OptimizedModule._run

    def counted(self: inference.OptimizedModule, x: torch.Tensor) -> object:
        served.append(tuple(x.shape))
        return run(self, x)

    monkeypatch.setattr(inference.OptimizedModule, "_run", counted)
    return served
