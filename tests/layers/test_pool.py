"""Attention pooling (MAP) against its definition written out with explicit softmax."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import AttentionPool


def explicit_map(pool: AttentionPool, x: torch.Tensor) -> torch.Tensor:
    """One learned query attends over the tokens, per head, then proj and a residual MLP."""
    B, N, D = x.shape
    heads, d = pool.num_heads, D // pool.num_heads
    q = pool.q(pool.latent[0, 0]).reshape(heads, d)  # the same query for every image
    k, v = pool.kv(x).reshape(B, N, 2, heads, d).unbind(2)  # (B, N, heads, d) each
    weights = torch.softmax(torch.einsum("hd,bnhd->bhn", q, k) / d**0.5, dim=-1)
    out = pool.proj(torch.einsum("bhn,bnhd->bhd", weights, v).reshape(B, D))
    return out + pool.mlp(pool.norm(out))


@pytest.mark.parametrize("act_layer", ["gelu", "gelu_tanh", "quick_gelu"])
def test_map_equals_the_explicit_computation(act_layer):
    torch.manual_seed(0)
    pool = AttentionPool(dim=12, num_heads=3, mlp_ratio=2.0, act_layer=act_layer).eval()
    x = torch.randn(4, 7, 12)
    with torch.no_grad():
        torch.testing.assert_close(pool(x), explicit_map(pool, x))
    assert pool.mlp.fc1.out_features == 24


def test_parameter_layout_is_timms_attention_pool_latent():
    pool = AttentionPool(dim=8, num_heads=2)
    shapes = {name: tuple(p.shape) for name, p in pool.named_parameters()}
    assert shapes == {
        "latent": (1, 1, 8),
        "q.weight": (8, 8),
        "q.bias": (8,),
        "kv.weight": (16, 8),
        "kv.bias": (16,),
        "proj.weight": (8, 8),
        "proj.bias": (8,),
        "norm.weight": (8,),
        "norm.bias": (8,),
        "mlp.fc1.weight": (32, 8),
        "mlp.fc1.bias": (32,),
        "mlp.fc2.weight": (8, 32),
        "mlp.fc2.bias": (8,),
    }


def test_latent_is_initialised_within_two_standard_deviations():
    torch.manual_seed(0)
    pool = AttentionPool(dim=64, num_heads=4)
    std = 64**-0.5
    assert pool.latent.abs().max() <= 2 * std and pool.latent.std() > std / 2


def test_pooling_is_invariant_to_token_order():
    """Attention over a set: permuting the tokens changes nothing (positions live in the tokens)."""
    torch.manual_seed(0)
    pool = AttentionPool(dim=8, num_heads=2).eval()
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        torch.testing.assert_close(pool(x[:, torch.randperm(6)]), pool(x))
