"""vitzoo/data/naflex_train.py: random crops keep area and aspect (relative to the image's) in range; a
whole-image crop is exactly `vitzoo.naflex.preprocess`; the token-budget batches hold at most the
budget, every image once per epoch, the same order for the same seed, the ranks' shares, and a
pass resumed at step k yields the batches an uninterrupted pass yields from k on."""

from __future__ import annotations

import pytest
import torch

import vitzoo
from vitzoo.data import ImageTensors
from vitzoo.data.naflex_train import NaFlexCrop, NaFlexTrainLoader, random_crop_box, token_schedule
from vitzoo.layers.naflex import PATCH_VALID, PATCHES
from vitzoo.naflex import NaFlexError, NaFlexSpec, preprocess

MODEL = vitzoo.create("deit_ti16", num_classes=3, img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2)
SPEC = NaFlexSpec.from_model(MODEL, 16)


def _images(n: int = 37, seed: int = 0) -> ImageTensors:
    """n uint8 squares (the in-memory store) of 3 classes."""
    generator = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n, 3, 40, 40), dtype=torch.uint8, generator=generator)
    return ImageTensors(images, torch.arange(n) % 3, ("a", "b", "c"), "test")


def test_random_crops_keep_area_and_aspect_in_range() -> None:
    generator = torch.Generator().manual_seed(0)
    for height, width in [(30, 90), (90, 30), (64, 64)]:
        for _ in range(50):
            top, left, h, w = random_crop_box(height, width, generator, scale=(0.2, 1.0), ratio=(3 / 4, 4 / 3))
            assert 0 <= top and top + h <= height and 0 <= left and left + w <= width
            assert 0.2 * 0.85 <= h * w / (height * width) <= 1.0
            relative = (w / h) / (width / height)  # to the image's own aspect: a wide image stays wide
            assert 3 / 4 * 0.85 <= relative <= 4 / 3 / 0.85


def test_a_whole_image_crop_is_exactly_the_evaluation_preprocessing() -> None:
    """Training differs from `vitzoo.naflex.preprocess` only by its crop and flip."""
    data = _images(6)
    whole = NaFlexCrop(SPEC, hflip=False, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    loader = NaFlexTrainLoader(data, crop=whole, seq_lens=(4, 9), max_tokens=18, seed=1)
    for (seq_len, idx), (batch, labels) in zip(loader.epoch_batches(0), loader.iterate(0)):
        expected = preprocess(MODEL, list(data.images[idx]), seq_len, pad_to_budget=True)
        assert batch.keys() == expected.keys() and all(torch.equal(batch[k], expected[k]) for k in batch)
        assert torch.equal(labels, data.labels[idx])
    tall = torch.randint(0, 256, (3, 90, 30), dtype=torch.uint8)
    for seed in range(10):  # random crops and flips stay within the budget, the image's aspect kept
        image = NaFlexCrop(SPEC)(tall, 16, torch.Generator().manual_seed(seed))
        rows, cols = image.shape[1] // 8, image.shape[2] // 8
        assert rows * cols <= 16 and rows > cols


def test_schedule_covers_every_image_within_the_token_budget() -> None:
    schedule = token_schedule(1000, (16, 32, 64), 256, seed=3)
    assert sum(size for _, size in schedule) == 1000
    assert all(size * seq_len <= 256 for seq_len, size in schedule)
    assert all(size == 256 // seq_len for seq_len, size in schedule[:-1])  # small budgets: bigger batches
    assert {seq_len for seq_len, _ in schedule} == {16, 32, 64}


def _loader(data: ImageTensors, **kwargs) -> NaFlexTrainLoader:
    options = dict(seq_lens=(4, 9, 16), max_tokens=64, seed=5)
    return NaFlexTrainLoader(data, crop=NaFlexCrop(SPEC), **{**options, **kwargs})


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


def test_bad_budgets_are_refused() -> None:
    with pytest.raises(NaFlexError, match="max_tokens=8 is below the longest sequence length 16"):
        _loader(_images(), seq_lens=(4, 16), max_tokens=8)
    with pytest.raises(NaFlexError, match="seq_lens"):
        _loader(_images(), seq_lens=(0,))


def test_files_are_read_at_their_own_size_and_an_unreadable_one_is_named(tmp_path) -> None:
    from PIL import Image

    from vitzoo.data.files import ImageFiles

    Image.new("RGB", (48, 16), (200, 10, 10)).save(tmp_path / "wide.png")
    (tmp_path / "broken.png").write_bytes(b"not a png")
    files = ImageFiles.from_samples([(str(tmp_path / "wide.png"), 0), (str(tmp_path / "broken.png"), 1)], "ab", "t")
    loader = NaFlexTrainLoader(
        files, crop=NaFlexCrop(SPEC, scale=(1.0, 1.0), ratio=(1.0, 1.0)), seq_lens=(12,), max_tokens=12
    )
    with pytest.raises(NaFlexError, match=r"cannot decode image .*broken\.png: cannot identify image file"):
        list(loader.iterate(0))
    good = NaFlexTrainLoader(files.subset(torch.tensor([0])), crop=loader.crop, seq_lens=(12,), max_tokens=12)
    batch, _ = next(good.iterate(0))
    rows, cols = (int(batch["patch_coord"][0, :, k].max()) + 1 for k in (0, 1))
    assert (rows, cols) == (2, 6)  # 48 x 16 at 12 patches of 8: the file's own 3:1 aspect
