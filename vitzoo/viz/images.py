"""Images for the pictures: read a file (or draw a synthetic test card) and prepare it the way the
model's weights expect (vitzoo.data.eval_transform: the same tensor `vitzoo predict` feeds it).

Two versions of an image travel together: the *display* image, (C, H, W) in [0, 1] at the model's
input size, which the pictures show, and the *input*, the display image normalised with the
model's mean / std with a batch dimension, which the model sees.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from ..layers import to_2tuple

T = TypeVar("T")


def read_image(path: str | os.PathLike[str], *, channels: int = 3) -> torch.Tensor:
    """Read an image file into a (channels, H, W) float tensor in [0, 1] (1 channel: grayscale)."""
    if channels not in (1, 3):
        raise ValueError(f"channels={channels} is not supported; expected 1 (grayscale) or 3 (RGB)")
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file '{path}' does not exist (or is not a file)")

    def to_tensor(img: Any) -> torch.Tensor:  # img is 8-bit already (16-bit scaled, not clipped)
        img = img.convert("L" if channels == 1 else "RGB")
        data = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8)
        width, height = img.size
        return data.reshape(height, width, channels).permute(2, 0, 1).float() / 255.0

    return _read(path, to_tensor)


def synthetic_image(size: int | tuple[int, int] = 224, *, channels: int = 3) -> torch.Tensor:
    """A deterministic test card, (channels, H, W) in [0, 1]: a soft gradient background, a bright
    disc on the upper left and a dark square on the lower right, so patch borders, position and
    attention have something to show without any image file."""
    h, w = to_2tuple(size, "size")
    y = torch.linspace(0, 1, h).unsqueeze(1).expand(h, w)
    x = torch.linspace(0, 1, w).unsqueeze(0).expand(h, w)
    background = 0.25 + 0.2 * x + 0.1 * y
    disc = ((x - 0.33) ** 2 + (y - 0.35) ** 2) < 0.2**2
    square = (x > 0.58) & (x < 0.85) & (y > 0.55) & (y < 0.82)
    gray = torch.where(disc, torch.full_like(x, 0.95), background)
    gray = torch.where(square, torch.full_like(x, 0.05), gray)
    if channels == 1:
        return gray.unsqueeze(0).contiguous()
    if channels != 3:
        raise ValueError(f"channels={channels} is not supported; expected 1 (grayscale) or 3 (RGB)")
    red = torch.where(disc, torch.full_like(x, 0.95), gray)
    green = torch.where(disc, torch.full_like(x, 0.55), gray * 0.9)
    blue = torch.where(square, torch.full_like(x, 0.45), gray)
    return torch.stack([red, green, blue]).clamp(0, 1)


def model_input_size(model: nn.Module) -> tuple[int, int, int]:
    """(C, H, W) a vitzoo model expects, from its config (or its patch embedding)."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "img_size"):
        return (config.in_chans, *to_2tuple(config.img_size))
    patch_embed = getattr(model, "patch_embed", None)
    if patch_embed is not None:
        return (patch_embed.in_chans, *patch_embed.img_size)
    raise ValueError(f"{type(model).__name__} is not a vitzoo VisionTransformer: it has no config or patch_embed")


def open_image(path: str | os.PathLike[str]) -> Any:
    """A PIL image, fully decoded; a clear error for a missing or unreadable file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"image file '{path}' does not exist (or is not a file)")
    return _read(path, lambda img: img.copy())


def _read(path: str | os.PathLike[str], decode: Callable[[Any], T]) -> T:
    """`decode` of the image file, read by the data pipeline's reader (vitzoo.data.folder.decode_image:
    8-bit, decompression-bomb guard); ValueError naming the file when it cannot be read."""
    from ..data.folder import UnreadableImageError, decode_image

    try:
        return decode_image(path, decode, rgb=False)
    except UnreadableImageError as err:
        raise ValueError(
            f"cannot read image '{path}': {err}; expected an image file Pillow can decode (PNG, JPEG, BMP, ...)"
        ) from err


def prepare_image(
    model: nn.Module, image: str | os.PathLike[str] | torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(display image, model input) for `model` from a path, a (C, H, W) tensor in [0, 1], or
    None (the synthetic test card, drawn at the input size). A file or tensor goes through
    vitzoo.data.eval_transform, the preprocessing of the model's weights (`vitzoo predict` and
    `vitzoo eval` use it too): the display image is its output before normalising, the input that
    normalised, (1, C, H, W) on the model's device and dtype."""
    from ..data.transforms import eval_finish, eval_transform

    c, h, w = model_input_size(model)
    if image is None:
        display = synthetic_image((h, w), channels=c)
    elif isinstance(image, torch.Tensor):
        if image.ndim != 3 or image.shape[0] != c:
            raise ValueError(
                f"image tensor has shape {tuple(image.shape)}; expected ({c}, H, W) with values in [0, 1] for this model"
            )
        # torchvision's tensor resize: bicubic can overshoot [0, 1] on a float tensor
        display = eval_transform(model, normalize=False)(image.float()).clamp(0, 1)
    else:
        display = eval_transform(model, normalize=False)(open_image(image))
    x = eval_finish(model)(display).unsqueeze(0)  # on [0, 1] floats only the mean / std act
    param = next(model.parameters(), None)
    if param is not None:
        x = x.to(device=param.device, dtype=param.dtype)
    return display, x
