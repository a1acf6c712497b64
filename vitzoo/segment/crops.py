"""The geometry of the segmentation probe: what the backbone sees of an image and of its mask.

Every image is first resized keeping its aspect ratio, its shorter side to `size` (None: its own
size) and both sides to whole patches (`patch_multiple_size`, the resize of vitzoo.dense), its mask
with it (nearest). From there:

* training without augmentation: the windows of `crop` pixels, `stride` apart, that evaluation
  slides over the image (`windows`); each window's features are computed once and cached;
* training with augmentation: the resized pair scaled again by a random factor (scale jitter), a
  random `crop` square cut out (padded with the ignored label where the image is smaller) and
  flipped half the time (`random_crop`);
* evaluation: the windows again (or the whole resized image at once), their logits averaged where
  windows overlap and resized to the mask's own size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torchvision.transforms.v2 import functional as TF

from ..data.masks import IGNORE_INDEX
from ..data.transforms import InputSpec, convert_channels, patch_multiple_size
from ..errors import VitzooError

Window = tuple[int, int, int, int]  # top, left, height, width in pixels


class SegmentSettingsError(VitzooError, ValueError):
    """A setting of the probe (or its RUN folder) that cannot be used; the message names it."""


@dataclass(frozen=True)
class Geometry:
    """Pixels: the window (`crop`, square) and the `stride` between windows, multiples of the
    patch; the shorter side images are resized to (`size`; None keeps theirs)."""

    patch: tuple[int, int]
    crop: int
    stride: int
    size: int | None = None
    interpolation: str = "bilinear"

    def resized(
        self, image: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """uint8 image (3, H, W) (and its mask (H, W)) resized to whole patches (module docstring)."""
        height, width = image.shape[-2:]
        target = patch_multiple_size(height, width, self.size or min(height, width), self.patch)
        return self.scaled(image, mask, target)

    def scaled(
        self, image: torch.Tensor, mask: torch.Tensor | None, target: tuple[int, int]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if tuple(image.shape[-2:]) == target:
            return image, mask
        from PIL import Image

        limit = Image.MAX_IMAGE_PIXELS  # None when the user switched PIL's guard off
        if limit is not None and target[0] * target[1] > limit:
            raise SegmentSettingsError(
                f"size={self.size} would resize a {image.shape[-1]}x{image.shape[-2]} image to {target[1]}x{target[0]} "
                f"pixels, more than PIL's decompression-bomb limit of {limit}; expected a smaller size"
            )
        mode = TF.InterpolationMode(self.interpolation)
        image = TF.resize(image, list(target), interpolation=mode, antialias=True)
        if mask is not None:
            mask = TF.resize(mask[None], list(target), interpolation=TF.InterpolationMode.NEAREST)[0]
        return image, mask


def normalised(image: torch.Tensor, spec: InputSpec) -> torch.Tensor:
    """uint8 RGB (..., 3, H, W) -> the model's float input: [0, 1], its channels, its mean / std."""
    x = convert_channels(image.float() / 255, spec.channels)
    mean = torch.tensor(spec.mean, dtype=x.dtype).view(-1, 1, 1)
    std = torch.tensor(spec.std, dtype=x.dtype).view(-1, 1, 1)
    return (x - mean) / std


def _starts(length: int, window: int, stride: int) -> list[int]:
    """Window starts along one axis, `stride` apart, the last one flush with the end."""
    if length <= window:
        return [0]
    starts = list(range(0, length - window + 1, stride))
    return starts if starts[-1] == length - window else [*starts, length - window]


def windows(height: int, width: int, crop: int, stride: int) -> list[Window]:
    """The windows that tile an image: `crop` squares (cut to the image where it is smaller),
    `stride` apart, the last row and column flush with the border."""
    h, w = min(crop, height), min(crop, width)
    return [(top, left, h, w) for top in _starts(height, h, stride) for left in _starts(width, w, stride)]


def padded(image: torch.Tensor, mask: torch.Tensor, crop: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A float image (C, H, W) and its mask padded at the bottom and right to at least `crop`
    square: zeros (the mean, once normalised) and the ignored label."""
    pad_h, pad_w = max(0, crop - image.shape[-2]), max(0, crop - image.shape[-1])
    if not pad_h and not pad_w:
        return image, mask
    return F.pad(image, (0, pad_w, 0, pad_h)), F.pad(mask, (0, pad_w, 0, pad_h), value=IGNORE_INDEX)


def random_crop(
    geometry: Geometry,
    image: torch.Tensor,
    mask: torch.Tensor,
    scale: tuple[float, float],
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale jitter, a random `crop` square and a random horizontal flip of a uint8 pair already
    `resized`; the image comes back as uint8, padded regions of the mask ignored (see `padded`,
    applied by the caller after normalising)."""
    low, high = scale
    factor = low + (high - low) * float(torch.rand((), generator=generator))
    height, width = image.shape[-2:]
    target = (max(1, round(height * factor)), max(1, round(width * factor)))
    image, scaled_mask = geometry.scaled(image, mask, target)
    assert scaled_mask is not None
    crop = geometry.crop
    top = int(torch.randint(0, max(1, target[0] - crop + 1), (), generator=generator))
    left = int(torch.randint(0, max(1, target[1] - crop + 1), (), generator=generator))
    image = image[:, top : top + crop, left : left + crop]
    scaled_mask = scaled_mask[top : top + crop, left : left + crop]
    if float(torch.rand((), generator=generator)) < 0.5:
        image, scaled_mask = image.flip(-1), scaled_mask.flip(-1)
    return image, scaled_mask
