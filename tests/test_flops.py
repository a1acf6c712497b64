"""The FLOPs formula against torch's own counter (FlopCounterMode) on real forward passes."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

import vitzoo
from vitzoo.flops import _attention_ops_missing_from_counter, count_flops, measure_flops, model_flops, vit_flops
from vitzoo.layers.attention import capture_attention
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.zoo.curated import CURATED


def counted(model: nn.Module, x: torch.Tensor) -> int:
    """torch's own counter on the explicit-softmax attention path of the blocks: q @ k^T and
    attn @ v are plain matmuls there, which FlopCounterMode counts on every torch version (the
    fused kernel's CPU op is not counted by some versions). The attention pool ("map") keeps its
    fused kernel; where this torch's counter misses that op it is counted by its shapes, the
    formula test_count_flops_counts_fused_attention_by_its_shapes checks."""
    mapping = _attention_ops_missing_from_counter()
    with capture_attention(model), FlopCounterMode(display=False, custom_mapping=mapping) as counter:
        with torch.no_grad():
            model.eval()(x)
    return counter.get_total_flops()


@pytest.mark.parametrize(
    "config",
    [
        ViTConfig(img_size=32, patch_size=8, in_chans=3, num_classes=7, embed_dim=24, depth=2, num_heads=3),
        # rectangular image and patches, avg pooling without class token, odd MLP ratio
        ViTConfig(
            img_size=(24, 40),
            patch_size=(8, 4),
            num_classes=5,
            embed_dim=16,
            depth=3,
            num_heads=2,
            mlp_ratio=2.5,
            class_token=False,
            global_pool="avg",
        ),
        # distillation token (two heads) and the representation layer
        ViTConfig(
            img_size=32,
            patch_size=16,
            num_classes=4,
            embed_dim=12,
            depth=1,
            num_heads=2,
            distilled=True,
            representation_size=20,
        ),
        # no classifier: features only
        ViTConfig(img_size=16, patch_size=4, in_chans=1, num_classes=0, embed_dim=8, depth=2, num_heads=2),
        # SigLIP: attention pooling over the patch tokens (its query, k/v, proj and MLP count)
        ViTConfig(
            img_size=32,
            patch_size=8,
            num_classes=3,
            embed_dim=24,
            depth=2,
            num_heads=3,
            class_token=False,
            global_pool="map",
        ),
        # DINOv2-reg: register tokens are tokens; LayerScale is element-wise and adds nothing
        ViTConfig(
            img_size=28,
            patch_size=14,
            num_classes=0,
            embed_dim=16,
            depth=2,
            num_heads=2,
            init_values=1e-5,
            reg_tokens=4,
            no_embed_class=True,
            global_pool="map",
        ),
        # CLIP-like (pre-norm, QuickGELU, no biases) with fc_norm; and no pooling: a head on every token
        ViTConfig(
            img_size=32,
            patch_size=16,
            num_classes=6,
            embed_dim=12,
            depth=1,
            num_heads=2,
            pre_norm=True,
            patch_bias=False,
            head_bias=False,
            act_layer="quick_gelu",
            global_pool="avg",
            fc_norm=True,
        ),
        ViTConfig(
            img_size=32,
            patch_size=16,
            num_classes=6,
            embed_dim=12,
            depth=1,
            num_heads=2,
            global_pool="",
            representation_size=5,
        ),
        # gated MLPs: SwiGLU with an aligned width and a sub-norm, then packed with a MAP pool
        # (the pool's own MLP stays plain)
        ViTConfig(
            img_size=32,
            patch_size=16,
            num_classes=4,
            embed_dim=12,
            depth=2,
            num_heads=2,
            mlp_layer="swiglu",
            mlp_ratio=2.5,
            mlp_align=8,
            mlp_norm=True,
            act_layer="silu",
            norm_layer="rmsnorm",
        ),
        ViTConfig(
            img_size=32,
            patch_size=16,
            num_classes=0,
            embed_dim=12,
            depth=2,
            num_heads=2,
            mlp_layer="swiglu_packed",
            mlp_ratio=3.0,
            act_layer="silu",
            class_token=False,
            global_pool="map",
        ),
    ],
    ids=[
        "plain",
        "rect-avg",
        "distilled-repr",
        "features",
        "map",
        "registers-layerscale-map",
        "clip-fc-norm",
        "no-pool",
        "swiglu-aligned-subnorm",
        "swiglu-packed-map",
    ],
)
def test_formula_equals_flop_counter_on_cpu(config):
    model = VisionTransformer(config)
    h, w = (config.img_size, config.img_size) if isinstance(config.img_size, int) else config.img_size
    x = torch.randn(1, config.in_chans, h, w)
    expected = counted(model, x)
    assert vit_flops(config).total == expected
    # The fused kernel's count (what count_flops adds where torch misses it) is the same number.
    assert count_flops(model, x) == expected


def test_count_flops_counts_fused_attention_by_its_shapes():
    q, k, v = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 7, 4), torch.randn(2, 3, 7, 6)

    class Sdpa(nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    # q k^T: 2*3 heads of (5 x 4) @ (4 x 7); attn v: (5 x 7) @ (7 x 6); a multiply-add is 2 FLOPs.
    assert count_flops(Sdpa(), q, k, v) == 2 * 6 * (5 * 4 * 7 + 5 * 7 * 6)


def test_registered_models_match_flop_counter_on_meta():
    """Every built-in config at its full width and image size, counted without allocating it (meta
    device). Its blocks are all built alike (VisionTransformer._new_blocks), so the count is
    affine in depth: counted at depth 1 and 2, which gives one block's FLOPs and the rest's, the
    full depth's count is exact (the formula is checked at all three depths). The curated table's
    models: the generated ones are the same blocks in other sizes."""
    for name in sorted(m.name for m in CURATED):
        counts = []
        for depth in (1, 2):
            with torch.device("meta"):
                model = vitzoo.create(name, depth=depth)
            model = model.to("meta")  # the sincos table is computed on the CPU even under a meta context
            # the config's size (the formula's): timm's NaFlexVit releases evaluate at another
            counts.append(counted(model, torch.empty(1, *model.config.input_size, device="meta")))
            assert vit_flops(model.config).total == counts[-1], (name, depth)
            assert model_flops(model) == counts[-1]
        full = ViTConfig.from_dict(vitzoo.model_info(name)["config"])
        if full.global_attn_indexes:  # windowed blocks but a few global ones (SAM 3): counted whole
            with torch.device("meta"):
                model = vitzoo.create(name).to("meta")
            assert vit_flops(full).total == counted(model, torch.empty(1, *full.input_size, device="meta")), name
            continue
        block = counts[1] - counts[0]
        assert vit_flops(full).total == counts[0] + (full.depth - 1) * block, name


def test_known_figures():
    # ViT-B/16 at 224 is the familiar 17.6 GMACs = 35.1 GFLOPs; DeiT-Ti 1.25 GMACs.
    assert vit_flops(ViTConfig.from_dict(vitzoo.model_info("vit_b16")["config"])).total == 35_127_656_448
    breakdown = vit_flops(ViTConfig(img_size=224, patch_size=16, embed_dim=192, depth=12, num_heads=3))
    assert round(breakdown.total / 2e9, 2) == 1.25
    assert breakdown.attention == 12 * 4 * 197 * 197 * 192


def test_measure_flops_of_a_module_that_is_not_a_vit():
    class TwoLayers(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.fc = nn.Linear(8, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.conv(x).mean(dim=(2, 3)))

    model = TwoLayers()
    # conv: 8 outputs per position, 3*3*3 multiply-adds each, 6x6 positions; fc: 8 x 10.
    assert measure_flops(model, (3, 8, 8)) == 2 * (6 * 6 * 8 * 27 + 8 * 10)
    assert model.conv.weight.device.type == "cpu"  # the caller's model stays where it was
    with pytest.raises(ValueError, match="cannot tell the input size of TwoLayers"):
        model_flops(model)
