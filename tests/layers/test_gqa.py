"""Grouped-query attention (layers/gqa.py) and attention-only LayerScale: vitzoo's Attention with
fewer key/value heads and qk-norm computes timm's AttentionRope (its Sapiens2 attention); the
config fields validate together, count their parameters exactly, and capture_attention and LoRA
work on them."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import Attention, capture_attention
from vitzoo.layers.gqa import check_kv_heads, expand_kv
from vitzoo.layers.lora import add_lora
from vitzoo.model import VisionTransformer, ViTConfig

SMALL = dict(img_size=32, patch_size=16, embed_dim=32, depth=3, num_heads=4, num_classes=0, qkv_fused=False)


def test_expand_kv_gives_each_query_head_its_groups_kv_head():
    x = torch.arange(2.0).reshape(1, 2, 1, 1)  # kv heads 0 and 1
    assert expand_kv(x, 3).flatten().tolist() == [0, 0, 0, 1, 1, 1]
    assert expand_kv(x, 1) is x


@pytest.mark.parametrize(("kv", "qk_norm"), [(1, ""), (2, "head"), (4, "head")])
def test_attention_computes_timms_attention_rope(kv, qk_norm):
    timm_attention = pytest.importorskip("timm.layers.attention")
    if not hasattr(timm_attention, "AttentionRope") or "num_kv_heads" not in str(
        timm_attention.AttentionRope.__init__.__code__.co_varnames
    ):
        pytest.skip("this timm's AttentionRope has no grouped-query attention (timm >= 1.0.27 has)")
    from timm.layers import RmsNorm

    torch.manual_seed(0)
    theirs = timm_attention.AttentionRope(
        32,
        num_heads=4,
        num_kv_heads=kv,
        qkv_fused=False,
        qk_norm=bool(qk_norm),
        norm_layer=RmsNorm,
        num_prefix_tokens=0,
    ).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.2)
    ours = Attention(dim=32, num_heads=4, qkv_fused=False, num_kv_heads=kv, qk_norm=qk_norm, qk_norm_layer="rmsnorm")
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6)
        with capture_attention(ours) as maps:
            torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6)
    assert maps[0].shape == (2, 4, 5, 5) and torch.allclose(maps[0].sum(-1), torch.ones(2, 4, 5))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(num_kv_heads=3), r"num_kv_heads=3 is invalid: .*a divisor of num_heads"),
        (dict(num_kv_heads=(4, 2)), r"has 2 entries for depth=3"),
        (dict(num_kv_heads=2, qkv_fused=True), r"needs qkv_fused=False"),
        (dict(num_kv_heads=2, rope="mixed"), r"cannot be combined with rope='mixed'"),
        (dict(num_kv_heads=(4, 0, 4)), r"a divisor of num_heads"),
        (dict(layer_scale_mlp=False), r"layer_scale_mlp=False .* needs init_values"),
        (dict(qk_norm="both"), r"qk_norm='both' is invalid"),
    ],
)
def test_bad_fields_are_one_error_naming_them(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**{**SMALL, **fields})


def test_check_kv_heads_alone():
    check_kv_heads(8, 8, True)  # multi-head attention, fused: fine
    with pytest.raises(ValueError, match="needs qkv_fused=False"):
        check_kv_heads(8, 2, True)


@pytest.mark.parametrize(
    "fields",
    [
        dict(num_kv_heads=(4, 2, 1), qk_norm="head", init_values=1.0, layer_scale_mlp=False),
        dict(num_kv_heads=2, qk_norm="full", norm_layer="rmsnorm", k_bias=False),
        dict(num_kv_heads=1, qkv_bias=False, init_values=0.1),
    ],
)
def test_num_params_is_exact_and_layer_scale_is_on_the_attention_alone(fields):
    config = ViTConfig(**{**SMALL, **fields})
    model = VisionTransformer(config)
    assert config.num_params == sum(p.numel() for p in model.parameters())
    block = model.blocks[0]
    assert hasattr(block.ls1, "gamma") == bool(config.init_values)
    assert hasattr(block.ls2, "gamma") == bool(config.init_values and config.layer_scale_mlp)
    assert [b.attn.k_proj.out_features for b in model.blocks] == [8 * h for h in config.kv_heads]


def test_lora_adapts_the_narrower_key_and_value_projections():
    torch.manual_seed(0)
    model = VisionTransformer(ViTConfig(**SMALL, num_kv_heads=(4, 2, 1), qk_norm="head")).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        before = model(x)
    adapted = add_lora(model, rank=2, targets="qkv")
    assert "blocks.2.attn.k_proj" in adapted and model.blocks[2].attn.k_proj.lora_B.shape == (1, 8, 2)
    with torch.no_grad():
        torch.testing.assert_close(model(x), before)  # B starts at zero: the same function
    model(x).sum().backward()
    assert model.blocks[2].attn.v_proj.lora_A.grad is not None


def test_pruning_keeps_the_kept_blocks_kv_heads():
    model = VisionTransformer(ViTConfig(**SMALL, num_kv_heads=(4, 2, 1)))
    model.prune_intermediate_layers([1])
    assert model.config.num_kv_heads == (4, 2) and model.config.depth == 2
