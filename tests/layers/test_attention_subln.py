"""The attention's sub-LN (`Attention(norm_layer=...)`, ViTConfig.attn_norm): the heads normalised
before the output projection, against the textbook formula and timm's `scale_norm` attentions."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
from torch import nn

from vitzoo.layers import Attention, capture_attention
from vitzoo.layers.lora import add_lora, merge_lora
from vitzoo.layers.norm import RMSNorm
from vitzoo.model import VisionTransformer, ViTConfig


def reference_attention(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """proj(norm(concat(softmax(q_h k_h^T / sqrt(d)) v_h))), one head at a time (fused qkv rows [q | k | v])."""
    D, H = x.shape[-1], attn.num_heads
    d = D // H
    w, b = attn.qkv.weight, attn.qkv.bias
    heads = []
    for h in range(H):
        q, k, v = (x @ w[r].T + b[r] for r in (slice(p * D + h * d, p * D + (h + 1) * d) for p in range(3)))
        heads.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1) @ v)
    return attn.proj(attn.norm(torch.cat(heads, dim=-1)))


def _randomised(module: nn.Module) -> nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


@pytest.mark.parametrize("norm_layer, kind", [("layernorm", nn.LayerNorm), ("rmsnorm", RMSNorm)])
def test_sub_ln_normalises_the_heads_before_the_projection(norm_layer, kind):
    attn = _randomised(Attention(dim=12, num_heads=3, norm_layer=norm_layer, norm_eps=1e-5))
    assert isinstance(attn.norm, kind) and attn.norm.eps == 1e-5
    x = torch.randn(2, 5, 12)
    with torch.no_grad():
        want = reference_attention(attn, x)
        torch.testing.assert_close(attn(x), want, rtol=0, atol=1e-5)
        with capture_attention(attn) as maps:  # the written-out path normalises the same way
            torch.testing.assert_close(attn(x), want, rtol=0, atol=1e-5)
    assert len(maps) == 1 and torch.allclose(maps[0].sum(-1), torch.ones(2, 3, 5))


def test_without_sub_ln_the_attention_has_no_norm_and_no_new_parameter():
    attn = Attention(dim=12, num_heads=3)
    assert isinstance(attn.norm, nn.Identity)
    assert not any(name.startswith("norm.") for name in attn.state_dict())


def _timm_attention(timm_module, cls_name: str):
    cls = getattr(timm_module, cls_name, None)
    if cls is None or "scale_norm" not in inspect.signature(cls).parameters:
        pytest.skip(f"timm's {cls_name} has no scale_norm in this timm")
    return cls


def test_equals_timms_attention_with_scale_norm():
    """BEiT-3's attention in timm: VisionTransformer's Attention(scale_norm=True)."""
    timm = pytest.importorskip("timm")
    cls = _timm_attention(timm.layers, "Attention")
    theirs = _randomised(cls(16, num_heads=4, qkv_bias=True, scale_norm=True, norm_layer=nn.LayerNorm))
    ours = Attention(dim=16, num_heads=4, norm_layer="layernorm", norm_eps=1e-5).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)


def test_equals_timms_eva_attention_with_scale_attn_inner():
    """EVA-02-CLIP B/L's attention in timm: EvaAttention(scale_norm=True), separate q/k/v, no k bias."""
    eva = pytest.importorskip("timm.models.eva")
    cls = _timm_attention(eva, "EvaAttention")
    theirs = _randomised(cls(16, num_heads=4, qkv_fused=False, scale_norm=True, norm_layer=nn.LayerNorm))
    ours = Attention(dim=16, num_heads=4, qkv_fused=False, k_bias=False, norm_layer="layernorm", norm_eps=1e-5)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), theirs(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("norm_layer", ["layernorm", "rmsnorm"])
def test_num_params_counts_the_sub_ln_exactly(norm_layer):
    config = ViTConfig(img_size=32, patch_size=8, embed_dim=24, depth=2, num_heads=3, num_classes=5)
    for fields in ({}, {"mlp_norm": True}, {"qkv_fused": False, "k_bias": False}):
        plain = config.replace(norm_layer=norm_layer, **fields)
        with_norm = plain.replace(attn_norm=True)
        with torch.device("meta"):
            model = VisionTransformer(with_norm)
        assert with_norm.num_params == sum(p.numel() for p in model.parameters())
        per_norm = 2 * 24 if norm_layer == "layernorm" else 24
        assert with_norm.num_params - plain.num_params == 2 * per_norm  # one norm per block
        assert "blocks.1.attn.norm.weight" in model.state_dict()


def test_attn_norm_is_a_checked_bool():
    with pytest.raises(TypeError, match="attn_norm"):
        ViTConfig(attn_norm="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize("other", [{"block_type": "parallel"}, {"attn_layer": "diff"}])
def test_attn_norm_belongs_to_the_plain_attention(other):
    with pytest.raises(ValueError, match="cannot be combined with attn_norm=True"):
        ViTConfig(attn_norm=True, **other)


def test_lora_on_a_sub_ln_model_merges_into_the_same_computation():
    torch.manual_seed(0)
    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=24, depth=1, num_heads=3, attn_norm=True).eval()
    add_lora(model, rank=2, targets="qkv,proj")
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.normal_(0, 0.1)
        x = torch.randn(2, 3, 32, 32)
        adapted = model(x)
        merged = merge_lora(model)
        torch.testing.assert_close(merged(x), adapted, rtol=0, atol=1e-5)
    assert "blocks.0.attn.norm.weight" in merged.state_dict()
