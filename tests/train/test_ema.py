"""vitzoo/train/ema.py: the weight average's update rule, its buffers and its errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.train.ema import WeightEma


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))


def test_update_follows_the_warmed_up_decay() -> None:
    model = _net()
    ema = WeightEma(model, decay=0.99)
    assert not ema.module.training and not any(p.requires_grad for p in ema.module.parameters())
    expected = [p.detach().clone() for p in model.parameters()]
    for step in range(1, 200):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        model(torch.randn(8, 3))  # training-mode forward: BatchNorm's running statistics move
        d = min(0.99, (1 + step) / (10 + step))  # 0.18 at step 1: early weights are not remembered
        expected = [d * e + (1 - d) * p.detach() for e, p in zip(expected, model.parameters(), strict=True)]
        ema.update(model, step)
    for got, want in zip(ema.module.parameters(), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the average differs from the current weights; buffers are copied, not averaged
    assert not torch.allclose(ema.module[0].weight, model[0].weight)
    for got, want in zip(ema.module.buffers(), model.buffers(), strict=True):
        assert torch.equal(got, want)
    assert ema.decay_at(1) == pytest.approx(2 / 11) and ema.decay_at(10**6) == 0.99


def test_state_dict_round_trip() -> None:
    model = _net()
    ema = WeightEma(model, decay=0.9)
    with torch.no_grad():
        model[0].weight.add_(1.0)
    ema.update(model, 50)
    other = WeightEma(_net(), decay=0.9)
    other.load_state_dict(ema.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(other.module.parameters(), ema.module.parameters(), strict=True))


@pytest.mark.parametrize("decay", [0.0, 1.0, 1.5, -0.1])
def test_bad_decay_is_named(decay: float) -> None:
    with pytest.raises(ValueError, match=f"ema decay={decay!r}.*\\(0, 1\\)"):
        WeightEma(_net(), decay=decay)
