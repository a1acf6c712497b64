"""VisionTransformer: shapes for every registered config, the model API, the distillation and
representation heads, bad input, and the timm-compatible parameter layout."""

from __future__ import annotations

import re
from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn

import vitzoo
from vitzoo import VisionTransformer, ViTConfig
from vitzoo.layers import DropPath, to_2tuple
from vitzoo.layers.swiglu import packed_mlp_ratio
from vitzoo.registry import count_parameters, get_entry
from vitzoo.zoo.curated import CURATED as _CURATED_MODELS

# Only the built-in zoo: names other tests or plugins register are not this file's business.
CURATED = {m.name for m in _CURATED_MODELS}
BUILTIN_NAMES = [name for name in vitzoo.list_models() if name in CURATED]  # the generated: tests/zoo


@pytest.fixture(autouse=True)
def one_thread():
    """These tests check values, not parallel speed. One intra-op thread spares every op an OpenMP
    barrier, which on a small machine shared with other jobs costs more than the work itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _input(config: ViTConfig, batch: int = 2, device: str = "cpu") -> torch.Tensor:
    h, w = to_2tuple(config.img_size)
    return torch.randn(batch, config.in_chans, h, w, device=device)


def _tiny(**fields) -> VisionTransformer:
    """A small model for API tests: 32x32, 4 patches of 16, 2 blocks."""
    base = dict(img_size=32, patch_size=16, in_chans=3, num_classes=5, embed_dim=24, depth=2, num_heads=3)
    return VisionTransformer(ViTConfig(**base), **fields)


def _output_width(config: ViTConfig) -> int:
    """Logits, or with num_classes=0 the pooled feature (DINO, DINOv2, MAE, SigLIP backbones)."""
    return config.num_classes or config.representation_size or config.embed_dim


# ----------------------------------------------------------------------------- every config
@pytest.mark.every_config
@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_full_depth_output_shape_of_every_config(name):
    """The full model of each name; models over a million parameters are built and run on the
    meta device (shapes only, no memory or compute), small ones for real."""
    if vitzoo.model_info(name)["num_params"] > 1_000_000:
        with torch.device("meta"):
            model = vitzoo.create(name).eval()
        device = "meta"
    else:
        model, device = vitzoo.create(name).eval(), "cpu"
    cfg = model.config
    gh, gw = cfg.grid_size
    tokens = gh * gw + cfg.num_prefix_tokens
    with torch.inference_mode():
        x = _input(cfg, device=device)
        feats = model.forward_features(x)
        assert feats.shape == (2, tokens, cfg.embed_dim)
        assert model.forward_head(feats).shape == (2, _output_width(cfg))
        assert model(x).shape == (2, _output_width(cfg))
        assert model.forward_head(feats, pre_logits=True).shape == (2, cfg.representation_size or cfg.embed_dim)


@pytest.mark.every_config
@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_one_block_forward_is_finite_for_every_config(name):
    """Real numbers through every config's stem and head (depth cut to 1 and width to at most 384
    to stay fast: the 2026 families reach 4096)."""
    torch.manual_seed(0)
    config = get_entry(name).resolve_config()
    narrow: dict[str, Any] = {"embed_dim": 384, "num_heads": 6} if config.embed_dim > 384 else {}
    if narrow and config.mlp_layer == "swiglu_packed":  # fc1 holds gate and input halves: an even width
        narrow["mlp_ratio"] = packed_mlp_ratio(384, int(384 * config.mlp_ratio) // 2)
    model = vitzoo.create(name, depth=1, **narrow).eval()
    assert len(model.blocks) == 1
    with torch.inference_mode():
        out = model(_input(model.config, batch=1))
    assert out.shape == (1, _output_width(model.config))
    assert torch.isfinite(out).all()


# ----------------------------------------------------------------------------- API
def test_forward_is_forward_head_of_forward_features():
    torch.manual_seed(0)
    model = _tiny().eval()
    x = _input(model.config)
    with torch.no_grad():
        feats = model.forward_features(x)
        assert feats.shape == (2, 1 + 4, 24)
        torch.testing.assert_close(model(x), model.forward_head(feats))
        pre = model.forward_head(feats, pre_logits=True)
        torch.testing.assert_close(pre, feats[:, 0])  # token pooling: the class token
        torch.testing.assert_close(model.head(pre), model(x))


def test_avg_pool_averages_patch_tokens_only():
    torch.manual_seed(0)
    model = _tiny(global_pool="avg").eval()
    with torch.no_grad():
        feats = model.forward_features(_input(model.config))
        torch.testing.assert_close(model.forward_head(feats, pre_logits=True), feats[:, 1:].mean(dim=1))


def test_reset_classifier_and_num_classes_zero_give_features():
    torch.manual_seed(0)
    model = _tiny().eval()
    x = _input(model.config)
    model.reset_classifier(7)
    assert model.head.out_features == 7 and model.config.num_classes == 7
    assert model.pretrained_cfg.num_classes == 7
    assert model(x).shape == (2, 7)
    model.reset_classifier(0)
    assert isinstance(model.head, nn.Identity)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.forward_features(x)[:, 0])

    features_model = _tiny(num_classes=0).eval()
    assert isinstance(features_model.head, nn.Identity)
    assert features_model(x).shape == (2, 24)
    assert not any("head" in name for name, _ in features_model.named_parameters())


def test_reset_classifier_keeps_the_model_dtype():
    model = _tiny(distilled=True).to(torch.bfloat16).eval()
    model.reset_classifier(4)
    assert model.head.weight.dtype == model.head_dist.weight.dtype == torch.bfloat16
    assert model(_input(model.config).to(torch.bfloat16)).shape == (2, 4)


def test_no_weight_decay_names_tokens_and_learned_position_embedding():
    assert _tiny().no_weight_decay() == {"pos_embed", "cls_token"}
    assert _tiny(distilled=True).no_weight_decay() == {"pos_embed", "cls_token", "dist_token"}
    # A fixed sinusoidal table is a buffer, not a parameter: nothing to decay.
    assert _tiny(pos_embed="sincos").no_weight_decay() == {"cls_token"}
    for model in (_tiny(), _tiny(distilled=True)):
        params = dict(model.named_parameters())
        assert model.no_weight_decay() <= set(params)


def test_sincos_position_embedding_is_a_fixed_non_persistent_buffer():
    from vitzoo.layers import sincos_1d

    model = _tiny(pos_embed="sincos")
    assert "pos_embed" not in dict(model.named_parameters())
    assert "pos_embed" not in model.state_dict()
    torch.testing.assert_close(model.pos_embed, sincos_1d(5, 24).unsqueeze(0))


def test_drop_path_rises_linearly_over_depth():
    model = _tiny(depth=5, drop_path_rate=0.2)
    assert isinstance(model.blocks[0].drop_path1, nn.Identity)  # rate 0 at the first block
    rates = [b.drop_path1.drop_prob for b in model.blocks[1:]]
    assert rates == pytest.approx([0.05, 0.1, 0.15, 0.2])
    assert all(isinstance(b.drop_path2, DropPath) for b in model.blocks[1:])


def test_config_and_pretrained_cfg_are_plain_data():
    model = vitzoo.create("vit_mnist")
    assert isinstance(model.config, ViTConfig)
    assert ViTConfig.from_dict(model.config.to_dict()) == model.config
    assert model.pretrained_cfg.input_size == (1, 28, 28)
    assert model.pretrained_cfg.num_classes == 10
    rect = _tiny(img_size=(32, 48), in_chans=2)
    assert rect.config.input_size == rect.pretrained_cfg.input_size == (2, 32, 48)
    assert ViTConfig(img_size=64, in_chans=1).input_size == (1, 64, 64)
    assert rect.forward_features(_input(rect.config)).shape == (2, 1 + 2 * 3, 24)


# ----------------------------------------------------------------------------- DeiT distillation
def test_distilled_returns_a_pair_in_train_and_their_average_in_eval():
    torch.manual_seed(0)
    model = _tiny(distilled=True, drop_rate=0.0)
    assert model.cls_token is not None and model.dist_token is not None
    assert model.pos_embed.shape == (1, 4 + 2, 24)  # position embedding over N + 2 tokens
    x = _input(model.config)
    with torch.no_grad():
        model.train()
        logits, dist_logits = model(x)
        feats = model.forward_features(x)
        # DeiT token order [cls, dist, patches]: the class head reads token 0, the distillation head token 1.
        torch.testing.assert_close(logits, model.head(feats[:, 0]))
        torch.testing.assert_close(dist_logits, model.head_dist(feats[:, 1]))
        assert not torch.allclose(logits, dist_logits)
        model.eval()
        torch.testing.assert_close(model(x), (logits + dist_logits) / 2)
        pre = model.forward_head(feats, pre_logits=True)
        torch.testing.assert_close(pre, (feats[:, 0] + feats[:, 1]) / 2)


def test_distilled_reset_classifier_replaces_both_heads():
    model = _tiny(distilled=True)
    model.reset_classifier(3)
    assert model.head.out_features == 3 and model.head_dist.out_features == 3
    model.train()
    logits, dist_logits = model(_input(model.config))
    assert logits.shape == dist_logits.shape == (2, 3)


def test_distilled_needs_a_class_token():
    with pytest.raises(ValueError, match="distilled=True needs class_token=True"):
        _tiny(distilled=True, class_token=False, global_pool="avg")


# ----------------------------------------------------------------------------- representation layer
def test_representation_layer_is_linear_tanh_before_the_head():
    torch.manual_seed(0)
    model = _tiny(representation_size=10).eval()
    assert isinstance(model.pre_logits.fc, nn.Linear) and model.pre_logits.fc.out_features == 10
    assert isinstance(model.pre_logits.act, nn.Tanh)
    assert model.head.in_features == 10
    x = _input(model.config)
    with torch.no_grad():
        feats = model.forward_features(x)
        pre = model.forward_head(feats, pre_logits=True)
        torch.testing.assert_close(pre, torch.tanh(model.pre_logits.fc(feats[:, 0])))
        torch.testing.assert_close(model(x), model.head(pre))
    assert _tiny(representation_size=10, num_classes=0).eval()(x).shape == (2, 10)


def test_vit_b16_in21k_has_the_768_representation_layer():
    with torch.device("meta"):
        model = vitzoo.create("vit_b16_in21k")
    assert model.pre_logits.fc.in_features == model.pre_logits.fc.out_features == 768
    assert model.head.out_features == 21843
    base = vitzoo.model_info("vit_b16")["num_params"]
    head_delta = 768 * (21843 - 1000) + (21843 - 1000)
    assert count_parameters(model) == base + 768 * 768 + 768 + head_delta


def test_vit_b16_accepts_distilled_and_representation_together():
    with torch.device("meta"):
        full = vitzoo.create("vit_b16", distilled=True, representation_size=768)
    base = vitzoo.model_info("vit_b16")["num_params"]
    # + dist token, + one position, + representation Linear(768, 768), + second 1000-way head.
    assert count_parameters(full) == base + 768 + 768 + (768 * 768 + 768) + (768 * 1000 + 1000)

    torch.manual_seed(0)
    model = vitzoo.create("vit_b16", distilled=True, representation_size=768, depth=1, img_size=32)
    x = _input(model.config)
    with torch.no_grad():
        model.train()
        logits, dist_logits = model(x)
        feats = model.forward_features(x)
        # Both tokens go through the shared representation layer, then their own head.
        torch.testing.assert_close(dist_logits, model.head_dist(model.pre_logits(feats[:, 1])))
        model.eval()
        torch.testing.assert_close(model(x), (logits + dist_logits) / 2)


# ----------------------------------------------------------------------------- bad input
def test_wrong_image_size_or_channels_name_expected_and_given():
    model = _tiny()
    with pytest.raises(ValueError, match=r"\(2, 3, 64, 64\).*\(batch, 3, 32, 32\)"):
        model(torch.zeros(2, 3, 64, 64))
    with pytest.raises(ValueError, match=r"\(2, 1, 32, 32\).*\(batch, 3, 32, 32\)"):
        model(torch.zeros(2, 1, 32, 32))
    with pytest.raises(ValueError, match=r"\(3, 32, 32\)"):
        model(torch.zeros(3, 32, 32))  # no batch dimension


def test_bad_config_values_are_value_errors():
    with pytest.raises(ValueError, match=r"img_size 30 is not divisible by patch_size 16"):
        _tiny(img_size=30)
    with pytest.raises(ValueError, match=r"embed_dim 24 is not divisible by num_heads 5"):
        _tiny(num_heads=5)
    with pytest.raises(ValueError, match="num_classes"):
        _tiny(num_classes=-1)
    with pytest.raises(ValueError, match="global_pool"):
        _tiny(global_pool="max")


def test_an_image_size_beyond_any_vit_is_refused_before_anything_is_allocated():
    """img_size=100000 (`vitzoo export --img-size 100000`) sized the position table by it (an allocator error)."""
    with pytest.raises(ValueError, match=r"img_size=\(4112, 4112\) is invalid; .* at most 65536 patches \(257 x 257"):
        ViTConfig(img_size=4112, patch_size=16)
    with pytest.raises(ValueError, match=r"img_size=\(100000, 100000\) is invalid; expected at most 65536 pixels"):
        vitzoo.create("vit_mnist_tiny", img_size=100000)
    assert ViTConfig(img_size=(16, 4096 * 16), patch_size=16).grid_size == (1, 4096)  # a long strip is fine


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("depth", 3.5, "depth=3.5 is invalid; expected an int"),
        ("embed_dim", "9", "embed_dim='9' is invalid; expected an int"),
        ("num_classes", True, "num_classes=True is invalid; expected an int"),  # a bool is not a count
        ("mlp_ratio", "4", "mlp_ratio='4' is invalid; expected a finite number"),
        ("mlp_ratio", float("nan"), "mlp_ratio=nan is invalid; expected a finite number"),
        ("qkv_bias", 1, "qkv_bias=1 is invalid; expected true or false"),
        ("img_size", (32, 32.0), "img_size=(32, 32.0) is invalid; expected an int or a list of 2 ints"),
        ("conv_stem", (8, "16"), "conv_stem=(8, '16') is invalid; expected a list of ints"),
        ("representation_size", 2.5, "representation_size=2.5 is invalid; expected an int or None"),
        ("pos_embed", 1, "pos_embed=1 is invalid; expected one of 'learned', 'sincos', 'none', 'factorized'"),
    ],
)
def test_wrongly_typed_config_fields_are_type_errors_naming_the_field(field, value, expected):
    with pytest.raises(TypeError) as err:
        ViTConfig().replace(**{field: value})
    assert str(err.value) == expected


def test_config_types_accept_ints_for_floats_and_lists_for_tuples():
    config = ViTConfig(img_size=[32, 48], patch_size=16, mlp_ratio=2, norm_eps=1, embed_dim=24, num_heads=3)
    assert config.img_size == (32, 48) and config.mlp_ratio == 2
    with pytest.raises(ValueError, match="embed_dim=0 is invalid; expected an int >= 1"):
        ViTConfig(embed_dim=0, num_heads=1)


def test_unknown_config_field_is_a_type_error_listing_valid_fields():
    with pytest.raises(TypeError, match=r"unknown config field\(s\) 'num_layers'; valid fields: .*depth") as err:
        _tiny(num_layers=3)
    for name in ViTConfig.field_names():
        assert name in str(err.value)
    with pytest.raises(TypeError, match="'emb_dim'"):
        ViTConfig().replace(emb_dim=3)


# ----------------------------------------------------------------------------- the tutorial model
def test_vit_mnist_tiny_is_the_tutorial_model_with_5689_parameters():
    model = vitzoo.create("vit_mnist_tiny")
    assert count_parameters(model) == 5689
    cfg = model.config
    assert (cfg.img_size, cfg.patch_size, cfg.in_chans, cfg.embed_dim, cfg.num_heads, cfg.depth) == (32, 16, 1, 9, 3, 3)
    assert cfg.pos_embed == "sincos" and cfg.class_token and cfg.num_classes == 10
    assert isinstance(model.norm, nn.Identity)
    out = model.eval()(torch.randn(4, 1, 32, 32))
    assert out.shape == (4, 10)
    assert not torch.allclose(out.sum(dim=1), torch.ones(4))  # logits, not softmax probabilities


# ----------------------------------------------------------------------------- timm layout
@pytest.mark.parametrize("name", ["vit_ti16", "deit_ti16_distilled"])
def test_timm_state_dict_loads_key_by_key_with_identical_logits(name):
    timm = pytest.importorskip("timm")

    torch.manual_seed(0)
    reference = timm.create_model(get_entry(name).timm_name, pretrained=False).eval()
    ours = vitzoo.create(name).eval()
    theirs_sd, ours_sd = reference.state_dict(), ours.state_dict()
    assert sorted(theirs_sd) == sorted(ours_sd)  # the same names
    for key, value in theirs_sd.items():
        assert ours_sd[key].shape == value.shape, key
    ours.load_state_dict(theirs_sd, strict=True)

    x = torch.randn(2, 3, 224, 224)
    with torch.inference_mode():
        expected, got = reference(x), ours(x)
    # The same sequence of ops: equal up to the summation order of the kernels chosen for each call
    # (AVX2's and AVX-512's differ in the last bits of fp32).
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    reference.train(), ours.train()
    if ours.config.distilled:  # timm returns the pair in train mode too (outside distilled training)
        reference.set_distilled_training(True)
        with torch.no_grad():
            for a, b in zip(ours(x), reference(x)):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- hybrid (conv stem)
def test_conv_stem_model_round_trips_through_json_and_save_pretrained(tmp_path):
    from vitzoo.weights.errors import WeightsMismatchError
    from vitzoo.weights.keymaps import to_timm
    from vitzoo.weights.shapes import infer_config_fields

    config = ViTConfig.from_dict(
        dict(
            img_size=28,
            patch_size=8,
            in_chans=1,
            conv_stem=[4, 8],
            num_classes=3,
            embed_dim=16,
            depth=1,
            num_heads=2,
            class_token=False,
            global_pool="avg",
        )
    )
    assert config.conv_stem == (4, 8) and config.grid_size == (4, 4)  # JSON lists become tuples
    torch.manual_seed(0)
    model = VisionTransformer(config)
    model.train()(torch.randn(8, 1, 28, 28))  # moves the BatchNorm running statistics off 0 / 1
    model.eval()
    state = model.state_dict()
    assert "patch_embed.stem.1.running_mean" in state and state["patch_embed.stem.1.running_mean"].abs().sum() > 0
    assert model.pos_embed.shape == (1, 16, 16)

    x = torch.randn(2, 1, 28, 28)
    model.save_pretrained(tmp_path / "hybrid")
    again = vitzoo.from_pretrained(str(tmp_path / "hybrid")).eval()
    assert again.config == config
    assert torch.equal(again(x), model(x))  # weights and BatchNorm statistics both came back

    fields = infer_config_fields(state)
    assert (fields["conv_stem"], fields["in_chans"], fields["patch_size"]) == ((4, 8), 1, 8)
    with pytest.raises(WeightsMismatchError, match="convolutional stem"):
        to_timm(state)


def test_conv_stem_config_errors_name_the_field():
    with pytest.raises(ValueError, match=r"expected patch_size=8, got \(16, 16\)"):
        _tiny(conv_stem=(4, 4))
    with pytest.raises(ValueError, match="conv_stem"):
        _tiny(patch_size=4, conv_stem=(-1,))


# ============================================================================= today's families
# Each family's architecture at a tiny size (timm's settings: deit.py / vision_transformer.py).
# The timm twin is built from the same fields, so each option is proven against timm's own code.
TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=3, num_heads=4)
FAMILIES = {
    "vit": dict(num_classes=10),
    "deit3": dict(num_classes=10, no_embed_class=True, init_values=1e-6),
    "dino_mae": dict(num_classes=0),  # DINO v1 and MAE pretraining: a plain ViT without classifier
    "mae_finetuned": dict(num_classes=10, global_pool="avg", fc_norm=True),
    "dinov2": dict(img_size=56, patch_size=14, init_values=1e-5, num_classes=0),
    "dinov2_reg": dict(img_size=56, patch_size=14, init_values=1e-5, reg_tokens=4, no_embed_class=True, num_classes=0),
    "clip": dict(num_classes=16, pre_norm=True, patch_bias=False, norm_eps=1e-5, act_layer="quick_gelu"),
    "siglip": dict(num_classes=0, class_token=False, global_pool="map"),
    "siglip_tanh_head": dict(num_classes=7, class_token=False, global_pool="map", act_layer="gelu_tanh"),
    # DINOv2-g: SwiGLU with gate and input packed in fc1 (timm's SwiGLUPacked, ratio 2.66667 * 2:
    # 512 wide at 96 dims, 256 hidden units)
    "dinov2_g": dict(
        embed_dim=96,
        img_size=56,
        patch_size=14,
        init_values=1e-5,
        num_classes=0,
        mlp_layer="swiglu_packed",
        act_layer="silu",
        mlp_ratio=2.66667 * 2,
    ),
    # timm's unpacked SwiGLU (fc1_g, fc1_x) with RMSNorm everywhere, as timm's AIMv2 builds them
    "swiglu_rmsnorm": dict(
        num_classes=10, class_token=False, global_pool="avg", mlp_layer="swiglu", act_layer="silu", norm_layer="rmsnorm"
    ),
}
EXACT = dict(rtol=0, atol=1e-5)  # the bound for fp32 parity with timm


def _family(name: str, **fields) -> ViTConfig:
    return ViTConfig(**{**TINY, **FAMILIES[name], **fields})


def _timm_twin(config: ViTConfig) -> nn.Module:
    """timm's VisionTransformer with the same architecture and random weights, every parameter
    redrawn at a scale where no option hides behind a near-zero init (LayerScale's 1e-6)."""
    import functools

    timm_vit = pytest.importorskip("timm.models.vision_transformer")
    timm_layers = pytest.importorskip("timm.layers")
    mlp_layers = {"mlp": timm_layers.Mlp, "swiglu": timm_layers.SwiGLU, "swiglu_packed": timm_layers.SwiGLUPacked}
    norm_layers = {"layernorm": nn.LayerNorm, "rmsnorm": timm_layers.RmsNorm}
    if config.patch_bias == config.pre_norm:
        raise AssertionError("timm ties the patch bias to pre_norm (bias = not pre_norm)")
    kwargs = dict(
        img_size=config.img_size,
        patch_size=config.patch_size,
        in_chans=config.in_chans,
        num_classes=config.num_classes,
        embed_dim=config.embed_dim,
        depth=config.depth,
        num_heads=config.num_heads,
        mlp_ratio=config.mlp_ratio,
        qkv_bias=config.qkv_bias,
        init_values=config.init_values,
        class_token=config.class_token,
        reg_tokens=config.reg_tokens,
        no_embed_class=config.no_embed_class,
        pre_norm=config.pre_norm,
        global_pool=config.global_pool,
        fc_norm=config.fc_norm,
        dynamic_img_size=config.dynamic_img_size,
        act_layer=config.act_layer,
        mlp_layer=mlp_layers[config.mlp_layer],
        norm_layer=functools.partial(norm_layers[config.norm_layer], eps=config.norm_eps),
    )
    twin = timm_vit.VisionTransformer(**kwargs)
    if twin.attn_pool is not None:
        probe = torch.linspace(-4, 4, 9)
        if not torch.equal(twin.attn_pool.mlp.act(probe), twin.blocks[0].mlp.act(probe)):
            pytest.skip(f"timm {_timm_version()} builds the attention pool's MLP with GELU whatever act_layer says")
    with torch.no_grad():
        for p in twin.parameters():
            p.normal_(0, 0.1)
    return twin.eval()


def _timm_version() -> str:
    import timm

    return timm.__version__


def _skip_before_timm_rmsnorm_fix() -> None:
    """timm before 1.0.13 normalised by the variance (mean removed), not the mean square."""
    import timm

    if tuple(int(p) for p in timm.__version__.split(".")[:3]) < (1, 0, 13):
        pytest.skip(f"timm {timm.__version__}'s RmsNorm divides by the variance (timm >= 1.0.13 by the mean square)")


def _twins(name: str, **fields) -> tuple[VisionTransformer, nn.Module]:
    torch.manual_seed(0)
    config = _family(name, **fields)
    if config.norm_layer == "rmsnorm":
        _skip_before_timm_rmsnorm_fix()
    theirs = _timm_twin(config)
    ours = VisionTransformer(config).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)  # our keys are timm's keys
    return ours, theirs


def _flat(out) -> list[torch.Tensor]:
    """Every tensor of a nested result (lists, tuples, dicts) in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in _flat(out[key])]
    return [t for item in out for t in _flat(item)]


def _assert_same(ours, theirs, **tolerance) -> None:
    a, b = _flat(ours), _flat(theirs)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, **(tolerance or EXACT))


def _image(config: ViTConfig, size: tuple[int, int] | None = None, batch: int = 2) -> torch.Tensor:
    h, w = size or to_2tuple(config.img_size)
    return torch.randn(batch, config.in_chans, h, w, generator=torch.Generator().manual_seed(1))


INTERMEDIATE_CALLS = [
    dict(),
    dict(indices=2, norm=True),
    dict(indices=[0, -1], output_fmt="NLC", return_prefix_tokens=True),
    dict(indices=[2, 0], stop_early=True, intermediates_only=True),
    dict(indices=(1,), norm=True, output_fmt="NLC", intermediates_only=True, return_prefix_tokens=True),
]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_equals_timm_on_timms_weights(family):
    ours, theirs = _twins(family)
    assert count_parameters(ours) == sum(p.numel() for p in theirs.parameters())
    x = _image(ours.config)
    with torch.no_grad():
        _assert_same(ours(x), theirs(x))
        _assert_same(ours.forward_features(x), theirs.forward_features(x))
        _assert_same(
            ours.forward_head(ours.forward_features(x), pre_logits=True),
            theirs.forward_head(theirs.forward_features(x), pre_logits=True),
        )
        for call in INTERMEDIATE_CALLS:
            got = ours.forward_intermediates(x, **call)
            if not ours.num_prefix_tokens:
                # No prefix tokens to return: the flag changes nothing (timm 1.0.3 fails on it here)
                call = {**call, "return_prefix_tokens": False}
            _assert_same(got, theirs.forward_intermediates(x, **call))


@pytest.mark.parametrize("family", FAMILIES)
def test_dynamic_img_size_equals_timm_at_other_sizes(family):
    ours, theirs = _twins(family, dynamic_img_size=True)
    p = to_2tuple(ours.config.patch_size)[0]
    side = to_2tuple(ours.config.img_size)[0]
    with torch.no_grad():
        for size in [(side, side), (side + p, side + 2 * p), (2 * p, 3 * p)]:
            x = _image(ours.config, size)
            _assert_same(ours(x), theirs(x), rtol=0, atol=1e-4)
            call = dict(indices=[0, -1], norm=True)
            maps = ours.forward_intermediates(x, **call)[1]
            assert maps[0].shape[-2:] == (size[0] // p, size[1] // p)
            _assert_same(maps, theirs.forward_intermediates(x, **call)[1], rtol=0, atol=1e-4)


@pytest.mark.parametrize("family", ["deit3", "dinov2_reg", "siglip", "clip"])
def test_set_input_size_resamples_once_like_timm(family, tmp_path):
    ours, theirs = _twins(family)
    side = to_2tuple(ours.config.img_size)[0]
    p = to_2tuple(ours.config.patch_size)[0]
    new = (side + p, side + 2 * p)
    x = _image(ours.config, new)
    dynamic = VisionTransformer(ours.config.replace(dynamic_img_size=True)).eval()
    dynamic.load_state_dict(ours.state_dict())
    ours.set_input_size(img_size=new)
    assert ours.config.img_size == new and ours.pretrained_cfg.input_size == (3, *new)
    assert ours.patch_embed.grid_size == (new[0] // p, new[1] // p)
    assert isinstance(ours.pos_embed, nn.Parameter) and ours.pos_embed.requires_grad
    with torch.no_grad():
        torch.testing.assert_close(ours(x), dynamic(x), rtol=0, atol=0)  # the same table as per call
    with pytest.raises(ValueError, match=rf"expected \(batch, 3, {new[0]}, {new[1]}\)"):
        ours(_image(ours.config, (side, side)))
    # The new size is the model's size now: it saves and loads as such.
    ours.save_pretrained(tmp_path / "resized")
    again = vitzoo.from_pretrained(str(tmp_path / "resized")).eval()
    with torch.no_grad():
        assert torch.equal(again(x), ours(x))

    if not hasattr(theirs, "set_input_size"):
        pytest.skip(f"timm {_timm_version()} has no VisionTransformer.set_input_size to compare with")
    theirs.set_input_size(img_size=new)
    assert ours.pos_embed.shape == theirs.pos_embed.shape
    with torch.no_grad():
        _assert_same(ours(x), theirs(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize("family", ["vit", "mae_finetuned", "dinov2_reg", "siglip"])
@pytest.mark.parametrize("prune_norm", [False, True])
def test_prune_intermediate_layers_like_timm(family, prune_norm):
    ours, theirs = _twins(family)
    indices = [0, 1]
    assert ours.prune_intermediate_layers(indices, prune_norm=prune_norm) == [0, 1]
    theirs.prune_intermediate_layers(indices, prune_norm=prune_norm)
    assert len(ours.blocks) == ours.config.depth == 2
    assert ours.attn_pool is None and isinstance(ours.head, nn.Identity) and ours.config.global_pool == ""
    assert count_parameters(ours) == sum(p.numel() for p in theirs.parameters())
    x = _image(ours.config)
    with torch.no_grad():
        _assert_same(ours(x), theirs(x))  # the token sequence: no pooling, no head
        call = dict(indices=indices, norm=True, intermediates_only=True)
        _assert_same(ours.forward_intermediates(x, **call), theirs.forward_intermediates(x, **call))
    # The config describes what is left: a model built from it takes the pruned weights as they are.
    rebuilt = VisionTransformer(ours.config).eval()
    rebuilt.load_state_dict(ours.state_dict(), strict=True)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), ours(x))


def test_forward_intermediates_output_dict_like_timm():
    ours, theirs = _twins("dinov2_reg")
    if "output_dict" not in __import__("inspect").signature(theirs.forward_intermediates).parameters:
        pytest.skip(f"timm {_timm_version()}'s forward_intermediates has no output_dict")
    x = _image(ours.config)
    with torch.no_grad():
        for call in [dict(indices=2), dict(indices=[1], return_prefix_tokens=True, intermediates_only=True)]:
            a = ours.forward_intermediates(x, output_dict=True, **call)
            b = theirs.forward_intermediates(x, output_dict=True, **call)
            assert sorted(a) == sorted(b)
            _assert_same(a, b)


# ----------------------------------------------------------------------------- options, end to end
def test_register_tokens_follow_the_class_token():
    torch.manual_seed(0)
    model = _tiny(reg_tokens=3, no_embed_class=True).eval()
    assert model.num_prefix_tokens == model.config.num_prefix_tokens == 4
    assert model.reg_token.shape == (1, 3, 24) and model.pos_embed.shape == (1, 4, 24)  # patches only
    x = _input(model.config)
    patches = model.patch_embed(x) + model.pos_embed  # positions on the patches, before the prefix joins
    expected = torch.cat([model.cls_token.expand(2, -1, -1), model.reg_token.expand(2, -1, -1), patches], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), model.norm(model.blocks(expected)))
        # token pooling reads the class token; average pooling skips every prefix token
        feats = model.forward_features(x)
        torch.testing.assert_close(model.forward_head(feats, pre_logits=True), feats[:, 0])
        model.reset_classifier(5, global_pool="avg")
        torch.testing.assert_close(model.forward_head(feats, pre_logits=True), feats[:, 4:].mean(dim=1))
        torch.testing.assert_close(model.pool(feats, pool_type="token"), feats[:, 0])  # timm's signature
    with pytest.raises(ValueError, match="pool_type='max' is invalid"):
        model.pool(feats, pool_type="max")


def test_no_pooling_puts_the_head_on_every_token():
    torch.manual_seed(0)
    model = _tiny(global_pool="").eval()
    x = _input(model.config)
    with torch.no_grad():
        feats = model.forward_features(x)
        torch.testing.assert_close(model(x), model.head(feats))  # (2, 1 + 4, 5): logits per token
    model.reset_classifier(0)
    assert model(x).shape == (2, 5, 24)


def test_register_tokens_with_position_embedding_on_every_token():
    model = _tiny(reg_tokens=2)
    assert model.pos_embed.shape == (1, 1 + 2 + 4, 24)
    assert model(_input(model.config)).shape == (2, 5)


def test_pre_norm_patch_bias_and_head_bias():
    torch.manual_seed(0)
    model = _tiny(pre_norm=True, patch_bias=False, head_bias=False, norm_eps=1e-5).eval()
    assert model.patch_embed.proj.bias is None and model.head.bias is None
    assert isinstance(model.norm_pre, nn.LayerNorm) and model.norm_pre.eps == 1e-5
    x = _input(model.config)
    tokens = torch.cat([model.cls_token.expand(2, -1, -1), model.patch_embed(x)], dim=1) + model.pos_embed
    with torch.no_grad():
        torch.testing.assert_close(model.forward_features(x), model.norm(model.blocks(model.norm_pre(tokens))))
    model.reset_classifier(3)
    assert model.head.bias is None  # a new head keeps the model's choice
    assert isinstance(_tiny().norm_pre, nn.Identity)


def test_fc_norm_moves_the_final_norm_after_pooling():
    torch.manual_seed(0)
    model = _tiny(class_token=False, global_pool="avg", fc_norm=True).eval()
    assert isinstance(model.norm, nn.Identity) and isinstance(model.fc_norm, nn.LayerNorm)
    x = _input(model.config)
    with torch.no_grad():
        tokens = model.forward_features(x)  # not normalised
        torch.testing.assert_close(tokens, model.blocks(model.patch_embed(x) + model.pos_embed))
        torch.testing.assert_close(model(x), model.head(model.fc_norm(tokens.mean(dim=1))))


def test_map_pooling_reads_the_patch_tokens_only():
    torch.manual_seed(0)
    model = _tiny(global_pool="map", reg_tokens=1).eval()
    x = _input(model.config)
    with torch.no_grad():
        feats = model.forward_features(x)
        torch.testing.assert_close(model.forward_head(feats, pre_logits=True), model.attn_pool(feats[:, 2:]))
        # Changing a prefix token changes the features of the patches but not what the pool is handed.
        torch.testing.assert_close(model.attn_pool(feats[:, 2:]), model.attn_pool(feats[:, 2:].clone()))
    assert model.attn_pool.mlp.fc1.out_features == 4 * 24
    model.reset_classifier(0, global_pool="token")
    assert model.attn_pool is None and model.config.global_pool == "token"
    with pytest.raises(ValueError, match="global_pool='map' is invalid for a model built without attention pooling"):
        model.reset_classifier(3, global_pool="map")


def test_activation_reaches_the_blocks_and_the_pool():
    from vitzoo.layers import QuickGELU

    model = _tiny(act_layer="quick_gelu", global_pool="map")
    assert all(isinstance(b.mlp.act, QuickGELU) for b in model.blocks)
    assert isinstance(model.attn_pool.mlp.act, QuickGELU)
    assert _tiny(act_layer="gelu_tanh").blocks[0].mlp.act.approximate == "tanh"


def test_init_weights_covers_the_new_parameters():
    torch.manual_seed(0)
    model = _tiny(init_values=1e-5, reg_tokens=2, global_pool="map", embed_dim=64, num_heads=4)
    assert all(torch.equal(b.ls1.gamma, torch.full((64,), 1e-5)) for b in model.blocks)
    assert 0 < model.reg_token.std() < 1e-5  # tiny normal, like the class token
    assert model.attn_pool.latent.abs().max() <= 2 / 8 and model.attn_pool.latent.std() > 1 / 16
    assert model.attn_pool.q.weight.std().item() == pytest.approx(0.02, rel=0.2)
    assert torch.equal(model.attn_pool.kv.bias, torch.zeros(128))
    with torch.device("meta"):  # nothing to initialise, and nothing fails
        assert _tiny(init_values=1e-5, reg_tokens=2, global_pool="map").attn_pool.latent.is_meta


def test_no_weight_decay_names_register_tokens():
    assert _tiny(reg_tokens=2).no_weight_decay() == {"pos_embed", "cls_token", "reg_token"}
    # timm decays the attention pool's latent query like a weight; so do we
    assert "attn_pool.latent" not in _tiny(global_pool="map").no_weight_decay()


def test_disabled_options_add_no_parameters():
    plain = {name for name, _ in _tiny().named_parameters()}
    assert not any(key in name for name in plain for key in ("gamma", "reg_token", "norm_pre", "fc_norm", "attn_pool"))
    assert _tiny().attn_pool is None and _tiny().reg_token is None
    assert not any(".mlp.norm" in name or "fc1_" in name for name in plain)


def test_drop_remainder_ignores_the_pixels_past_the_last_whole_patch():
    """SigLIP So400m/14 at 384 px (no multiple of 14): the model sees the whole patches only, so it
    computes on an image what it computes on that image cut to whole patches; dynamic sizes too.
    (timm's fixed-size model does the same: tests/test_zoo.py compares siglip_so400m14 with it.)"""
    fields = dict(patch_size=14, drop_remainder=True, class_token=False, global_pool="map", num_classes=0)
    torch.manual_seed(0)
    model = _tiny(img_size=62, **fields).eval()
    assert model.patch_embed.grid_size == model.config.grid_size == (4, 4)
    cut = _tiny(img_size=56, **fields).eval()
    cut.load_state_dict(model.state_dict())
    dynamic = _tiny(img_size=62, dynamic_img_size=True, **fields).eval()
    dynamic.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 75, 90)
    with torch.no_grad():
        assert torch.equal(model(x[..., :62, :62]), cut(x[..., :56, :56]))
        assert torch.equal(dynamic(x), dynamic(x[..., :70, :84]))  # 5 x 6 whole patches
        maps = dynamic.forward_intermediates(x, indices=1, intermediates_only=True)
        assert maps[0].shape[-2:] == (5, 6)
    with pytest.raises(ValueError, match="height at least 14 and width at least 14"):
        dynamic(torch.randn(1, 3, 10, 28))
    with pytest.raises(ValueError, match=r"img_size 62 is not divisible by patch_size 14.*or drop_remainder=True"):
        _tiny(img_size=62, patch_size=14)
    with pytest.raises(ValueError, match=r"img_size 10 is smaller than patch_size 14"):
        _tiny(img_size=10, **fields)


def test_mlp_options_reach_every_block():
    """The gated MLP, its sub-norm and RMSNorm in every block and every norm of the model."""
    from vitzoo.layers import RMSNorm, SwiGLU

    model = _tiny(
        mlp_layer="swiglu", mlp_norm=True, mlp_align=16, norm_layer="rmsnorm", act_layer="silu", pre_norm=True
    )
    for block in model.blocks:
        assert isinstance(block.mlp, SwiGLU) and isinstance(block.mlp.act, nn.SiLU)
        assert block.mlp.fc1_g.out_features == 96  # int(24 * 4) = 96, a multiple of 16 already
        assert isinstance(block.mlp.norm, RMSNorm) and block.mlp.norm.weight.shape == (96,)
        assert isinstance(block.norm1, RMSNorm) and isinstance(block.norm2, RMSNorm)
    assert isinstance(model.norm, RMSNorm) and isinstance(model.norm_pre, RMSNorm)
    assert _tiny(mlp_layer="swiglu", mlp_ratio=2.5, mlp_align=16).blocks[0].mlp.fc1_x.out_features == 64
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
        again = VisionTransformer(model.config)
        again.load_state_dict(model.state_dict(), strict=True)
        x = _input(model.config)
        assert torch.equal(again.eval()(x), model.eval()(x))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(reg_tokens=-1), "reg_tokens=-1 is invalid; expected an int >= 0"),
        (dict(init_values=0.0), "init_values=0.0 is invalid; expected None or a positive number"),
        (
            dict(act_layer="relu"),
            "act_layer='relu' is invalid; expected one of 'gelu', 'gelu_tanh', 'quick_gelu', 'silu'",
        ),
        (dict(distilled=True, reg_tokens=4), "distilled=True cannot be combined with reg_tokens=4"),
        (dict(distilled=True, global_pool="map"), "distilled=True cannot be combined with global_pool='map'"),
        (dict(distilled=True, global_pool=""), "distilled=True cannot be combined with global_pool=''"),
        (dict(distilled=True, fc_norm=True), "distilled=True cannot be combined with fc_norm=True"),
        (dict(fc_norm=True, final_norm=False), "fc_norm=True moves the final LayerNorm after the pooling"),
        (
            dict(global_pool="max"),
            "global_pool='max' is invalid; expected 'token', 'avg', 'prefix_avg', 'map', 'coca', 'aimv2' or ''",
        ),
        (dict(mlp_layer="geglu"), "mlp_layer='geglu' is invalid; expected one of 'mlp', 'swiglu', 'swiglu_packed'"),
        (dict(norm_layer="batchnorm"), "norm_layer='batchnorm' is invalid; expected one of 'layernorm', 'rmsnorm'"),
        (dict(mlp_align=-8), "mlp_align=-8 is invalid; expected an int >= 0"),
        (dict(mlp_align=8), "mlp_align=8 cannot be combined with mlp_layer='mlp'"),
        (dict(mlp_layer="swiglu_packed", mlp_ratio=2.625), "fc1's width int(embed_dim * mlp_ratio) = 63"),
    ],
)
def test_bad_option_combinations_are_value_errors(fields, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _tiny(**fields)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("reg_tokens", 1.5, "reg_tokens=1.5 is invalid; expected an int"),
        ("init_values", "1e-5", "init_values='1e-5' is invalid; expected a finite number or None"),
        ("act_layer", 1, "act_layer=1 is invalid; expected one of 'gelu', 'gelu_tanh', 'quick_gelu', 'silu'"),
        ("mlp_layer", 2, "mlp_layer=2 is invalid; expected one of 'mlp', 'swiglu', 'swiglu_packed'"),
        ("mlp_norm", "no", "mlp_norm='no' is invalid; expected true or false"),
        ("mlp_align", 8.0, "mlp_align=8.0 is invalid; expected an int"),
        ("drop_remainder", 1, "drop_remainder=1 is invalid; expected true or false"),
        ("norm_layer", None, "norm_layer=None is invalid; expected one of 'layernorm', 'rmsnorm'"),
        ("dynamic_img_size", "yes", "dynamic_img_size='yes' is invalid; expected true or false"),
    ],
)
def test_new_fields_are_type_checked(field, value, expected):
    with pytest.raises(TypeError) as err:
        ViTConfig().replace(**{field: value})
    assert str(err.value) == expected


# ----------------------------------------------------------------------------- backbone API
def test_forward_intermediates_are_the_block_outputs():
    torch.manual_seed(0)
    model = _tiny(depth=3, reg_tokens=1, img_size=(32, 48)).eval()
    x = _input(model.config)
    with torch.no_grad():
        tokens, outputs = model.forward_features(x), []
        h = model._embed(x)
        for block in model.blocks:
            h = block(h)
            outputs.append(h)
        final, maps = model.forward_intermediates(x)  # every block, NCHW
        torch.testing.assert_close(final, tokens)
        assert [m.shape for m in maps] == [(2, 24, 2, 3)] * 3
        for m, out in zip(maps, outputs):
            torch.testing.assert_close(m, out[:, 2:].transpose(1, 2).reshape(2, 24, 2, 3))  # row-major grid
        last = model.forward_intermediates(x, indices=1, norm=True, output_fmt="NLC", intermediates_only=True)
        torch.testing.assert_close(last[0], tokens[:, 2:])  # the last block through the final norm
        pairs = model.get_intermediate_layers(x, n=[-1, 0], return_prefix_tokens=True)
        assert len(pairs) == 2  # block order, not the order asked
        torch.testing.assert_close(pairs[0][0], outputs[0][:, 2:])
        torch.testing.assert_close(pairs[1][1], outputs[2][:, :2])


def test_forward_intermediates_bad_arguments_name_them():
    model = _tiny(depth=2)
    x = _input(model.config)
    with pytest.raises(
        ValueError, match="indices=3 is invalid; expected the number of last blocks to take, from 1 to 2"
    ):
        model.forward_intermediates(x, indices=3)
    with pytest.raises(ValueError, match=r"indices=\[0, 2\] is invalid; expected block indices from -2 to 1"):
        model.forward_intermediates(x, indices=[0, 2])
    with pytest.raises(ValueError, match="output_fmt='NHWC' is invalid; expected 'NCHW'"):
        model.forward_intermediates(x, output_fmt="NHWC")
    with pytest.raises(TypeError, match="indices=True is invalid"):
        model.forward_intermediates(x, indices=True)


def test_dynamic_img_size_through_create_and_in_bf16():
    torch.manual_seed(0)
    model = vitzoo.create("vit_ti16", depth=1, dynamic_img_size=True, dtype="bf16").eval()
    assert model.config.dynamic_img_size and model.pos_embed.dtype == torch.bfloat16
    with torch.no_grad():
        out = model(torch.randn(1, 3, 64, 96))  # fp32 image, bf16 weights, a 4 x 6 grid
    assert out.shape == (1, 1000) and out.dtype == torch.bfloat16 and torch.isfinite(out).all()
    with pytest.raises(ValueError, match=r"\(1, 3, 64, 90\).*height a multiple of 16 and width a multiple of 16"):
        model(torch.randn(1, 3, 64, 90))


def test_dynamic_img_size_with_sinusoidal_positions_recomputes_the_table():
    from vitzoo.layers import sincos_1d

    torch.manual_seed(0)
    model = _tiny(pos_embed="sincos", dynamic_img_size=True).eval()
    x = torch.randn(2, 3, 48, 64)
    with torch.no_grad():
        expected = model.blocks(model._embed(x))
        tokens = torch.cat([model.cls_token.expand(2, -1, -1), model.patch_embed(x)], dim=1)
        torch.testing.assert_close(expected, model.blocks(tokens + sincos_1d(1 + 12, 24)))
    model.set_input_size(img_size=(48, 64))  # the buffer now holds the 13-token table, still not saved
    torch.testing.assert_close(model.pos_embed, sincos_1d(13, 24).unsqueeze(0))
    assert "pos_embed" not in model.state_dict()


def test_set_input_size_refuses_another_patch_size():
    model = _tiny()
    with pytest.raises(ValueError, match=r"set_input_size: patch_size=8 is invalid.*\(16, 16\)"):
        model.set_input_size(img_size=64, patch_size=8)
    with pytest.raises(ValueError, match="img_size 40 is not divisible by patch_size 16"):
        model.set_input_size(img_size=40)
    assert model.config.img_size == 32 and model.pos_embed.shape == (1, 5, 24)  # unchanged after errors


@pytest.mark.parametrize("family", ["dinov2_reg", "siglip"])
def test_grad_checkpointing_recomputes_blocks_with_identical_gradients(family):
    """Each block runs twice per step (forward, then again inside backward) and the gradients are
    the same to the bit, with dropout and stochastic depth on: the RNG state is replayed."""
    config = _family(family, num_classes=5, drop_rate=0.1, drop_path_rate=0.2)
    torch.manual_seed(0)
    model = VisionTransformer(config).train()
    x = _image(config)

    def step(checkpointing: bool) -> tuple[dict[str, torch.Tensor], int]:
        model.zero_grad(set_to_none=True)
        model.set_grad_checkpointing(checkpointing)
        block = model.blocks[0]
        # Count calls of the block's forward itself (the recomputation skips module hooks).
        with mock.patch.object(block, "forward", wraps=block.forward) as forward:
            torch.manual_seed(1)
            model(x).square().mean().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}, forward.call_count

    plain, plain_calls = step(False)
    checkpointed, checkpointed_calls = step(True)
    assert (plain_calls, checkpointed_calls) == (1, 2)
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=0, atol=0, msg=name)
    block = model.blocks[0]
    with torch.no_grad(), mock.patch.object(block, "forward", wraps=block.forward) as forward:
        model.eval()(x)  # nothing to recompute without autograd: the plain forward
    assert forward.call_count == 1


# ----------------------------------------------------------------------------- timm's attributes and FX
def test_timm_attributes_follow_the_model():
    model = _tiny(num_classes=5, global_pool="avg")
    assert (model.num_classes, model.num_features, model.embed_dim, model.global_pool) == (5, 24, 24, "avg")
    assert model.num_prefix_tokens == 1
    assert model.feature_info == [{"num_chs": 24, "reduction": 16, "module": f"blocks.{i}"} for i in range(2)]
    model.reset_classifier(0, "token")
    assert (model.num_classes, model.global_pool, model.default_cfg["num_classes"]) == (0, "token", 0)
    model.prune_intermediate_layers([0])
    assert [f["module"] for f in model.feature_info] == ["blocks.0"]


def test_default_cfg_is_timms_dict_and_pretrained_cfg_reads_like_one():
    model = vitzoo.create("deit_ti16_distilled", depth=1)
    cfg = model.default_cfg
    assert type(cfg) is dict
    assert cfg["first_conv"] == "patch_embed.proj" and cfg["classifier"] == ("head", "head_dist")
    assert cfg["fixed_input_size"] is True and cfg["input_size"] == (3, 224, 224)
    assert {k: cfg[k] for k in model.pretrained_cfg} == model.pretrained_cfg.to_dict()
    assert vitzoo.create("vit_ti16", depth=1, dynamic_img_size=True).default_cfg["fixed_input_size"] is False
    pcfg = model.pretrained_cfg
    assert dict(pcfg) == pcfg.to_dict() and len(pcfg) == len(pcfg.keys())
    assert "crop_pct" in pcfg and "first_conv" not in pcfg and pcfg.get("first_conv", 7) == 7
    timm_data = pytest.importorskip("timm.data")
    resolved = timm_data.resolve_model_data_config(model)
    assert resolved["input_size"] == pcfg.input_size and resolved["crop_pct"] == pcfg.crop_pct
    assert tuple(resolved["mean"]) == pcfg.mean and resolved["interpolation"] == pcfg.interpolation


@pytest.mark.parametrize(
    "fields",
    [{}, {"distilled": True}, {"global_pool": "map", "class_token": False}, {"reg_tokens": 2, "init_values": 0.1}],
)
def test_fx_trace_equals_eager_exactly_and_feeds_torchvision(fields):
    from torchvision.models.feature_extraction import create_feature_extractor

    model = _tiny(**fields).eval()
    x = _input(model.config)
    with torch.no_grad():
        assert torch.equal(torch.fx.symbolic_trace(model)(x), model(x))
        maps = create_feature_extractor(model, return_nodes={"blocks.1": "b1", "norm": "norm"})(x)
        assert torch.equal(maps["norm"], model.forward_features(x))
        assert torch.equal(maps["b1"], model.blocks(model._embed(x)))


@pytest.mark.parametrize("fields", [{}, {"pos_embed": "sincos"}, {"no_embed_class": True, "reg_tokens": 1}])
def test_fx_trace_of_a_dynamic_size_model_adapts_its_positions_per_input(fields):
    model = _tiny(dynamic_img_size=True, **fields).eval()
    traced = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        for h, w in ((32, 32), (48, 80), (16, 32)):
            x = torch.randn(1, 3, h, w)
            assert torch.equal(traced(x), model(x)), (h, w)


def test_traced_model_still_checks_its_input():
    traced = torch.fx.symbolic_trace(_tiny().eval())
    with pytest.raises(ValueError, match=r"input image has shape \(1, 3, 48, 48\)"):
        traced(torch.randn(1, 3, 48, 48))


def test_bf16_model_traces_and_eager_keeps_the_fused_linear():
    from vitzoo.layers import linear as linear_module

    model = _tiny().to(torch.bfloat16).eval()
    x = _input(model.config).to(torch.bfloat16)
    taken: list[bool] = []

    def spy(x: torch.Tensor, weight: torch.Tensor) -> bool:
        taken.append(real(x, weight))
        return taken[-1]

    real = linear_module.use_fused
    with mock.patch.object(linear_module, "use_fused", spy):
        traced = torch.fx.symbolic_trace(model)  # decided while tracing: the portable F.linear
        assert taken and not any(taken)
        assert "mkldnn" not in traced.code and "torch._C._nn.linear" in traced.code
        taken.clear()
        with torch.inference_mode():
            eager = model(x)
            assert taken and all(taken) == linear_module._fused_op_available()  # every eager Linear fused
            assert torch.allclose(traced(x).float(), eager.float(), rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------- rotary position embedding
# RoPE-ViT's three layouts against timm's Eva built by name at a reduced size (the same code path);
# timm's Eva names LayerScale gamma_1 / gamma_2, which the timm key map renames.
ROPE_VIT = {
    "vit_base_patch16_rope_224": dict(rope="cat", rope_temperature=100.0, pos_embed="none"),
    "vit_base_patch16_rope_mixed_224": dict(rope="mixed", rope_temperature=10.0, pos_embed="none"),
    "vit_base_patch16_rope_mixed_ape_224": dict(rope="mixed", rope_temperature=10.0, no_embed_class=True),
}


def _rope_twins(timm_name: str, reg_tokens: int = 0) -> tuple[VisionTransformer, nn.Module]:
    timm = pytest.importorskip("timm")
    if not timm.is_model(timm_name):
        pytest.skip(f"timm {timm.__version__} has no {timm_name}")
    from vitzoo.weights.keymaps import to_vitzoo

    torch.manual_seed(0)
    theirs = timm.create_model(
        timm_name, img_size=64, depth=2, embed_dim=64, num_heads=2, num_classes=5, num_reg_tokens=reg_tokens
    ).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.2)  # LayerScale's 1e-5 would hide the blocks
    fields = dict(ROPE_VIT[timm_name], rope_grid_indexing="xy", init_values=1e-5, reg_tokens=reg_tokens)
    ours = VisionTransformer(
        img_size=64,
        patch_size=16,
        embed_dim=64,
        depth=2,
        num_heads=2,
        num_classes=5,
        **fields,
    ).eval()
    ours.load_state_dict(to_vitzoo(theirs.state_dict()).state, strict=True)
    return ours, theirs


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


@pytest.mark.parametrize("timm_name", list(ROPE_VIT))
def test_rope_models_equal_timms_eva(timm_name):
    ours, theirs = _rope_twins(timm_name)
    assert count_parameters(ours) == sum(p.numel() for p in theirs.parameters())
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        feats = ours.forward_features(x)
        assert _max_diff(feats, theirs.forward_features(x)) <= 1e-5
        assert _max_diff(ours(x), theirs(x)) <= 1e-5
        assert _max_diff(ours.forward_head(feats, pre_logits=True), theirs.forward_head(feats, pre_logits=True)) <= 1e-5
        _, maps = ours.forward_intermediates(x, indices=[0, 1])
        _, their_maps = theirs.forward_intermediates(x, indices=[0, 1])
        assert max(_max_diff(a, b) for a, b in zip(maps, their_maps)) <= 1e-5


def test_rope_register_tokens_are_not_rotated_as_in_timm():
    ours, theirs = _rope_twins("vit_base_patch16_rope_224", reg_tokens=2)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        assert _max_diff(ours.forward_features(x), theirs.forward_features(x)) <= 1e-5


def test_rope_mixed_grad_checkpointing_gives_the_same_gradients():
    grads = []
    for ckpt in (False, True):
        torch.manual_seed(0)
        model = _tiny(rope="mixed", embed_dim=32, num_heads=2, pos_embed="none")
        model.set_grad_checkpointing(ckpt)
        model(_input(model.config)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*grads))
    assert grads[0][[n for n, _ in model.named_parameters()].index("rope.freqs")].abs().sum() > 0
    assert model.no_weight_decay() == {"cls_token", "rope.freqs"}


def test_rope_options_add_nothing_when_off():
    torch.manual_seed(0)
    plain = _tiny()
    torch.manual_seed(0)
    off = _tiny(rope="", qkv_fused=True, k_bias=True)
    assert plain.rope is None and off.rope is None
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), off.state_dict().values()))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"rope": "spiral"}, "rope='spiral' is invalid; expected '' (none) or one of 'cat', 'mixed', 'dinov3'"),
        ({"rope": "cat", "embed_dim": 30, "num_heads": 3}, "needs a head width (embed_dim / num_heads) divisible by 4"),
        ({"rope": "mixed", "rope_rotate_half": True}, "rope='mixed' cannot be combined with rope_rotate_half=True"),
        ({"rope_jitter_coords": 0.5}, "rope_jitter_coords=0.5 is invalid; expected None or >= 1"),
        ({"rope_min_period": 0.5}, "expected both (DINOv3's period range) or neither"),
        ({"rope_ref_feat_shape": [16, 0]}, "rope_ref_feat_shape=(16, 0) is invalid"),
        (
            {"pos_embed": "rotary"},
            "pos_embed='rotary' is invalid; expected 'learned', 'sincos', 'none' or 'factorized'",
        ),
    ],
)
def test_bad_rope_fields_are_named(fields, message):
    with pytest.raises(ValueError) as err:
        ViTConfig(img_size=32, patch_size=16, embed_dim=32, num_heads=2).replace(**fields)
    assert message in str(err.value)


@pytest.mark.parametrize("kind", ["cat", "mixed", "dinov3"])
def test_rope_models_trace_with_torch_fx_and_follow_the_input_size(kind):
    model = _tiny(embed_dim=32, num_heads=2, rope=kind, dynamic_img_size=True, reg_tokens=1).eval()
    traced = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        for size in [(32, 32), (48, 64)]:
            x = torch.randn(1, 3, *size)
            assert torch.equal(traced(x), model(x))
