"""The building blocks of a Vision Transformer, one concept per module.

patch_embed  image -> sequence of patch vectors (Conv2d, and the unfold + Linear form)
pos_embed    learned and fixed sinusoidal position embeddings
attention    multi-head self-attention (fused qkv, scaled_dot_product_attention)
mlp          the position-wise feed-forward network
drop_path    stochastic depth
block        the pre-norm encoder block that stacks the pieces above
"""

from .attention import Attention, capture_attention
from .block import Block
from .drop_path import DropPath
from .helpers import to_2tuple
from .mlp import Mlp
from .patch_embed import PatchEmbed, patchify, unfold_linear_patch_embed
from .pos_embed import sincos_1d

__all__ = [
    "Attention",
    "Block",
    "DropPath",
    "Mlp",
    "PatchEmbed",
    "capture_attention",
    "patchify",
    "sincos_1d",
    "to_2tuple",
    "unfold_linear_patch_embed",
]
