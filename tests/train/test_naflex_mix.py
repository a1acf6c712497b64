"""vitzoo/train/naflex_mix.py: Mixup on patch grids equals timm's variable-size Mixup of the
images for the same pairs and weight; CutMix replaces a box of the partner's patches inside the
overlap and the targets carry exactly each image's share; padding is never touched; erasing
stays inside valid patches; every draw comes from the seed."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from vitzoo.train.naflex_mix import NaFlexMixer, PatchErasing, grid_shape, mix_patches, mixed_targets

P, C = 4, 5
# grids whose differences are even: the centred overlap is whole patches in pixels too
GRIDS = [(4, 6), (6, 4), (2, 8), (4, 4), (6, 6), (2, 2), (8, 2)]


def _images(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(3, r * P, c * P, generator=generator) for r, c in GRIDS]


def _batch(images: list[torch.Tensor], seq_len: int = 70) -> dict[str, torch.Tensor]:
    """Float images (C, H, W) as a NaFlex batch: row-major patches, each (row, column, channel)."""
    batch = {
        PATCHES: torch.full((len(images), seq_len, P * P * 3), 7.0),  # padding that must stay as it is
        PATCH_COORD: torch.zeros(len(images), seq_len, 2, dtype=torch.int64),
        PATCH_VALID: torch.zeros(len(images), seq_len, dtype=torch.bool),
    }
    for i, image in enumerate(images):
        rows, cols = image.shape[1] // P, image.shape[2] // P
        n = rows * cols
        batch[PATCHES][i, :n] = image.reshape(3, rows, P, cols, P).permute(1, 3, 2, 4, 0).reshape(n, -1)
        grid = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        batch[PATCH_COORD][i, :n] = torch.stack([g.flatten() for g in grid], dim=1)
        batch[PATCH_VALID][i, :n] = True
    return batch


def test_mixup_is_timms_on_the_same_pairs_and_weight() -> None:
    naflex_mixup = pytest.importorskip("timm.data.naflex_mixup", reason="needs timm >= 1.0.16 (its NaFlex Mixup)")
    images = _images()
    torch.manual_seed(3)
    mixed, kept, pairs = naflex_mixup.mix_batch_variable_size(images, mixup_alpha=0.8, cutmix_alpha=0.0)
    torch.manual_seed(3)
    lam = float(torch.distributions.Beta(0.8, 0.8).sample())  # the draw timm made
    batch = _batch(images)
    ours, our_kept = mix_patches(batch, pairs, lam, cutmix=False)
    expected = _batch(mixed)
    assert torch.equal(ours[PATCHES], expected[PATCHES])
    assert our_kept == pytest.approx(kept, abs=1e-12)
    labels = torch.arange(len(images)) % C
    theirs = naflex_mixup.pairwise_mixup_target(labels, pairs, kept, num_classes=C, smoothing=0.1)
    assert torch.allclose(mixed_targets(labels, pairs, our_kept, C, 0.1), theirs, atol=1e-7)


@pytest.mark.parametrize("lam", [0.3, 0.75])
def test_cutmix_pastes_a_box_of_the_partner_and_targets_count_it(lam: float) -> None:
    images = _images(1)
    batch = _batch(images)
    pairs = {0: 1, 1: 0, 2: 3, 3: 2, 4: 5, 5: 4}  # 6 is the odd one out
    out, kept = mix_patches(batch, pairs, lam, cutmix=True, generator=torch.Generator().manual_seed(0))
    valid = batch[PATCH_VALID]
    assert torch.equal(out[PATCHES][~valid], batch[PATCHES][~valid])  # padding untouched
    assert torch.equal(out[PATCHES][6], batch[PATCHES][6]) and kept[6] == 1.0
    for i, j in pairs.items():
        changed = (out[PATCHES][i] != batch[PATCHES][i]).any(-1)
        n = int(valid[i].sum())
        assert kept[i] == pytest.approx(1 - int(changed.sum()) / n)  # the label weight is the patches kept
        for k in torch.nonzero(changed).flatten():  # each pasted patch is one of the partner's
            assert (batch[PATCHES][j, : int(valid[j].sum())] == out[PATCHES][i, k]).all(-1).any()
        rows, cols = batch[PATCH_COORD][i][changed].unbind(-1)
        if len(rows):  # a rectangle
            assert int(changed.sum()) == (int(rows.max() - rows.min()) + 1) * (int(cols.max() - cols.min()) + 1)


def test_mixer_targets_sum_to_one_and_are_seeded() -> None:
    batch, labels = _batch(_images(2)), torch.tensor([0, 1, 2, 3, 4, 0, 1])
    mixer = NaFlexMixer(num_classes=C, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    state = torch.get_rng_state()
    a, ta = mixer(batch, labels, seed=11)
    b, tb = mixer(batch, labels, seed=11)
    assert torch.equal(torch.get_rng_state(), state)  # the global generator is left alone
    assert torch.equal(a[PATCHES], b[PATCHES]) and torch.equal(ta, tb)
    assert torch.allclose(ta.sum(1), torch.ones(len(labels)))
    others = [mixer(batch, labels, seed=s)[1] for s in range(12, 20)]
    assert any(not torch.equal(ta, t) for t in others)
    off = NaFlexMixer(num_classes=C, mixup_alpha=0.8, prob=0.0)(batch, labels, seed=1)
    assert off[0] is batch and torch.allclose(off[1].argmax(1), labels)


def test_erasing_stays_inside_valid_patches() -> None:
    batch = _batch(_images(3))
    before = batch[PATCHES].clone()
    for seed in range(5):
        PatchErasing(prob=1.0, value=0.0)(batch, torch.Generator().manual_seed(seed))
    valid = batch[PATCH_VALID]
    erased = (batch[PATCHES] != before).any(-1)
    assert erased.any() and not (erased & ~valid).any()
    assert torch.equal(batch[PATCHES][~valid], before[~valid])
    assert (batch[PATCHES][erased] == 0).all()
    for i in range(len(GRIDS)):
        assert grid_shape(batch[PATCH_COORD][i], valid[i]) == GRIDS[i]
    unchanged = _batch(_images(3))
    PatchErasing(prob=0.0)(unchanged, torch.Generator().manual_seed(0))
    assert torch.equal(unchanged[PATCHES], before)
