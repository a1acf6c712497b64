"""vitzoo/data/naflex.py: image sizes for a patch budget and patches as timm computes them; the
token-budget batches hold at most the budget, every image once per epoch, the same order for the
same seed, the ranks' shares, and a pass resumed at step k yields the batches an uninterrupted
pass yields from k on."""

from __future__ import annotations

import random

import pytest
import torch

from vitzoo.data import ImageTensors
from vitzoo.data.naflex import (
    PATCH_COORD,
    PATCH_VALID,
    PATCHES,
    NaFlexDataError,
    NaFlexLoader,
    NaFlexTransform,
    collate,
    patchify,
    size_for_budget,
    token_schedule,
)
from vitzoo.data.transforms import InputSpec


def _timm_naflex():
    return pytest.importorskip("timm.data.naflex_transforms", reason="needs timm >= 1.0.16 (its NaFlex transforms)")


SPEC = InputSpec(channels=3, size=(32, 32), mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), interpolation="bicubic")


def _images(n: int = 37, seed: int = 0) -> ImageTensors:
    """n uint8 squares (the in-memory store) of 3 classes."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 40, 40), dtype=torch.uint8, generator=generator)
    return ImageTensors(images, torch.arange(n) % 3, ("a", "b", "c"), "test")


def test_size_for_budget_is_timms() -> None:
    naflex_transforms = _timm_naflex()
    rng = random.Random(0)
    for _ in range(200):
        h, w, p, budget = rng.randint(1, 900), rng.randint(1, 900), rng.choice([4, 14, 16]), rng.randint(1, 700)
        expected = naflex_transforms.get_image_size_for_seq((h, w), patch_size=p, max_seq_len=budget)[1]
        assert size_for_budget(h, w, (p, p), budget) == expected, (h, w, p, budget)


def test_patchify_is_timms() -> None:
    naflex_transforms = _timm_naflex()
    image = torch.randn(3, 24, 40)
    patches, coord = patchify(image, (8, 8))
    theirs, their_coord, _ = naflex_transforms.patchify_image(image, (8, 8))
    assert torch.equal(patches, theirs) and torch.equal(coord, their_coord)


def test_transform_keeps_the_budget_and_normalises() -> None:
    image = torch.randint(0, 256, (3, 30, 90), dtype=torch.uint8)
    evaluate = NaFlexTransform(SPEC, patch_size=8, train=False)
    patches, coord = evaluate(image, 24)
    rows, cols = int(coord[:, 0].max()) + 1, int(coord[:, 1].max()) + 1
    assert rows * cols == len(patches) <= 24 and cols > rows  # the image's aspect, about 1:3
    train = NaFlexTransform(SPEC, patch_size=8, train=True)
    for seed in range(20):
        patches, coord = train(image, 24, torch.Generator().manual_seed(seed))
        assert len(patches) <= 24 and patches.shape[1] == 8 * 8 * 3
    # a uniform grey image normalises to (grey - mean) / std in every pixel's channel slot
    grey = torch.full((3, 16, 16), 128, dtype=torch.uint8)
    patches, _ = evaluate(grey, 4)
    expected = (128 / 255 - torch.tensor(SPEC.mean)) / torch.tensor(SPEC.std)
    assert torch.allclose(patches.view(len(patches), -1, 3), expected.expand(len(patches), 64, 3), atol=1e-5)


def test_collate_pads_invalid_zeros() -> None:
    a, b = patchify(torch.randn(3, 8, 16), (8, 8)), patchify(torch.randn(3, 16, 8), (8, 8))
    batch = collate([a, b], 5)
    assert batch[PATCHES].shape == (2, 5, 192) and batch[PATCH_VALID].sum(1).tolist() == [2, 2]
    assert not batch[PATCHES][~batch[PATCH_VALID]].any() and not batch[PATCH_COORD][~batch[PATCH_VALID]].any()


def test_schedule_covers_every_image_within_the_token_budget() -> None:
    schedule = token_schedule(1000, (16, 32, 64), 256, seed=3)
    assert sum(size for _, size in schedule) == 1000
    assert all(size * seq_len <= 256 for seq_len, size in schedule)
    assert all(size == 256 // seq_len for seq_len, size in schedule[:-1])  # small budgets: bigger batches
    assert {seq_len for seq_len, _ in schedule} == {16, 32, 64}


def _loader(data: ImageTensors, **kwargs) -> NaFlexLoader:
    options = dict(seq_lens=(4, 9, 16), max_tokens=64, shuffle=True, seed=5)
    return NaFlexLoader(data, transform=NaFlexTransform(SPEC, patch_size=8, train=True), **{**options, **kwargs})


def test_each_epoch_sees_every_image_once_in_a_seeded_order() -> None:
    data = _images()
    loader = _loader(data)
    batches = list(loader.iterate(0))
    assert len(batches) == len(loader)
    seen = torch.cat([y for _, y in batches])
    order = torch.cat([idx for _, idx in loader.epoch_batches(0)])
    assert sorted(order.tolist()) == list(range(len(data))) and torch.equal(seen, data.labels[order])
    for batch, _ in batches:
        assert batch[PATCHES].shape[0] * batch[PATCHES].shape[1] <= 64
        assert int(batch[PATCH_VALID].sum(1).max()) <= batch[PATCHES].shape[1]
    again = list(_loader(data).iterate(0))
    assert all(torch.equal(a[0][PATCHES], b[0][PATCHES]) for a, b in zip(batches, again))
    other = torch.cat([idx for _, idx in loader.epoch_batches(1)])
    assert not torch.equal(order, other) and sorted(other.tolist()) == list(range(len(data)))


def test_a_pass_resumed_at_step_k_yields_the_same_batches() -> None:
    loader = _loader(_images(), hook=lambda batch, g: batch[PATCHES].add_(torch.rand((), generator=g)))
    full = list(loader.iterate(2))
    resumed = list(loader.iterate(2, start_step=3))
    assert len(resumed) == len(full) - 3
    for (a, ya), (b, yb) in zip(full[3:], resumed):
        assert torch.equal(ya, yb) and all(torch.equal(a[k], b[k]) for k in a)


def test_ranks_split_the_epoch_and_step_together() -> None:
    data = _images(37)
    ranks = [_loader(data, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])
    assert [s for s, _ in ranks[0].epoch_batches(0)] == [s for s, _ in ranks[1].epoch_batches(0)]
    shares = [r.indices(0) for r in ranks]
    assert len(shares[0]) == len(shares[1]) == 19  # 37 padded to 38 by wrapping around
    assert set(torch.cat(shares).tolist()) == set(range(37))
    single = _loader(data).indices(0)
    assert torch.equal(shares[0], single[0::2]) and torch.equal(shares[1][:-1], single[1::2])


def test_evaluation_is_in_order_at_the_longest_length_unpadded() -> None:
    data = _images(37)
    loader = NaFlexLoader(
        data,
        transform=NaFlexTransform(SPEC, patch_size=8, train=False),
        seq_lens=(4, 16),
        max_tokens=64,
        shuffle=False,
        rank=1,
        world_size=2,
    )
    batches = loader.epoch_batches(0)
    assert {s for s, _ in batches} == {16} and torch.equal(torch.cat([i for _, i in batches]), torch.arange(1, 37, 2))


def test_bad_budgets_are_refused() -> None:
    with pytest.raises(NaFlexDataError, match="max_tokens=8 is below the longest sequence length 16"):
        _loader(_images(), seq_lens=(4, 16), max_tokens=8)
    with pytest.raises(NaFlexDataError, match="seq_lens"):
        _loader(_images(), seq_lens=(0,))
