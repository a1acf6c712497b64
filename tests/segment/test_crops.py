"""vitzoo/segment/crops.py: windows tile an image flush with its borders; resizing keeps masks'
labels (nearest); random crops are the crop size, padded with the ignored label."""

from __future__ import annotations

import pytest
import torch

from vitzoo.data.masks import IGNORE_INDEX
from vitzoo.segment.crops import Geometry, SegmentSettingsError, padded, random_crop, windows


def test_windows_cover_every_pixel_and_end_flush_with_the_border():
    tiles = windows(100, 70, 32, 24)
    covered = torch.zeros(100, 70)
    for top, left, h, w in tiles:
        assert (h, w) == (32, 32)
        covered[top : top + h, left : left + w] += 1
    assert bool((covered > 0).all())
    assert max(t for t, _, _, _ in tiles) == 100 - 32 and max(left for _, left, _, _ in tiles) == 70 - 32
    assert windows(20, 70, 32, 24)[0][2] == 20  # an image smaller than the window: the window is cut to it


def test_resizing_keeps_the_aspect_to_whole_patches_and_the_mask_labels():
    geometry = Geometry(patch=(8, 8), crop=32, stride=16, size=40)
    image = torch.randint(0, 256, (3, 30, 61), dtype=torch.uint8)
    mask = torch.randint(0, 4, (30, 61), dtype=torch.uint8)
    mask[0] = IGNORE_INDEX
    big, big_mask = geometry.resized(image, mask)
    assert big.shape == (3, 40, 80) and big_mask is not None and big_mask.shape == (40, 80)
    assert set(big_mask.unique().tolist()) <= {0, 1, 2, 3, IGNORE_INDEX}


def test_random_crops_are_the_crop_size_padded_with_the_ignored_label():
    geometry = Geometry(patch=(8, 8), crop=32, stride=16)
    image = torch.randint(0, 256, (3, 24, 40), dtype=torch.uint8)
    mask = torch.ones(24, 40, dtype=torch.uint8)
    generator = torch.Generator().manual_seed(0)
    crop, crop_mask = random_crop(geometry, image, mask, (0.5, 0.6), generator)
    assert crop.shape[-2:] == crop_mask.shape and crop.shape[-1] <= 32
    x, target = padded(crop.float(), crop_mask, 32)
    assert x.shape == (3, 32, 32) and target.shape == (32, 32)
    assert bool((target[crop_mask.shape[0] :] == IGNORE_INDEX).all())
    assert bool((target[: crop_mask.shape[0], : crop_mask.shape[1]] == 1).all())


def test_a_size_beyond_the_decompression_bomb_limit_is_refused_before_resizing():
    geometry = Geometry(patch=(8, 8), crop=32, stride=16, size=200_000)
    with pytest.raises(SegmentSettingsError, match="size=200000 would resize a 40x30 image"):
        geometry.resized(torch.zeros(3, 30, 40, dtype=torch.uint8))
