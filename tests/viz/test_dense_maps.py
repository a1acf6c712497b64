"""vitzoo.viz.dense_maps: the PCA and patch-similarity pictures of real photos (scikit-image's),
with DINOv3's architecture at a reduced size and random weights."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from PIL import Image

import vitzoo
from vitzoo.data.transforms import dense_transform
from vitzoo.viz import dense_images, patch_similarity, pca_colours, plot_pca, plot_similarity
from vitzoo.viz.pca import PictureInputError

skdata = pytest.importorskip("skimage.data")
pytest.importorskip("matplotlib")

SIZE = 96  # shorter side: astronaut (square) 6 x 6 patches of 16, coffee (2:3) 6 x 9


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return vitzoo.create("dinov3_s16", embed_dim=64, num_heads=2, depth=2).eval()


@pytest.fixture(scope="module")
def photos() -> list[Image.Image]:
    return [Image.fromarray(skdata.astronaut()), Image.fromarray(skdata.coffee())]


def _drawn(fig, index: int) -> np.ndarray:
    """The array the `index`-th axes of a figure shows."""
    return np.asarray(fig.axes[index].images[0].get_array())


def test_dense_images_keep_each_photos_aspect_ratio(model, photos):
    items = dense_images(model, photos, size=SIZE)
    assert [item.source_size for item in items] == [(512, 512), (400, 600)]
    assert [tuple(item.features.shape) for item in items] == [(64, 6, 6), (64, 6, 9)]
    assert [item.block for item in items] == [1, 1] and items[0].name == "image 0"
    for item, photo in zip(items, photos):
        x = vitzoo.load_dense_image(model, photo, short_side=SIZE)
        with torch.no_grad():
            assert torch.equal(item.features, vitzoo.dense_features(model, x)[0])
        shown = dense_transform(model, SIZE, (16, 16), normalize=False)(photo)
        assert torch.allclose(item.display, shown.clamp(0, 1), atol=1e-5)


def test_plot_pca_draws_each_photo_beside_one_shared_map(model, photos, tmp_path):
    out = tmp_path / "pca.png"
    fig = plot_pca(model, photos, size=SIZE, out=out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    items = dense_images(model, photos, size=SIZE)
    colours, foreground = pca_colours([item.features for item in items])
    for row, (colour, mask) in enumerate(zip(colours, foreground)):
        drawn = _drawn(fig, 2 * row + 1)
        assert np.array_equal(drawn, colour.permute(1, 2, 0).numpy()) and np.all(drawn[~mask.numpy()] == 0)
        assert _drawn(fig, 2 * row).shape == (*items[row].display.shape[1:], 3)  # the photo itself
    patches = sum(int(m.sum()) for m in foreground)
    assert f"fit on the {patches} foreground patches of all images" in fig.texts[0].get_text()


def _save_mask(path, mask: np.ndarray):
    Image.fromarray(np.where(mask, 255, 0).astype(np.uint8)).save(path)
    return path


def test_plot_pca_takes_the_foreground_from_masks(model, photos, tmp_path):
    astronaut = np.zeros((6, 6), dtype=bool)  # one pixel per patch
    astronaut[1:5, 2:5] = True
    coffee = np.zeros((400, 600), dtype=bool)  # the photo's own size: its left 3 of 9 patch columns
    coffee[:, :200] = True
    masks = [_save_mask(tmp_path / "a.png", astronaut), _save_mask(tmp_path / "c.png", coffee)]
    coffee_cells = np.zeros((6, 9), dtype=bool)
    coffee_cells[:, :3] = True
    fig = plot_pca(model, photos, size=SIZE, masks=masks)
    for row, cells in enumerate((astronaut, coffee_cells)):
        shown = _drawn(fig, 2 * row + 1)
        assert np.all(shown[~cells] == 0) and np.all(shown[cells].max(axis=-1) > 0)
    assert "the masks given" in fig.texts[0].get_text()


def test_a_mask_of_the_wrong_size_names_the_file(model, photos, tmp_path):
    right = _save_mask(tmp_path / "right.png", np.ones((6, 6), dtype=bool))
    wrong = _save_mask(tmp_path / "wrong.png", np.ones((5, 7), dtype=bool))
    named = f"mask '{wrong}' is 5x7 pixels (height x width); expected the size of image 1: 6x9 or 96x144 or 400x600"
    with pytest.raises(PictureInputError, match=re.escape(named)):
        plot_pca(model, photos, size=SIZE, masks=[right, wrong])
    with pytest.raises(
        PictureInputError, match=re.escape("1 mask file(s) for 2 image(s); expected one mask file per image (2)")
    ):
        plot_pca(model, photos, size=SIZE, masks=[right])


def test_plot_similarity_marks_the_query_and_compares_every_patch(model, photos, tmp_path):
    out = tmp_path / "similarity.png"
    fig = plot_similarity(model, photos, (2, 3), size=SIZE, out=out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    items = dense_images(model, photos, size=SIZE)
    expected = patch_similarity([item.features for item in items], (2, 3))
    maps = [_drawn(fig, index) for index, ax in enumerate(fig.axes) if ax.images and ax.images[0].get_array().ndim == 2]
    assert len(maps) == 2 and all(np.array_equal(m, e.numpy()) for m, e in zip(maps, expected))
    assert maps[0][2, 3] == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(
    "call, named",
    [
        (
            lambda m, p: plot_similarity(m, p, (6, 0), size=SIZE),
            "outside the patch grid of image 0, 6 rows x 6 columns",
        ),
        (lambda m, p: plot_similarity(m, p[1:], (0, 9), size=SIZE), "expected ROW in 0..5 and COL in 0..8"),
        (lambda m, p: plot_pca(m, p, layer=2), "layer 2 is out of range: the model has 2 blocks"),
        (lambda m, p: plot_pca(m, [], size=SIZE), "images: got []; expected a non-empty list of images"),
    ],
    ids=["query-row", "query-column", "layer", "no-images"],
)
def test_bad_arguments_name_themselves(model, photos, call, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        call(model, photos)
