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
With `rel_pos_grid` the block has BEiT's relative position bias table (`rel_pos`, relpos_bias.py),
whose bias its attention adds to the logits (`attn_bias`).

The kinds of block, chosen by ViTConfig.block_type, are the table BLOCKS (name -> class), each
class built with the same keyword arguments (`make_block`): "prenorm" this one, "parallel"
attention and MLP side by side from one norm (parallel_block.py).
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import Attention
from .diff_attention import DiffAttention
from .drop_path import DropPath
from .layer_scale import LayerScale
from .norm import make_norm
from .parallel_block import ParallelBlock
from .relpos_bias import RelPosBiasTable
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
        norm_eps: float = 1e-6,
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
        rel_pos_grid: tuple[int, int] | None = None,
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
        self.rel_pos = RelPosBiasTable(rel_pos_grid, num_heads) if rel_pos_grid is not None else None
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
        self, x: torch.Tensor, rope: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        h = self.norm1(x)  # BEiT's relative position bias, where there is a table, added to the logits
        h = self.attn(h, rope, attn_mask) if self.rel_pos is None else self.attn(h, rope, attn_mask, self.rel_pos())
        x = x + self.drop_path1(self.ls1(h))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


# ViTConfig.block_type -> the block class; each takes Block's keyword arguments.
BLOCKS: dict[str, type[nn.Module]] = {"prenorm": Block, "parallel": ParallelBlock}


def make_block(block_type: str, **kwargs: object) -> nn.Module:
    """The encoder block of kind `block_type` (a key of BLOCKS) built from Block's keyword arguments."""
    if block_type not in BLOCKS:
        raise ValueError(f"block_type={block_type!r} is invalid; expected one of {', '.join(map(repr, BLOCKS))}")
    return BLOCKS[block_type](**kwargs)
