"""The parallel block (vitzoo/layers/parallel_block.py) against timm's ParallelScalingBlock and
DiffParallelScalingBlock, the block table (layers/block.py) and the config fields that choose them."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers.attention import attention_layers, capture_attention
from vitzoo.layers.block import BLOCKS, Block, make_block
from vitzoo.layers.parallel_block import ParallelBlock
from vitzoo.model import VisionTransformer, ViTConfig


def _random(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.2)
    return module.eval()


@pytest.mark.parametrize(
    "cls, attn_layer, qkv_bias",
    [
        ("ParallelScalingBlock", "attn", True),
        ("ParallelScalingBlock", "attn", False),
        ("DiffParallelScalingBlock", "diff", True),
    ],
)
def test_matches_timms_parallel_blocks(cls, attn_layer, qkv_bias):
    vision_transformer = pytest.importorskip("timm.models.vision_transformer")
    if not hasattr(vision_transformer, cls):
        pytest.skip(f"timm has no {cls} (DiffParallelScalingBlock: timm >= 1.0.20)")
    try:
        theirs = getattr(vision_transformer, cls)(
            dim=32, num_heads=4, mlp_ratio=3.0, qkv_bias=qkv_bias, init_values=1e-5, depth=3
        )
    except TypeError as e:  # timm before 1.0.20 builds the block without its depth
        pytest.skip(f"timm's {cls} takes no depth in this timm ({e}); timm >= 1.0.20 does")
    _random(theirs)
    ours = ParallelBlock(
        dim=32, num_heads=4, mlp_ratio=3.0, qkv_bias=qkv_bias, init_values=1e-5, attn_layer=attn_layer, index=3
    )
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        expected = theirs(x)
        torch.testing.assert_close(ours.eval()(x), expected, rtol=0, atol=1e-5)
        ours.explicit = True  # vitzoo.optimize's written-out attention: the same numbers
        torch.testing.assert_close(ours(x), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("attn_layer", ["attn", "diff"])
def test_attention_is_captured_and_masked(attn_layer):
    block = _random(ParallelBlock(dim=16, num_heads=2, attn_layer=attn_layer))
    assert attention_layers(block) == [block]
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 4 + [False]])[:, None, None, :]
    with torch.no_grad(), capture_attention(block) as maps:
        captured = block(x, attn_mask=mask)
    assert maps[0].shape == (2, 2, 5, 5) and (maps[0][1, :, :, 4] == 0).all()
    with torch.no_grad():
        torch.testing.assert_close(block(x, attn_mask=mask), captured, rtol=0, atol=1e-5)
    assert block.attn_sink is None


def test_block_table_builds_each_kind_from_the_same_arguments():
    assert BLOCKS["prenorm"] is Block and BLOCKS["parallel"] is ParallelBlock
    args = dict(dim=16, num_heads=2, init_values=1e-5, index=1)
    assert isinstance(make_block("parallel", **args), ParallelBlock)
    assert isinstance(make_block("prenorm", **args), Block)
    with pytest.raises(ValueError, match="block_type='serial' is invalid"):
        make_block("serial", **args)


@pytest.mark.parametrize(
    "fields",
    [
        dict(block_type="parallel"),
        dict(block_type="parallel", qkv_bias=False, init_values=1e-5),
        dict(block_type="parallel", attn_layer="diff", norm_layer="rmsnorm"),
        dict(attn_layer="diff", init_values=1e-5, reg_tokens=1),
    ],
)
def test_num_params_is_exact(fields):
    config = ViTConfig(img_size=32, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.5, num_classes=3, **fields)
    with torch.device("meta"):
        model = VisionTransformer(config)
    assert config.num_params == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(block_type="serial"), "block_type"),
        (dict(attn_layer="flash"), "attn_layer"),
        (dict(block_type="parallel", mlp_layer="swiglu"), "block_type='parallel' cannot be combined with mlp_layer"),
        (
            dict(block_type="parallel", rope="cat", pos_embed="none"),
            "block_type='parallel' cannot be combined with rope",
        ),
        (dict(attn_layer="diff", qkv_fused=False), "attn_layer='diff' cannot be combined with qkv_fused"),
        (dict(attn_layer="diff", num_heads=8), "even head width"),  # 32 / 8 = 4 is even: 24 / 8 = 3 is not
    ],
)
def test_combinations_without_a_meaning_are_refused(fields, message):
    base = dict(img_size=32, embed_dim=24 if fields.get("num_heads") == 8 else 32, num_heads=4)
    with pytest.raises((ValueError, TypeError), match=message):
        ViTConfig(**{**base, **fields})


@pytest.mark.parametrize(
    "fields", [dict(block_type="parallel"), dict(block_type="parallel", attn_layer="diff"), dict(attn_layer="diff")]
)
def test_flop_formula_equals_the_counter(fields):
    """Differential attention's two maps each multiply all of v: the formula counts attn v twice."""
    from vitzoo.flops import count_flops, vit_flops

    config = ViTConfig(img_size=32, embed_dim=32, depth=2, num_heads=4, num_classes=3, **fields)
    model = VisionTransformer(config).eval()
    assert vit_flops(config).total == count_flops(model, torch.randn(1, 3, 32, 32))
