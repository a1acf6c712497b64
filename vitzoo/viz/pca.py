"""The numbers behind the dense-feature pictures: DINOv3's PCA colouring and patch similarity.

DINOv3's recipe (its notebook `pca.ipynb`, the figures of the DINOv2 and DINOv3 papers):

1. the foreground: a mask given (the notebook's comes from a trained foreground classifier), or
   DINOv2's: the patches on the positive side of the first principal component of all patches (of
   all images together);
2. a PCA of 3 whitened components (scikit-learn's `PCA(n_components=3, whiten=True)`) fit on the
   foreground patches only, of all images together, so the same parts get the same colours;
3. every patch projected, each component through `sigmoid(2 * z)` as one of red, green and blue,
   the background set to black.

The first component's sign is arbitrary (an SVD's is); it is chosen so that the patches on the
image borders lie mostly on its negative side, where the background usually is (DINOv2's paper keeps
the patches of positive value and does not say how it picks the sign). Patch similarity is the
cosine similarity of one patch's vector with every patch's. Pure tensor functions: maps are
(C, rows, columns) per image, as `vitzoo.dense_features` gives them (batch index taken).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import VitzooError

SIGMOID_GAIN = 2.0  # DINOv3's gain before the sigmoid: whitened components in vivid, saturating colours
_EPS = 1e-12  # a component without variance is not divided by zero


class PictureInputError(VitzooError, ValueError):
    """An argument of the dense-feature pictures that cannot be used; the message names it."""


@dataclass(frozen=True)
class PCA:
    """A fitted PCA: `mean` (C,), orthonormal `components` (k, C) and the standard deviation of the
    fitted samples along each (k,), with n - 1 in the denominator as scikit-learn's."""

    mean: torch.Tensor
    components: torch.Tensor
    std: torch.Tensor

    def transform(self, features: torch.Tensor, *, whiten: bool = True) -> torch.Tensor:
        """(N, C) -> (N, k) coordinates along the components, divided by their standard deviation
        with `whiten` (variance 1 on the fitted samples)."""
        z = (features.double() - self.mean) @ self.components.T
        return z / self.std.clamp_min(_EPS) if whiten else z


def fit_pca(features: torch.Tensor, k: int = 3) -> PCA:
    """The first `k` principal components of (N, C) samples, in float64. Each component's sign
    puts its largest entry positive (scikit-learn's convention), so a fit is reproducible."""
    if features.ndim != 2:
        raise PictureInputError(f"features have shape {tuple(features.shape)}; expected (samples, channels)")
    n, c = features.shape
    if not 1 <= k <= c or n < k + 1:
        raise PictureInputError(
            f"a PCA of {k} components needs at least {k + 1} samples and {k} channels; got {n} samples of {c} channels"
        )
    samples = features.detach().double()
    mean = samples.mean(dim=0)
    _, s, vh = torch.linalg.svd(samples - mean, full_matrices=False)
    components = vh[:k]
    largest = components.gather(1, components.abs().argmax(dim=1, keepdim=True))
    components = components * torch.where(largest < 0, -1.0, 1.0).to(components)
    return PCA(mean, components, s[:k] / (n - 1) ** 0.5)


def _tokens(maps: Sequence[torch.Tensor]) -> torch.Tensor:
    """Every patch vector of (C, rows, columns) maps, image after image, as (N, C)."""
    if not maps or any(m.ndim != 3 or m.shape[0] != maps[0].shape[0] for m in maps):
        shapes = [tuple(m.shape) for m in maps]
        raise PictureInputError(f"maps have shapes {shapes}; expected one or more (C, rows, columns) of the same C")
    return torch.cat([m.detach().flatten(1).T for m in maps])


def _split(values: torch.Tensor, maps: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """(N, ...) values -> one (..., rows, columns) tensor per map."""
    sizes = [m.shape[1] * m.shape[2] for m in maps]
    return [v.T.reshape(-1, *m.shape[1:]) for v, m in zip(values.split(sizes), maps)]


def _border(rows: int, columns: int) -> torch.Tensor:
    ring = torch.ones(rows, columns, dtype=torch.bool)
    ring[1:-1, 1:-1] = False
    return ring


def first_component_foreground(maps: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """DINOv2's foreground: (rows, columns) bool masks, True where a patch lies on the positive side
    of the first principal component of all patches of all `maps` (sign and smoothing: module doc)."""
    tokens = _tokens(maps)
    first = fit_pca(tokens, 1).transform(tokens, whiten=False)
    scores = [s[0] for s in _split(first, maps)]
    border = torch.cat([s[_border(*s.shape)] for s in scores])
    if (border > 0).double().mean() > 0.5:  # the borders on the positive side: flip
        scores = [-s for s in scores]
    return [s > 0 for s in scores]


def pca_colours(
    maps: Sequence[torch.Tensor], foreground: Sequence[torch.Tensor] | None = None
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """DINOv3's colouring of (C, rows, columns) maps: one (3, rows, columns) picture in [0, 1] per
    map from 3 whitened components fit on the foreground patches of all maps together, black
    outside the foreground. `foreground`: one (rows, columns) bool mask per map (default: DINOv2's,
    `first_component_foreground`). Returns the pictures and the foreground masks used."""
    tokens = _tokens(maps)
    masks = first_component_foreground(maps) if foreground is None else list(foreground)
    if len(masks) != len(maps) or any(tuple(f.shape) != tuple(m.shape[1:]) for f, m in zip(masks, maps)):
        raise PictureInputError(
            f"foreground has shapes {[tuple(f.shape) for f in masks]}; expected one (rows, columns) mask per map: "
            f"{[tuple(m.shape[1:]) for m in maps]}"
        )
    keep = torch.cat([f.reshape(-1).bool() for f in masks])
    if int(keep.sum()) < 4:
        raise PictureInputError(
            f"the foreground has {int(keep.sum())} patches of {keep.numel()}; a PCA of 3 components needs at least 4"
        )
    pca = fit_pca(tokens[keep], 3)
    colours = torch.sigmoid(SIGMOID_GAIN * pca.transform(tokens)) * keep[:, None]
    return [c.float() for c in _split(colours, maps)], [f.bool() for f in masks]


def check_query(query: Sequence[int], grid: tuple[int, int], where: str = "the image") -> tuple[int, int]:
    """`query` as a (row, column) inside a `grid` of (rows, columns) patches; an error naming the
    argument and the grid otherwise."""
    rows, columns = grid
    valid = len(query) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in query)
    if not valid or not (0 <= query[0] < rows and 0 <= query[1] < columns):
        shown = ",".join(str(v) for v in query)
        raise PictureInputError(
            f"query {shown} (--query ROW,COL) is outside the patch grid of {where}, {rows} rows x {columns} "
            f"columns; expected ROW in 0..{rows - 1} and COL in 0..{columns - 1}"
        )
    return query[0], query[1]


def patch_similarity(maps: Sequence[torch.Tensor], query: Sequence[int]) -> list[torch.Tensor]:
    """The cosine similarity of the patch at `query` = (row, column) of the first map with every
    patch of every map: one (rows, columns) map in [-1, 1] each, 1 at the query itself."""
    tokens = _tokens(maps)
    row, column = check_query(query, (maps[0].shape[1], maps[0].shape[2]), "the first image")
    unit = F.normalize(tokens.double(), dim=1)
    similarity = unit @ unit[row * maps[0].shape[2] + column]
    return [s[0].float() for s in _split(similarity[:, None], maps)]
