"""The pre-norm Transformer encoder block of ViT:

x = x + DropPath(LayerScale(Attention(LayerNorm(x))))
x = x + DropPath(LayerScale(Mlp(LayerNorm(x))))

`rope` is the rotary embedding of the tokens (rope.py), None without one; `attn_mask` the keys each
query may attend (padding masked out of patch-sequence batches, naflex.py), None for all.
LayerScale (layer_scale.py) is there only with `init_values` (DeiT III, DINOv2), on the attention
branch alone with `layer_scale_mlp=False` (Sapiens2); otherwise, like a zero stochastic-depth rate,
it is an nn.Identity that does no tensor work. The attention may have fewer key/value heads
(`num_kv_heads`, gqa.py) and a norm of q and k (`qk_norm`, qk_norm.py). The norms are LayerNorm
or RMSNorm (norm.py), the MLP plain or gated (SwiGLU, swiglu.py), with a sub-norm on request, and
the attention too (`attn_norm`: its sub-LN before the output projection, attention.py);
`proj_bias=False` (AIMv2) drops the biases of the attention's output projection and of every MLP layer;
the attention is plain (attention.py) or differential (`attn_layer="diff"`, diff_attention.py, which
takes the block's `index` for its lambda_init).
`rel_pos` is the block's own relative position bias, a module () -> (1, heads, N, N) whose bias
its attention adds to the logits (`attn_bias`): BEiT's table (relpos_bias.py) or timm's relpos
MLP (relpos_mlp.py); or, where the model shares one bias among all its blocks, the forward's
`attn_bias` carries it.

`PostNormBlock` is the residual post-norm variant (timm's `ResPostBlock` and `ResPostRelPosBlock`,
EVA's `EvaBlockPostNorm` of EVA-02-CLIP-E): each norm moves to the end of its residual branch, so
the residual stream itself is never normalised:

x = x + DropPath(LayerNorm(Attention(x)))
x = x + DropPath(LayerNorm(Mlp(x)))

It holds the same parameters under the same names (norm1, attn, norm2, mlp) and no LayerScale:
`init_values` (timm's argument name) is there the norms' initial weight instead (timm's init;
ViTConfig.postnorm_init), which a checkpoint replaces.

The kinds of block, chosen by ViTConfig.block_type, are the table BLOCKS (name -> class), each
class built with the same keyword arguments (`make_block`): "prenorm" Block, "postnorm"
PostNormBlock, "parallel" attention and MLP side by side from one norm (parallel_block.py).
"""

from __future__ import annotations

import typing
from typing import Any

import torch
from torch import nn

from .attention import Attention
from .diff_attention import DiffAttention
from .drop_path import DropPath
from .layer_scale import LayerScale
from .norm import DEFAULT_NORM_EPS, make_norm
from .parallel_block import ParallelBlock
from .swiglu import make_mlp


class Block(nn.Module):
    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        drop: float = 0.0,
        attn_drop: float = 0.0,
        drop_path: float = 0.0,
        norm_eps: float = DEFAULT_NORM_EPS,
        init_values: float | None = None,
        act_layer: str = "gelu",
        mlp_layer: str = "mlp",
        mlp_norm: bool = False,
        mlp_align: int = 0,
        norm_layer: str = "layernorm",
        is_causal: bool = False,
        qkv_fused: bool = True,
        k_bias: bool = True,
        proj_bias: bool = True,
        rope_rotate_half: bool = False,
        attn_layer: str = "attn",
        index: int = 0,
        attn_norm: bool = False,
        num_kv_heads: int | None = None,
        qk_norm: str = "",
        layer_scale_mlp: bool = True,
        rel_pos: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = make_norm(norm_layer, dim, norm_eps)
        self.attn: Attention
        if attn_layer == "diff":
            self.attn = DiffAttention(
                dim=dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=drop, index=index
            )
        else:
            self.attn = Attention(
                dim=dim,
                num_heads=num_heads,
                qkv_bias=qkv_bias,
                attn_drop=attn_drop,
                proj_drop=drop,
                is_causal=is_causal,
                qkv_fused=qkv_fused,
                k_bias=k_bias,
                proj_bias=proj_bias,
                rope_rotate_half=rope_rotate_half,
                norm_layer=norm_layer if attn_norm else None,
                norm_eps=norm_eps,
                num_kv_heads=num_kv_heads,
                qk_norm=qk_norm,
                qk_norm_layer=norm_layer,
            )
        self.rel_pos = rel_pos  # the block's relative position bias module, or None
        self.ls1 = LayerScale(dim, init_values) if init_values else nn.Identity()
        self.drop_path1 = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.norm2 = make_norm(norm_layer, dim, norm_eps)
        self.mlp = make_mlp(
            mlp_layer,
            dim=dim,
            mlp_ratio=mlp_ratio,
            drop=drop,
            act_layer=act_layer,
            norm_layer=norm_layer if mlp_norm else None,
            norm_eps=norm_eps,
            align=mlp_align,
            bias=proj_bias,
        )
        self.ls2 = LayerScale(dim, init_values) if init_values and layer_scale_mlp else nn.Identity()
        self.drop_path2 = DropPath(drop_path) if drop_path > 0 else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self._attend(self.norm1(x), rope, attn_mask, attn_bias)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x

    def _attend(
        self, h: torch.Tensor, rope: torch.Tensor | None, attn_mask: torch.Tensor | None, attn_bias: torch.Tensor | None
    ) -> torch.Tensor:
        """The attention of `h`, with the block's own relative position bias, else the shared one."""
        return self.attn(h, rope, attn_mask, self.rel_pos() if self.rel_pos is not None else attn_bias)


class PostNormBlock(Block):
    """The residual post-norm block (the module docstring): Block's parts, each norm after its branch."""

    def __init__(self, *, init_values: float | None = None, **settings: Any) -> None:
        super().__init__(init_values=None, **settings)  # no LayerScale
        self.init_values = init_values

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """timm's init of a post-norm block: the norms' weights at `init_values` (when given)."""
        if self.init_values is not None:
            for norm in (self.norm1, self.norm2):
                nn.init.constant_(typing.cast(torch.Tensor, norm.weight), self.init_values)

    def forward(
        self,
        x: torch.Tensor,
        rope: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.drop_path1(self.norm1(self._attend(x, rope, attn_mask, attn_bias)))
        x = x + self.drop_path2(self.norm2(self.mlp(x)))
        return x


# ViTConfig.block_type -> the block class; each takes Block's keyword arguments.
BLOCKS: dict[str, type[nn.Module]] = {"prenorm": Block, "postnorm": PostNormBlock, "parallel": ParallelBlock}


def check_block_type(block_type: str) -> None:
    """ValueError unless `block_type` is a key of BLOCKS: the one check of the name (ViTConfig's
    block_type is checked here too)."""
    if block_type not in BLOCKS:
        raise ValueError(f"block_type={block_type!r} is invalid; expected one of {', '.join(map(repr, BLOCKS))}")


def make_block(block_type: str, **kwargs: object) -> nn.Module:
    """The encoder block of kind `block_type` (a key of BLOCKS) built from Block's keyword arguments."""
    check_block_type(block_type)
    return BLOCKS[block_type](**kwargs)
