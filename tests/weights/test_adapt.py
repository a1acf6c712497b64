"""vitzoo.weights.adapt: a checkpoint fitted to a model with another num_classes, img_size or
in_chans, compared with timm's own adaptation of the same file; everything else is an error."""

from __future__ import annotations

import logging

import pytest
import timm
import torch
from timm.layers import resample_abs_pos_embed

import vitzoo
from vitzoo.weights import WeightsMismatchError
from vitzoo.weights.adapt import adapt_input_conv

# Both sides resample with bicubic interpolation (antialiased when shrinking) in float32; the
# tolerance is the parity bar used for every converter (1e-5 in fp32).
ATOL = 1e-5


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@pytest.fixture(scope="module")
def ti_ckpt(timm_checkpoint):
    return timm_checkpoint("vit_tiny_patch16_224", depth=2) / "model.safetensors"


def timm_model(path, **kwargs):
    return timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=True,
        depth=2,
        pretrained_cfg_overlay=dict(file=str(path), custom_load=False),
        **kwargs,
    ).eval()


def test_num_classes_change_reinitialises_head_and_logs(ti_ckpt, caplog):
    with caplog.at_level(logging.WARNING, logger="vitzoo.weights"):
        model = vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, num_classes=7).eval()
    assert "classifier head re-initialised: checkpoint has 1000 classes, model has 7" in caplog.text
    assert model.head.weight.shape == (7, 192) and torch.all(model.head.bias == 0)
    assert 0.01 < model.head.weight.std().item() < 0.03  # trunc_normal(0.02), not leftovers
    reference = timm_model(ti_ckpt, num_classes=7)
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():  # everything before the head is the checkpoint's
        assert (
            max_diff(
                model.forward_head(model.forward_features(x), pre_logits=True),
                reference.forward_head(reference.forward_features(x), pre_logits=True),
            )
            <= ATOL
        )
    assert model.pretrained_cfg.num_classes == 7 and model.pretrained_cfg.label_names is None


def test_num_classes_zero_drops_the_head(ti_ckpt, caplog):
    with caplog.at_level(logging.WARNING, logger="vitzoo.weights"):
        model = vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, num_classes=0)
    assert "classifier head dropped" in caplog.text
    assert model(torch.randn(1, 3, 224, 224)).shape == (1, 192)


@pytest.mark.parametrize("img_size", [384, (224, 320), (160, 96)])
def test_img_size_change_matches_timms_resampling(ti_ckpt, img_size):
    model = vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, img_size=img_size).eval()
    reference = timm_model(ti_ckpt, img_size=img_size)
    size = (img_size, img_size) if isinstance(img_size, int) else img_size
    assert model.pos_embed.shape == reference.pos_embed.shape
    assert max_diff(model.pos_embed, reference.pos_embed) <= 1e-6
    assert torch.equal(model.pos_embed[:, :1], timm_model(ti_ckpt).pos_embed[:, :1])  # prefix kept
    x = torch.randn(1, 3, *size)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL
    assert model.pretrained_cfg.input_size == (3, *size)


def test_rectangular_checkpoint_back_to_square_grid(ti_ckpt, tmp_path):
    # A model at 160x224 (10x14 grid) saved by vitzoo: its config.json states the grid.
    rect = vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, img_size=(160, 224))
    rect.save_pretrained(tmp_path / "rect")
    # Asked for 224 explicitly (without it the checkpoint's own 160x224 is kept).
    square = vitzoo.create("vit_ti16", weights=str(tmp_path / "rect"), depth=2, img_size=224)
    expected = resample_abs_pos_embed(
        rect.pos_embed.detach(), new_size=[14, 14], old_size=[10, 14], num_prefix_tokens=1
    )
    assert max_diff(square.pos_embed, expected) <= 1e-6


def test_distilled_model_keeps_both_prefix_tokens(timm_checkpoint):
    ckpt = timm_checkpoint("deit_tiny_distilled_patch16_224", depth=2) / "model.safetensors"
    model = vitzoo.create("deit_ti16_distilled", weights=str(ckpt), depth=2, img_size=256).eval()
    reference = timm.create_model(
        "deit_tiny_distilled_patch16_224",
        pretrained=True,
        depth=2,
        img_size=256,
        pretrained_cfg_overlay=dict(file=str(ckpt), custom_load=False),
    ).eval()
    x = torch.randn(1, 3, 256, 256)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


@pytest.mark.parametrize("in_chans", [1, 2, 5])
def test_in_chans_change_matches_timm(ti_ckpt, in_chans):
    model = vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, in_chans=in_chans).eval()
    reference = timm_model(ti_ckpt, in_chans=in_chans)
    x = torch.randn(1, in_chans, 224, 224)
    with torch.no_grad():
        assert max_diff(model(x), reference(x)) <= ATOL


def test_grey_input_gives_the_rgb_response_to_a_grey_image():
    w = torch.randn(8, 3, 4, 4)
    grey = torch.randn(2, 1, 12, 12)
    out1 = torch.nn.functional.conv2d(grey, adapt_input_conv(w, 1), stride=4)
    out3 = torch.nn.functional.conv2d(grey.expand(-1, 3, -1, -1), w, stride=4)
    assert max_diff(out1, out3) <= 1e-5
    tiled = adapt_input_conv(w, 4)
    assert torch.allclose(tiled[:, 3], w[:, 0] * 0.75) and torch.allclose(tiled[:, :3], w * 0.75)


def test_other_differences_are_errors_naming_key_and_shapes(ti_ckpt):
    with pytest.raises(
        WeightsMismatchError, match=r"patch_embed\.proj\.weight: expected \(192, 3, 8, 8\), found \(192, 3, 16, 16\)"
    ):
        vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, patch_size=8)
    with pytest.raises(
        WeightsMismatchError, match=r"blocks\.0\.mlp\.fc1\.weight: expected \(384, 192\), found \(768, 192\)"
    ):
        vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=2, mlp_ratio=2.0)


def test_missing_and_unexpected_keys_are_listed(ti_ckpt):
    with pytest.raises(
        WeightsMismatchError, match=r"missing key\(s\) the model needs: blocks\.2\.attn\.proj\.bias, .*blocks\.3\."
    ) as err:
        vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=4)
    assert "strict=False" in str(err.value) and str(ti_ckpt) in str(err.value)
    with pytest.raises(
        WeightsMismatchError, match=r"unexpected key\(s\) the model does not have: blocks\.1\.attn\.proj\.bias"
    ):
        vitzoo.create("vit_ti16", weights=str(ti_ckpt), depth=1)


def test_non_strict_loads_what_fits(ti_ckpt):
    model = vitzoo.create("vit_ti16", depth=3)
    report = vitzoo.load_weights(model, ti_ckpt, strict=False)
    assert report.unexpected == [] and all(k.startswith("blocks.2.") for k in report.missing)
    reference = timm_model(ti_ckpt)
    assert torch.equal(model.blocks[1].mlp.fc2.weight, reference.blocks[1].mlp.fc2.weight)


def test_head_count_mismatch_is_an_error_not_silent_garbage(ti_ckpt):
    # No tensor shape depends on num_heads: without its config the checkpoint would load and
    # compute something else. timm's config.json names the architecture, hence the head count.
    with pytest.raises(WeightsMismatchError, match="num_heads=3, the model has num_heads=6"):
        vitzoo.create("vit_ti16", weights=str(ti_ckpt.parent), depth=2, num_heads=6)
