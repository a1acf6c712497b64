"""The patch-embedding picture: identity kernel (exact), learned kernels, principal components."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.layers import patchify
from vitzoo.viz.patch_embedding import (
    filter_principal_components,
    identity_patch_embed,
    plot_patch_embedding,
    unpatchify,
)


@pytest.mark.parametrize("channels, patch", [(3, 4), (1, (2, 4))])
def test_identity_kernel_reproduces_the_patches_and_the_image_exactly(channels, patch):
    torch.manual_seed(0)
    x = torch.rand(2, channels, 8, 16)
    embed = identity_patch_embed(img_size=(8, 16), patch_size=patch, in_chans=channels)
    with torch.no_grad():
        tokens = embed(x)
    assert torch.equal(tokens, patchify(x, patch))  # bit for bit: the kernel only picks pixels
    assert torch.equal(unpatchify(tokens, img_size=(8, 16), patch_size=patch), x)


def test_principal_components_recover_the_patterns_the_filters_are_made_of():
    torch.manual_seed(0)
    basis = torch.linalg.qr(torch.randn(12, 2)).Q.T  # two orthonormal 12-d patterns
    # Zero-mean, uncorrelated coefficients (orthogonal columns), the first varying 3x more.
    raw = torch.randn(40, 2)
    coeffs = torch.linalg.qr(raw - raw.mean(dim=0)).Q * torch.tensor([3.0, 1.0])
    weight = (coeffs @ basis + torch.randn(12)).reshape(40, 3, 2, 2)  # plus a shared mean filter
    components, explained = filter_principal_components(weight, k=3)
    assert components.shape == (3, 3, 2, 2)
    flat = components.reshape(3, -1)
    torch.testing.assert_close(flat @ flat.T, torch.eye(3), atol=1e-5, rtol=0)  # orthonormal
    assert abs(torch.dot(flat[0], basis[0])) == pytest.approx(1.0, abs=1e-4)
    assert abs(torch.dot(flat[1], basis[1])) == pytest.approx(1.0, abs=1e-4)
    assert explained[:2].sum().item() == pytest.approx(1.0, abs=1e-6)  # rank two after centring
    assert explained[0] > explained[1]


def test_plot_patch_embedding_writes_a_1200x800_png_and_states_the_exact_reconstruction(make_vit, tmp_path, png_size):
    fig = plot_patch_embedding(make_vit(), None, out=tmp_path / "embedding.png")
    assert png_size(tmp_path / "embedding.png") == (1200, 800)
    assert "max |diff| = 0" in fig.axes[1].get_title()
    assert "principal components" in fig.axes[-1].get_title()


def test_plot_patch_embedding_gray_model_with_fewer_filters_than_asked(make_vit, tmp_path, png_size):
    model = make_vit(in_chans=1, patch_size=4, embed_dim=12, num_heads=2)
    fig = plot_patch_embedding(
        model, torch.rand(1, 32, 32), num_filters=64, num_components=64, out=tmp_path / "gray.png"
    )
    assert png_size(tmp_path / "gray.png") == (1200, 800)
    assert "filters 0-11 of 12" in fig.axes[-2].get_title()
    assert "first 12 principal components" in fig.axes[-1].get_title()


def test_model_without_patch_embedding_is_a_clear_error():
    with pytest.raises(ValueError, match=r"Linear has no vitzoo PatchEmbed at .patch_embed"):
        plot_patch_embedding(nn.Linear(2, 2))
