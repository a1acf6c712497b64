"""PatchEmbed (Conv2d, kernel = stride = patch) is the same linear map as the tutorial's
unfold + Linear, for square and rectangular images and patches."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.layers import PatchEmbed, patchify, unfold_linear_patch_embed


@pytest.mark.parametrize(
    "img_size, patch_size, in_chans",
    [
        (32, 16, 1),  # the MNIST tutorial: 2x2 patches
        (28, 4, 1),
        (24, 8, 3),
        ((24, 40), 8, 3),  # rectangular image, square patches
        ((24, 40), (4, 8), 2),  # rectangular image and patches
        ((12, 30), (6, 5), 3),
    ],
)
def test_conv_equals_unfold_linear_with_shared_weights(img_size, patch_size, in_chans):
    torch.manual_seed(0)
    embed = PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=in_chans, embed_dim=7)
    h, w = embed.img_size
    ph, pw = embed.patch_size
    x = torch.randn(3, in_chans, h, w)

    conv_out = embed(x)
    assert conv_out.shape == (3, (h // ph) * (w // pw), 7)
    assert embed.grid_size == (h // ph, w // pw)
    assert embed.num_patches == (h // ph) * (w // pw)

    linear = embed.as_linear()
    # Shared weights: the Linear's weight is the conv kernel, flattened channel-major.
    assert torch.equal(linear.weight, embed.proj.weight.reshape(7, -1))
    torch.testing.assert_close(unfold_linear_patch_embed(x, linear, patch_size), conv_out, rtol=1e-5, atol=1e-5)


def test_unfold_linear_matches_a_hand_built_linear_and_patch_order():
    """Independent of `as_linear`: copy the weights by hand and check a patch against slicing."""
    torch.manual_seed(1)
    embed = PatchEmbed(img_size=(8, 12), patch_size=(4, 6), in_chans=2, embed_dim=5)
    linear = nn.Linear(2 * 4 * 6, 5)
    with torch.no_grad():
        linear.weight.copy_(embed.proj.weight.flatten(1))
        linear.bias.copy_(embed.proj.bias)
    x = torch.randn(2, 2, 8, 12)
    torch.testing.assert_close(unfold_linear_patch_embed(x, linear, (4, 6)), embed(x), rtol=1e-5, atol=1e-5)

    patches = patchify(x, (4, 6))
    assert patches.shape == (2, 4, 48)
    # Patches are row-major over the grid; each is flattened channel, then row, then column.
    assert torch.equal(patches[:, 1], x[:, :, 0:4, 6:12].reshape(2, -1))
    assert torch.equal(patches[:, 2], x[:, :, 4:8, 0:6].reshape(2, -1))


@pytest.mark.parametrize(
    "img_size, patch_size",
    [(30, 16), ((32, 30), 16), (32, (16, 7)), (0, 16)],
)
def test_img_size_not_divisible_by_patch_size_is_a_value_error(img_size, patch_size):
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        PatchEmbed(img_size=img_size, patch_size=patch_size, in_chans=1, embed_dim=4)


def test_bad_size_types_are_type_errors():
    with pytest.raises(TypeError, match="img_size"):
        PatchEmbed(img_size=(32, 32, 32), patch_size=16)
    with pytest.raises(TypeError, match="patch_size"):
        PatchEmbed(img_size=32, patch_size=16.0)


def test_wrong_input_shape_names_expected_and_given():
    embed = PatchEmbed(img_size=(32, 48), patch_size=16, in_chans=3, embed_dim=4)
    with pytest.raises(ValueError, match=r"\(2, 1, 32, 48\).*\(batch, 3, 32, 48\)"):
        embed(torch.zeros(2, 1, 32, 48))
    with pytest.raises(ValueError, match=r"\(2, 3, 48, 32\).*\(batch, 3, 32, 48\)"):
        embed(torch.zeros(2, 3, 48, 32))
    with pytest.raises(ValueError, match="patchify"):
        patchify(torch.zeros(1, 3, 30, 32), 16)


# ----------------------------------------------------------------------------- convolutional stem
@pytest.mark.parametrize(
    "img_size, conv_stem, grid", [(28, (16, 32), (4, 4)), (32, (8,), (8, 8)), ((28, 20), (4, 8), (4, 3))]
)
def test_conv_stem_halves_the_image_per_stage_rounding_up(img_size, conv_stem, grid):
    stride = 2 ** (len(conv_stem) + 1)
    embed = PatchEmbed(img_size=img_size, patch_size=stride, in_chans=1, embed_dim=6, conv_stem=conv_stem)
    h, w = embed.img_size
    out = embed(torch.randn(2, 1, h, w))
    assert embed.grid_size == grid and embed.num_patches == grid[0] * grid[1]
    assert out.shape == (2, grid[0] * grid[1], 6)
    convs = [m for m in embed.stem if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == list(conv_stem)
    assert all(c.stride == (2, 2) and c.kernel_size == (3, 3) and c.bias is None for c in convs)
    assert sum(isinstance(m, nn.BatchNorm2d) for m in embed.stem) == len(conv_stem)


def test_conv_stem_tokens_see_overlapping_neighbourhoods():
    """A plain patch embedding's token depends only on its own patch; a stem token also on the
    pixels just across the patch border (overlapping 3x3 windows), which is the point of a stem."""
    torch.manual_seed(0)
    for conv_stem in ((), (4,)):
        embed = PatchEmbed(img_size=16, patch_size=4, in_chans=1, embed_dim=3, conv_stem=conv_stem).eval()
        x = torch.randn(1, 1, 16, 16)
        y = x.clone()
        y[..., 3, 3] += 1.0  # last pixel of patch (0, 0), which spans rows/cols 0-3
        changed = (embed(x) - embed(y)).abs().sum(-1)[0] > 0
        assert bool(changed[0])  # its own token
        assert bool(changed[5]) == bool(conv_stem), conv_stem  # token 5 = patch (1, 1), the diagonal neighbour


def test_conv_stem_has_no_linear_form_and_needs_a_matching_patch_size():
    embed = PatchEmbed(img_size=28, patch_size=8, in_chans=1, embed_dim=4, conv_stem=(8, 8))
    with pytest.raises(ValueError, match="convolutional stem"):
        embed.as_linear()
    with pytest.raises(ValueError, match=r"each token covers 8x8 pixels; expected patch_size=8, got \(7, 7\)"):
        PatchEmbed(img_size=28, patch_size=7, in_chans=1, embed_dim=4, conv_stem=(8, 8))
    with pytest.raises(ValueError, match="positive channel counts"):
        PatchEmbed(img_size=28, patch_size=4, in_chans=1, embed_dim=4, conv_stem=(0,))


@pytest.mark.parametrize("in_chans, conv_stem, patch_size", [(1, (4, 8), 8), (1, (), 7), (3, (), 7), (3, (4,), 4)])
def test_tokens_come_out_contiguous(in_chans, conv_stem, patch_size):
    """The convolutions run channels-last, so the (B, N, D) tokens are contiguous memory (not a
    transposed view of NCHW): the encoder's residual stream then stays contiguous."""
    torch.manual_seed(0)
    embed = PatchEmbed(img_size=28, patch_size=patch_size, in_chans=in_chans, embed_dim=16, conv_stem=conv_stem)
    x = torch.randn(3, in_chans, 28, 28)
    tokens = embed(x)
    assert tokens.is_contiguous()
    # ... and the values are those of the same modules run in the default NCHW layout.
    reference = embed.stem(x) if embed.stem is not None else x
    reference = embed.proj(reference).flatten(2).transpose(1, 2)
    assert not reference.is_contiguous()
    torch.testing.assert_close(tokens, reference, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- options, other sizes
def test_projection_without_bias():
    embed = PatchEmbed(img_size=32, patch_size=16, embed_dim=4, bias=False)
    assert embed.proj.bias is None
    assert embed.as_linear().bias is None


def test_dynamic_input_takes_any_multiple_of_the_patch():
    torch.manual_seed(0)
    embed = PatchEmbed(img_size=32, patch_size=(8, 4), embed_dim=6, strict_img_size=False)
    x = torch.randn(2, 3, 16, 12)
    assert embed.dynamic_feat_size(x.shape[-2:]) == (2, 3)
    tokens = embed(x)
    assert tokens.shape == (2, 2 * 3, 6)
    torch.testing.assert_close(tokens, unfold_linear_patch_embed(x, embed.as_linear(), (8, 4)))
    with pytest.raises(ValueError, match=r"\(2, 3, 16, 10\).*height a multiple of 8 and width a multiple of 4"):
        embed(torch.zeros(2, 3, 16, 10))
    with pytest.raises(ValueError, match=r"expected \(batch, 3, height, width\)"):
        embed(torch.zeros(2, 1, 16, 12))


def test_dynamic_input_with_a_conv_stem_takes_any_size():
    embed = PatchEmbed(img_size=28, patch_size=8, in_chans=1, embed_dim=4, conv_stem=(4, 8), strict_img_size=False)
    x = torch.randn(1, 1, 30, 9)
    assert embed(x).shape == (1, 4 * 2, 4)
    assert embed.dynamic_feat_size(x.shape[-2:]) == (4, 2)  # ceil(30 / 8), ceil(9 / 8)


def test_set_input_size_changes_the_expected_size_not_the_weights():
    embed = PatchEmbed(img_size=32, patch_size=16, embed_dim=4)
    weight = embed.proj.weight.clone()
    embed.set_input_size((48, 64))
    assert (embed.img_size, embed.grid_size, embed.num_patches) == ((48, 64), (3, 4), 12)
    assert torch.equal(embed.proj.weight, weight)
    assert embed(torch.randn(1, 3, 48, 64)).shape == (1, 12, 4)
    with pytest.raises(ValueError, match=r"\(1, 3, 32, 32\).*\(batch, 3, 48, 64\)"):
        embed(torch.randn(1, 3, 32, 32))
    with pytest.raises(ValueError, match="not divisible by patch_size"):
        embed.set_input_size(40)
