"""The ResNet (BiT) stem of the hybrid ViTs: "An Image is Worth 16x16 Words" (Dosovitskiy et al., 2021),
section 3.1, and the AugReg hybrids of "How to train your ViT?" (Steiner et al., 2022).

Instead of cutting the image into patches, a ResNet computes a feature map and the transformer's
tokens are its cells (or patches of it). The ResNet is Big Transfer's (Kolesnikov et al., 2020):

    root    = MaxPool3x3/2(ReLU(GroupNorm(StdConv7x7/2(image))))       64 channels, stride 4
    stage i = Bottleneck x layers[i]                                   256, 512, 1024, 2048 channels
    Bottleneck(x) = ReLU(x' + GN(StdConv1x1(ReLU(GN(StdConv3x3/s(ReLU(GN(StdConv1x1(x)))))))))
            x' = GN(StdConv1x1/s(x)) in a stage's first block (the projection shortcut), else x

Stage 0 keeps the stride, every later stage halves the map with the 3x3 conv of its first block,
so `layers` of n > 0 stages reach stride 4 * 2 ** (n - 1) (R50's three stages: 16; R26's four: 32).
The blocks are post-activation (ResNet v1.5: the stride on the 3x3 conv), as the hybrids use them
(timm's `Bottleneck`, `preact=False`), with GroupNorm of 32 groups (eps 1e-5) after every conv.

Every convolution is weight-standardised (Qiao et al., 2019): each filter's weights are shifted
to zero mean and scaled to unit variance (biased, eps 1e-8) before convolving, and pads as
TensorFlow's "SAME" does. This module takes inputs whose sides are multiples of the stem's
stride (the model checks it), where "SAME" is a fixed padding: k - s pixels per axis, the
smaller half before (timm's `StdConv2dSame` and `MaxPool2dSame` compute the same there; the max
pool pads with -inf). Parameter names are timm's (`stem.conv`, `stem.norm`,
`stages.i.blocks.j.{conv1..3, norm1..3, downsample.conv, downsample.norm}`; a stem without stages
is the root alone: `conv`, `norm`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ROOT_CHANNELS = 64
STAGE_CHANNELS = (256, 512, 1024, 2048)
GROUPS = 32  # GroupNorm's groups
NORM_EPS = 1e-5
STD_EPS = 1e-8  # the weight standardisation's


def same_padding(kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "SAME" padding (before, after) of one axis whose size is a multiple of `stride`."""
    total = max(kernel - stride, 0)
    return total // 2, total - total // 2


class StdConv2d(nn.Conv2d):
    """A bias-free square Conv2d with weight standardisation and "SAME" padding (see the module docstring)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__(c_in, c_out, kernel, stride=stride, bias=False)
        before, after = same_padding(kernel, stride)
        self.pad = (before, after, before, after)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        flat = w.reshape(w.shape[0], -1)
        var, mean = torch.var_mean(flat, dim=1, unbiased=False, keepdim=True)
        w = ((flat - mean) * torch.rsqrt(var + STD_EPS)).reshape_as(w)
        if any(self.pad):
            x = F.pad(x, self.pad)
        return F.conv2d(x, w, None, self.stride)


class GroupNormAct(nn.GroupNorm):
    """GroupNorm of 32 groups, then ReLU unless `act=False` (the norm before a residual sum)."""

    def __init__(self, channels: int, act: bool = True) -> None:
        super().__init__(GROUPS, channels, eps=NORM_EPS)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = super().forward(x)
        return F.relu(x) if self.act else x


class MaxPoolSame(nn.Module):
    """3x3 stride-2 max pooling, "SAME"-padded with -inf (the root's)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        before, after = same_padding(3, 2)
        return F.max_pool2d(F.pad(x, (before, after, before, after), value=float("-inf")), 3, 2)


class Downsample(nn.Module):
    """The projection shortcut: a strided 1x1 conv and a GroupNorm without activation."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv = StdConv2d(c_in, c_out, 1, stride)
        self.norm = GroupNormAct(c_out, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x))


class Bottleneck(nn.Module):
    """1x1 down to a quarter of the width, 3x3 (strided), 1x1 up; the sum with the shortcut, then ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int, project: bool) -> None:
        super().__init__()
        mid = c_out // 4
        self.downsample = Downsample(c_in, c_out, stride) if project else None
        self.conv1, self.norm1 = StdConv2d(c_in, mid, 1), GroupNormAct(mid)
        self.conv2, self.norm2 = StdConv2d(mid, mid, 3, stride), GroupNormAct(mid)
        self.conv3, self.norm3 = StdConv2d(mid, c_out, 1), GroupNormAct(c_out, act=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        x = self.norm1(self.conv1(x))
        x = self.norm2(self.conv2(x))
        x = self.norm3(self.conv3(x))
        return F.relu(x + shortcut)


class ResNetStage(nn.Module):
    """`depth` bottlenecks; the first projects the shortcut and carries the stage's stride."""

    def __init__(self, c_in: int, c_out: int, stride: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *[Bottleneck(c_in if i == 0 else c_out, c_out, stride if i == 0 else 1, i == 0) for i in range(depth)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


def root(in_chans: int) -> nn.Sequential:
    """7x7/2 conv, GroupNorm + ReLU, 3x3/2 max pool: stride 4, 64 channels."""
    stem = nn.Sequential()
    stem.add_module("conv", StdConv2d(in_chans, ROOT_CHANNELS, 7, 2))
    stem.add_module("norm", GroupNormAct(ROOT_CHANNELS))
    stem.add_module("pool", MaxPoolSame())
    return stem


class ResNetV2(nn.Module):
    """The root and the bottleneck stages (timm's `ResNetV2(preact=False)` without its head)."""

    def __init__(self, in_chans: int, layers: tuple[int, ...]) -> None:
        super().__init__()
        self.stem = root(in_chans)
        self.stages = nn.Sequential()
        c_in = ROOT_CHANNELS
        for i, depth in enumerate(layers):
            self.stages.add_module(str(i), ResNetStage(c_in, STAGE_CHANNELS[i], 1 if i == 0 else 2, depth))
            c_in = STAGE_CHANNELS[i]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem(x))


def resnetv2_stem(in_chans: int, layers: tuple[int, ...]) -> nn.Module:
    """The stem of `layers` (stage depths; () the root alone, as timm's R+ViT-Ti builds it)."""
    return ResNetV2(in_chans, layers) if layers else root(in_chans)


def resnetv2_stride(layers: tuple[int, ...]) -> int:
    """How many pixels one cell of the stem's output map covers, per side."""
    return 4 * 2 ** max(len(layers) - 1, 0)


def resnetv2_channels(layers: tuple[int, ...]) -> int:
    """Channels of the stem's output map."""
    return STAGE_CHANNELS[len(layers) - 1] if layers else ROOT_CHANNELS


def resnetv2_params(in_chans: int, layers: tuple[int, ...]) -> int:
    """The stem's parameter count (conv weights, GroupNorm scales and shifts), by arithmetic."""
    total = in_chans * ROOT_CHANNELS * 49 + 2 * ROOT_CHANNELS
    c_in = ROOT_CHANNELS
    for i, depth in enumerate(layers):
        c, mid = STAGE_CHANNELS[i], STAGE_CHANNELS[i] // 4
        total += c_in * c + 2 * c  # the projection shortcut
        for j in range(depth):
            total += (c_in if j == 0 else c) * mid + mid * mid * 9 + mid * c + 2 * (2 * mid + c)
        c_in = c
    return total


def resnetv2_flops(in_chans: int, layers: tuple[int, ...], h: int, w: int) -> int:
    """The stem's convolution FLOPs (2 per multiply-add) on an h x w image, sides multiples of its stride."""
    h, w = h // 2, w // 2
    flops = 2 * h * w * in_chans * 49 * ROOT_CHANNELS
    h, w, c_in = h // 2, w // 2, ROOT_CHANNELS
    for i, depth in enumerate(layers):
        c, mid = STAGE_CHANNELS[i], STAGE_CHANNELS[i] // 4
        for j in range(depth):
            stride = 2 if i and not j else 1
            cin = c_in if j == 0 else c
            flops += 2 * h * w * cin * mid  # conv1 at the input's resolution
            h, w = h // stride, w // stride
            flops += 2 * h * w * (mid * mid * 9 + mid * c + (cin * c if j == 0 else 0))
        c_in = c
    return flops


def check_resnetv2_layers(layers: tuple[int, ...]) -> None:
    """Raise a ValueError unless `layers` is a tuple of 0 to 4 positive stage depths."""
    if len(layers) > len(STAGE_CHANNELS) or any(not isinstance(d, int) or d <= 0 for d in layers):
        raise ValueError(
            f"hybrid_layers={layers!r} is invalid; expected up to {len(STAGE_CHANNELS)} positive stage depths "
            "(R50: (3, 4, 9); () the ResNet root alone)"
        )
