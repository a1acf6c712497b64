"""Batch transforms: uint8 images (B, C, H, W) -> normalised float input of the model.

What the model expects comes from its `pretrained_cfg` (input size, mean/std, interpolation,
crop_pct) and its `in_chans`; the data's channel count is converted to it (grayscale repeated to
RGB, RGB to luminance). Augmentation works on whole batches with per-image random parameters:

* digits (MNIST, Fashion-MNIST): a small random affine (rotation, scale, shift), plus a
  horizontal flip for Fashion-MNIST where clothes are mirror-symmetric;
* natural images (folders): random resized crop and horizontal flip, then RandAugment;
* optionally random erasing (Zhong et al., 2020), any data: with probability `erase` an image
  gets one rectangle (2-33% of its area, aspect 0.3-3.3) set to the mean (0 after normalising).

Every geometric change and the resize to the model's input size are one `affine_grid` +
`grid_sample` call for the batch: one interpolation, no per-image Python loop on the digits path.
All randomness comes from the `torch.Generator` passed in, so a batch is a pure function of
(seed, epoch, step) and a resumed run sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..pretrained_cfg import PretrainedCfg, pretrained_cfg_of
from .tensors import DataKind

# ITU-R 601 luma weights, the usual RGB -> grayscale conversion (PIL's "L" mode uses them too).
_LUMA = (0.299, 0.587, 0.114)


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """What a model expects of its input, read from its pretrained_cfg."""

    channels: int
    size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str = "bilinear"
    crop_pct: float = 1.0

    @classmethod
    def from_model(cls, model: nn.Module) -> InputSpec:
        cfg = pretrained_cfg_of(model) or PretrainedCfg()
        channels, height, width = cfg.input_size
        config = getattr(model, "config", None)
        if config is not None:  # the built model is the truth when cfg and config disagree
            channels = config.in_chans
            img = config.img_size
            height, width = (img, img) if isinstance(img, int) else tuple(img)
        mean, std = tuple(cfg.mean), tuple(cfg.std)
        if len(mean) != channels:  # e.g. an RGB model's statistics for a 1-channel variant
            mean, std = _fit_stats(mean, channels), _fit_stats(std, channels)
        interpolation = cfg.interpolation if cfg.interpolation in ("bilinear", "bicubic", "nearest") else "bilinear"
        return cls(
            channels=channels,
            size=(height, width),
            mean=mean,
            std=std,
            interpolation=interpolation,
            crop_pct=cfg.crop_pct,
        )


def _fit_stats(values: tuple[float, ...], channels: int) -> tuple[float, ...]:
    average = sum(values) / len(values)
    return (average,) * channels


def convert_channels(x: torch.Tensor, channels: int) -> torch.Tensor:
    """(B, C, H, W) float -> (B, channels, H, W): gray repeated to RGB, RGB to luma."""
    have = x.shape[1]
    if have == channels:
        return x
    if have == 1:
        return x.expand(-1, channels, -1, -1)
    if have == 3 and channels == 1:
        weights = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
        return (x * weights).sum(dim=1, keepdim=True)
    raise ValueError(f"cannot convert {have}-channel images to the model's {channels} channels")


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

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(
                f"BatchTransform expects a uint8 (B, C, H, W) batch, got {images.dtype} {tuple(images.shape)}"
            )
        x = images.float().div_(255.0)
        if self.train:
            theta = (
                self._digits_theta(len(x), generator) if self.kind == "digits" else self._crop_theta(len(x), generator)
            )
            x = self._warp(x, theta)
            if self.randaugment is not None:
                x = self._randaugment(self.randaugment, x, generator)
        else:
            x = self._eval_resize(x)
        x = convert_channels(x, self.spec.channels)
        x = (x - self.mean) * self.inv_std
        if self.train and self.erase > 0:
            x = x * ~self._erase_mask(x, generator)
        return x

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

    def _eval_resize(self, x: torch.Tensor) -> torch.Tensor:
        """Centre crop of crop_pct (folders are stored at size / crop_pct), then resize if needed."""
        height, width = self.spec.size
        if self.kind == "natural":  # the stored square is size / crop_pct: its centre is the crop
            crop_h, crop_w = min(x.shape[2], height), min(x.shape[3], width)
            top, left = (x.shape[2] - crop_h) // 2, (x.shape[3] - crop_w) // 2
            x = x[:, :, top : top + crop_h, left : left + crop_w]
        if tuple(x.shape[2:]) != (height, width):
            mode = "bicubic" if self.spec.interpolation == "bicubic" else "bilinear"
            x = F.interpolate(x, size=(height, width), mode=mode, align_corners=False, antialias=True).clamp_(0.0, 1.0)
        return x

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
