"""The gated MLP of the newer families: SwiGLU (Shazeer 2020), act(x W_g) * (x W_x) then W_out,
with SiLU as the activation (GELU gives GeGLU), in the two parameter layouts timm uses.

    swiglu          timm's `SwiGLU`: two input projections `fc1_g` (gate) and `fc1_x`, then `fc2`;
                    EVA-02 and DINOv3 (whose original checkpoints call them w1, w2, w3)
    swiglu_packed   timm's `SwiGLUPacked` (`GluMlp` with the gate first): one projection `fc1`
                    whose first half is the gate, then `fc2`; DINOv2-g (transformers' weights_in and
                    weights_out)

Either may hold a normalisation of the hidden units before `fc2` (`norm`: EVA-02's sub-LayerNorm,
timm's `scale_mlp`).

The hidden width follows timm's rules, so the parameter shapes are timm's:

    mlp, swiglu     hidden = int(dim * mlp_ratio), rounded up to a multiple of `align` if given
                    (DINOv3's `swiglu_align_to`)
    swiglu_packed   fc1 is int(dim * mlp_ratio) wide and the hidden width half of it: DINOv2-g's
                    ratio 2.66667 * 2 gives fc1 8192 and 4096 hidden units for dim 1536, what
                    DINOv2's own rule (2/3 of 4 * dim, rounded up to a multiple of 8) gives
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, get_args

import torch
from torch import nn

from .activations import make_activation
from .mlp import Mlp
from .norm import DEFAULT_NORM_EPS, make_norm

MlpName = Literal["mlp", "swiglu", "swiglu_packed"]
MLPS: tuple[str, ...] = get_args(MlpName)


def mlp_hidden_dim(kind: str, dim: int, mlp_ratio: float, align: int = 0) -> int:
    """The hidden width of an MLP of `kind` (see the module docstring)."""
    hidden = int(dim * mlp_ratio)
    if kind == "swiglu_packed":
        return hidden // 2
    return hidden + (-hidden % align) if align else hidden


def dinov2_swiglu_hidden_dim(dim: int, mlp_ratio: float) -> int:
    """DINOv2's SwiGLU width (and transformers' `Dinov2SwiGLUFFN`): 2/3 of dim * mlp_ratio,
    rounded up to a multiple of 8."""
    hidden = int(dim * mlp_ratio)
    return (int(hidden * 2 / 3) + 7) // 8 * 8


def packed_mlp_ratio(dim: int, hidden: int) -> float:
    """The `mlp_ratio` of a swiglu_packed MLP of `hidden` units, written as timm writes DINOv2-g's
    (2.66667 * 2): 2 * hidden / dim to five decimals, nudged up so int(dim * ratio) is 2 * hidden."""
    return round(2 * hidden / dim, 5) + 1e-5


class _GatedMlp(nn.Module):
    """What both layouts share: their input projections (`_add_inputs`), then act(gate) * x,
    dropout, the optional sub-norm, fc2 and dropout, registered in timm's order."""

    def __init__(
        self,
        *,
        dim: int,
        hidden_dim: int,
        drop: float = 0.0,
        act_layer: str = "silu",
        norm_layer: str | None = None,
        norm_eps: float = DEFAULT_NORM_EPS,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self._add_inputs(dim, hidden_dim, bias)
        self.act = make_activation(act_layer)
        self.drop1 = nn.Dropout(drop)
        self.norm = make_norm(norm_layer, hidden_dim, norm_eps) if norm_layer else nn.Identity()
        self.fc2 = nn.Linear(hidden_dim, dim, bias=bias)
        self.drop2 = nn.Dropout(drop)

    def _add_inputs(self, dim: int, hidden_dim: int, bias: bool) -> None:
        raise NotImplementedError

    def _output(self, gate: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(gate) * x))))


class SwiGLU(_GatedMlp):
    """Gate and input projections apart (`fc1_g`, `fc1_x`): fc2(norm(act(fc1_g(x)) * fc1_x(x)))."""

    def _add_inputs(self, dim: int, hidden_dim: int, bias: bool) -> None:
        self.fc1_g = nn.Linear(dim, hidden_dim, bias=bias)
        self.fc1_x = nn.Linear(dim, hidden_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._output(self.fc1_g(x), self.fc1_x(x))


class SwiGLUPacked(_GatedMlp):
    """Gate and input in one projection `fc1` (gate first): fc2(norm(act(gate) * x))."""

    def _add_inputs(self, dim: int, hidden_dim: int, bias: bool) -> None:
        self.fc1 = nn.Linear(dim, 2 * hidden_dim, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, x = self.fc1(x).chunk(2, dim=-1)
        return self._output(gate, x)


def make_mlp(
    kind: str,
    *,
    dim: int,
    mlp_ratio: float,
    drop: float = 0.0,
    act_layer: str = "gelu",
    norm_layer: str | None = None,
    norm_eps: float = DEFAULT_NORM_EPS,
    align: int = 0,
    bias: bool = True,
) -> nn.Module:
    """The MLP of a block: `kind` one of MLPS, its width by `mlp_hidden_dim`, with a sub-norm of
    the hidden units when `norm_layer` names one, its layers without biases when not `bias` (AIMv2)."""
    classes: dict[str, Callable[..., nn.Module]] = {"mlp": Mlp, "swiglu": SwiGLU, "swiglu_packed": SwiGLUPacked}
    if kind not in classes:
        raise ValueError(f"mlp_layer={kind!r} is invalid; expected one of {', '.join(map(repr, MLPS))}")
    hidden = mlp_hidden_dim(kind, dim, mlp_ratio, align)
    return classes[kind](
        dim=dim,
        hidden_dim=hidden,
        drop=drop,
        act_layer=act_layer,
        norm_layer=norm_layer,
        norm_eps=norm_eps,
        bias=bias,
    )
