"""DropPath: identity in eval; in train it zeroes whole samples and rescales the survivors."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers.drop_path import DropPath, drop_path


def test_identity_in_eval_and_at_rate_zero():
    x = torch.randn(8, 5, 4)
    layer = DropPath(0.5).eval()
    assert layer(x) is x
    assert drop_path(x, 0.0, training=True) is x
    assert DropPath(0.0).train()(x) is x


def test_drops_whole_samples_in_train():
    torch.manual_seed(0)
    x = torch.randn(256, 6, 3) + 5.0  # never zero, so a zero means "dropped"
    out = DropPath(0.25).train()(x)
    keep_prob = 0.75
    dropped = (out == 0).flatten(1)
    # Every sample is either entirely dropped or entirely kept (and scaled by 1 / keep_prob).
    assert torch.all(dropped.all(dim=1) | ~dropped.any(dim=1))
    kept = ~dropped.all(dim=1)
    torch.testing.assert_close(out[kept], x[kept] / keep_prob)
    assert 0 < int((~kept).sum()) < 256  # some dropped, some kept


def test_expectation_is_preserved():
    torch.manual_seed(0)
    x = torch.ones(20000, 2)
    out = drop_path(x, 0.3, training=True)
    # Mean over samples of a Bernoulli(0.7) / 0.7: 1 +- ~0.005 (std of the mean at n = 20000).
    assert out.mean().item() == pytest.approx(1.0, abs=0.03)
    assert 0.66 < (out[:, 0] != 0).float().mean().item() < 0.74


@pytest.mark.parametrize("rate", [-0.1, 1.0, 1.5])
def test_rate_outside_zero_one_is_a_value_error(rate):
    with pytest.raises(ValueError, match="drop_prob"):
        DropPath(rate)
