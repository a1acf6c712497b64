"""timm's default init of a VisionTransformer: truncated normal(0.02) for Linears and the position
embedding, tiny normal for the prefix tokens, LeCun-normal-like fan-in init for the patch conv,
LayerScale at init_values and the pooling queries at std 1/sqrt(D); each layer with an init of its
own (RMSNorm, BEiT's tables, the post-norm block, differential attention's lambdas) runs it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..layers.aimv2_pool import Aimv2Pool
from ..layers.attn_pooler import AttentionalPooler
from ..layers.block import PostNormBlock
from ..layers.diff_attention import init_lambdas
from ..layers.hybrid_embed import HybridEmbed
from ..layers.layer_scale import LayerScale
from ..layers.norm import RMSNorm
from ..layers.patch_embed import PatchEmbed
from ..layers.pool import AttentionPool
from ..layers.relpos_bias import RelPosBiasTable


def first_weight(patch_embed: PatchEmbed | HybridEmbed) -> torch.Tensor:
    """The patch embedding's first weight: the model's dtype and device."""
    if isinstance(patch_embed, HybridEmbed):
        return patch_embed.first_weight
    return patch_embed.proj.weight


def _init_module(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.trunc_normal_(m.weight, std=0.02)
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.LayerNorm):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)
    elif isinstance(m, (LayerScale, RMSNorm, RelPosBiasTable, PostNormBlock)):
        m.reset_parameters()  # a post-norm block after its norms (apply visits children first)
    elif isinstance(m, AttentionPool):
        m.init_latent()
    elif isinstance(m, (AttentionalPooler, Aimv2Pool)):
        m.init_query()
    if hasattr(m, "lambda_q1"):  # differential attention (layers/diff_attention.py)
        init_lambdas(m)


@torch.no_grad()
def init_weights(
    model: nn.Module,
    patch_embed: PatchEmbed | HybridEmbed,
    tables: Sequence[torch.Tensor | None],
    tokens: Sequence[torch.Tensor | None],
) -> None:
    """`model`'s modules, its stem, its position `tables` (the learned ones) and prefix `tokens`."""
    if first_weight(patch_embed).is_meta:
        # Built on the meta device (to count parameters, or to receive a checkpoint by
        # assignment): there is no data to initialise, and random init on meta tensors goes
        # through torch's Python reference ops, whose first use imports torch._dynamo (slow to load).
        return
    model.apply(_init_module)
    if not isinstance(patch_embed, HybridEmbed):  # a hybrid stem: PyTorch's conv and norm init (timm's too)
        w = patch_embed.proj.weight
        nn.init.trunc_normal_(w, std=math.sqrt(1.0 / (w[0].numel())))
        if patch_embed.proj.bias is not None:
            nn.init.zeros_(patch_embed.proj.bias)
    for table in tables:
        if isinstance(table, nn.Parameter):
            nn.init.trunc_normal_(table, std=0.02)
    for token in tokens:
        if token is not None:
            nn.init.normal_(token, std=1e-6)
