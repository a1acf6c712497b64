"""Patch embedding: cut the image into non-overlapping patches and project each one to `embed_dim`.

Two formulations of the same linear map:

* `PatchEmbed` uses a Conv2d whose kernel and stride both equal the patch size. Each output
  position sees exactly one patch, so the convolution *is* a Linear layer applied per patch,
  and it is the fast path (one cuDNN/oneDNN call, no copy of the patches).
* `unfold_linear_patch_embed` is the tutorial form: `F.unfold` flattens every patch into a vector
  of C * ph * pw values (channel-major, then rows, then columns) and an `nn.Linear` projects it.
  With the conv weight reshaped to (D, C * ph * pw) the two give the same output
  (tests/layers/test_patch_embed.py proves it).

The hybrid variant (`conv_stem=(c1, c2, ...)`) follows "Early Convolutions Help Transformers See
Better" (Xiao et al., 2021) and the ViT paper's hybrid models: instead of one cut into patches,
a stack of 3x3 stride-2 convolutions (BatchNorm, ReLU) halves the image once per entry, and a final
3x3 stride-2 convolution projects to `embed_dim`. Each token then covers a cell of
`patch_size = 2 ** (len(conv_stem) + 1)` pixels, seen through overlapping, translation-equivariant
filters rather than one linear map of its own pixels: on small images trained from scratch that
is worth more accuracy per second than more tokens (benchmarks/accuracy.py).

`norm` normalises each patch token right after the projection, before positions are added
(AIMv2: RMSNorm; timm's `patch_embed.norm`); without one it is an nn.Identity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .helpers import to_2tuple


class PatchEmbed(nn.Module):
    """(B, C, H, W) image -> (B, N, D) patch tokens, N = (H / ph) * (W / pw), row-major order.

    The input must be `img_size`; with `strict_img_size=False` any height and width that are
    multiples of the patch (any size with a stem) pass, for models that adapt their position
    embedding per call (`ViTConfig.dynamic_img_size`)."""

    def __init__(
        self,
        *,
        img_size: int | tuple[int, int] = 224,
        patch_size: int | tuple[int, int] = 16,
        in_chans: int = 3,
        embed_dim: int = 768,
        conv_stem: tuple[int, ...] = (),
        bias: bool = True,
        strict_img_size: bool = True,
        drop_remainder: bool = False,
        norm: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.patch_size = to_2tuple(patch_size, "patch_size")
        self.in_chans = in_chans
        self.conv_stem = tuple(conv_stem)
        # False: any height and width that are multiples of the patch size (any size with a stem)
        self.strict_img_size = strict_img_size
        # True: pixels past the last whole patch are ignored (the strided conv never reaches them)
        self.drop_remainder = drop_remainder and not conv_stem
        self.set_input_size(img_size)
        if self.conv_stem:
            self.stem: nn.Sequential | None = conv_stem_layers(in_chans, self.conv_stem)
            self.proj = nn.Conv2d(self.conv_stem[-1], embed_dim, kernel_size=3, stride=2, padding=1, bias=bias)
        else:
            self.stem = None
            self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=self.patch_size, stride=self.patch_size, bias=bias)
        # A norm of each token after the projection (timm's `embed_norm_layer`, AIMv2's RMSNorm).
        self.norm = norm if norm is not None else nn.Identity()

    def set_input_size(self, img_size: int | tuple[int, int]) -> None:
        """Set the image size this embedding expects (and its grid); the weights do not depend on it."""
        img_size = to_2tuple(img_size, "img_size")
        if self.conv_stem:
            check_conv_stem(self.conv_stem, self.patch_size, img_size)
        else:
            for axis, size, patch in zip(("height", "width"), img_size, self.patch_size):
                if size <= 0 or patch <= 0 or size < patch or (size % patch and not self.drop_remainder):
                    raise ValueError(
                        f"img_size {img_size} is not divisible by patch_size {self.patch_size} "
                        f"({axis}: {size} % {patch} = {size % patch if patch > 0 else 'n/a'}); "
                        "expected positive sizes with img_size a multiple of patch_size"
                    )
        self.img_size = img_size
        self.grid_size = self.dynamic_feat_size(img_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]

    def dynamic_feat_size(self, img_size: tuple[int, int] | torch.Size) -> tuple[int, int]:
        """The (rows, columns) grid of tokens for an image of `img_size` = (height, width): whole
        patches without a stem (exact division unless `drop_remainder`); rounded up with one (a
        3x3 stride-2 conv with padding 1 maps n pixels to ceil(n / 2))."""
        (h, w), (ph, pw) = img_size, self.patch_size
        if not self.conv_stem:
            return (h // ph, w // pw)
        return (-(-h // ph), -(-w // pw))  # ceil in integers: no float in a traced graph

    def check_input(self, x: torch.Tensor) -> None:
        """Raise a ValueError naming expected and given shape when `x` does not fit this model."""
        self._check(x)

    def _check(self, x: torch.Tensor) -> torch.Tensor:
        stem = self.stem is not None
        return check_image(
            x, self.in_chans, self.img_size, self.patch_size, self.strict_img_size, stem, self.drop_remainder
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._check(x)  # the checked image: a traced graph keeps the check on the data path
        # Convolve in channels-last (NHWC) memory: oneDNN and cuDNN keep that layout through the
        # stem, and the projection's NHWC output, (B, gh, gw, D) in memory, *is* the (B, N, D)
        # token matrix, so the flatten + transpose below is a free view of contiguous tokens.
        # From NCHW it would be a strided view, and without a class token (whose concatenation
        # copies) every residual add and LayerNorm of the encoder would then work on transposed
        # memory, which costs vit_mnist's training measurably (docs/measurements.md). Same values
        # up to float rounding.
        x = x.to(memory_format=torch.channels_last)
        if self.stem is not None:
            x = self.stem(x)  # (B, c_last, H / 2^n, W / 2^n), rounded up
        x = self.proj(x)  # (B, D, gh, gw)
        return self.norm(x.flatten(2).transpose(1, 2))  # (B, N, D), patches in row-major order

    def as_linear(self) -> nn.Linear:
        """The same projection as an nn.Linear over flattened patches (sharing no storage)."""
        if self.stem is not None:
            raise ValueError(
                f"this patch embedding has a convolutional stem (conv_stem={self.conv_stem}): its tokens are not "
                "a linear map of the image's patches, so there is no equivalent nn.Linear"
            )
        d, c, ph, pw = self.proj.weight.shape
        linear = nn.Linear(c * ph * pw, d, bias=self.proj.bias is not None)
        with torch.no_grad():
            linear.weight.copy_(self.proj.weight.reshape(d, c * ph * pw))
            if self.proj.bias is not None:
                linear.bias.copy_(self.proj.bias)
        return linear


def check_conv_stem(conv_stem: tuple[int, ...], patch_size: tuple[int, int], img_size: tuple[int, int]) -> None:
    """Raise a ValueError unless `conv_stem` is a valid stem for this patch and image size."""
    if any(not isinstance(c, int) or c <= 0 for c in conv_stem):
        raise ValueError(f"conv_stem={conv_stem!r} is invalid; expected a tuple of positive channel counts")
    stride = 2 ** (len(conv_stem) + 1)
    if patch_size != (stride, stride):
        raise ValueError(
            f"conv_stem={conv_stem!r} has {len(conv_stem)} stride-2 stage(s) plus the stride-2 projection, so each "
            f"token covers {stride}x{stride} pixels; expected patch_size={stride}, got {patch_size}"
        )
    if min(img_size) <= 0:
        raise ValueError(f"img_size {img_size} is invalid; expected positive sizes")


def conv_stem_layers(in_chans: int, channels: tuple[int, ...]) -> nn.Sequential:
    """[Conv3x3 stride 2 (no bias: BatchNorm adds one), BatchNorm, ReLU] per entry of `channels`,
    as one flat Sequential (state-dict keys stem.0, stem.1, stem.3, ...)."""
    layers: list[nn.Module] = []
    for c_in, c_out in zip((in_chans, *channels), channels):
        layers += [
            nn.Conv2d(c_in, c_out, kernel_size=3, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(c_out),
            nn.ReLU(inplace=True),
        ]
    return nn.Sequential(*layers)


def patchify(x: torch.Tensor, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """(B, C, H, W) -> (B, N, C * ph * pw): every patch flattened channel-major, patches row-major."""
    ph, pw = to_2tuple(patch_size, "patch_size")
    if x.ndim != 4 or x.shape[-2] % ph or x.shape[-1] % pw:
        raise ValueError(f"patchify expects (B, C, H, W) with H % {ph} == 0 and W % {pw} == 0, got {tuple(x.shape)}")
    return F.unfold(x, kernel_size=(ph, pw), stride=(ph, pw)).transpose(1, 2)


def unfold_linear_patch_embed(x: torch.Tensor, linear: nn.Linear, patch_size: int | tuple[int, int]) -> torch.Tensor:
    """The tutorial formulation: flatten patches with unfold, then project them with a Linear."""
    return linear(patchify(x, patch_size))


def check_image(
    x: torch.Tensor,
    in_chans: int,
    img_size: tuple[int, int],
    patch_size: tuple[int, int],
    strict: bool,
    stem: bool,
    remainder: bool = False,
) -> torch.Tensor:
    """`x`, after raising a ValueError naming expected and given shape when image batch `x` does not
    fit: exactly (B, in_chans, *img_size) when `strict`, else any height and width that are
    multiples of the patch (any positive size with a stem, at least one patch with `remainder`). A
    leaf of torch.fx graphs (see `torch.fx.wrap` below): tracing records the call instead of
    branching on a symbolic shape, and the traced model checks its real input as the eager one does.
    The image flows through the call, so graph passes that drop nodes whose result is unused
    (torchvision's feature extractor) keep the check."""
    if strict:
        expected = (in_chans, *img_size)
        if x.ndim != 4 or tuple(x.shape[1:]) != expected:
            raise ValueError(
                f"input image has shape {tuple(x.shape)}, expected (batch, {expected[0]}, "
                f"{expected[1]}, {expected[2]}) = (B, in_chans, height, width) for this model; "
                "resize the image or create the model with matching img_size / in_chans"
            )
        return x
    ph, pw = patch_size
    if (
        x.ndim != 4
        or x.shape[1] != in_chans
        or min(x.shape[2:]) <= 0
        or (remainder and (x.shape[2] < ph or x.shape[3] < pw))
        or (not stem and not remainder and (x.shape[2] % ph or x.shape[3] % pw))
    ):
        sides = "positive height and width" if stem else f"height a multiple of {ph} and width a multiple of {pw}"
        if remainder:
            sides = f"height at least {ph} and width at least {pw}"
        raise ValueError(
            f"input image has shape {tuple(x.shape)}, expected (batch, {in_chans}, height, width) with "
            f"{sides} for this model (dynamic_img_size=True); pad or resize the image"
        )
    return x


torch.fx.wrap("check_image")
