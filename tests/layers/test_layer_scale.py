"""LayerScale: a per-channel factor, starting at init_values, on the block's residual branches."""

from __future__ import annotations

import torch

from vitzoo.layers import Block, LayerScale


def test_layer_scale_multiplies_each_channel_by_its_gamma():
    ls = LayerScale(4, init_values=1e-5)
    assert ls.gamma.shape == (4,) and torch.equal(ls.gamma, torch.full((4,), 1e-5))
    with torch.no_grad():
        ls.gamma.copy_(torch.tensor([1.0, 2.0, -1.0, 0.0]))
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(ls(x), x * torch.tensor([1.0, 2.0, -1.0, 0.0]))
    ls.reset_parameters()
    assert torch.equal(ls.gamma, torch.full((4,), 1e-5))


def test_block_scales_both_branches():
    torch.manual_seed(0)
    block = Block(dim=8, num_heads=2, init_values=0.5).eval()
    assert isinstance(block.ls1, LayerScale) and isinstance(block.ls2, LayerScale)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        h = x + 0.5 * block.attn(block.norm1(x))
        torch.testing.assert_close(block(x), h + 0.5 * block.mlp(block.norm2(h)))


def test_tiny_init_values_start_each_block_near_the_identity():
    torch.manual_seed(0)
    block = Block(dim=8, num_heads=2, init_values=1e-6).eval()
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        assert (block(x) - x).abs().max() < 1e-4
