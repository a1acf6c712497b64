"""BEiT's relative position bias (vitzoo/layers/relpos_bias.py) against timm's beit.py: the index,
the resized table, a block; and Attention's additive `attn_bias` (fused, written out, captured)."""

from __future__ import annotations

import inspect

import pytest
import torch

from vitzoo.layers import Block, capture_attention
from vitzoo.layers.attention import Attention
from vitzoo.layers.relpos_bias import RelPosBiasTable, num_relative_distances, relative_position_index, resize_table
from vitzoo.weights.keymaps import to_vitzoo

timm = pytest.importorskip("timm")
beit = pytest.importorskip("timm.models.beit")


@pytest.mark.parametrize("grid", [(1, 1), (3, 3), (2, 5)])
def test_index_is_timms(grid):
    assert torch.equal(relative_position_index(grid), beit.gen_relative_position_index(grid))
    assert int(relative_position_index(grid).max()) == num_relative_distances(grid) - 1


@pytest.mark.parametrize(("old", "new"), [((4, 4), (6, 5)), ((6, 6), (3, 3)), ((3, 5), (5, 3)), ((4, 4), (4, 4))])
def test_resized_table_is_timms(old, new):
    from timm.layers import resize_rel_pos_bias_table

    table = torch.randn(num_relative_distances(old), 3, generator=torch.Generator().manual_seed(0))
    shape = (num_relative_distances(new), 3)
    if "old_window_size" in inspect.signature(resize_rel_pos_bias_table).parameters:
        expected = resize_rel_pos_bias_table(table, new_window_size=new, new_bias_shape=shape, old_window_size=old)
    elif old[0] == old[1]:  # older timm assumes a square source
        expected = resize_rel_pos_bias_table(table, new_window_size=new, new_bias_shape=shape)
    else:
        pytest.skip(f"timm {timm.__version__} resizes square source tables only (newer timm takes old_window_size)")
    got = resize_table(table, old, new)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert torch.equal(got[-3:], table[-3:])  # the class token's rows are kept


def test_block_computes_timms_beit_block():
    torch.manual_seed(0)
    grid, dim, heads = (3, 4), 32, 4
    theirs = beit.Block(dim, heads, qkv_bias=True, init_values=0.1, window_size=grid).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.2)
    ours = Block(
        dim=dim, num_heads=heads, k_bias=False, init_values=0.1, rel_pos=RelPosBiasTable(grid, heads), norm_eps=1e-6
    ).eval()
    state = to_vitzoo({f"blocks.0.{k}": v for k, v in theirs.state_dict().items()}, fmt="vitzoo").state
    ours.load_state_dict({k.removeprefix("blocks.0."): v for k, v in state.items()}, strict=True)
    x = torch.randn(2, 1 + grid[0] * grid[1], dim)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)
        with capture_attention(ours) as maps:  # the written-out path: the same output, rows summing to 1
            torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)
    assert maps[0].shape == (2, heads, 13, 13)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, heads, 13))


def test_attn_bias_is_added_to_the_logits_and_combines_with_a_mask():
    torch.manual_seed(0)
    attn = Attention(dim=16, num_heads=2).eval()
    x, bias = torch.randn(2, 5, 16), torch.randn(1, 2, 5, 5)
    mask = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False  # the second sample's last two keys are padding
    with torch.no_grad():
        q, k, v = attn._project(x)
        scores = (q * attn.scale) @ k.transpose(-2, -1) + bias
        weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1)
        expected = attn.proj((weights @ v).transpose(1, 2).reshape(2, 5, 16))
        torch.testing.assert_close(attn(x, attn_mask=mask, attn_bias=bias), expected, rtol=0, atol=1e-5)
        with capture_attention(attn) as maps:
            attn(x, attn_mask=mask, attn_bias=bias)
        torch.testing.assert_close(maps[0], weights, rtol=0, atol=1e-6)
        unbiased = attn(x)
    assert not torch.allclose(attn(x, attn_bias=bias), unbiased)


def test_set_grid_resizes_once_and_rebuilds_the_index():
    table = RelPosBiasTable((4, 4), num_heads=2)
    with torch.no_grad():
        table.relative_position_bias_table.normal_()
    before = table.relative_position_bias_table.detach().clone()
    table.set_grid((6, 5))
    assert table.grid == (6, 5) and table().shape == (1, 2, 31, 31)
    torch.testing.assert_close(table.relative_position_bias_table, resize_table(before, (4, 4), (6, 5)))
    assert "relative_position_index" not in table.state_dict()  # rebuilt from the grid, never saved
    table.set_grid((4, 4))
    assert table().shape == (1, 2, 17, 17)
