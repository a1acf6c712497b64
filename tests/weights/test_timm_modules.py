"""vitzoo/weights/timm_modules.py: a timm model whose parts vitzoo does not compute exactly (post-norm
blocks, parallel branches, relative positions, ...) is refused through "timm:<name>",
naming each part, while the architectures it does compute still give timm's output."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from test_dinov3 import max_diff, randomise

import vitzoo
from vitzoo.weights import WeightsMismatchError
from vitzoo.weights.timm_modules import timm_on_meta

timm = pytest.importorskip("timm")
TIMM_VERSION = tuple(int(p) for p in timm.__version__.split(".")[:3] if p.isdigit())

ATOL = 1e-5
TINY = dict(depth=2, embed_dim=64, num_heads=2, img_size=32)


def _timm_model(name: str, *, meta: bool = False, **args: Any) -> torch.nn.Module:
    """timm's model, or a skip naming the installed timm where it predates the architecture or one
    of its arguments (the oldest pinned timm, 1.0.3, has no PE or RoPE-Mixed, nor avgmax pooling)."""
    if not timm.is_model(name):
        pytest.skip(f"timm {timm.__version__} has no {name} (newer timm has)")
    try:
        return timm_on_meta(timm, name, **args) if meta else timm.create_model(name, **args)
    except (TypeError, AssertionError) as e:
        pytest.skip(f"timm {timm.__version__} cannot build {name} with {args} ({e}); newer timm can")


def _from_timm(name: str, reference: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    """vitzoo.from_pretrained("timm:<name>") with timm's loader handed `reference` (no download)."""
    monkeypatch.setattr(timm, "create_model", lambda *args, **kwargs: reference)
    return vitzoo.from_pretrained(f"timm:{name}")


@pytest.mark.parametrize(
    "name, args, found",
    [
        ("vit_base_patch16_xp_224", {}, r"ParallelScalingBlock with qk-norm"),
        ("vit_small_patch16_18x2_224", {}, r"ParallelThingsBlock, several attention and MLP branches"),
        ("vit_relpos_base_patch16_224", dict(rel_pos_type="bias"), r"RelPosBias, a learned table"),
        ("vit_relpos_base_patch16_224", dict(rel_pos_type="mlp_swin"), r"RelPosMlp with Swin V2's 'swin'"),
        (
            "beit_base_patch16_224",
            dict(use_rel_pos_bias=False, use_shared_rel_pos_bias=True),
            r"rel_pos_bias: RelativePositionBias, one relative position bias shared by every block",
        ),
        ("vit_base_patch16_224", dict(global_pool="avgmax"), r"global_pool 'avgmax'"),
        (
            "vit_base_patch16_224",
            dict(reg_tokens=1, global_pool="avg", pool_include_prefix=True),
            "pool_include_prefix",
        ),
    ],
)
def test_timm_source_refuses_what_vitzoo_does_not_compute(name, args, found, monkeypatch):
    """Post-norm blocks hold the keys of pre-norm ones: vitzoo used to load them as pre-norm and
    compute something else without a word. Each such part is now named, with the model's class."""
    reference = _timm_model(name, meta=True, **{**TINY, **args})  # refused before any tensor is read
    with pytest.raises(WeightsMismatchError, match=rf"timm:{name}: timm builds it as \w+, .*{found}"):
        _from_timm(name, reference, monkeypatch)


@pytest.mark.parametrize(
    "name, args",
    [
        ("vit_base_patch16_siglip_224", {}),  # the attention pool (its norm is before its MLP)
        ("vit_pe_core_small_patch16_384", {}),  # Eva: rotary, a pool over every token
        ("eva02_small_patch14_224", dict(img_size=28)),  # Eva: SwiGLU with its sub-norm, q/v biases
        ("vit_base_patch16_rope_mixed_224", {}),  # AttentionRope
        ("vit_medium_patch16_gap_256", {}),  # average pooling
        ("deit_small_distilled_patch16_224", {}),
        ("vit_base_patch16_clip_quickgelu_224", {}),  # norm_pre, QuickGELU
        ("vit_base_patch16_rpn_224", {}),  # ResPostBlock: block_type="postnorm"
        ("eva02_enormous_patch14_clip_224", dict(img_size=28)),  # EvaBlockPostNorm
        ("vit_relpos_medium_patch16_rpn_224", {}),  # relative position bias MLP, post-norm
        ("vit_srelpos_small_patch16_224", {}),  # one bias MLP shared by the blocks
        ("beit3_base_patch16_224", {}),  # the attention's sub-LN (scale_attn_norm), the MLP's
        ("eva02_base_patch16_clip_224", {}),  # Eva's sub-LN in the attention (scale_attn_inner)
        ("vit_small_r26_s32_224", dict(img_size=64)),  # BiT's ResNet stem (HybridEmbed)
        ("vit_dwee_patch16_reg1_gap_256", {}),  # differential attention
        ("vit_pwee_patch16_reg1_gap_256", {}),  # the parallel block (ParallelScalingBlock)
        ("vit_base_patch16_224", dict(qk_norm=True)),  # qk-norm per head (ViTConfig.qk_norm="head")
        ("beit_base_patch16_224", {}),  # BEiT: relative position tables, q/v biases, gamma_1/2, fc_norm
    ],
)
def test_timm_source_still_loads_what_vitzoo_computes(name, args: dict[str, Any], monkeypatch):
    if name == "vit_small_r26_s32_224" and TIMM_VERSION < (1, 0, 31):
        pytest.skip(f"timm {timm.__version__}'s HybridEmbed is refused by name; the stem is proved against timm 1.0.31")
    reference = randomise(_timm_model(name, **{**TINY, **args}), 0)
    model = _from_timm(name, reference, monkeypatch).eval()
    size = args.get("img_size", TINY["img_size"])
    x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL
