"""VisionTransformer: shapes for every registered config, the model API, the distillation and
representation heads, bad input, and the timm-compatible parameter layout."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import vitzoo
from vitzoo import VisionTransformer, ViTConfig
from vitzoo.layers import DropPath, to_2tuple
from vitzoo.registry import count_parameters, get_entry

# Only the built-in zoo: names other tests or plugins register are not this file's business.
BUILTIN_NAMES = [name for name in vitzoo.list_models() if get_entry(name).origin == "built-in"]


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


# ----------------------------------------------------------------------------- every config
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
        assert model.forward_head(feats).shape == (2, cfg.num_classes)
        assert model(x).shape == (2, cfg.num_classes)
        assert model.forward_head(feats, pre_logits=True).shape == (2, cfg.representation_size or cfg.embed_dim)


@pytest.mark.parametrize("name", BUILTIN_NAMES)
def test_one_block_forward_is_finite_for_every_config(name):
    """Real numbers through every config's stem and head (depth cut to 1 to stay fast)."""
    torch.manual_seed(0)
    model = vitzoo.create(name, depth=1).eval()
    assert len(model.blocks) == 1
    with torch.inference_mode():
        out = model(_input(model.config, batch=1))
    assert out.shape == (1, model.config.num_classes)
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
    assert rect.pretrained_cfg.input_size == (2, 32, 48)
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
        ("pos_embed", 1, "pos_embed=1 is invalid; expected one of 'learned', 'sincos'"),
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
    # Bit-identical in practice (the same sequence of ops); 1e-6 leaves room for a BLAS kernel choice.
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    reference.train(), ours.train()
    if ours.config.distilled:  # timm returns the pair in train mode too (outside distilled training)
        reference.set_distilled_training(True)
        with torch.no_grad():
            for a, b in zip(ours(x), reference(x)):
                torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- hybrid (conv stem)
def test_conv_stem_model_round_trips_through_json_and_save_pretrained(tmp_path):
    from vitzoo.weights.errors import WeightsMismatchError
    from vitzoo.weights.keymaps import infer_config_fields, to_timm

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
