"""The evaluation preprocessing of a model's weights: one transform, used everywhere.

    tf = vitzoo.data.eval_transform(model)          # or a PretrainedCfg
    x = tf(PIL.Image.open("cat.jpg"))               # float32 (C, H, W), normalised
    logits = model(x.unsqueeze(0))

What `model.pretrained_cfg` says (input_size, mean, std, interpolation, crop_pct, crop_mode)
becomes a torchvision v2 pipeline, the same one timm builds for the same config
(`timm.data.create_transform(**timm.data.resolve_model_data_config(model))`):

* "center": resize the shorter side to floor(size / crop_pct), keeping the aspect ratio (for a
  non-square input, the side that covers floor((H, W) / crop_pct), as timm's ResizeKeepRatio),
  then crop the centre (timm, torchvision, DeiT);
* "squash": resize to exactly floor(H / crop_pct) x floor(W / crop_pct), aspect ratio lost, then
  crop the centre (with crop_pct 1.0 that is exactly (H, W): transformers' ViTImageProcessor);
* then uint8 -> float in [0, 1], the image's channels converted to the model's (gray repeated to
  RGB, RGB to ITU-R 601 luma, in float) and normalised with the weights' mean / std.

A PIL image of any mode is read as 8-bit RGB first (16-bit scaled with `as_8bit`, alpha dropped);
grayscale stays one channel for a one-channel model. Resizing a PIL image uses PIL's filters,
exactly as timm and torchvision do for PIL input; a uint8 (or [0, 1] float) tensor (C, H, W) or
batch (B, C, H, W) takes torchvision's tensor resize (antialiased), which differs from PIL's by a
few 1/255 steps.

Dense features (vitzoo.dense) keep the aspect ratio instead: `dense_transform` resizes the shorter
side to a given size and both sides to whole patches, with no crop.

`vitzoo predict`, `vitzoo eval` / fine-tuning's evaluation (vitzoo.data stores a folder's evaluation
images through `eval_geometry` and `BatchTransform` finishes them with `eval_finish`) and the
pictures (vitzoo.viz.prepare_image) all use these functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

from ..pretrained_cfg import PretrainedCfg, pretrained_cfg_of

# ITU-R 601 luma weights, the usual RGB -> grayscale conversion (PIL's "L" mode uses them too).
_LUMA = (0.299, 0.587, 0.114)
_GRAY_MODES = ("1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "I;16S", "F")
_PREMULTIPLIED = {"La": "LA", "RGBa": "RGBA"}  # premultiplied alpha -> the same with straight alpha


@dataclass(frozen=True, kw_only=True)
class InputSpec:
    """What a model expects of its input, read from its pretrained_cfg (and its config)."""

    channels: int
    size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    interpolation: str = "bilinear"  # any of pretrained_cfg.INTERPOLATIONS
    crop_pct: float = 1.0
    crop_mode: str = "center"  # "center" or "squash", see pretrained_cfg.CROP_MODES

    @classmethod
    def from_model(cls, model: nn.Module) -> InputSpec:
        cfg = pretrained_cfg_of(model) or PretrainedCfg()
        spec = cls.from_cfg(cfg)
        config = getattr(model, "config", None)
        if config is None:
            return spec
        # The built model is the truth when cfg and config disagree (another img_size or in_chans).
        img = config.img_size
        height, width = (img, img) if isinstance(img, int) else tuple(img)
        return cls.from_cfg(cfg.replace(input_size=(config.in_chans, height, width)))

    @classmethod
    def from_cfg(cls, cfg: PretrainedCfg) -> InputSpec:
        channels, height, width = cfg.input_size
        mean, std = tuple(cfg.mean), tuple(cfg.std)
        if len(mean) != channels:  # e.g. an RGB model's statistics for a 1-channel variant
            mean, std = _fit_stats(mean, channels), _fit_stats(std, channels)
        return cls(
            channels=channels,
            size=(height, width),
            mean=mean,
            std=std,
            interpolation=cfg.interpolation,
            crop_pct=cfg.crop_pct,
            crop_mode=cfg.crop_mode,
        )

    @classmethod
    def of(cls, model_or_cfg: nn.Module | PretrainedCfg | InputSpec) -> InputSpec:
        if isinstance(model_or_cfg, InputSpec):
            return model_or_cfg
        if isinstance(model_or_cfg, PretrainedCfg):
            return cls.from_cfg(model_or_cfg)
        if isinstance(model_or_cfg, nn.Module):
            return cls.from_model(model_or_cfg)
        raise TypeError(f"expected a model, a PretrainedCfg or an InputSpec, got {type(model_or_cfg).__name__}")


def _fit_stats(values: tuple[float, ...], channels: int) -> tuple[float, ...]:
    average = sum(values) / len(values)
    return (average,) * channels


def convert_channels(x: torch.Tensor, channels: int) -> torch.Tensor:
    """(..., C, H, W) float -> (..., channels, H, W): gray repeated to RGB, RGB to luma."""
    have = x.shape[-3]
    if have == channels:
        return x
    if have == 1:
        return x.expand(*x.shape[:-3], channels, *x.shape[-2:])
    if have == 3 and channels == 1:
        weights = torch.tensor(_LUMA, dtype=x.dtype, device=x.device).view(3, 1, 1)
        return (x * weights).sum(dim=-3, keepdim=True)
    raise ValueError(f"cannot convert {have}-channel images to the model's {channels} channels")


# ------------------------------------------------------------------------------------ steps
def as_8bit(img: Any) -> Any:
    """A PIL image with more than 8 bits per sample as an 8-bit one ("L"), scaled rather than
    clipped: PIL's own convert() clips 16-bit grayscale at 255, so mid-grey 32768 would become white.
    "I" (32-bit integer; how older Pillow opens 16-bit PNGs) is read as 16-bit. 16-bit RGB(A) PNGs
    are already reduced to 8 bits by PIL when opened. 32-bit float ("F", e.g. a float TIFF) holds
    intensities in 0..1, scaled to 0..255 (PIL's convert() would truncate them to 0 and 1: a black
    image); values outside 0..1 or not finite are refused with a ValueError naming the mode.
    Other images are returned unchanged."""
    if img.mode == "F":
        return _float_as_8bit(img)
    if not img.mode.startswith("I"):
        return img
    import numpy as np
    from PIL import Image

    values = np.asarray(img)
    if values.dtype.kind != "u":  # signed ("I", "I;16S"): negatives are black, above 16 bits white
        values = np.clip(values, 0, 65535)
    return Image.fromarray((values >> 8).astype(np.uint8), "L")


def _float_as_8bit(img: Any) -> Any:
    import numpy as np
    from PIL import Image

    values = np.asarray(img, dtype=np.float64)
    finite = bool(np.isfinite(values).all())
    if not finite or (values.size and (values.min() < 0 or values.max() > 1)):
        found = "values that are not finite" if not finite else f"values from {values.min():g} to {values.max():g}"
        raise ValueError(f"32-bit float image (mode F) with {found}; expected intensities in 0..1")
    return Image.fromarray(np.rint(values * 255).astype(np.uint8), "L")


class ReadAs8Bit(v2.Transform):
    """A PIL image of any mode -> 8-bit "RGB" (or "L": grayscale for a one-channel model).
    16-bit images are scaled (vitzoo.data.folder.as_8bit), alpha is dropped. Tensors pass."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(self, *inputs: Any) -> Any:
        (img,) = inputs  # one image (PIL or tensor) or batch
        if not hasattr(img, "convert"):  # a tensor: already pixels
            return img
        gray = img.mode in _GRAY_MODES
        img = as_8bit(img)
        if img.mode in _PREMULTIPLIED:  # PIL converts these only through their straight-alpha mode
            img = img.convert(_PREMULTIPLIED[img.mode])
        mode = "L" if gray and self.channels == 1 else "RGB"
        try:
            return img if img.mode == mode else img.convert(mode)
        except ValueError as err:
            raise ValueError(
                f"PIL image mode {img.mode!r} cannot be converted to {mode!r} ({err}); expected an image mode "
                "PIL converts, such as RGB, RGBA, L, LA, P, CMYK or I;16"
            ) from err


class ResizeCovering(v2.Transform):
    """Resize keeping the aspect ratio so that the image covers `size` (H, W) with the smaller
    scale: timm's ResizeKeepRatio (longest=0), which "center" mode uses for non-square inputs."""

    def __init__(self, size: tuple[int, int], interpolation: v2.InterpolationMode) -> None:
        super().__init__()
        self.size, self.interpolation = size, interpolation

    def forward(self, *inputs: Any) -> Any:
        (img,) = inputs  # one image (PIL or tensor) or batch
        height, width = TF.get_size(img)
        ratio = min(height / self.size[0], width / self.size[1])
        target = [round(height / ratio), round(width / ratio)]
        return v2.Resize(target, interpolation=self.interpolation, antialias=True)(img)


class ConvertChannels(v2.Transform):
    """Float image(s) (..., C, H, W) -> the model's channel count (`convert_channels`)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.channels = channels

    def forward(self, *inputs: Any) -> Any:
        (img,) = inputs  # one image (PIL or tensor) or batch
        return convert_channels(img.as_subclass(torch.Tensor), self.channels)  # a plain tensor out


def _interpolation(name: str) -> v2.InterpolationMode:
    return v2.InterpolationMode(name)  # the names of pretrained_cfg.INTERPOLATIONS are its values


def eval_geometry(model_or_cfg: nn.Module | PretrainedCfg | InputSpec) -> v2.Transform:
    """The resize and centre crop of the evaluation preprocessing: image -> image of the model's
    (H, W), same type (PIL stays PIL and uint8 stays uint8). See the module docstring."""
    spec = InputSpec.of(model_or_cfg)
    height, width = spec.size
    scale = (math.floor(height / spec.crop_pct), math.floor(width / spec.crop_pct))
    interpolation = _interpolation(spec.interpolation)
    if spec.crop_mode == "squash":
        resize: v2.Transform = v2.Resize(scale, interpolation=interpolation, antialias=True)
    elif spec.crop_mode == "center":
        if scale[0] == scale[1]:  # the shorter side to `scale`
            resize = v2.Resize(scale[0], interpolation=interpolation, antialias=True)
        else:
            resize = ResizeCovering(scale, interpolation)
    else:
        raise ValueError(f"crop_mode={spec.crop_mode!r} is invalid; expected 'center' or 'squash'")
    return v2.Compose([resize, v2.CenterCrop((height, width))])


def eval_finish(model_or_cfg: nn.Module | PretrainedCfg | InputSpec, *, normalize: bool = True) -> v2.Transform:
    """The rest of the evaluation preprocessing, after `eval_geometry`: uint8 image(s) (PIL or
    (..., C, H, W) tensor) -> float32 in [0, 1], the model's channels, normalised."""
    spec = InputSpec.of(model_or_cfg)
    steps: list[Any] = [v2.ToImage(), v2.ToDtype(torch.float32, scale=True), ConvertChannels(spec.channels)]
    if normalize:
        steps.append(v2.Normalize(mean=list(spec.mean), std=list(spec.std)))
    return v2.Compose(steps)


def eval_transform(model_or_cfg: nn.Module | PretrainedCfg | InputSpec, *, normalize: bool = True) -> v2.Transform:
    """The evaluation preprocessing of a model's weights, like torchvision's `weights.transforms()`:
    a PIL image (any mode) or a uint8 tensor (C, H, W) -> normalised float32 (C, H, W) for the
    model (its `pretrained_cfg`, its config's in_chans and img_size). `normalize=False` stops
    before the mean / std: the [0, 1] image the model sees, for showing it."""
    spec = InputSpec.of(model_or_cfg)
    return v2.Compose([ReadAs8Bit(spec.channels), eval_geometry(spec), eval_finish(spec, normalize=normalize)])


# ------------------------------------------------------------------------------ dense features
def patch_multiple_size(height: int, width: int, short_side: int, patch_size: tuple[int, int]) -> tuple[int, int]:
    """(H, W) for an image of (height, width) keeping its aspect ratio: the shorter side scaled to
    `short_side`, then each side rounded to the nearest multiple of its patch (at least one patch)."""
    scale = short_side / min(height, width)
    ph, pw = patch_size
    return max(ph, round(height * scale / ph) * ph), max(pw, round(width * scale / pw) * pw)


class ResizeToPatches(v2.Transform):
    """Resize keeping the aspect ratio to whole patches (`patch_multiple_size`), no crop. A size
    beyond PIL's decompression-bomb limit (an extreme aspect ratio) is refused before resizing."""

    def __init__(self, short_side: int, patch_size: tuple[int, int], interpolation: v2.InterpolationMode) -> None:
        super().__init__()
        self.short_side, self.patch_size, self.interpolation = short_side, patch_size, interpolation

    def forward(self, *inputs: Any) -> Any:
        (img,) = inputs  # one image (PIL or tensor) or batch
        from PIL import Image

        height, width = TF.get_size(img)
        target = patch_multiple_size(height, width, self.short_side, self.patch_size)
        limit = Image.MAX_IMAGE_PIXELS  # None when the user switched PIL's guard off
        if limit is not None and target[0] * target[1] > limit:
            raise ValueError(
                f"short_side={self.short_side} would resize this {width}x{height} image to {target[1]}x{target[0]} "
                f"pixels, more than PIL's decompression-bomb limit of {limit} (PIL.Image.MAX_IMAGE_PIXELS); "
                "expected a smaller short_side or a less elongated image"
            )
        return v2.Resize(list(target), interpolation=self.interpolation, antialias=True)(img)


def dense_transform(
    model_or_cfg: nn.Module | PretrainedCfg | InputSpec,
    short_side: int,
    patch_size: tuple[int, int],
    *,
    normalize: bool = True,
) -> v2.Transform:
    """The preprocessing of dense features: a PIL image (any mode) or a uint8 tensor (C, H, W) ->
    float32 (C, H, W), its aspect ratio kept and its sides whole patches (`ResizeToPatches`, with
    the weights' interpolation), the model's channels, normalised with the weights' mean / std."""
    spec = InputSpec.of(model_or_cfg)
    resize = ResizeToPatches(short_side, patch_size, _interpolation(spec.interpolation))
    return v2.Compose([ReadAs8Bit(spec.channels), resize, eval_finish(spec, normalize=normalize)])
