"""The attention picture: class-token maps per head, rollout across layers, and bad input."""

from __future__ import annotations

import pytest
import torch

from vitzoo.viz.attention_maps import (
    attention_rollout,
    attention_weights,
    class_token_attention,
    plot_attention,
    rollout_map,
)


def _random_stochastic(*shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape), dim=-1)


def test_attention_weights_one_per_block_and_the_models_mode_is_kept(make_vit):
    model = make_vit(depth=3).train()
    weights = attention_weights(model, torch.randn(2, 3, 32, 32))
    assert model.training  # restored after the eval-mode pass
    assert len(weights) == 3
    for w in weights:
        assert w.shape == (2, 3, 17, 17) and not w.requires_grad
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 17))
    assert all(block.attn.attn_sink is None for block in model.blocks)  # back on the fused kernel


def test_rollout_rows_sum_to_one(make_vit):
    model = make_vit(depth=3)
    weights = attention_weights(model, torch.randn(2, 3, 32, 32))
    for fusion in ("mean", "max"):
        rollout = attention_rollout(weights, head_fusion=fusion)
        assert rollout.shape == (2, 17, 17)
        torch.testing.assert_close(rollout.sum(-1), torch.ones(2, 17))
        assert rollout.min() >= 0


def test_rollout_is_the_product_of_residual_mixed_head_means():
    torch.manual_seed(0)
    w1, w2 = _random_stochastic(1, 2, 5, 5), _random_stochastic(1, 2, 5, 5)
    eye = torch.eye(5)
    a1, a2 = 0.5 * w1.mean(1) + 0.5 * eye, 0.5 * w2.mean(1) + 0.5 * eye
    torch.testing.assert_close(attention_rollout([w1, w2]), a2 @ a1)
    torch.testing.assert_close(attention_rollout([w1], residual=0.0), w1.mean(1))
    torch.testing.assert_close(attention_rollout([w1, w2], residual=1.0), eye.unsqueeze(0))


def test_class_token_row_and_patch_columns_are_picked():
    weights = torch.arange(2 * 6 * 6, dtype=torch.float32).reshape(1, 2, 6, 6)  # 2 prefix + 2x2 grid
    maps = class_token_attention(weights, num_prefix_tokens=2, grid=(2, 2))
    assert maps.shape == (1, 2, 2, 2)
    assert torch.equal(maps[0, 1].flatten(), weights[0, 1, 0, 2:])
    with pytest.raises(ValueError, match="needs a class token"):
        class_token_attention(weights, num_prefix_tokens=0, grid=(2, 3))


def test_rollout_map_without_class_token_averages_the_patch_rows():
    rollout = _random_stochastic(1, 4, 4)
    heat = rollout_map(rollout, num_prefix_tokens=0, grid=(2, 2), class_token=False)
    torch.testing.assert_close(heat[0].flatten(), rollout[0].mean(dim=0))
    heat = rollout_map(rollout, num_prefix_tokens=0, grid=(2, 2), class_token=True)
    torch.testing.assert_close(heat[0].flatten(), rollout[0, 0])


def test_plot_attention_heads_and_rollout(make_vit, tmp_path, png_size):
    model = make_vit()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        before = model(x)
    fig = plot_attention(model, None, out=tmp_path / "attention.png")
    # 7 columns of 2.2 inches for the input + 3 heads + their mean, and 3.6 inches for rollout.
    assert png_size(tmp_path / "attention.png") == (1200, 580)
    titles = [ax.get_title() for ax in fig.axes]
    assert any(t.startswith("layer 1, head 2") for t in titles)
    assert any(t.startswith("layer 1, mean of 3 heads") for t in titles)
    assert any(t.startswith("rollout over 2 layers (class token's row)") for t in titles)
    with torch.no_grad():
        torch.testing.assert_close(model(x), before)  # drawing changed nothing in the model


def test_plot_attention_single_head_and_rollout_only(make_vit, tmp_path, png_size):
    model = make_vit(distilled=True)
    fig = plot_attention(model, None, layer=0, head=-1, what="heads", out=tmp_path / "head.png")
    assert png_size(tmp_path / "head.png") == (1200, 220)
    assert next(t for t in (ax.get_title() for ax in fig.axes) if t.startswith("layer")).startswith("layer 0, head 2")
    avg = make_vit(class_token=False, global_pool="avg")
    fig = plot_attention(avg, None, what="rollout", layer=1, out=tmp_path / "rollout.png")
    assert png_size(tmp_path / "rollout.png") == (1200, 360)
    assert any("mean of patch rows" in ax.get_title() for ax in fig.axes)


@pytest.mark.parametrize("layer", [2, -3, 17])
def test_layer_out_of_range_is_a_clear_error(make_vit, layer, tmp_path):
    with pytest.raises(
        ValueError,
        match=rf"layer {layer} is out of range: the VisionTransformer has 2 blocks; expected an index in \[-2, 1\]",
    ):
        plot_attention(make_vit(), None, layer=layer, out=tmp_path / "a.png")
    assert not (tmp_path / "a.png").exists()


def test_head_out_of_range_is_a_clear_error(make_vit):
    with pytest.raises(
        ValueError, match=r"head 3 is out of range: layer 1 has 3 heads; expected an index in \[-3, 2\]"
    ):
        plot_attention(make_vit(), None, head=3)


@pytest.mark.parametrize(
    "kwargs",
    [dict(what="both"), dict(what="heads"), dict(head=0), dict(layer=1)],
    ids=["both", "heads", "head", "layer"],
)
def test_class_token_attention_of_a_model_without_class_token_is_a_clear_error(make_vit, kwargs):
    with pytest.raises(ValueError, match=r"no class token .* class-token attention is undefined.*what='rollout'"):
        plot_attention(make_vit(class_token=False, global_pool="avg"), None, **kwargs)


def test_without_class_token_the_default_is_the_rollout_alone(make_vit, tmp_path, png_size):
    fig = plot_attention(make_vit(class_token=False, global_pool="avg"), None, out=tmp_path / "avg.png")
    assert png_size(tmp_path / "avg.png") == (1200, 360)
    assert not any(ax.get_title().startswith("layer") for ax in fig.axes)


def test_unreadable_image_is_a_clear_error(make_vit, tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(ValueError, match=r"cannot read image '.*broken.jpg'"):
        plot_attention(make_vit(), bad, out=tmp_path / "a.png")
    assert not (tmp_path / "a.png").exists()
