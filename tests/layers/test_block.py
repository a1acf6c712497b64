"""The pre-norm encoder block: x + attn(norm1(x)), then + mlp(norm2(x)); stochastic depth per block."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.layers import Block, DropPath, Mlp, PostNormBlock
from vitzoo.layers.block import make_block


def test_block_is_two_pre_norm_residual_branches():
    torch.manual_seed(0)
    block = Block(dim=12, num_heads=3, mlp_ratio=2.0, norm_eps=1e-5).eval()
    assert block.norm1.eps == 1e-5 and block.norm2.eps == 1e-5
    assert block.mlp.fc1.out_features == 24
    x = torch.randn(2, 7, 12)
    with torch.no_grad():
        h = x + block.attn(block.norm1(x))
        expected = h + block.mlp(block.norm2(h))
        torch.testing.assert_close(block(x), expected)


def test_drop_path_only_when_asked():
    assert isinstance(Block(dim=8, num_heads=2).drop_path1, nn.Identity)
    block = Block(dim=8, num_heads=2, drop_path=0.2)
    assert isinstance(block.drop_path1, DropPath) and block.drop_path1.drop_prob == 0.2
    assert isinstance(block.drop_path2, DropPath)


def test_mlp_is_fc1_exact_gelu_fc2():
    torch.manual_seed(0)
    mlp = Mlp(dim=6, hidden_dim=10).eval()
    x = torch.randn(3, 6)
    with torch.no_grad():
        expected = mlp.fc2(torch.nn.functional.gelu(mlp.fc1(x), approximate="none"))
        torch.testing.assert_close(mlp(x), expected)


def test_mlp_activation_is_chosen_by_name():
    torch.manual_seed(0)
    block = Block(dim=8, num_heads=2, act_layer="quick_gelu").eval()
    mlp = block.mlp
    x = torch.randn(3, 8)
    with torch.no_grad():
        h = mlp.fc1(x)
        torch.testing.assert_close(mlp(x), mlp.fc2(h * torch.sigmoid(1.702 * h)))


def test_without_init_values_the_layer_scales_are_identities():
    block = Block(dim=8, num_heads=2)
    assert isinstance(block.ls1, nn.Identity) and isinstance(block.ls2, nn.Identity)
    assert not any("gamma" in name for name, _ in block.named_parameters())


def test_post_norm_block_equals_timms_res_post_block():
    """x + norm1(attn(x)), then x + norm2(mlp(x)): timm's ResPostBlock, key by key, its norms
    initialised at init_values and no LayerScale."""
    vision_transformer = pytest.importorskip("timm.models.vision_transformer")
    torch.manual_seed(0)
    theirs = vision_transformer.ResPostBlock(dim=16, num_heads=2, qkv_bias=True, init_values=1e-5).eval()
    ours = make_block("postnorm", dim=16, num_heads=2, init_values=1e-5).eval()
    assert isinstance(ours, PostNormBlock) and isinstance(ours.ls1, nn.Identity)
    ours.reset_parameters()
    assert torch.all(ours.norm1.weight == 1e-5) and torch.all(ours.norm2.weight == 1e-5)
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)  # fp32 rounding, on any torch
