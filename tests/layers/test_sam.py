"""vitzoo/layers/sam.py: SAM's windows, decomposed relative positions, block and neck against timm's
vision_transformer_sam (the same numbers), the weights capture_attention hands out, the config's
checks, the parameter count and the FLOP formula."""

from __future__ import annotations

import json

import pytest
import torch

import vitzoo
from vitzoo.flops import count_flops, vit_flops
from vitzoo.layers import capture_attention
from vitzoo.layers.sam import (
    Neck,
    SamBlock,
    decomposed_rel_pos_bias,
    sam_rel_pos_pairs,
    window_partition,
    window_rope_embed,
    window_unpartition,
)
from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.weights import WeightsError

SAM = dict(class_token=False, global_pool="avg", final_norm=False, window_size=3, use_rel_pos=True, neck_chans=16)
TINY = dict(img_size=80, patch_size=16, embed_dim=32, depth=3, num_heads=2, global_attn_indexes=(1,), **SAM)


def _timm_sam():
    timm = pytest.importorskip("timm")
    from timm.models import vision_transformer_sam as sam

    if not hasattr(sam, "get_decomposed_rel_pos_bias"):
        pytest.skip(f"timm {timm.__version__} has no get_decomposed_rel_pos_bias (timm >= 1.0.9 has)")
    return sam


def test_windows_pad_and_come_back_exactly():
    x = torch.randn(2, 5, 7, 3)
    windows, padded = window_partition(x, 3)
    assert padded == (6, 9) and windows.shape == (2 * 2 * 3, 9, 3)
    assert torch.equal(windows[0].reshape(3, 3, 3), x[0, :3, :3])
    assert torch.equal(window_unpartition(windows, 3, padded, (5, 7)), x.reshape(2, 35, 3))


@pytest.mark.parametrize("length", [9, 5, 13], ids=["own", "upsampled", "downsampled"])
def test_relative_table_and_bias_are_timms(length):
    sam = _timm_sam()
    table = torch.randn(length, 8)
    assert torch.equal(sam_rel_pos_pairs(table, 5), sam.get_rel_pos(5, 5, table))
    q, rel_h, rel_w = torch.randn(2, 3, 5 * 4, 8), torch.randn(length, 8), torch.randn(7, 8)
    ours = decomposed_rel_pos_bias(q, rel_h, rel_w, (5, 4))
    theirs = sam.get_decomposed_rel_pos_bias(q.reshape(6, 20, 8), rel_h, rel_w, (5, 4), (5, 4))
    torch.testing.assert_close(ours.reshape(6, 20, 20), theirs, rtol=0, atol=1e-6)


@pytest.mark.parametrize("window", [0, 3], ids=["global", "windowed"])
def test_block_is_timms(window):
    sam = _timm_sam()
    torch.manual_seed(0)
    theirs = sam.Block(dim=32, num_heads=2, use_rel_pos=True, window_size=window, input_size=(5, 4)).eval()
    ours = SamBlock(dim=32, num_heads=2, norm_eps=1e-5, window_size=window, use_rel_pos=True, grid=(5, 4)).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.2)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 5, 4, 32)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(x.reshape(2, 20, 32), grid=(5, 4)), theirs(x).reshape(2, 20, 32), rtol=0, atol=1e-5
        )


def test_neck_is_timms():
    pytest.importorskip("timm")
    from timm.layers import LayerNorm2d

    torch.manual_seed(0)
    ours = Neck(32, 16)
    reference = torch.nn.Sequential(
        torch.nn.Conv2d(32, 16, 1, bias=False),
        LayerNorm2d(16),
        torch.nn.Conv2d(16, 16, 3, padding=1, bias=False),
        LayerNorm2d(16),
    )
    with torch.no_grad():
        for p in ours.parameters():
            p.normal_(0, 0.5)
    reference.load_state_dict(ours.state_dict())
    x = torch.randn(2, 12, 32)
    expected = reference(x.transpose(1, 2).reshape(2, 32, 3, 4)).flatten(2).transpose(1, 2)
    torch.testing.assert_close(ours.tokens(x, (3, 4)), expected, rtol=0, atol=1e-6)


def test_captured_weights_of_windows_cover_the_grid():
    """A windowed block hands out one (B, heads, N, N) matrix: zero across windows, each row the
    window's softmax (summing to 1 where the window holds no padding)."""
    model = VisionTransformer(**TINY, num_classes=0).eval()
    x = torch.randn(2, 3, 80, 80)
    with torch.no_grad(), capture_attention(model) as weights:
        model(x)
    assert [tuple(w.shape) for w in weights] == [(2, 2, 25, 25)] * 3
    windowed = weights[0]
    assert windowed[:, :, 0, 3:5].abs().max() == 0 and windowed[:, :, 0, 15:].abs().max() == 0  # other windows
    sums = windowed.sum(-1).reshape(2, 2, 5, 5)
    torch.testing.assert_close(sums[:, :, :3, :3], torch.ones(2, 2, 3, 3))
    assert (sums[:, :, 3:, :] < 1).all()  # the bottom windows attend to padding too
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(2, 2, 25))  # the global block
    with torch.no_grad():
        assert torch.equal(model(x), model(x))


def test_parameter_count_and_flops_are_exact():
    config = ViTConfig(**TINY, num_classes=7)
    model = VisionTransformer(config)
    assert config.num_params == sum(p.numel() for p in model.parameters())
    assert vit_flops(config).total == count_flops(model, torch.randn(1, 3, 80, 80))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(window_size=3, class_token=True, global_pool="token"), "class, distillation or register tokens"),
        (dict(use_rel_pos=True, class_token=False, global_pool="avg", reg_tokens=2), "register tokens"),
        (dict(global_attn_indexes=(1,)), "needs window_size > 0"),
        (dict(window_size=-1, class_token=False, global_pool="avg"), "window_size"),
        (dict(window_size=2, global_attn_indexes=(1, 1), class_token=False, global_pool="avg"), "global_attn_indexes"),
        (dict(neck_chans=8, class_token=False, global_pool="avg"), "final_norm=False"),
        (dict(use_rel_pos=True, rope="cat", class_token=False, global_pool="avg"), "rope"),
        (dict(window_size=3, window_rope=True, rope="cat", class_token=False, global_pool="avg"), "rope='cat'"),
        (
            dict(window_size=3, window_rope=True, embed_dim=60, num_heads=2, class_token=False, global_pool="avg"),
            "by 4",
        ),
    ],
)
def test_config_refuses_what_sam_cannot_mean(fields, message):
    with pytest.raises(ValueError, match=message):
        ViTConfig(**fields)


@pytest.mark.parametrize("window", [1000, 10**6])
def test_a_window_no_tensor_shows_is_bounded_by_the_grid(tmp_path, window):
    """C4: without relative positions no tensor states the window; a saved config stating a huge one
    loaded, then its forward asked for terabytes. Refused on loading, naming the field."""
    fields = {**TINY, "use_rel_pos": False}
    vitzoo.create("samvit_b16", **fields).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["config"]["window_size"] = window
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match=rf"window_size={window} is invalid for the 5x5 grid of patches"):
        vitzoo.from_pretrained(tmp_path)
    # the bound is the grid's: a window past the grid pads it (timm's), up to MAX_TOKENS patches
    assert ViTConfig(**{**fields, "window_size": 256}).window_size == 256
    with pytest.raises(ValueError, match="pad it to 257x257 = 66049 patches; expected"):
        ViTConfig(**{**fields, "window_size": 257})


def test_window_rope_of_a_window_is_the_axial_cat_embedding():
    """SAM 3's windows rotate by their patch indices: vitzoo's axial "cat" embedding in (column, row)
    order with interleaved pairs, exactly (the same frequencies)."""
    from vitzoo.layers.rope import RotaryEmbedding2d

    cat = RotaryEmbedding2d("cat", head_dim=16, num_heads=2, depth=1, grid=(4, 4), grid_indexing="xy")
    assert torch.equal(window_rope_embed((4, 4), 4, 16, 10000.0), cat.get_embed())


def test_window_rope_of_the_grid_spans_one_window():
    """A global block's positions: the grid's (column, row) indices times window / columns."""
    embed = window_rope_embed((3, 5), 4, 8, 100.0)  # 8 wide: 2 frequencies per axis, 1 and 1 / 10
    sin, cos = embed.chunk(2, dim=-1)
    col = (torch.arange(5).float() * (4 / 5)).repeat(3)
    row = torch.arange(3).float().repeat_interleave(5) * (4 / 5)
    angles = torch.stack([col, col / 10, row, row / 10], dim=-1).repeat_interleave(2, dim=-1)
    torch.testing.assert_close(sin, angles.sin(), rtol=0, atol=1e-6)
    torch.testing.assert_close(cos, angles.cos(), rtol=0, atol=1e-6)


def test_window_rope_block_and_counts_are_exact():
    """SAM 3's fields: windows with rotary positions, no parameter of their own; FLOPs unchanged."""
    fields = dict(TINY, use_rel_pos=False, neck_chans=0, window_rope=True, pre_norm=True, patch_bias=False)
    config = ViTConfig(**fields)
    model = VisionTransformer(config)
    assert config.num_params == sum(p.numel() for p in model.parameters())
    assert vit_flops(config).total == count_flops(model, torch.randn(1, 3, 80, 80))
    with pytest.raises(ValueError, match="use_rel_pos=True"):
        SamBlock(window_size=3, use_rel_pos=True, grid=(5, 5), rope_temperature=10.0, rope_span=3, dim=8, num_heads=2)
