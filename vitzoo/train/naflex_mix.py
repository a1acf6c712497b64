"""Mixup / CutMix and random erasing on NaFlex batches: images as patch grids of differing sizes.

    mixer = NaFlexMixer(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    batch, targets = mixer(batch, labels, seed=step_seed(seed, epoch, step, rank))
    PatchErasing(prob=0.25)(batch, generator)   # in place

Mixing follows timm's `naflex_mixup.py` on the patch grids instead of the pixels (a NaFlex batch
holds patches; timm mixes images before it cuts them): the images are sorted by aspect, shuffled
within windows of `local_shuffle`, and paired with their neighbour (an odd one out is left as it
is). Each pair mixes only the centred overlap of its two grids: Mixup blends the overlap's patches
(lam ~ Beta(alpha, alpha)), CutMix replaces a box of the overlap, of sides sqrt(1 - lam) of it in
whole patches, at a random place, with the partner's patches. An image's label weight is the share
of its own patches it keeps (Mixup's overlap counted at lam), so targets match what the model sees;
label smoothing is folded in as in mix.py. Padding patches are never read or written.

Random erasing is timm's `PatchRandomErasing` in its "region" mode: per image with probability
`prob`, a rectangle of patches (area a fraction in [min_area, max_area] of the grid, aspect
log-uniform in [min_aspect, 1 / min_aspect], up to ten tries) set to `value` (0: the mean, after
normalisation, as the square images' erasing in data/augment.py), valid patches only.

Every draw comes from the seed or generator given, so a batch is a function of (seed, epoch, step,
rank) and `--resume` stays exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..data.naflex_train import NaFlexBatch
from ..layers.naflex import PATCH_COORD, PATCH_VALID, PATCHES
from .mix import check_mix_settings, smooth_one_hot


def grid_shape(coord: torch.Tensor, valid: torch.Tensor) -> tuple[int, int]:
    """(rows, columns) of one image's patch grid: one past its largest valid coordinates."""
    used = coord[valid]
    if len(used) == 0:
        return 0, 0
    return int(used[:, 0].max()) + 1, int(used[:, 1].max()) + 1


def _index_grid(coord: torch.Tensor, valid: torch.Tensor, shape: tuple[int, int]) -> torch.Tensor:
    """(rows, columns) int64: the position in the sequence of each grid cell's patch (-1: none)."""
    grid = torch.full(shape, -1, dtype=torch.int64)
    positions = torch.nonzero(valid).flatten()
    grid[coord[positions, 0], coord[positions, 1]] = positions
    return grid


def pair_by_aspect(shapes: list[tuple[int, int]], generator: torch.Generator, local_shuffle: int = 4) -> dict[int, int]:
    """i -> partner: images sorted by aspect (columns / rows), shuffled within windows of
    `local_shuffle`, neighbours paired (timm's pairing); an odd one out has no partner."""
    order = sorted(range(len(shapes)), key=lambda i: shapes[i][1] / max(shapes[i][0], 1))
    if local_shuffle > 1:
        for start in range(0, len(order), local_shuffle):
            window = order[start : start + local_shuffle]
            order[start : start + local_shuffle] = [window[k] for k in torch.randperm(len(window), generator=generator)]
    pairs: dict[int, int] = {}
    for a, b in zip(order[::2], order[1::2]):
        pairs[a], pairs[b] = b, a
    return pairs


def mix_patches(
    batch: NaFlexBatch,
    pairs: dict[int, int],
    lam: float,
    *,
    cutmix: bool,
    generator: torch.Generator | None = None,
) -> tuple[NaFlexBatch, list[float]]:
    """The batch with each image of `pairs` mixed with its partner (see the module docstring), and
    the share of its own content each image keeps. CutMix draws the box places from `generator`."""
    patches, coord, valid = batch[PATCHES], batch[PATCH_COORD], batch[PATCH_VALID]
    out = patches.clone()
    kept = [1.0] * len(patches)
    shapes = [grid_shape(coord[i], valid[i]) for i in range(len(patches))]
    grids = [_index_grid(coord[i], valid[i], shapes[i]) for i in range(len(patches))]
    for i, j in pairs.items():
        (hi, wi), (hj, wj) = shapes[i], shapes[j]
        oh, ow = min(hi, hj), min(wi, wj)
        ti, li, tj, lj = (hi - oh) // 2, (wi - ow) // 2, (hj - oh) // 2, (wj - ow) // 2
        if cutmix:
            ch, cw = int(oh * math.sqrt(1.0 - lam)), int(ow * math.sqrt(1.0 - lam))
            y = int(torch.randint(oh - ch + 1, (1,), generator=generator))
            x = int(torch.randint(ow - cw + 1, (1,), generator=generator))
            dest = grids[i][ti + y : ti + y + ch, li + x : li + x + cw].flatten()
            src = grids[j][tj + y : tj + y + ch, lj + x : lj + x + cw].flatten()
            out[i, dest] = patches[j, src]
            kept[i] = 1.0 - ch * cw / float(hi * wi)
        else:
            dest = grids[i][ti : ti + oh, li : li + ow].flatten()
            src = grids[j][tj : tj + oh, lj : lj + ow].flatten()
            out[i, dest] = patches[i, dest].mul(lam).add_(patches[j, src], alpha=1.0 - lam)
            kept[i] = (hi * wi - oh * ow) / (hi * wi) + lam * oh * ow / (hi * wi)
    return {**batch, PATCHES: out}, kept


def mixed_targets(
    labels: torch.Tensor, pairs: dict[int, int], kept: list[float], num_classes: int, smoothing: float = 0.0
) -> torch.Tensor:
    """(B, num_classes) targets: each image's smoothed one-hot row weighted by the share it kept,
    its partner's by the rest (timm's `pairwise_mixup_target`)."""
    encoded = smooth_one_hot(labels, num_classes, smoothing)
    targets = encoded.clone()
    for i, j in pairs.items():
        targets[i].mul_(kept[i]).add_(encoded[j], alpha=1.0 - kept[i])
    return targets


def beta_sample(alpha: float, seed: int) -> float:
    """One draw of Beta(alpha, alpha) from `seed`, leaving torch's global generator as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return min(1.0, max(0.0, float(torch.distributions.Beta(alpha, alpha).sample())))


class NaFlexMixer:
    """Mixup / CutMix of NaFlex batches with mix.Mixer's settings and call (see the module docstring)."""

    def __init__(
        self,
        *,
        num_classes: int,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        label_smoothing: float = 0.0,
        local_shuffle: int = 4,
    ) -> None:
        check_mix_settings(mixup_alpha, cutmix_alpha, prob, switch_prob)
        self.num_classes, self.smoothing, self.local_shuffle = num_classes, label_smoothing, local_shuffle
        self.mixup_alpha, self.cutmix_alpha, self.prob, self.switch_prob = mixup_alpha, cutmix_alpha, prob, switch_prob

    def __call__(self, batch: NaFlexBatch, labels: torch.Tensor, *, seed: int) -> tuple[NaFlexBatch, torch.Tensor]:
        """A batch and its (B,) labels -> the mixed batch and (B, num_classes) targets."""
        generator = torch.Generator().manual_seed(seed)
        mix_draw, switch_draw = torch.rand(2, generator=generator).tolist()
        if mix_draw >= self.prob or len(labels) < 2:
            return batch, smooth_one_hot(labels, self.num_classes, self.smoothing)
        if self.mixup_alpha > 0 and self.cutmix_alpha > 0:
            cutmix = switch_draw < self.switch_prob
        else:
            cutmix = self.cutmix_alpha > 0
        lam = beta_sample(
            self.cutmix_alpha if cutmix else self.mixup_alpha, int(torch.randint(2**62, (1,), generator=generator))
        )
        coord, valid = batch[PATCH_COORD].cpu(), batch[PATCH_VALID].cpu()
        shapes = [grid_shape(coord[i], valid[i]) for i in range(len(labels))]
        pairs = pair_by_aspect(shapes, generator, self.local_shuffle)
        mixed, kept = mix_patches(batch, pairs, lam, cutmix=cutmix, generator=generator)
        return mixed, mixed_targets(labels, pairs, kept, self.num_classes, self.smoothing).to(labels.device)


@dataclass(frozen=True)
class PatchErasing:
    """Random erasing of rectangles of patches (timm's PatchRandomErasing, "region" mode; see the
    module docstring). Called on a batch with a generator, in place."""

    prob: float = 0.25
    min_area: float = 0.02
    max_area: float = 1 / 3
    min_aspect: float = 0.3
    value: float = 0.0

    def __call__(self, batch: NaFlexBatch, generator: torch.Generator) -> None:
        patches, coord, valid = batch[PATCHES], batch[PATCH_COORD], batch[PATCH_VALID]
        log_low, log_high = math.log(self.min_aspect), math.log(1 / self.min_aspect)
        for i in range(len(patches)):
            if float(torch.rand((), generator=generator)) >= self.prob:
                continue
            rows, cols = grid_shape(coord[i], valid[i])
            for _ in range(10):
                u, v = torch.rand(2, generator=generator, dtype=torch.float64).tolist()
                area = (self.min_area + (self.max_area - self.min_area) * u) * rows * cols
                aspect = math.exp(log_low + (log_high - log_low) * v)
                h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
                if not (0 < h <= rows and 0 < w <= cols):
                    continue
                top = int(torch.randint(rows - h + 1, (1,), generator=generator))
                left = int(torch.randint(cols - w + 1, (1,), generator=generator))
                ys, xs = coord[i, :, 0], coord[i, :, 1]
                region = (ys >= top) & (ys < top + h) & (xs >= left) & (xs < left + w) & valid[i]
                patches[i, region] = self.value
                break
