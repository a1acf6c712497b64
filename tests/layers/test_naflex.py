"""vitzoo/layers/naflex.py: a batch's grids and each patch's place, the patch Linear, the per-grid
table rules against their formulas, rotary positions per image, masks and the masked mean; and
that a model places patches by their coordinates, not by their order in the sequence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from vitzoo.layers.naflex import (
    PATCH_COORD,
    PATCH_VALID,
    PATCHES,
    embed_patches,
    key_mask,
    masked_mean,
    read_patch_batch,
    resample_table,
    rope_for_sequence,
)
from vitzoo.layers.rope import RotaryEmbedding2d
from vitzoo.model import VisionTransformer


def grid_coords(rows: int, cols: int) -> torch.Tensor:
    return torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1).reshape(-1, 2)


def two_images() -> dict[str, torch.Tensor]:
    """A 2 x 3 and a 1 x 2 grid of 4 x 4 single-channel patches, padded to 7."""
    coord = torch.zeros(2, 7, 2, dtype=torch.int64)
    coord[0, :6], coord[1, :2] = grid_coords(2, 3), grid_coords(1, 2)
    valid = torch.zeros(2, 7, dtype=torch.bool)
    valid[0, :6], valid[1, :2] = True, True
    return {PATCHES: torch.randn(2, 7, 16), PATCH_COORD: coord, PATCH_VALID: valid}


def test_grids_and_places():
    seq = read_patch_batch(two_images(), (4, 4), 1)
    assert seq.grids == [(2, 3), (1, 2)]
    # rows of the concatenated per-grid tables: the first grid's 6, then the second's 2
    assert seq.index[0, :6].tolist() == list(range(6)) and seq.index[1, :2].tolist() == [6, 7]
    assert seq.index[1, 2:].tolist() == [6] * 5  # padding points at a valid row, its own image's first
    tables = {(2, 3): torch.arange(6.0), (1, 2): torch.tensor([10.0, 11.0])}
    assert seq.gather(lambda grid: tables[grid])[1, :2].tolist() == [10.0, 11.0]
    assert (
        key_mask(seq.valid, 2).shape == (2, 1, 1, 9)
        and key_mask(seq.valid, 2)[1, 0, 0].tolist() == [True] * 4 + [False] * 5
    )


def test_patch_linear_is_the_convolution():
    conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
    image = torch.randn(1, 3, 8, 12)
    ours = image.reshape(1, 3, 2, 4, 3, 4)  # 2 x 3 patches, each (row, column, channel)
    ours = ours.permute(0, 2, 4, 3, 5, 1).reshape(1, 6, 48)
    batch = {PATCHES: ours, PATCH_COORD: grid_coords(2, 3)[None], PATCH_VALID: torch.ones(1, 6, dtype=torch.bool)}
    expected = conv(image).flatten(2).transpose(1, 2)
    assert torch.allclose(
        embed_patches(read_patch_batch(batch, (4, 4), 3), conv.weight, conv.bias), expected, atol=1e-6
    )


@pytest.mark.parametrize(
    ("rule", "mode", "square"),
    [("timm", "bicubic", False), ("siglip2", "bilinear", False), ("timm_square", "bicubic", True)],
)
def test_table_rules(rule, mode, square):
    table = torch.randn(4 * 4, 8)
    image = table.reshape(1, 4, 4, 8).permute(0, 3, 1, 2)
    for grid in [(2, 7), (6, 3), (4, 4)]:
        size = (max(grid), max(grid)) if square else grid
        expected = F.interpolate(image, size=size, mode=mode, align_corners=False, antialias=True)
        expected = expected[:, :, : grid[0], : grid[1]].permute(0, 2, 3, 1).reshape(-1, 8)
        assert torch.allclose(resample_table(table, (4, 4), grid, rule), expected, atol=1e-6)
    assert resample_table(table, (4, 4), (4, 4), rule) is table
    with pytest.raises(ValueError, match="pos_resample='nearest' is invalid"):
        resample_table(table, (4, 4), (2, 2), "nearest")


@pytest.mark.parametrize("kind", ["cat", "mixed", "dinov3"])
def test_rope_per_image_is_each_grid_own(kind):
    rope = RotaryEmbedding2d(kind, head_dim=8, num_heads=2, depth=3, grid=(4, 4), num_prefix_tokens=1)
    seq = read_patch_batch(two_images(), (4, 4), 1)
    embed = rope_for_sequence(rope, seq)
    for i, (grid, n) in enumerate([((2, 3), 6), ((1, 2), 2)]):
        alone = rope.get_embed(grid)
        got = embed[:, i] if kind == "mixed" else embed[i, 0]
        assert torch.allclose(got[..., : 1 + n, :], alone, atol=1e-6)


def test_masked_mean():
    x, valid = torch.randn(2, 5, 3), torch.tensor([[True, True, False, False, False], [True] * 5])
    assert torch.allclose(masked_mean(x, valid), torch.stack([x[0, :2].mean(0), x[1].mean(0)]))


def test_patches_are_placed_by_coordinate_not_by_order():
    """The same patches in another order (and interleaved with padding) give the same pooled
    output and, token by token, the same features: positions come from the coordinates."""
    tiny = dict(img_size=16, patch_size=4, in_chans=1, embed_dim=16, depth=2, num_heads=2, num_classes=3)
    model = VisionTransformer(**tiny, rope="cat", global_pool="avg").eval()
    batch = two_images()
    order = torch.tensor([[5, 2, 6, 0, 4, 1, 3], [6, 1, 3, 2, 0, 4, 5]])
    shuffled = {key: torch.stack([value[i, order[i]] for i in range(2)]) for key, value in batch.items()}
    with torch.no_grad():
        assert torch.allclose(model(batch), model(shuffled), atol=1e-5)
        ours, theirs = model.forward_features(batch)[PATCHES], model.forward_features(shuffled)[PATCHES]
        for i in range(2):
            assert torch.allclose(
                ours[i, 1:][order[i]][batch[PATCH_VALID][i, order[i]]],
                theirs[i, 1:][shuffled[PATCH_VALID][i]],
                atol=1e-5,
            )


@pytest.mark.parametrize("rule, corners", [("radio", False), ("radio_corners", True)])
def test_radio_rules_resize_bilinearly_to_the_square_without_antialiasing(rule, corners):
    """C-RADIO: bilinear to a square of the longer side, its top-left kept, not antialiased (a
    downsampled table is sampled, not averaged); align_corners keeps the table's corner rows."""
    table = torch.randn(8 * 8, 5)
    image = table.reshape(1, 8, 8, 5).permute(0, 3, 1, 2)
    for grid in [(3, 6), (12, 10)]:
        side = max(grid)
        expected = F.interpolate(image, size=(side, side), mode="bilinear", align_corners=corners, antialias=False)[
            :, :, : grid[0], : grid[1]
        ]
        got = resample_table(table, (8, 8), grid, rule)
        torch.testing.assert_close(got, expected.permute(0, 2, 3, 1).reshape(-1, 5), rtol=0, atol=0)
    if corners:
        torch.testing.assert_close(resample_table(table, (8, 8), (4, 4), rule)[0], table[0], rtol=0, atol=0)
