"""Attention weights on request: `capture_attention` / `forward_with_attention` compute softmax
weights explicitly, give the same output as the fused kernel, and leave the fused path alone."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitzoo import VisionTransformer
from vitzoo.layers import Attention
from vitzoo.layers.attention import capture_attention


def small_vit(**overrides) -> VisionTransformer:
    fields = dict(img_size=16, patch_size=4, in_chans=3, num_classes=5, embed_dim=24, depth=3, num_heads=3)
    fields.update(overrides)
    torch.manual_seed(0)
    return VisionTransformer(**fields).eval()


def test_captured_weights_are_the_softmax_of_scaled_scores():
    torch.manual_seed(0)
    attn = Attention(dim=12, num_heads=3).eval()
    x = torch.randn(2, 5, 12)
    with torch.no_grad(), capture_attention(attn) as maps:
        out = attn(x)
    assert len(maps) == 1 and maps[0].shape == (2, 3, 5, 5)
    # Recompute the weights by hand from the fused qkv projection (rows [q | k | v]).
    q, k, _v = attn.qkv(x).reshape(2, 5, 3, 3, 4).permute(2, 0, 3, 1, 4)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(4), dim=-1)
    torch.testing.assert_close(maps[0], expected)
    torch.testing.assert_close(maps[0].sum(-1), torch.ones(2, 3, 5))
    with torch.no_grad():
        torch.testing.assert_close(out, attn(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "overrides",
    [dict(), dict(distilled=True), dict(class_token=False, global_pool="avg"), dict(pos_embed="sincos")],
    ids=["cls", "distilled", "no-cls", "sincos"],
)
def test_model_output_is_the_same_with_and_without_explicit_weights(overrides):
    model = small_vit(**overrides)
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        fused = model(x)
        explicit, maps = model.forward_with_attention(x)
    torch.testing.assert_close(explicit, fused, rtol=1e-5, atol=1e-5)
    tokens = 16 + model.num_prefix_tokens
    assert len(maps) == 3
    for w in maps:
        assert w.shape == (2, 3, tokens, tokens)
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, tokens))


def test_weights_are_computed_only_on_request(monkeypatch):
    model = small_vit()
    x = torch.randn(1, 3, 16, 16)
    calls = {"explicit": 0, "fused": 0}
    real_sdpa = F.scaled_dot_product_attention
    real_explicit = Attention._explicit_attention

    def counting_sdpa(*args, **kwargs):
        calls["fused"] += 1
        return real_sdpa(*args, **kwargs)

    def counting_explicit(self, *args):
        calls["explicit"] += 1
        return real_explicit(self, *args)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting_sdpa)
    monkeypatch.setattr(Attention, "_explicit_attention", counting_explicit)
    with torch.no_grad():
        model(x)
        assert calls == {"explicit": 0, "fused": 3}
        model.forward_with_attention(x)
        assert calls == {"explicit": 3, "fused": 3}
        model(x)  # after the context the layers are back on the fused kernel
    assert calls == {"explicit": 3, "fused": 6}
    assert all(block.attn.attn_sink is None for block in model.blocks)


def test_context_is_restored_after_an_error_and_nesting_restores_the_outer_list():
    model = small_vit()
    with pytest.raises(RuntimeError, match="boom"):
        with capture_attention(model):
            raise RuntimeError("boom")
    assert all(block.attn.attn_sink is None for block in model.blocks)
    x = torch.randn(1, 3, 16, 16)
    with torch.no_grad(), capture_attention(model) as outer:
        with capture_attention(model.blocks[0]) as inner:
            model(x)
        model(x)
    # Inside the inner context block 0 reported to `inner`, blocks 1 and 2 still to `outer`;
    # after it, block 0 went back to `outer`: 1 + (2 + 3).
    assert len(inner) == 1 and len(outer) == 5
    assert all(block.attn.attn_sink is None for block in model.blocks)


def test_gradients_flow_through_the_explicit_path_in_training():
    model = small_vit(attn_drop_rate=0.1).train()
    x = torch.randn(2, 3, 16, 16)
    out, maps = model.forward_with_attention(x)
    out.sum().backward()
    assert model.blocks[0].attn.qkv.weight.grad is not None
    assert maps[0].requires_grad  # kept in the graph, e.g. for attention x gradient maps


def test_module_without_attention_layers_is_a_clear_error():
    with pytest.raises(ValueError, match=r"Linear contains no vitzoo.layers.Attention layer"):
        with capture_attention(nn.Linear(2, 2)):
            pass
