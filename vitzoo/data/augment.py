"""Batch transforms: uint8 images (B, C, H, W) -> normalised float input of the model.

What the model expects comes from its `pretrained_cfg` (input size, mean/std, interpolation,
crop_pct) and its `in_chans`; the data's channel count is converted to it (grayscale repeated to
RGB, RGB to luminance). Augmentation works on whole batches with per-image random parameters:

* digits (MNIST, Fashion-MNIST): a small random affine (rotation, scale, shift) and/or a
  translation by whole pixels (`pixel_shift`: with no affine the pixels move without blur), plus a
  horizontal flip for Fashion-MNIST where clothes are mirror-symmetric;
* natural images (folders): random resized crop and horizontal flip, then RandAugment; for a
  folder streamed from disk (stream.py) the same recipe runs per image on the full decoded file
  (`ImageAugment`, torchvision v2) in the DataLoader workers, and `finish_train` does the rest;
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
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .tensors import DataKind
from .transforms import InputSpec, convert_channels, eval_finish, eval_geometry

__all__ = ["BatchTransform", "ImageAugment", "InputSpec", "convert_channels"]

CROP_RATIO = (3 / 4, 4 / 3)  # aspect-ratio range of the random resized crop (width / height)


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
        pixel_shift: int = 0,
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
        if pixel_shift < 0:
            raise ValueError(f"pixel_shift={pixel_shift!r} is invalid; expected whole pixels >= 0")
        self.pixel_shift = pixel_shift
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
        if self.kind == "digits":
            theta = self._digits_theta(len(x), generator, (x.shape[2], x.shape[3]))
        else:
            theta = self._crop_theta(len(x), generator)
        x = self._warp(x, theta)
        if self.randaugment is not None:
            x = self._randaugment(self.randaugment, x, generator)
        return self._normalise(x, generator)

    def finish_train(self, images: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The last, batch-wide part of training: uint8 images already cropped, flipped and
        RandAugmented one at a time (`image_augment`, for images streamed from disk) -> the model's
        channels, normalised, randomly erased. Evaluation batches go through `__call__`."""
        if not self.train:
            raise ValueError("finish_train() is the end of the training augmentation; evaluate through __call__")
        # Straight from 0-255 (the channel conversion is linear), in place: this runs in the
        # training process for every batch, while the workers prepare the next ones.
        x = convert_channels(images.float(), self.spec.channels).contiguous()  # gray to RGB is a view: copy it
        x.sub_(self.mean * 255.0).mul_(self.inv_std / 255.0)
        if self.erase > 0:
            x.masked_fill_(self._erase_mask(x, generator), 0.0)
        return x

    def image_augment(self) -> ImageAugment:
        """This transform's natural-image training augmentation, for one full image at a time."""
        if self.kind != "natural":
            raise ValueError(f"image_augment() is the augmentation of photos; this transform is for {self.kind!r}")
        return ImageAugment(
            size=self.spec.size,
            interpolation=self.spec.interpolation,
            crop_scale=self.crop_scale,
            hflip=self.hflip,
            randaugment=self.randaugment is not None,
        )

    def _normalise(self, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """[0, 1] float batch -> the model's channels, normalised, then random erasing."""
        x = convert_channels(x, self.spec.channels).sub(self.mean).mul_(self.inv_std)  # one new tensor, not two
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

    def _digits_theta(self, n: int, generator: torch.Generator | None, size: tuple[int, int]) -> torch.Tensor:
        """Output -> input coordinate maps (normalised [-1, 1]) of rotate + scale + shift (+ flip),
        plus a whole-pixel translation of the (height, width) = `size` input."""
        angle = self._uniform(n, -self.rotate_deg, self.rotate_deg, generator) * (math.pi / 180)
        zoom = self._uniform(n, *self.scale, generator)
        shift = self._uniform(2 * n, -2 * self.shift, 2 * self.shift, generator).view(n, 2)  # [-1,1] spans 2
        flip = self._flip_sign(n, generator)
        if self.pixel_shift:  # drawn last: without it the other draws, and so old runs, are unchanged
            pixels = torch.randint(-self.pixel_shift, self.pixel_shift + 1, (n, 2), generator=generator)
            shift = shift + pixels * torch.tensor([2.0 / size[1], 2.0 / size[0]])
        cos, sin = torch.cos(angle) / zoom, torch.sin(angle) / zoom
        return torch.stack(
            [torch.stack([cos * flip, -sin, shift[:, 0]], 1), torch.stack([sin * flip, cos, shift[:, 1]], 1)], 1
        )

    def _crop_theta(self, n: int, generator: torch.Generator | None) -> torch.Tensor:
        """Random resized crop: area fraction in crop_scale, aspect ratio in [3/4, 4/3] (log-uniform)."""
        area = self._uniform(n, *self.crop_scale, generator)
        log_ratio = self._uniform(n, math.log(CROP_RATIO[0]), math.log(CROP_RATIO[1]), generator)
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


class ImageAugment:
    """The photos' training augmentation of `BatchTransform`, on one whole decoded image: for
    images streamed from disk, which arrive at their own sizes and aspect ratios.

    torchvision v2's RandomResizedCrop (area fraction in `crop_scale`, aspect ratio log-uniform in
    [3/4, 4/3], the same ranges as BatchTransform's crop; here out of the full image rather than a
    stored centre square) straight to the model's size, a horizontal flip, then RandAugment (2
    operations at magnitude 9), all on the PIL image with PIL's filters. Called with a seed: the
    torchvision transforms draw from torch's global RNG, so it is forked and seeded per image,
    which makes an image's augmentation the same whichever worker process prepares it.
    Picklable, for DataLoader workers started with "spawn"."""

    def __init__(
        self,
        *,
        size: tuple[int, int],
        interpolation: str,
        crop_scale: tuple[float, float],
        hflip: bool,
        randaugment: bool,
    ) -> None:
        from torchvision.transforms import v2

        steps: list[nn.Module] = [
            v2.RandomResizedCrop(
                list(size),
                scale=crop_scale,
                ratio=CROP_RATIO,
                interpolation=v2.InterpolationMode(interpolation),
                antialias=True,
            )
        ]
        if hflip:
            steps.append(v2.RandomHorizontalFlip())
        if randaugment:
            steps.append(v2.RandAugment(num_ops=2, magnitude=9))
        self.pipeline = v2.Compose(steps)

    def __call__(self, img: Any, seed: int) -> torch.Tensor:
        """8-bit RGB PIL image -> uint8 (3, H, W) at the model's size."""
        from torchvision.transforms.v2 import functional as TF

        with torch.random.fork_rng(devices=[]):
            # The CPU generator alone: torch.manual_seed would also queue seeds for every GPU
            # (recording a stack trace each time), which costs more than the crop itself.
            torch.default_generator.manual_seed(seed)
            return TF.pil_to_tensor(self.pipeline(img))
