"""The patches picture and the token order behind it."""

from __future__ import annotations

import pytest
import torch

from vitzoo.viz.images import synthetic_image
from vitzoo.viz.patches import patch_sequence, plot_patches


@pytest.mark.parametrize("channels, patch", [(3, 4), (1, (4, 8))])
def test_patch_sequence_is_row_major_over_the_grid(channels, patch):
    image = torch.rand(channels, 16, 32)
    ph, pw = (patch, patch) if isinstance(patch, int) else patch
    tiles = patch_sequence(image, patch)
    gh, gw = 16 // ph, 32 // pw
    assert tiles.shape == (gh * gw, channels, ph, pw)
    for i in range(gh):
        for j in range(gw):
            assert torch.equal(tiles[i * gw + j], image[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw])


def test_plot_patches_writes_a_1200x400_png(tmp_path, png_size):
    fig = plot_patches(synthetic_image(64), 16, out=tmp_path / "patches.png")
    assert png_size(tmp_path / "patches.png") == (1200, 400)
    assert "4x4 grid of 16x16 patches" in fig.axes[0].get_title()
    assert "16 tokens" in fig.axes[1].get_title()
    # The third panel is the flattened (N, C*ph*pw) matrix itself.
    matrix = fig.axes[2].images[0].get_array()
    assert matrix.shape == (16, 3 * 16 * 16)


def test_plot_patches_any_patch_size_gray_and_dpi(tmp_path, png_size):
    plot_patches(synthetic_image(28, channels=1), 7, out=tmp_path / "p7.png", dpi=50)
    assert png_size(tmp_path / "p7.png") == (600, 200)


def test_patch_size_that_does_not_tile_the_image_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"patch size 5x5 does not tile the 28x28 image"):
        plot_patches(synthetic_image(28), 5, out=tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
