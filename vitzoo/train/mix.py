"""Mixup and CutMix on training batches, with the label targets they imply, as timm's `Mixup` does.

    mixer = Mixer(num_classes=10, mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1)
    x, targets = mixer(x, y, seed=step_seed(seed, epoch, step, rank))   # targets: (B, 10), rows sum to 1

Per batch (timm's "batch" mode): with probability `prob` the batch is mixed, otherwise only its
labels become (smoothed) one-hot rows; a mixed batch gets CutMix with probability `switch_prob`
when both are on, else Mixup. The image operations and their mixing weight (lam ~ Beta(alpha,
alpha); CutMix's box, with lam corrected to the box's area) are torchvision's `v2.MixUp` and
`v2.CutMix`, which pair each image with its neighbour in the (shuffled) batch.

Label smoothing is folded into the targets, which is exact because mixing is linear:
lam * smooth(y1) + (1 - lam) * smooth(y2) = (1 - s) * (lam * y1 + (1 - lam) * y2) + s / C.
The loss is then the cross-entropy against these probabilities, without smoothing again.

Every random draw of a batch comes from `seed` alone: torchvision draws from torch's global
generator, so the call runs on a forked copy of it seeded from `seed` and leaves the global state
(dropout, stochastic depth) untouched. A batch is therefore a function of (seed, epoch, step,
rank), which keeps `--resume` bit-exact without any mixing state in the checkpoint.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torchvision.transforms import v2


def step_seed(*values: int) -> int:
    """A 63-bit seed from ints such as (seed, epoch, step, rank): stable across processes and
    Python versions (unlike hash()), and unrelated for neighbouring steps."""
    digest = hashlib.blake2b(",".join(map(str, values)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def smooth_one_hot(labels: torch.Tensor, num_classes: int, smoothing: float = 0.0) -> torch.Tensor:
    """(B,) class indices -> (B, num_classes) float rows: 1 - s + s/C on the label, s/C elsewhere
    (what F.cross_entropy's label_smoothing=s means)."""
    return F.one_hot(labels, num_classes).float() * (1.0 - smoothing) + smoothing / num_classes


def check_mix_settings(mixup_alpha: float, cutmix_alpha: float, prob: float, switch_prob: float) -> None:
    """The settings of a Mixup / CutMix mixer (this module's and train/naflex_mix.py's)."""
    if mixup_alpha < 0 or cutmix_alpha < 0 or mixup_alpha == cutmix_alpha == 0:
        raise ValueError(
            f"mixup_alpha={mixup_alpha}, cutmix_alpha={cutmix_alpha}: expected alphas >= 0, at least one > 0"
        )
    if not (0 <= prob <= 1 and 0 <= switch_prob <= 1):
        raise ValueError(f"prob={prob}, switch_prob={switch_prob}: expected probabilities in [0, 1]")


class Mixer:
    """Mixup / CutMix for training batches; see the module docstring."""

    def __init__(
        self,
        *,
        num_classes: int,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        prob: float = 1.0,
        switch_prob: float = 0.5,
        label_smoothing: float = 0.0,
    ) -> None:
        check_mix_settings(mixup_alpha, cutmix_alpha, prob, switch_prob)
        self.num_classes, self.label_smoothing = num_classes, label_smoothing
        self.prob, self.switch_prob = prob, switch_prob
        self.mixup = v2.MixUp(alpha=mixup_alpha, num_classes=num_classes) if mixup_alpha > 0 else None
        self.cutmix = v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes) if cutmix_alpha > 0 else None

    def __call__(self, x: torch.Tensor, labels: torch.Tensor, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, C, H, W) images and (B,) labels -> mixed images and (B, num_classes) targets."""
        generator = torch.Generator().manual_seed(seed)
        mix_draw, switch_draw = torch.rand(2, generator=generator).tolist()
        if mix_draw >= self.prob:
            return x, smooth_one_hot(labels, self.num_classes, self.label_smoothing)
        operation: v2.Transform | None
        if self.mixup is not None and self.cutmix is not None:
            operation = self.cutmix if switch_draw < self.switch_prob else self.mixup
        else:
            operation = self.mixup or self.cutmix
        assert operation is not None  # __init__ refuses both off
        with torch.random.fork_rng(devices=[]):  # CPU generator only: torchvision's draws happen there
            torch.random.default_generator.manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
            mixed, targets = operation(x, labels)
        # targets = lam * one_hot(y) + (1 - lam) * one_hot(neighbour): smoothing folds in linearly
        return mixed, targets * (1.0 - self.label_smoothing) + self.label_smoothing / self.num_classes
