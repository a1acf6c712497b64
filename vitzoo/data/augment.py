"""Batch transforms: uint8 images (B, C, H, W) -> normalised float input of the model.

What the model expects comes from its `pretrained_cfg` (input size, mean/std, interpolation,
crop_pct) and its `in_chans`; the data's channel count is converted to it (grayscale repeated to
RGB, RGB to luminance). Augmentation works on whole batches with per-image random parameters:

* digits (MNIST, Fashion-MNIST): a small random affine (rotation, scale, shift), plus a
  horizontal flip for Fashion-MNIST where clothes are mirror-symmetric;
* natural images (folders): random resized crop and horizontal flip, then RandAugment;
* optionally random erasing (Zhong et al., 2020), any data: with probability `erase` an image
  gets one rectangle (2-33% of its area, aspect 0.3-3.3) set to the mean (0 after normalising).

Evaluation is vitzoo.data.eval_transform (vitzoo/data/transforms.py), the preprocessing of the
weights. In training, every geometric change and the resize to the model's input size are one
`affine_grid` + `grid_sample` call for the batch: one interpolation, no per-image Python loop on the digits path.
All randomness comes from the `torch.Generator` passed in, so a batch is a pure function of
(seed, epoch, step) and a resumed run sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .tensors import DataKind
from .transforms import InputSpec, convert_channels, eval_finish, eval_geometry

__all__ = ["BatchTransform", "InputSpec", "convert_channels"]


class BatchTransform:
    """Callable: (uint8 batch, generator) -> float batch ready for the model."""

    def __init__(
        self,
        *,
        spec: InputSpec,
        train: bool,
        kind: DataKind = "digits",
        hflip: bool = False,
        rotate_deg: float = 10.0,
        scale: tuple[float, float] = (0.9, 1.1),
        shift: float = 0.1,
        crop_scale: tuple[float, float] = (0.35, 1.0),
        randaugment: bool = True,
        erase: float = 0.0,
    ) -> None:
        if kind not in ("digits", "natural"):
            raise ValueError(f"kind={kind!r} is invalid; expected 'digits' or 'natural'")
        if not 0.0 <= erase <= 1.0:
            raise ValueError(f"erase={erase!r} is invalid; expected a probability in [0, 1]")
        self.erase = erase
        self.spec, self.train, self.kind, self.hflip = spec, train, kind, hflip
        self.rotate_deg, self.scale, self.shift, self.crop_scale = rotate_deg, scale, shift, crop_scale
        self.mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
        self.inv_std = 1.0 / torch.tensor(spec.std).view(1, -1, 1, 1)
        self.randaugment: nn.Module | None = None
        if train and kind == "natural" and randaugment:
            from torchvision.transforms import v2

            self.randaugment = v2.RandAugment(num_ops=2, magnitude=9)
        self.geometry, self.finish = eval_geometry(spec), eval_finish(spec)

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"BatchTransform expects a uint8 (B, C, H, W) batch, got {images.dtype} {tuple(images.shape)}"
            )
        if not self.train:
            return self._eval(images)
        x = images.float().div_(255.0)
        theta = self._digits_theta(len(x), generator) if self.kind == "digits" else self._crop_theta(len(x), generator)
        x = self._warp(x, theta)
        if self.randaugment is not None:
            x = self._randaugment(self.randaugment, x, generator)
        x = convert_channels(x, self.spec.channels)
        x = (x - self.mean) * self.inv_std
        if self.erase > 0:
            x = x * ~self._erase_mask(x, generator)
        return x

    def _eval(self, images: torch.Tensor) -> torch.Tensor:
        """vitzoo.data.eval_transform, a batch at a time. Images already at the model's size (a
        folder's evaluation images, stored through `eval_geometry` from PIL; 28x28 digits for a
        28x28 model) only get its last part, `eval_finish`; photos of another size (e.g. a folder
        loaded without `eval_for`) get its resize and centre crop on the uint8 tensors first.
        Digits of another size are resized whole, as the digit training warp sees them."""
        if tuple(images.shape[2:]) != self.spec.size:
            if self.kind == "natural":
                images = self.geometry(images)
            else:
                height, width = self.spec.size
                mode = "bicubic" if self.spec.interpolation == "bicubic" else "bilinear"
                x = images.float().div_(255.0)
                x = F.interpolate(x, size=(height, width), mode=mode, align_corners=False, antialias=True)
                return self.finish(x.clamp_(0.0, 1.0))
        return self.finish(images)

    def _erase_mask(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(B, 1, H, W) bool: one random rectangle per image chosen with probability `erase`."""
        n, _, height, width = x.shape
        area = self._uniform(n, 0.02, 1 / 3, generator)
        ratio = torch.exp(self._uniform(n, math.log(0.3), math.log(1 / 0.3), generator))
        h = (torch.sqrt(area * ratio) * height).round().clamp(1, height)
        w = (torch.sqrt(area / ratio) * width).round().clamp(1, width)
        top = (torch.rand(n, generator=generator) * (height - h + 1)).floor()
        left = (torch.rand(n, generator=generator) * (width - w + 1)).floor()
        chosen = torch.rand(n, generator=generator) < self.erase
        rows = torch.arange(height).view(1, height, 1)
        cols = torch.arange(width).view(1, 1, width)
        inside = (
            (rows >= top.view(n, 1, 1))
            & (rows < (top + h).view(n, 1, 1))
            & (cols >= left.view(n, 1, 1))
            & (cols < (left + w).view(n, 1, 1))
        )
        return (inside & chosen.view(n, 1, 1)).unsqueeze(1)

    # ----------------------------------------------------------------------------- geometry
    def _warp(self, x: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        """Sample the output grid (model size) through per-image affine maps; zeros outside."""
        grid = F.affine_grid(theta, [len(x), x.shape[1], *self.spec.size], align_corners=False)
        mode = "bicubic" if self.spec.interpolation == "bicubic" else "bilinear"
        out = F.grid_sample(x, grid, mode=mode, padding_mode="zeros", align_corners=False)
        return out.clamp_(0.0, 1.0) if mode == "bicubic" else out  # bicubic overshoots

    def _uniform(self, n: int, low: float, high: float, generator: torch.Generator | None) -> torch.Tensor:
        return torch.rand(n, generator=generator) * (high - low) + low

    def _flip_sign(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        if not self.hflip:
            return torch.ones(n)
        return torch.where(torch.rand(n, generator=generator) < 0.5, -1.0, 1.0)

    def _digits_theta(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """Output -> input coordinate maps (normalised [-1, 1]) of rotate + scale + shift (+ flip)."""
        angle = self._uniform(n, -self.rotate_deg, self.rotate_deg, generator) * (math.pi / 180)
        zoom = self._uniform(n, *self.scale, generator)
        shift = self._uniform(2 * n, -2 * self.shift, 2 * self.shift, generator).view(n, 2)  # [-1,1] spans 2
        flip = self._flip_sign(n, generator)
        cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
        return torch.stack(
            [torch.stack([cos * flip, -sin, shift[:, 0]], 1), torch.stack([sin * flip, cos, shift[:, 1]], 1)], 1
        )

    def _crop_theta(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """Random resized crop: area fraction in crop_scale, aspect ratio in [3/4, 4/3] (log-uniform)."""
        area = self._uniform(n, *self.crop_scale, generator)
        log_ratio = self._uniform(n, math.log(3 / 4), math.log(4 / 3), generator)
        ratio = torch.exp(log_ratio)
        w = torch.sqrt(area * ratio).clamp(max=1.0)  # fractions of the stored square's side
        h = torch.sqrt(area / ratio).clamp(max=1.0)
        cx = (torch.rand(n, generator=generator) * 2 - 1) * (1 - w)
        cy = (torch.rand(n, generator=generator) * 2 - 1) * (1 - h)
        zero = torch.zeros(n)
        flip = self._flip_sign(n, generator)
        return torch.stack([torch.stack([w * flip, zero, cx], 1), torch.stack([zero, h, cy], 1)], 1)

    @staticmethod
    def _randaugment(op: nn.Module, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """torchvision's RandAugment, one image at a time (its ops are batch-wide otherwise).
        It draws from the global RNG, so fork that from our generator to stay deterministic."""
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            as_uint8 = (x * 255).round_().to(torch.uint8)
            out = torch.stack([op(img) for img in as_uint8])
        return out.float().div_(255.0)
