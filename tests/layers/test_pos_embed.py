"""The fixed sinusoidal table against the formula of "Attention Is All You Need", element by element."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers import sincos_1d, tile_pos_embed


@pytest.mark.parametrize("num_positions, dim", [(5, 9), (17, 8), (3, 1), (50, 64)])
def test_sincos_values_match_the_formula(num_positions, dim):
    table = sincos_1d(num_positions, dim)
    assert table.shape == (num_positions, dim)
    assert table.dtype == torch.float32
    for pos in range(num_positions):
        for j in range(dim):
            i = j // 2  # columns 2i and 2i + 1 share the frequency 1 / 10000^(2i / d)
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert table[pos, j].item() == pytest.approx(expected, abs=1e-6), (pos, j)


def test_odd_dim_ends_on_a_sine_column():
    table = sincos_1d(4, 9)
    last = torch.tensor([math.sin(p / 10000 ** (8 / 9)) for p in range(4)])
    torch.testing.assert_close(table[:, 8], last)
    # Position 0: sin(0) = 0 in even columns, cos(0) = 1 in odd ones.
    assert torch.equal(table[0, 0::2], torch.zeros(5))
    assert torch.equal(table[0, 1::2], torch.ones(4))


def test_sincos_is_real_data_on_the_meta_device():
    with torch.device("meta"):
        table = sincos_1d(3, 4)
    assert table.device.type == "cpu"
    torch.testing.assert_close(table, sincos_1d(3, 4))


@pytest.mark.parametrize("num_positions, dim", [(0, 4), (4, 0), (-1, 4)])
def test_non_positive_sizes_are_value_errors(num_positions, dim):
    with pytest.raises(ValueError, match="positive"):
        sincos_1d(num_positions, dim)


# ----------------------------------------------------------------------------- resampling
def test_resample_keeps_prefix_rows_and_resizes_the_grid_as_an_image():
    from vitzoo.layers import resample_abs_pos_embed

    torch.manual_seed(0)
    table = torch.randn(1, 2 + 3 * 4, 5)  # two prefix rows, a 3 x 4 grid of 5-dim vectors
    out = resample_abs_pos_embed(table, new_grid=(6, 2), old_grid=(3, 4), num_prefix_tokens=2)
    assert out.shape == (1, 2 + 6 * 2, 5)
    assert torch.equal(out[:, :2], table[:, :2])
    image = table[0, 2:].reshape(3, 4, 5).permute(2, 0, 1)[None]  # (1, D, rows, columns)
    expected = torch.nn.functional.interpolate(image, size=(6, 2), mode="bicubic", antialias=True)
    torch.testing.assert_close(out[0, 2:], expected[0].permute(1, 2, 0).reshape(12, 5))


def test_resample_to_the_same_grid_returns_the_table_itself():
    from vitzoo.layers import resample_abs_pos_embed

    table = torch.randn(1, 9, 4)
    assert resample_abs_pos_embed(table, new_grid=(3, 3), old_grid=(3, 3), num_prefix_tokens=0) is table


def test_resample_equals_timms():
    timm_pos_embed = pytest.importorskip("timm.layers.pos_embed")
    from vitzoo.layers import resample_abs_pos_embed

    torch.manual_seed(0)
    table = torch.randn(1, 1 + 4 * 4, 8)
    for grid in [(2, 2), (7, 5), (4, 6)]:
        expected = timm_pos_embed.resample_abs_pos_embed(table, list(grid), old_size=[4, 4], num_prefix_tokens=1)
        got = resample_abs_pos_embed(table, new_grid=grid, old_grid=(4, 4), num_prefix_tokens=1)
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_tile_repeats_the_table_over_the_grid():
    """SAM 3's table for another grid: entry (r, c) is the table's (r mod rows, c mod columns)."""
    table = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(1, 6, 4)  # a 2 x 3 grid, 4 wide
    tiled = tile_pos_embed(table, old_grid=(2, 3), new_grid=(5, 4)).reshape(5, 4, 4)
    grid = table.reshape(2, 3, 4)
    for r in range(5):
        for c in range(4):
            assert torch.equal(tiled[r, c], grid[r % 2, c % 3])
