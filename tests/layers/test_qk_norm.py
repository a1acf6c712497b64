"""QK-norm (layers/qk_norm.py): "head" normalises each head's channels, "full" all heads' at once
(InternViT-6B), each with the model's norm; none adds no parameter."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import Attention
from vitzoo.layers.qk_norm import apply_qk_norm, make_qk_norm


def test_head_scope_normalises_each_head_and_full_scope_all_heads():
    x = torch.randn(2, 4, 5, 8)  # (B, heads, N, head_dim)
    head = make_qk_norm("head", "layernorm", 8, 4, 1e-6)
    full = make_qk_norm("full", "rmsnorm", 8, 4, 1e-6)
    with torch.no_grad():
        full.weight.copy_(torch.rand(32) + 0.5)
    got = apply_qk_norm(head, x, "head")
    torch.testing.assert_close(got, torch.nn.functional.layer_norm(x, (8,), eps=1e-6))
    flat = x.transpose(1, 2).reshape(2, 5, 32)
    expected = flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + 1e-6) * full.weight
    torch.testing.assert_close(apply_qk_norm(full, x, "full"), expected.reshape(2, 5, 4, 8).transpose(1, 2))


def test_names_are_timms_and_none_adds_nothing():
    names = set(Attention(dim=32, num_heads=4, qk_norm="head").state_dict())
    assert {"q_norm.weight", "q_norm.bias", "k_norm.weight", "k_norm.bias"} <= names
    assert not any("norm" in k for k in Attention(dim=32, num_heads=4).state_dict())
    full = Attention(dim=32, num_heads=4, qk_norm="full", qk_norm_layer="rmsnorm")
    assert full.state_dict()["q_norm.weight"].shape == (32,)


def test_unknown_scope_is_named():
    with pytest.raises(ValueError, match=r"qk_norm='per_token' is invalid"):
        make_qk_norm("per_token", "layernorm", 8, 4, 1e-6)
