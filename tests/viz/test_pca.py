"""vitzoo.viz.pca: the whitened PCA, DINOv2's foreground, DINOv3's colouring, patch similarity."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from vitzoo.viz.pca import (
    PictureInputError,
    check_query,
    first_component_foreground,
    fit_pca,
    patch_similarity,
    pca_colours,
)


def _correlated(n: int, c: int, seed: int) -> torch.Tensor:
    """Samples with unequal variances along mixed directions (a PCA with something to find)."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.linspace(3.0, 0.1, c)
    mixing = torch.linalg.qr(torch.randn(c, c, generator=g, dtype=torch.float64))[0]
    return (torch.randn(n, c, generator=g, dtype=torch.float64) * scales) @ mixing.T + 5.0


def _object_maps(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(C, rows, columns) features of a 10 x 12 grid, an object (a different vector plus noise) on
    rows 3-6 and columns 4-8, and its (rows, columns) mask."""
    g = torch.Generator().manual_seed(seed)
    background, thing = torch.randn(2, 8, generator=g)
    mask = torch.zeros(10, 12, dtype=torch.bool)
    mask[3:7, 4:9] = True
    base = torch.where(mask, thing[:, None, None], background[:, None, None])
    return base + 0.05 * torch.randn(8, 10, 12, generator=g), mask


def test_fit_pca_is_scikit_learns_whitened_pca():
    sklearn = pytest.importorskip("sklearn.decomposition")
    x = _correlated(300, 12, seed=0)
    pca = fit_pca(x, 3)
    reference = sklearn.PCA(n_components=3, whiten=True).fit(x.numpy())
    ours = pca.transform(x)
    theirs = torch.from_numpy(reference.transform(x.numpy()))
    signs = torch.sign((ours * theirs).sum(dim=0))  # an SVD's signs are a convention
    assert torch.allclose(ours, theirs * signs, atol=1e-8)
    assert torch.allclose(pca.components @ pca.components.T, torch.eye(3, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(ours.mean(dim=0), torch.zeros(3, dtype=torch.float64), atol=1e-10)
    assert torch.allclose(ours.var(dim=0), torch.ones(3, dtype=torch.float64), atol=1e-10)  # whitened
    assert torch.allclose(pca.transform(x, whiten=False).std(dim=0), pca.std)


def test_fit_pca_needs_more_samples_than_components():
    with pytest.raises(PictureInputError, match=re.escape("needs at least 4 samples and 3 channels; got 3 samples")):
        fit_pca(torch.randn(3, 8), 3)
    with pytest.raises(PictureInputError, match=re.escape("expected (samples, channels)")):
        fit_pca(torch.randn(3, 8, 2), 3)


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["as-is", "negated"])
def test_first_component_foreground_finds_the_object_not_the_border(sign):
    """Either sign of the features (so either sign of the SVD's first component): the object is the
    foreground, the patches along the borders are not."""
    (a, mask_a), (b, mask_b) = _object_maps(0), _object_maps(0)
    b = torch.flip(b, dims=[2])  # the second image: the object on the other side
    masks = first_component_foreground([sign * a, sign * b])
    assert torch.equal(masks[0], mask_a) and torch.equal(masks[1], torch.flip(mask_b, dims=[1]))


def test_pca_colours_whitened_on_the_foreground_and_black_outside():
    maps, mask = _object_maps(1)
    maps[:, mask] += torch.randn(8, int(mask.sum()), generator=torch.Generator().manual_seed(2))
    (colours,), (used,) = pca_colours([maps], [mask])
    assert colours.shape == (3, 10, 12) and torch.equal(used, mask)
    assert torch.all(colours[:, ~mask] == 0)  # background black
    z = torch.logit(colours[:, mask].double()) / 2.0  # back through DINOv3's sigmoid(2 z)
    assert torch.allclose(z.var(dim=1), torch.ones(3, dtype=torch.float64), atol=1e-4)
    assert torch.allclose(z.mean(dim=1), torch.zeros(3, dtype=torch.float64), atol=1e-4)


def test_one_fit_shared_by_all_images_colours_the_same_patch_alike():
    g = torch.Generator().manual_seed(3)
    first, second = torch.randn(16, 5, 6, generator=g), torch.randn(16, 7, 4, generator=g)
    second[:, 6, 3] = first[:, 2, 1]  # the same patch vector in both images
    masks = [torch.ones(5, 6, dtype=torch.bool), torch.ones(7, 4, dtype=torch.bool)]
    (a, b), _ = pca_colours([first, second], masks)
    assert torch.equal(a[:, 2, 1], b[:, 6, 3])
    (alone,), _ = pca_colours([second], masks[1:])  # fit on the second image only: other colours
    assert not torch.allclose(alone[:, 6, 3], a[:, 2, 1], atol=1e-3)


def test_pca_colours_default_foreground_and_bad_masks():
    maps, mask = _object_maps(4)
    (colours,), (used,) = pca_colours([maps])
    assert torch.equal(used, mask) and torch.all(colours[:, ~mask] == 0) and torch.all(colours[:, mask] > 0)
    with pytest.raises(PictureInputError, match=re.escape("expected one (rows, columns) mask per map: [(10, 12)]")):
        pca_colours([maps], [mask[:, :5]])
    few = torch.zeros_like(mask)
    few[0, :3] = True
    with pytest.raises(PictureInputError, match="the foreground has 3 patches of 120"):
        pca_colours([maps], [few])


def test_patch_similarity_is_the_cosine_with_the_query_patch():
    g = torch.Generator().manual_seed(5)
    first, second = torch.randn(16, 5, 6, generator=g), torch.randn(16, 3, 8, generator=g)
    second[:, 1, 7] = 3.0 * first[:, 4, 0]  # same direction, other length
    a, b = patch_similarity([first, second], (4, 0))
    assert a.shape == (5, 6) and b.shape == (3, 8)
    assert a[4, 0] == pytest.approx(1.0, abs=1e-6) and b[1, 7] == pytest.approx(1.0, abs=1e-6)
    query = first[:, 4, 0][:, None, None]
    assert torch.allclose(b, F.cosine_similarity(second, query, dim=0), atol=1e-6)
    assert float(torch.cat([a.flatten(), b.flatten()]).abs().max()) <= 1.0 + 1e-6


@pytest.mark.parametrize("query", [(5, 0), (0, 6), (-1, 2), (1,), (1.0, 2)])
def test_a_query_outside_the_grid_names_the_argument_and_the_grid(query):
    with pytest.raises(PictureInputError, match=re.escape("(--query ROW,COL) is outside the patch grid of the first")):
        patch_similarity([torch.randn(4, 5, 6)], query)
    with pytest.raises(PictureInputError, match=re.escape("5 rows x 6 columns; expected ROW in 0..4 and COL in 0..5")):
        check_query(query, (5, 6), "photo.jpg")
