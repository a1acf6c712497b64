"""The building blocks of a Vision Transformer, one concept per module.

patch_embed  image -> sequence of patch vectors (Conv2d, and the unfold + Linear form)
hybrid_embed a CNN stem as the patch embedding: BiT's ResNet (resnetv2_stem), MobileCLIP's (mci_stem)
pos_embed    learned and fixed sinusoidal position embeddings; resampling to another grid
rope         2D rotary position embeddings of q and k (timm's "cat", "mixed", DINOv3's)
relpos_bias  BEiT's learned table of relative position biases
relpos_mlp   a relative position bias from an MLP over log-spaced offsets (timm's relpos ViT)
attention    multi-head self-attention (fused qkv, scaled_dot_product_attention)
activations  GELU, its tanh approximation, QuickGELU
mlp          the position-wise feed-forward network
swiglu       the gated MLP (SwiGLU), unpacked and packed, and the MLP of a block by name
norm         LayerNorm or RMSNorm by name
layer_scale  LayerScale: a learned per-channel factor on a residual branch
drop_path    stochastic depth
block        the pre-norm encoder block that stacks the pieces above, its post-norm variant; the kinds of block by name
parallel_block  attention and MLP side by side from one norm (ViT-22B)
diff_attention  differential attention: two softmax maps subtracted with a learned lambda
pool         attention pooling (MAP): a learned query attends over the tokens
aimv2_pool   AIMv2's attention-pooling head: a learned query, k/v and output projections, no MLP
sam          SAM's image encoder: windowed attention, decomposed relative positions, the conv neck
"""

from .activations import QuickGELU, make_activation
from .aimv2_pool import Aimv2Pool
from .attention import Attention, capture_attention
from .block import Block, PostNormBlock
from .drop_path import DropPath
from .helpers import to_2tuple
from .layer_scale import LayerScale
from .mlp import Mlp
from .norm import RMSNorm, make_norm
from .patch_embed import PatchEmbed, patchify, unfold_linear_patch_embed
from .pool import AttentionPool
from .pos_embed import crop_resample_pos_embed, resample_abs_pos_embed, sincos_1d, tile_pos_embed
from .relpos_mlp import RelPosMlp
from .rope import RotaryEmbedding2d, apply_rope
from .swiglu import SwiGLU, SwiGLUPacked, make_mlp

__all__ = [
    "Aimv2Pool",
    "Attention",
    "AttentionPool",
    "Block",
    "DropPath",
    "LayerScale",
    "Mlp",
    "PatchEmbed",
    "PostNormBlock",
    "QuickGELU",
    "RMSNorm",
    "RelPosMlp",
    "RotaryEmbedding2d",
    "SwiGLU",
    "SwiGLUPacked",
    "apply_rope",
    "capture_attention",
    "crop_resample_pos_embed",
    "make_activation",
    "make_mlp",
    "make_norm",
    "patchify",
    "resample_abs_pos_embed",
    "sincos_1d",
    "tile_pos_embed",
    "to_2tuple",
    "unfold_linear_patch_embed",
]
