"""vitzoo/train/mix.py: Mixup / CutMix targets are probability rows made of the two mixed labels,
the images are what the targets say, every draw comes from the seed (and leaves the global RNG
alone), label smoothing folds in exactly, and training with them runs end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_model

from vitzoo.data import DataSplits
from vitzoo.train import TrainConfig, fit
from vitzoo.train.mix import Mixer, smooth_one_hot, step_seed
from vitzoo.train.step import classification_loss

C = 10


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(n, 1, 28, 28, generator=generator), torch.randint(C, (n,), generator=generator)


def _lam(targets: torch.Tensor, labels: torch.Tensor, smoothing: float = 0.0) -> torch.Tensor:
    """Each row's weight of its own image, read back from its target."""
    own = targets.gather(1, labels[:, None]).squeeze(1) - smoothing / C
    return own / (1 - smoothing)


@pytest.mark.parametrize(
    "mixup, cutmix, smoothing",
    [(0.8, 0.0, 0.0), (0.0, 1.0, 0.0), (0.8, 1.0, 0.1), (0.2, 0.2, 0.1)],
)
def test_targets_are_probabilities_of_the_two_mixed_labels(mixup: float, cutmix: float, smoothing: float) -> None:
    x, y = _batch()
    mixer = Mixer(num_classes=C, mixup_alpha=mixup, cutmix_alpha=cutmix, label_smoothing=smoothing)
    for step in range(8):
        _, targets = mixer(x, y, seed=step)
        assert targets.shape == (16, C) and (targets >= 0).all()
        torch.testing.assert_close(targets.sum(-1), torch.ones(16))
        # all the mass beyond smoothing is on each image's label and its neighbour's (the batch rolled by one)
        lam = _lam(targets, y, smoothing)
        partner = y.roll(1, 0)
        expected = (1 - smoothing) * (lam[:, None] * F.one_hot(y, C) + (1 - lam[:, None]) * F.one_hot(partner, C))
        torch.testing.assert_close(targets, expected + smoothing / C)


def test_mixup_images_are_the_blend_the_targets_state() -> None:
    x, y = _batch()
    y = torch.arange(16) % C  # neighbours differ: lam can be read back
    mixed, targets = Mixer(num_classes=C, mixup_alpha=0.8)(x, y, seed=3)
    lam = _lam(targets, y)[0]
    torch.testing.assert_close(mixed, lam * x + (1 - lam) * x.roll(1, 0))


def test_cutmix_pastes_a_box_whose_area_the_targets_state() -> None:
    x, y = _batch()
    y = torch.arange(16) % C
    for seed in range(5):
        mixed, targets = Mixer(num_classes=C, cutmix_alpha=1.0)(x, y, seed=seed)
        from_neighbour = (mixed == x.roll(1, 0)) & (mixed != x)
        assert ((mixed == x) | from_neighbour).all()  # every pixel is the image's own or its neighbour's
        pasted = from_neighbour[0, 0].float().mean()
        torch.testing.assert_close(1 - _lam(targets, y)[0], pasted)


def test_switch_and_mix_probability_choose_the_operation() -> None:
    x, y = _batch()
    for seed in range(4):
        cut, _ = Mixer(num_classes=C, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=1.0)(x, y, seed=seed)
        assert ((cut == x) | (cut == x.roll(1, 0))).all()  # always CutMix: no blended pixel
    same, targets = Mixer(num_classes=C, mixup_alpha=0.8, prob=0.0, label_smoothing=0.1)(x, y, seed=0)
    assert same is x
    torch.testing.assert_close(targets, smooth_one_hot(y, C, 0.1))


def test_seeded_repeatable_and_the_global_rng_untouched() -> None:
    x, y = _batch()
    mixer = Mixer(num_classes=C, mixup_alpha=0.8, cutmix_alpha=1.0)
    state = torch.get_rng_state()
    first, again = mixer(x, y, seed=step_seed(0, 1, 2, 0)), mixer(x, y, seed=step_seed(0, 1, 2, 0))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert torch.equal(torch.get_rng_state(), state)  # dropout etc. draw the same numbers as without mixing
    others = [mixer(x, y, seed=step_seed(0, 1, step, 0))[1] for step in range(3, 8)]
    assert not all(torch.equal(first[1], t) for t in others)
    assert step_seed(0, 1, 2, 0) != step_seed(0, 1, 2, 1)  # ranks mix differently


def test_smoothed_one_hot_targets_give_label_smoothed_cross_entropy() -> None:
    torch.manual_seed(0)
    logits, y = torch.randn(8, C), torch.randint(C, (8,))
    soft, _ = classification_loss(logits, smooth_one_hot(y, C, 0.1), 0.1)  # smoothing is not applied twice
    hard, _ = classification_loss(logits, y, 0.1)
    torch.testing.assert_close(soft, hard)


def test_invalid_mixing_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one > 0"):
        Mixer(num_classes=C)
    with pytest.raises(ValueError, match=r"mix_prob=1.5 is invalid; expected a probability in \[0, 1\]"):
        TrainConfig(mixup=0.8, mix_prob=1.5)
    with pytest.raises(ValueError, match=r"cutmix=-1.0 is invalid; expected a float >= 0"):
        TrainConfig(cutmix=-1.0)


def test_training_with_mixup_and_cutmix(small_splits: DataSplits, tmp_path: Path) -> None:
    config = TrainConfig(epochs=2, batch_size=32, lr=1e-2, progress=False, seed=7, mixup=0.8, cutmix=1.0)
    result = fit(tiny_model(), small_splits, config=config, out_dir=tmp_path)
    assert result.best_acc > 0.15  # it learns (chance: 0.10)
    assert json.loads((tmp_path / "run.json").read_text())["train_config"]["mixup"] == 0.8
