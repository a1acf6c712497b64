"""The hybrid stems (layers/resnetv2_stem.py, layers/mci_stem.py, layers/hybrid_embed.py) against timm's
own modules with random weights, their parameter and FLOP arithmetic, and the config's refusals."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from vitzoo.flops import vit_flops
from vitzoo.layers.hybrid_embed import HybridEmbed
from vitzoo.layers.mci_stem import mci_stem
from vitzoo.layers.resnetv2_stem import resnetv2_stem
from vitzoo.model import VisionTransformer, ViTConfig


def _randomise(module: torch.nn.Module) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if name.endswith("running_var"):
                t.uniform_(0.5, 2.0)
            elif t.is_floating_point():
                t.normal_(0, 0.2)


@pytest.mark.parametrize("layers", [(), (1, 2)])
@pytest.mark.parametrize("size", [(64, 64), (32, 96)])
def test_resnetv2_stem_is_timms(layers, size):
    hybrid = pytest.importorskip("timm.models.vision_transformer_hybrid")
    theirs = hybrid._resnetv2(layers=layers).eval()
    ours = resnetv2_stem(3, layers).eval()
    _randomise(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, *size)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)


def test_mci_stem_is_timms():
    hybrid = pytest.importorskip("timm.models.vision_transformer_hybrid")
    if not hasattr(hybrid, "ConvStem"):
        pytest.skip("this timm has no ConvStem (vit_base_mci_224 came in timm 1.0.20)")
    theirs = hybrid.ConvStem(
        channels=(8, 8, 32), stride=(4, 2, 2), kernel_size=(4, 2, 2), padding=0, act_layer=torch.nn.GELU
    ).eval()
    ours = mci_stem(3, 32).eval()
    _randomise(theirs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 3, 48, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)


CONFIGS = [
    dict(hybrid_stem="resnetv2", hybrid_layers=(1, 1), patch_size=8),
    dict(hybrid_stem="resnetv2", hybrid_layers=(), patch_size=32),
    dict(hybrid_stem="mci", patch_size=16, patch_bias=False),
]


@pytest.mark.parametrize("fields", CONFIGS, ids=["resnetv2", "root", "mci"])
def test_num_params_and_flops_are_the_models(fields):
    config = ViTConfig(img_size=64, embed_dim=64, depth=1, num_heads=2, num_classes=5, **fields)
    model = VisionTransformer(config).eval()
    assert config.num_params == sum(p.numel() for p in model.parameters())
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model.patch_embed(torch.zeros(1, 3, 64, 64))
    assert vit_flops(config).patch_embed == counter.get_total_flops()


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(hybrid_layers=(3, 4)), "hybrid_layers=(3, 4) needs hybrid_stem='resnetv2'"),
        (dict(hybrid_stem="resnetv2", hybrid_layers=(3, 4, 9), patch_size=8), "expected patch_size a multiple of 16"),
        (dict(hybrid_stem="resnetv2", hybrid_layers=(1, 0)), "expected up to 4 positive stage depths"),
        (dict(hybrid_stem="mci", patch_size=14, img_size=224), "expected patch_size=16"),
        (dict(hybrid_stem="mci", hybrid_layers=(1,)), "hybrid_layers=(1,) is invalid for hybrid_stem='mci'"),
        (dict(hybrid_stem="mci", conv_stem=(8,)), "cannot be combined with conv_stem"),
        (dict(hybrid_stem="mci", drop_remainder=True), "cannot be combined with drop_remainder"),
        (dict(hybrid_stem="mci", img_size=200), "img_size 200 is not divisible by patch_size 16"),
        (dict(hybrid_stem="cnn"), "hybrid_stem"),
    ],
)
def test_config_refuses_stems_that_do_not_fit(fields, message):
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(").replace(")", r"\)")):
        ViTConfig(embed_dim=64, num_heads=2, **fields)


def test_any_multiple_of_the_stride_with_dynamic_img_size_and_a_clear_refusal_otherwise():
    model = VisionTransformer(
        img_size=64, embed_dim=32, depth=1, num_heads=2, hybrid_stem="resnetv2", patch_size=32, dynamic_img_size=True
    ).eval()
    assert isinstance(model.patch_embed, HybridEmbed)
    with torch.no_grad():
        assert model.forward_features(torch.randn(1, 3, 96, 64)).shape == (1, 1 + 3 * 2, 32)
        with pytest.raises(ValueError, match="height a multiple of 32 and width a multiple of 32"):
            model(torch.randn(1, 3, 80, 64))
    assert "hybrid_stem='resnetv2'" in str(model.patch_sequence_refusal())
    with pytest.raises(ValueError, match=r"no equivalent nn\.Linear"):
        model.patch_embed.as_linear()
