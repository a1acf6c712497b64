"""The Vision Transformer (Dosovitskiy et al., 2021) and the variants of it that today's pretrained
families use, in one module with one config dataclass.

    tokens  = [cls, (dist | reg_1 ... reg_R), patch_1 ... patch_N] + position embedding
    tokens  = LayerNorm(tokens)                 (only with pre_norm: CLIP's ln_pre)
    tokens  = Block(tokens) x depth             (pre-norm encoder, optional LayerScale: layers/block.py)
    feature = pool(LayerNorm(tokens))           (class token, mean of the patch tokens, or attention)
    logits  = head(Tanh(Linear(feature)))       (the representation layer is optional)

Each variant is one `ViTConfig` field, its module in `vitzoo/layers/`:

    distilled        DeiT: a distillation token and a second head
    init_values      DeiT III, DINOv2: LayerScale on both residual branches (layers/layer_scale.py);
                     layer_scale_mlp=False: on the attention branch only (Sapiens2)
    reg_tokens       DINOv2 with registers: extra learned tokens that carry no image content
    no_embed_class   DeiT III, DINOv2-reg: the position embedding covers the patches only and is
                     added before the prefix tokens (class, registers) join
    embed_norm, proj_bias=False   AIMv2: a norm of the patch tokens (patch_embed.norm), no bias on the
                     attention's output projection nor in the MLP
    pre_norm, patch_bias=False, act_layer   CLIP (ln_pre, a bias-free patch projection, QuickGELU;
                     layers/activations.py)
    global_pool      "token", "avg", "map" (SigLIP's attention pooling, layers/pool.py) or "" (none);
                     attn_pool_num_heads, pool_include_prefix: PE's pool (8 heads, over every token);
                     attn_pool_mlp_ratio: its MLP's own width (PE-Core-G); "coca": CoCa's attentional
                     pooler (layers/attn_pooler.py; attn_pool_queries, attn_pool_dim, attn_pool_type),
                     its caption tokens from pool_with_tokens(forward_features(x))
    fc_norm          MAE fine-tuning: the final LayerNorm moves after the pooling
    head_bias        CLIP's visual projection has no bias
    mlp_layer        "swiglu" / "swiglu_packed": the gated MLP of DINOv2-g, EVA-02, DINOv3
                     (layers/swiglu.py); mlp_norm its sub-LayerNorm (EVA-02), mlp_align its width rounding
    norm_layer       "rmsnorm" instead of LayerNorm everywhere (layers/norm.py)
    rope, rope_*     2D rotary position embedding of q and k (layers/rope.py): "cat" (EVA-02, PE,
                     RoPE-ViT axial), "mixed" (RoPE-ViT, learned frequencies), "dinov3"; beside the
                     learned table or alone (pos_embed="none"); class and register tokens not rotated
    qkv_fused, k_bias  EVA's attention layouts: separate q/k/v projections, no bias on k
    block_type       "prenorm" (the block above), "postnorm": each norm after its residual branch
                     (timm's ResPostBlock, EVA-02-CLIP-E; layers/block.py), or "parallel": attention and
                     MLP side by side from one norm, their input projections fused (ViT-22B;
                     layers/parallel_block.py)
    attn_layer       "attn" or "diff": differential attention, two softmax maps subtracted
                     (layers/diff_attention.py)
    attn_norm        the attention's sub-LN before its output projection (BEiT-3, EVA-02-CLIP B/L;
                     layers/attention.py)
    num_kv_heads     grouped-query attention (layers/gqa.py): fewer key/value heads, per block (Sapiens2)
    qk_norm          a norm of q and k per head or over all heads (layers/qk_norm.py; ViT-22B, Sapiens2)
    window_size, global_attn_indexes, rel_pos, neck_chans   SAM's image encoder (layers/sam.py):
                     windowed attention but in a few global blocks, decomposed relative positions,
                     a conv neck in the final norm's place; no prefix tokens
    rel_pos_table    BEiT: a learned relative position bias per block, added to the attention logits
                     (layers/relpos_bias.py); resized once by set_input_size, no dynamic_img_size
    rel_pos_mlp, rel_pos_mlp_shared   timm's relpos ViT: a relative position bias from an MLP over
                     log-spaced patch offsets, per block or shared (layers/relpos_mlp.py)

Besides (B, C, H, W) images, every model takes a patch-sequence batch: a dict of images cut into
their own grids of patches and padded (NaFlex; layers/naflex.py holds all of it, this module only
dispatches): per-image positions, padding masked out of attention and pooling.

A disabled option is absent or an nn.Identity: it does no tensor work, and today's models compute
what they always did. As a backbone the model speaks timm's API: `forward_intermediates`,
`prune_intermediate_layers`, `dynamic_img_size` / `set_input_size` (any input size: the learned
position table is resampled) and `set_grad_checkpointing`.

Parameter names follow timm's VisionTransformer, so a timm state dict maps onto this model key by
key (cls_token, reg_token, dist_token, pos_embed, patch_embed.proj, norm_pre, blocks.i.{norm1,
attn.qkv, attn.norm, attn.proj, ls1.gamma, norm2, mlp.fc1, mlp.fc2, ls2.gamma}, norm, fc_norm, attn_pool.{latent,
q, kv, proj, norm, mlp}, head, head_dist); the representation layer is `pre_logits.fc`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import os
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .checks import MAX_TOKENS, check_fields, check_heads, check_image_bounds, check_types
from .layers import PatchEmbed, capture_attention, sincos_1d, to_2tuple
from .layers.activations import ACTIVATIONS, ActName
from .layers.attn_pooler import COCA_POOL_TYPES, AttentionalPooler, CocaPool, coca_pool_params
from .layers.block import BLOCKS, PostNormBlock, make_block
from .layers.diff_attention import init_lambdas
from .layers.gqa import check_kv_heads
from .layers.hybrid_embed import HybridEmbed, check_hybrid_stem, hybrid_params
from .layers.layer_scale import LayerScale
from .layers.naflex import (
    PATCH_COORD,
    PATCH_VALID,
    PATCHES,
    POS_RESAMPLE,
    PatchBatch,
    PatchBatchError,
    PatchSequence,
    PosResample,
    add_positions,
    embed_patches,
    is_patch_batch,
    key_mask,
    masked_mean,
    read_patch_batch,
    resample_table,
    rope_for_sequence,
)
from .layers.norm import NORMS, NormName, RMSNorm, make_norm
from .layers.patch_embed import check_conv_stem
from .layers.pool import AttentionPool
from .layers.pos_embed import resample_abs_pos_embed
from .layers.pos_factorized import (
    FACTORIZED_RULES,
    factorized_axes,
    factorized_for_image,
    factorized_sum,
    factorized_table,
)
from .layers.qk_norm import QK_NORMS, QKNormName
from .layers.relpos_bias import RelPosBiasTable, num_relative_distances
from .layers.relpos_mlp import RelPosMlp
from .layers.rope import GRID_INDEXINGS, NORMALIZE_COORDS, ROPE_KINDS, RotaryEmbedding2d, check_rope_args
from .layers.sam import Neck, SamBlock, neck_params, rel_pos_params
from .layers.swiglu import MLPS, MlpName, mlp_hidden_dim
from .layout import hub_pusher, save_pretrained
from .pretrained_cfg import PretrainedCfg
from .weight_shards import DEFAULT_MAX_SHARD_SIZE

GLOBAL_POOLS = ("token", "avg", "map", "coca", "")
COCA_QUERIES = 256  # open_clip's attn_pooler_queries, where attn_pool_queries is None
# The "coca" pool's own fields, and their values without it (prune_intermediate_layers resets them).
COCA_POOL_OFF: dict[str, Any] = {"attn_pool_queries": None, "attn_pool_dim": None, "attn_pool_type": ""}
ATTN_LAYERS = ("attn", "diff")
POS_EMBEDS = ("learned", "sincos", "none", "factorized")


@dataclass(frozen=True)
class ViTConfig:
    """Every architecture field of a VisionTransformer. Overrides go through `replace`."""

    img_size: int | tuple[int, int] = 224
    patch_size: int | tuple[int, int] = 16
    # Pixels past the last whole patch are ignored, as timm's and big_vision's strided conv does
    # (SigLIP So400m/14's input is no multiple of its patch); False: img_size must be a multiple.
    drop_remainder: bool = False
    in_chans: int = 3
    # Hybrid ViT: channels of 3x3 stride-2 conv + BatchNorm + ReLU stages that replace the cut into
    # patches (layers/patch_embed.py); () is the plain ViT. Needs patch_size = 2 ** (stages + 1).
    conv_stem: tuple[int, ...] = ()
    # Hybrid ViT with a CNN stem as the patch embedding (layers/hybrid_embed.py): "resnetv2" (BiT's
    # ResNet, stage depths `hybrid_layers`, then a `proj` conv; layers/resnetv2_stem.py) or "mci"
    # (MobileCLIP's three convs; layers/mci_stem.py); "" the plain cut into patches. patch_size is
    # the token's stride in pixels; img_size (and dynamic inputs) multiples of it.
    hybrid_stem: Literal["", "resnetv2", "mci"] = ""
    hybrid_layers: tuple[int, ...] = ()
    patch_bias: bool = True  # bias of the patch projection (CLIP has none)
    embed_norm: bool = False  # a norm (norm_layer) of the patch tokens right after the projection (AIMv2)
    num_classes: int = 1000  # 0: no classifier, the model returns pooled features
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    qkv_fused: bool = True  # False: separate q_proj / k_proj / v_proj (EVA-02 B/L)
    k_bias: bool = True  # False (with qkv_bias): q and v have a bias, k none (EVA's attention)
    proj_bias: bool = True  # biases of the attention's output projection and of the MLP's layers (AIMv2: none)
    # The encoder block (layers/block.py BLOCKS): "prenorm"; "postnorm" (each norm after its residual
    # branch, no LayerScale: init_values is the norms' initial weight; timm's ResPostBlock); or
    # "parallel" (attention and MLP from one norm, one fused input projection: timm's
    # ParallelScalingBlock; layers/parallel_block.py).
    block_type: Literal["prenorm", "postnorm", "parallel"] = "prenorm"
    # "attn" (softmax attention) or "diff": differential attention (layers/diff_attention.py);
    # with block_type="parallel", timm's DiffParallelScalingBlock (one fused output projection).
    attn_layer: Literal["attn", "diff"] = "attn"
    # Grouped-query attention (layers/gqa.py): key/value heads of every block (an int) or of each
    # block (one per block, Sapiens2); None: num_heads (multi-head attention). Needs qkv_fused=False.
    num_kv_heads: int | tuple[int, ...] | None = None
    # A norm (norm_layer, norm_eps) of q and k before attending (layers/qk_norm.py): "head" over each
    # head (ViT-22B, timm's qk_norm, Sapiens2), "full" over all heads at once (InternViT-6B); "": none.
    qk_norm: QKNormName = ""
    act_layer: ActName = "gelu"  # MLP activation of the blocks and of the "map" pool (layers/activations.py)
    # The blocks' MLP: "mlp" (fc1, act, fc2), or gated by act_layer (SwiGLU with "silu"):
    # "swiglu" (fc1_g, fc1_x, fc2) or "swiglu_packed" (fc1 holds gate and input); layers/swiglu.py.
    mlp_layer: MlpName = "mlp"
    mlp_norm: bool = False  # a norm of the MLP's hidden units before fc2 (EVA-02's sub-LayerNorm)
    attn_norm: bool = False  # a norm of the attention's heads before its proj (sub-LN: BEiT-3, EVA-02-CLIP)
    mlp_align: int = 0  # "swiglu": round the hidden width up to a multiple of this (DINOv3); 0: none
    norm_layer: NormName = "layernorm"  # every norm of the model: "layernorm" or "rmsnorm" (layers/norm.py)
    init_values: float | None = None  # LayerScale on both residual branches, gamma starting here
    layer_scale_mlp: bool = True  # False (with init_values): LayerScale on the attention branch only (Sapiens2)
    class_token: bool = True
    reg_tokens: int = 0  # register tokens after the class token (DINOv2 with registers)
    distilled: bool = False  # DeiT: a second token and head; needs class_token
    # "none": no absolute table (RoPE alone); "factorized": a row table plus a column table, summed
    # (NaViT, timm's NaFlexVit; layers/pos_factorized.py), patches only (no_embed_class)
    pos_embed: Literal["learned", "sincos", "none", "factorized"] = "learned"
    no_embed_class: bool = False  # the position embedding covers the patches only, not the prefix tokens
    pre_norm: bool = False  # LayerNorm `norm_pre` after the position embedding, before the blocks (CLIP)
    # "token": the class token; "avg": the mean of the patch tokens; "map": attention pooling
    # (SigLIP); "coca": CoCa's attentional pooler (layers/attn_pooler.py); "": none, the head sees
    # every token (what prune_intermediate_layers leaves).
    global_pool: Literal["token", "avg", "map", "coca", ""] = "token"
    # "map", "coca": heads of the pooling attention (PE, CoCa: 8); None: num_heads
    attn_pool_num_heads: int | None = None
    attn_pool_mlp_ratio: float | None = None  # "map": the pool MLP's width ratio (PE-Core-G: 4); None: mlp_ratio
    pool_include_prefix: bool = False  # "map", "coca": the queries attend over the prefix tokens too (PE, CoCa)
    # "coca" only: the caption queries (open_clip's attn_pooler_queries; None: 256), the pooler's width
    # (open_clip's embed_dim, what its proj takes; None: embed_dim), and how its poolers are arranged:
    # "" open_clip's released CoCa (one pooler, its first output pooled, the final norm after it),
    # "parallel" / "cascade" the paper's (a one-query contrastive pooler beside / after the caption one).
    attn_pool_queries: int | None = None
    attn_pool_dim: int | None = None
    attn_pool_type: Literal["", "parallel", "cascade"] = ""
    representation_size: int | None = None  # Linear + Tanh before the head (ImageNet-21k ViT)
    final_norm: bool = True  # LayerNorm after the last block (the MNIST tutorial has none)
    fc_norm: bool = False  # move the final LayerNorm after the pooling (timm's MAE fine-tuning)
    head_bias: bool = True  # bias of the classifier / projection head
    norm_eps: float = 1e-6  # transformers' ViT checkpoints use 1e-12, CLIP 1e-5
    dynamic_img_size: bool = False  # any input size, multiples of the patch; positions resampled per call
    # How the learned table is resized to another grid (each image's of a patch-sequence batch,
    # dynamic_img_size, set_input_size; layers/naflex.py): "timm" (bicubic), "timm_square" (NaFlexVit's
    # aspect-preserving square, cropped) or "siglip2" (transformers' SigLIP 2: bilinear), antialiased;
    # "radio" / "radio_corners" (C-RADIO: bilinear to the square, cropped, not antialiased).
    pos_resample: PosResample = "timm"
    # 2D rotary position embedding in every block (layers/rope.py); "" is none. timm's names.
    rope: Literal["", "cat", "mixed", "dinov3"] = ""
    rope_temperature: float = 10000.0  # the frequency base ("dinov3": of the periods)
    rope_grid_indexing: Literal["ij", "xy"] = "ij"  # coordinate channels (row, col) or (col, row)
    rope_grid_offset: float = 0.0  # added to the patch indices ("cat", "dinov3")
    rope_ref_feat_shape: tuple[int, int] | None = None  # "cat": positions rescaled to span this grid (EVA)
    rope_rotate_half: bool = False  # pairs channel i with i + head_dim/2, not 2i with 2i+1
    rope_min_period: float | None = None  # "dinov3": geometric periods from min to max instead of the base
    rope_max_period: float | None = None
    rope_normalize_coords: Literal["separate", "min", "max"] = "separate"  # "dinov3": the [-1, 1] scaling
    rope_shift_coords: float | None = None  # training only: coordinate shift, per-axis jitter, shared rescale
    rope_jitter_coords: float | None = None
    rope_rescale_coords: float | None = None
    # SAM's image encoder (layers/sam.py), on the grid of patches alone (no prefix tokens): attention
    # within windows of window_size x window_size patches (0: global) except in the blocks of
    # global_attn_indexes; decomposed relative positions in every block (rel_pos); a convolutional
    # neck to neck_chans channels in place of the final norm (0: none).
    window_size: int = 0
    global_attn_indexes: tuple[int, ...] = ()
    rel_pos: bool = False
    neck_chans: int = 0
    # BEiT: each block learns a bias per head for every relative offset of two patches (and the class
    # token's three rows), added to its attention logits (layers/relpos_bias.py). Needs the class token alone.
    rel_pos_table: bool = False
    # timm's relpos ViT: a bias on the attention logits from an MLP of rel_pos_mlp hidden units over
    # log-spaced patch offsets (layers/relpos_mlp.py), in every block or one shared by all
    # (rel_pos_mlp_shared); 0: none.
    rel_pos_mlp: int = 0
    rel_pos_mlp_shared: bool = False
    drop_rate: float = 0.0  # dropout after the position embedding, in the MLP and after attn proj
    attn_drop_rate: float = 0.0  # dropout on the attention weights
    drop_path_rate: float = 0.0  # stochastic depth, rising linearly from 0 to this over depth

    def __post_init__(self) -> None:
        # Normalise lists (from JSON) to tuples so configs compare and hash by value.
        for name in (
            "img_size",
            "patch_size",
            "conv_stem",
            "hybrid_layers",
            "rope_ref_feat_shape",
            "num_kv_heads",
            "global_attn_indexes",
        ):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        self.validate()

    def validate(self) -> None:
        # Types first: configs come from JSON files too, and a "9" or a 3.5 must be named here
        # rather than fail somewhere inside torch.
        check_types({name: getattr(self, name) for name in self.field_names()}, self.field_types())
        img, patch = to_2tuple(self.img_size, "img_size"), to_2tuple(self.patch_size, "patch_size")
        self._validate_hybrid(patch)
        if self.conv_stem:  # the stem pads, so any image size works; the patch size is its stride
            check_conv_stem(self.conv_stem, patch, img)
        elif self.drop_remainder and any(p <= 0 or s < p for s, p in zip(img, patch)):
            raise ValueError(
                f"img_size {self.img_size} is smaller than patch_size {self.patch_size}; "
                "expected at least one whole patch on both axes"
            )
        elif not self.drop_remainder and any(p <= 0 or s <= 0 or s % p for s, p in zip(img, patch)):
            raise ValueError(
                f"img_size {self.img_size} is not divisible by patch_size {self.patch_size}; "
                "expected img_size to be a positive multiple of patch_size on both axes "
                "(or drop_remainder=True to ignore the pixels past the last whole patch)"
            )
        check_image_bounds(img, self.grid_size)  # the position table and attention are sized by it
        check_heads(self.embed_dim, self.num_heads)
        check_fields(
            self,
            [
                (self.in_chans >= 1, "in_chans", "an int >= 1"),
                (self.embed_dim >= 1, "embed_dim", "an int >= 1"),
                (self.num_classes >= 0, "num_classes", "an int >= 0"),
                (self.depth >= 0, "depth", "an int >= 0"),
                (self.mlp_ratio > 0, "mlp_ratio", "a positive number"),
                (self.act_layer in ACTIVATIONS, "act_layer", "one of " + ", ".join(map(repr, ACTIVATIONS))),
                (self.mlp_layer in MLPS, "mlp_layer", "one of " + ", ".join(map(repr, MLPS))),
                (self.mlp_align >= 0, "mlp_align", "an int >= 0"),
                (self.norm_layer in NORMS, "norm_layer", "one of " + ", ".join(map(repr, NORMS))),
                (self.init_values is None or self.init_values > 0, "init_values", "None or a positive number"),
                (self.reg_tokens >= 0, "reg_tokens", "an int >= 0"),
                (self.pos_embed in POS_EMBEDS, "pos_embed", "'learned', 'sincos', 'none' or 'factorized'"),
                (self.pos_resample in POS_RESAMPLE, "pos_resample", "one of " + ", ".join(map(repr, POS_RESAMPLE))),
                (self.global_pool in GLOBAL_POOLS, "global_pool", "'token', 'avg', 'map', 'coca' or '' (no pooling)"),
                (
                    self.representation_size is None or self.representation_size > 0,
                    "representation_size",
                    "None or an int > 0",
                ),
                (self.norm_eps > 0, "norm_eps", "a positive float"),
                (0 <= self.drop_rate < 1, "drop_rate", "a float in [0, 1)"),
                (0 <= self.attn_drop_rate < 1, "attn_drop_rate", "a float in [0, 1)"),
                (0 <= self.drop_path_rate < 1, "drop_path_rate", "a float in [0, 1)"),
            ],
        )
        self._validate_rope()
        self._validate_pool()
        self._validate_attention()
        self._validate_factorized()
        if self.distilled and not self.class_token:
            raise ValueError("distilled=True needs class_token=True (DeiT token order is [cls, dist, patches])")
        if self.global_pool == "token" and not self.class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")
        # The distillation head reads token 1 next to the class token's pooled feature; the
        # options below would each give that second token a different meaning or treatment.
        if self.distilled and self.reg_tokens:
            raise ValueError(
                f"distilled=True cannot be combined with reg_tokens={self.reg_tokens}: DeiT's distillation token "
                "takes the place after the class token that register tokens would; expected one or the other"
            )
        if self.distilled and self.global_pool in ("map", "coca", ""):
            raise ValueError(
                f"distilled=True cannot be combined with global_pool={self.global_pool!r}: DeiT pools its class and "
                "distillation tokens separately; expected global_pool='token' or 'avg'"
            )
        if self.distilled and self.fc_norm:
            raise ValueError("distilled=True cannot be combined with fc_norm=True; expected fc_norm=False")
        if self.fc_norm and not self.final_norm:
            raise ValueError(
                "fc_norm=True moves the final LayerNorm after the pooling, so it needs final_norm=True; "
                "expected fc_norm=False for a model without a final norm"
            )
        self._validate_mlp()
        self._validate_block()
        self._validate_sam()
        self._validate_rel_pos()

    def _validate_block(self) -> None:
        """The parallel block and differential attention: their fields, and what they do not combine with."""
        check_fields(
            self,
            [
                (self.block_type in BLOCKS, "block_type", "one of " + ", ".join(map(repr, BLOCKS))),
                (self.attn_layer in ATTN_LAYERS, "attn_layer", "one of " + ", ".join(map(repr, ATTN_LAYERS))),
            ],
        )
        if self.attn_layer == "diff" and (self.embed_dim // self.num_heads) % 2:
            raise ValueError(
                f"attn_layer='diff' needs an even head width; embed_dim {self.embed_dim} / num_heads "
                f"{self.num_heads} = {self.embed_dim // self.num_heads}; expected it even"
            )
        refused = {
            "rope": self.rope != "",
            "qkv_fused": not self.qkv_fused,
            "k_bias": not self.k_bias,
            "proj_bias": not self.proj_bias,
            "attn_norm": self.attn_norm,  # the sub-LN is the plain attention's
            "rel_pos_table": self.rel_pos_table,
            "rel_pos_mlp": self.rel_pos_mlp,
        }
        if self.block_type == "parallel":
            refused.update(mlp_layer=self.mlp_layer != "mlp", mlp_norm=self.mlp_norm)
        for name, set_ in refused.items():
            if set_ and (self.block_type == "parallel" or self.attn_layer == "diff"):
                chosen = f"block_type={self.block_type!r}" if self.block_type == "parallel" else "attn_layer='diff'"
                raise ValueError(
                    f"{chosen} cannot be combined with {name}={getattr(self, name)!r}: it has one fused qkv "
                    f"projection with a plain MLP and no rotary embedding; expected {name}="
                    f"{getattr(ViTConfig, name)!r}"
                )

    def _check_window_grid(self) -> None:
        """No tensor shows the window where relative positions are off: it is bounded as a grid is, the
        grid padded to whole windows holding at most MAX_TOKENS patches (a window may exceed the grid:
        timm pads it, as at reduced sizes)."""
        (gh, gw), ws = self.grid_size, self.window_size
        rows, cols = -(-gh // ws) * ws, -(-gw // ws) * ws
        if rows * cols > MAX_TOKENS:
            raise ValueError(
                f"window_size={ws} is invalid for the {gh}x{gw} grid of patches: its windows pad it to "
                f"{rows}x{cols} = {rows * cols} patches; expected windows that pad the grid to at most {MAX_TOKENS} "
                "patches (SAM: 14)"
            )

    def _validate_sam(self) -> None:
        """SAM's fields (layers/sam.py): together, on a grid of patches without prefix tokens."""
        check_fields(
            self,
            [
                (self.window_size >= 0, "window_size", "an int >= 0 (0: no windows)"),
                (self.neck_chans >= 0, "neck_chans", "an int >= 0 (0: no neck)"),
                (
                    all(i >= 0 for i in self.global_attn_indexes)
                    and len(set(self.global_attn_indexes)) == len(self.global_attn_indexes),
                    "global_attn_indexes",
                    "distinct block indices >= 0",
                ),
            ],
        )
        if self.window_size:
            self._check_window_grid()
        if self.global_attn_indexes and not self.window_size:
            raise ValueError(
                f"global_attn_indexes={self.global_attn_indexes} needs window_size > 0: without windows every "
                "block attends globally; expected window_size (SAM: 14) or global_attn_indexes=()"
            )
        sam = [f for f, on in (("window_size", self.window_size), ("rel_pos", self.rel_pos)) if on]
        sam += ["neck_chans"] if self.neck_chans else []
        if not sam:
            return
        named = ", ".join(f"{f}={getattr(self, f)!r}" for f in sam)
        if self.num_prefix_tokens:
            raise ValueError(
                f"{named} works on the grid of patches alone, so it cannot be combined with class, distillation or "
                "register tokens; expected class_token=False, distilled=False, reg_tokens=0"
            )
        if (self.window_size or self.rel_pos) and self.rope:
            raise ValueError(f"{named} cannot be combined with rope={self.rope!r}; expected rope=''")
        if self.neck_chans and (self.final_norm or self.fc_norm or self.global_pool == "map"):
            raise ValueError(
                f"neck_chans={self.neck_chans}: SAM's neck ends in its own LayerNorm and takes the final norm's "
                "place; expected final_norm=False, fc_norm=False and global_pool 'avg' or ''"
            )
        if (self.window_size or self.rel_pos) and (
            self.block_type != "prenorm" or self.attn_layer != "attn" or not self.proj_bias
        ):
            raise ValueError(
                f"{named} cannot be combined with block_type={self.block_type!r} / attn_layer={self.attn_layer!r} / "
                f"proj_bias={self.proj_bias!r}; "
                "expected SAM's pre-norm blocks of plain attention"
            )
        if self.neck_chans and self.representation_size:
            raise ValueError(f"neck_chans={self.neck_chans} cannot be combined with representation_size")

    def _validate_rel_pos(self) -> None:
        """BEiT's table and the relpos ViT's MLP: each a relative position bias for the model's grid."""
        self._validate_rel_pos_mlp()
        if self.rel_pos_table and (not self.class_token or self.num_prefix_tokens != 1):
            raise ValueError(
                f"rel_pos_table=True cannot be combined with class_token={self.class_token}, "
                f"reg_tokens={self.reg_tokens}, distilled={self.distilled}: BEiT's table has rows for one class "
                "token before the patches; expected class_token=True and no register or distillation token"
            )
        grid_bound = [f"{f}={getattr(self, f)!r}" for f in ("rel_pos_table", "rel_pos_mlp") if getattr(self, f)]
        if grid_bound and self.dynamic_img_size:
            raise ValueError(
                f"{grid_bound[0]} cannot be combined with dynamic_img_size=True: its relative position bias is made "
                "for the model's grid, changed for good by set_input_size (as timm's resize_rel_pos_bias_table and "
                "relpos ViT do), not per call; expected dynamic_img_size=False"
            )

    def _validate_rel_pos_mlp(self) -> None:
        """timm's relpos ViT (layers/relpos_mlp.py): one relative position scheme, its width > 0 when shared."""
        check_fields(self, [(self.rel_pos_mlp >= 0, "rel_pos_mlp", "an int >= 0 (the MLP's hidden width; 0: none)")])
        if self.rel_pos_mlp_shared and not self.rel_pos_mlp:
            raise ValueError(
                "rel_pos_mlp_shared=True describes a relative position bias MLP, but rel_pos_mlp=0; expected "
                "rel_pos_mlp > 0 (its hidden width) or rel_pos_mlp_shared=False"
            )
        other = [f"{f}={getattr(self, f)!r}" for f in ("rel_pos_table", "rel_pos", "window_size") if getattr(self, f)]
        if self.rel_pos_mlp and other:
            raise ValueError(
                f"rel_pos_mlp={self.rel_pos_mlp} cannot be combined with {', '.join(other)}: it is a relative "
                "position bias of its own; expected one relative position scheme"
            )

    def _validate_factorized(self) -> None:
        if self.pos_embed != "factorized":
            return
        if self.num_prefix_tokens and not self.no_embed_class:
            raise ValueError(
                "pos_embed='factorized' gives positions to the patches only; expected no_embed_class=True "
                f"(this config has {self.num_prefix_tokens} prefix token(s))"
            )
        if self.pos_resample not in FACTORIZED_RULES:
            raise ValueError(
                f"pos_embed='factorized' with pos_resample={self.pos_resample!r} is invalid; its row and column "
                "tables resample linearly, per axis ('timm') or aspect-preserving ('timm_square')"
            )
        if self.conv_stem:
            raise ValueError(
                "pos_embed='factorized' cannot be combined with conv_stem: timm's factorized tables count whole "
                "patches, a conv stem pads; expected one or the other"
            )

    def _validate_pool(self) -> None:
        """The attention pools' own settings: "map" (PE: its head count; PE-Core-G: its MLP ratio) and "coca"."""
        heads_of = self.pool_dim if self.global_pool == "coca" else self.embed_dim
        check_fields(
            self,
            [
                (
                    self.attn_pool_num_heads is None
                    or (self.attn_pool_num_heads > 0 and heads_of % self.attn_pool_num_heads == 0),
                    "attn_pool_num_heads",
                    f"None or a divisor of {'attn_pool_dim' if self.global_pool == 'coca' else 'embed_dim'} {heads_of}",
                ),
                (
                    self.attn_pool_mlp_ratio is None or self.attn_pool_mlp_ratio > 0,
                    "attn_pool_mlp_ratio",
                    "None or a positive number",
                ),
                (
                    self.attn_pool_queries is None or self.attn_pool_queries >= 1,
                    "attn_pool_queries",
                    "None or an int >= 1",
                ),
                (self.attn_pool_dim is None or self.attn_pool_dim >= 1, "attn_pool_dim", "None or an int >= 1"),
                (
                    self.attn_pool_type in COCA_POOL_TYPES,
                    "attn_pool_type",
                    "one of " + ", ".join(map(repr, COCA_POOL_TYPES)),
                ),
            ],
        )
        self._validate_coca()

    def _validate_coca(self) -> None:
        """The "coca" pool's fields belong to it, and it to no MLP, representation layer or fc_norm."""
        if self.global_pool != "coca":
            stray = [f"{k}={getattr(self, k)!r}" for k, off in COCA_POOL_OFF.items() if getattr(self, k) != off]
            if stray:
                raise ValueError(
                    f"{', '.join(stray)} with global_pool={self.global_pool!r} is invalid: these are the settings of "
                    "CoCa's attentional pooler; expected global_pool='coca', or leave them unset"
                )
            return
        clash = [
            f"{name}={value!r}"
            for name, value, off in (
                ("attn_pool_mlp_ratio", self.attn_pool_mlp_ratio, None),  # the "map" pool's MLP
                ("representation_size", self.representation_size, None),
                ("fc_norm", self.fc_norm, False),
            )
            if value != off
        ]
        if clash:
            raise ValueError(
                f"global_pool='coca' cannot be combined with {', '.join(clash)}: CoCa's pooler has no MLP, its "
                "outputs go to the head (open_clip's proj) as they are, and its final norm sits where attn_pool_type "
                "says ('': after the pooler; 'parallel' / 'cascade': on the tokens); expected them unset"
            )

    @property
    def pool_dim(self) -> int:
        """The width of the pooled feature (what the representation layer or the head takes): CoCa's
        pooler's own width, SAM's neck's, else embed_dim."""
        if self.global_pool == "coca":
            return self.attn_pool_dim or self.embed_dim
        return self.neck_chans or self.embed_dim

    @property
    def norm_in_pool(self) -> bool:
        """Whether the final norm is the pool's (open_clip's released CoCa: ln_post after its pooler)."""
        return self.final_norm and self.global_pool == "coca" and not self.attn_pool_type

    def _validate_hybrid(self, patch: tuple[int, int]) -> None:
        if not self.hybrid_stem:
            if self.hybrid_layers:
                raise ValueError(
                    f"hybrid_layers={self.hybrid_layers!r} needs hybrid_stem='resnetv2'; expected () without a stem"
                )
            return
        combined = (
            ("conv_stem", self.conv_stem),
            ("drop_remainder", self.drop_remainder),
            ("embed_norm", self.embed_norm),
        )
        for name, value in combined:
            if value:
                raise ValueError(
                    f"hybrid_stem={self.hybrid_stem!r} cannot be combined with {name}={value!r}: the hybrid stem "
                    f"is the patch embedding and takes multiples of its stride; expected {name} off"
                )
        check_hybrid_stem(self.hybrid_stem, self.hybrid_layers, patch, self.embed_dim)

    def _validate_mlp(self) -> None:
        if self.mlp_align and self.mlp_layer != "swiglu":
            raise ValueError(
                f"mlp_align={self.mlp_align} cannot be combined with mlp_layer={self.mlp_layer!r}: only the "
                "unpacked SwiGLU rounds its width; expected mlp_layer='swiglu' or mlp_align=0"
            )
        if self.mlp_layer == "swiglu_packed" and int(self.embed_dim * self.mlp_ratio) % 2:
            raise ValueError(
                f"mlp_ratio={self.mlp_ratio} is invalid for mlp_layer='swiglu_packed': fc1's width "
                f"int(embed_dim * mlp_ratio) = {int(self.embed_dim * self.mlp_ratio)} holds gate and input "
                "halves; expected it even"
            )

    def _validate_attention(self) -> None:
        """num_kv_heads, qk_norm and layer_scale_mlp: each alone, and with the fields they need."""
        kv = self.num_kv_heads
        if isinstance(kv, tuple) and len(kv) != self.depth:
            raise ValueError(
                f"num_kv_heads={kv!r} has {len(kv)} entries for depth={self.depth}; expected one per block "
                "(or one int for every block)"
            )
        for heads in self.kv_heads:
            try:
                check_kv_heads(self.num_heads, heads, self.qkv_fused)
            except ValueError as e:
                raise ValueError(f"num_kv_heads={kv!r} is invalid: {e}") from None
        if self.rope == "mixed" and any(h != self.num_heads for h in self.kv_heads):
            raise ValueError(
                f"num_kv_heads={kv!r} cannot be combined with rope='mixed': its learned frequencies are per query "
                "head; expected rope='cat' or 'dinov3', or num_kv_heads=None"
            )
        check_fields(self, [(self.qk_norm in QK_NORMS, "qk_norm", "one of " + ", ".join(map(repr, QK_NORMS)))])
        if not self.layer_scale_mlp and not self.init_values:
            raise ValueError(
                "layer_scale_mlp=False places LayerScale on the attention branch only, so it needs init_values; "
                "expected init_values set (e.g. 1.0) or layer_scale_mlp=True"
            )

    @property
    def kv_heads(self) -> tuple[int, ...]:
        """The key/value head count of each block (num_heads where num_kv_heads is None)."""
        kv = self.num_kv_heads
        if isinstance(kv, tuple):
            return kv
        return (self.num_heads if kv is None else kv,) * self.depth

    def _validate_rope(self) -> None:
        check_fields(
            self,
            [
                (self.rope in ("", *ROPE_KINDS), "rope", "'' (none) or one of " + ", ".join(map(repr, ROPE_KINDS))),
                (self.rope_temperature > 0, "rope_temperature", "a positive number"),
                (self.rope_grid_indexing in GRID_INDEXINGS, "rope_grid_indexing", "'ij' or 'xy'"),
                (
                    self.rope_normalize_coords in NORMALIZE_COORDS,
                    "rope_normalize_coords",
                    "'separate', 'min' or 'max'",
                ),
                (
                    self.rope_ref_feat_shape is None or min(self.rope_ref_feat_shape) > 0,
                    "rope_ref_feat_shape",
                    "None or a list of 2 positive ints",
                ),
                (
                    self.rope_min_period is None or self.rope_min_period > 0,
                    "rope_min_period",
                    "None or a positive number",
                ),
                (
                    self.rope_max_period is None or self.rope_max_period > 0,
                    "rope_max_period",
                    "None or a positive number",
                ),
                (self.rope_shift_coords is None or self.rope_shift_coords >= 0, "rope_shift_coords", "None or >= 0"),
                (self.rope_jitter_coords is None or self.rope_jitter_coords >= 1, "rope_jitter_coords", "None or >= 1"),
                (
                    self.rope_rescale_coords is None or self.rope_rescale_coords >= 1,
                    "rope_rescale_coords",
                    "None or >= 1",
                ),
            ],
        )
        if (self.rope_min_period is None) != (self.rope_max_period is None):
            raise ValueError(
                f"rope_min_period={self.rope_min_period!r} and rope_max_period={self.rope_max_period!r}: "
                "expected both (DINOv3's period range) or neither (periods from rope_temperature)"
            )
        if self.rope:  # what the layer itself refuses (a head width, a layout)
            check_rope_args(
                self.rope,
                self.embed_dim // self.num_heads,
                self.rope_rotate_half,
                self.rope_grid_indexing,
                self.rope_normalize_coords,
            )

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def field_types(cls) -> dict[str, Any]:
        """Each field's annotation, evaluated (this module's annotations are strings)."""
        return _field_types()

    def replace(self, **overrides: Any) -> ViTConfig:
        unknown = sorted(set(overrides) - set(self.field_names()))
        if unknown:
            raise TypeError(
                f"unknown config field(s) {', '.join(map(repr, unknown))}; valid fields: {', '.join(self.field_names())}"
            )
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViTConfig:
        return cls().replace(**data)

    @property
    def input_size(self) -> tuple[int, int, int]:
        """(channels, height, width) of the input: `PretrainedCfg.input_size` of a model without weights."""
        return (self.in_chans, *to_2tuple(self.img_size))

    @property
    def grid_size(self) -> tuple[int, int]:
        (h, w), (ph, pw) = to_2tuple(self.img_size), to_2tuple(self.patch_size)
        if self.conv_stem:
            return (-(-h // ph), -(-w // pw))  # a stem's padding rounds up
        return (h // ph, w // pw)  # whole patches (exact unless drop_remainder)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distilled) + self.reg_tokens

    @property
    def num_params(self) -> int:
        """The parameter count of the model this config builds, by arithmetic: a listing of hundreds
        of names builds none (tests/test_registry.py checks it against every registered model)."""
        d, ph, pw = self.embed_dim, *to_2tuple(self.patch_size)
        norm = self._norm_params

        def linear(n_in: int, n_out: int, bias: bool = True) -> int:
            return n_in * n_out + (n_out if bias else 0)

        # The patch projection: a stem's 3x3 convs (BatchNorm brings their biases), or one conv per patch.
        channels = (self.in_chans, *self.conv_stem)
        stem = sum(linear(c_in * 9, c_out, False) + 2 * c_out for c_in, c_out in itertools.pairwise(channels))
        kernel = channels[-1] * 9 if self.conv_stem else self.in_chans * ph * pw
        total = stem + linear(kernel, d, self.patch_bias) + self.num_prefix_tokens * d
        total += norm(d) if self.embed_norm else 0
        if self.hybrid_stem:  # a CNN stem (and its projection) instead of the patch conv
            total += hybrid_params(self.hybrid_stem, self.hybrid_layers, self.in_chans, d, ph, self.patch_bias)
            total -= linear(kernel, d, self.patch_bias)
        if self.pos_embed == "learned":
            gh, gw = self.grid_size
            total += (gh * gw + (0 if self.no_embed_class else self.num_prefix_tokens)) * d
        elif self.pos_embed == "factorized":  # one vector per row and one per column
            total += sum(self.grid_size) * d
        if self.rope == "mixed":  # learned frequencies: (x, y) per block and head, a quarter of the head width each
            total += 2 * self.depth * self.num_heads * 2 * -(-(d // self.num_heads) // 4)
        total += norm(d) * (int(self.pre_norm) + int(self.final_norm and not self.fc_norm) + int(self.fc_norm))
        total += sum(self._block_params(heads) for heads in self.kv_heads) + self._sam_params()
        if self.rel_pos_table:  # one (offsets + 3, heads) table per block
            total += self.depth * num_relative_distances(self.grid_size) * self.num_heads
        if self.rel_pos_mlp:  # the bias MLP, 2 -> rel_pos_mlp -> heads, per block or shared
            mlps = 1 if self.rel_pos_mlp_shared else self.depth
            total += mlps * (linear(2, self.rel_pos_mlp) + linear(self.rel_pos_mlp, self.num_heads))
        if self.global_pool == "map":  # latent query, q, kv, proj, norm and a plain MLP
            hidden = int(d * (self.attn_pool_mlp_ratio or self.mlp_ratio))
            total += (
                d + linear(d, d) + linear(d, 2 * d) + linear(d, d) + norm(d) + linear(d, hidden) + linear(hidden, d)
            )
        if self.global_pool == "coca":  # its poolers, its norm where it holds the final one
            total += self._coca_params()
        if self.representation_size:
            total += linear(d, self.representation_size)
        if self.num_classes > 0:
            heads = 2 if self.distilled else 1
            total += heads * linear(self.representation_size or self.pool_dim, self.num_classes, self.head_bias)
        return total

    def _coca_params(self) -> int:
        queries = self.attn_pool_queries or COCA_QUERIES
        own = coca_pool_params(
            self.pool_dim,
            self.embed_dim,
            queries,
            self.attn_pool_type,
            self.norm_in_pool,
            self._norm_params(self.pool_dim),
        )
        return own - (self._norm_params(self.embed_dim) if self.norm_in_pool else 0)  # not on the tokens

    def _sam_params(self) -> int:
        """SAM's relative position tables (a window's, or the grid's in a global block) and neck."""
        total = neck_params(self.embed_dim, self.neck_chans) if self.neck_chans else 0
        if self.rel_pos:
            ws = self.window_size
            for i in range(self.depth):
                grid = (ws, ws) if ws and i not in self.global_attn_indexes else self.grid_size
                total += rel_pos_params(grid, self.embed_dim // self.num_heads)
        return total

    def _block_params(self, kv_heads: int) -> int:
        d = self.embed_dim
        # differential attention: four lambda vectors of half a head, the sub-norm's scale over a head
        diff = 3 * (d // self.num_heads) if self.attn_layer == "diff" else 0
        if self.block_type == "parallel":
            return self._parallel_block_params() + diff
        kv = d // self.num_heads * kv_heads  # the width of k and of v (d without grouped-query attention)
        q_and_v_bias = self.qkv_bias and not self.k_bias
        bias = int(self.proj_bias)  # of the output projection and the MLP's layers
        attn = 2 * d * d + 2 * d * kv + bias * d  # q, k, v and the output projection
        attn += d + 2 * kv if self.qkv_bias and self.k_bias else d + kv if q_and_v_bias else 0
        attn += self._norm_params(d) if self.attn_norm else 0  # the sub-LN before proj
        if self.qk_norm:  # one norm of q and one of k, over a head or over all heads
            attn += 2 * self._norm_params(d // self.num_heads) if self.qk_norm == "head" else self._norm_params(d + kv)
        hidden = mlp_hidden_dim(self.mlp_layer, d, self.mlp_ratio, self.mlp_align)
        inputs = 1 if self.mlp_layer == "mlp" else 2  # a gated MLP projects to gate and input
        mlp = inputs * (d * hidden + bias * hidden) + hidden * d + bias * d
        mlp += self._norm_params(hidden) if self.mlp_norm else 0
        # LayerScale (a post-norm block has none: init_values is its norms' initial weight)
        scales = (1 + int(self.layer_scale_mlp)) * d if self.init_values and self.block_type != "postnorm" else 0
        return attn + mlp + 2 * self._norm_params(d) + scales + diff

    def _parallel_block_params(self) -> int:
        """layers/parallel_block.py: one norm, in_proj (MLP hidden + q, k, v), the output projection(s)."""
        d, hidden = self.embed_dim, int(self.mlp_ratio * self.embed_dim)
        in_proj = d * (hidden + 3 * d) + (hidden + 3 * d if self.qkv_bias else hidden)  # else mlp_bias
        out = (d + hidden) * d + d if self.attn_layer == "diff" else d * d + d + hidden * d + d
        return self._norm_params(d) + in_proj + out + (d if self.init_values else 0)

    def _norm_params(self, n: int) -> int:
        return 2 * n if self.norm_layer == "layernorm" else n  # LayerNorm: weight and bias; RMSNorm: a scale


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(ViTConfig)


# The keys of timm's pretrained cfg that follow from the architecture rather than the weights; one
# home, read by `VisionTransformer.default_cfg`, the registry (`get_pretrained_cfg_value`) and push.
TIMM_ARCHITECTURE_KEYS = ("fixed_input_size", "first_conv", "classifier")


def timm_architecture_cfg(config: ViTConfig) -> dict[str, Any]:
    """TIMM_ARCHITECTURE_KEYS of a model of `config`: whether only its own input size is taken (not
    `dynamic_img_size`), its first convolution and its classifier(s), as timm names them."""
    first_conv = "patch_embed.proj"
    if config.hybrid_stem:  # the stem's first conv, as timm names it
        first_conv = "patch_embed.backbone." + (
            "0.conv" if config.hybrid_stem == "mci" else "stem.conv" if config.hybrid_layers else "conv"
        )
    return {
        "fixed_input_size": not config.dynamic_img_size,
        "first_conv": first_conv,
        "classifier": ("head", "head_dist") if config.distilled else "head",
    }


def timm_default_cfg(pcfg: PretrainedCfg, config: ViTConfig) -> dict[str, Any]:
    """timm's whole pretrained cfg as one dict: the fields of `pcfg` and the architecture's keys."""
    return {**pcfg.to_dict(), **timm_architecture_cfg(config)}


def fit_pretrained_cfg(cfg: PretrainedCfg, config: ViTConfig) -> PretrainedCfg:
    """A name's preprocessing without weights, fitted to the model `config` builds: its input size and
    class count (its label names only while the class count is theirs)."""
    labels = cfg.label_names if config.num_classes == cfg.num_classes else None
    return cfg.replace(input_size=config.input_size, num_classes=config.num_classes, label_names=labels)


def pos_embed_for_grid(
    pos_embed: torch.Tensor,
    grid: tuple[int, int],
    old_grid: tuple[int, int],
    prefix: int,
    learned: bool,
    rule: str = "timm",
) -> torch.Tensor:
    """The position table for a (rows, columns) grid of patches: a learned table resampled by
    `rule` (ViTConfig.pos_resample; "timm": layers/pos_embed.py, the others: layers/naflex.py),
    the sinusoidal one computed for that many tokens."""
    if learned and rule != "timm":
        rows = resample_table(pos_embed[0, prefix:], old_grid, grid, rule)
        return torch.cat([pos_embed[:, :prefix], rows.unsqueeze(0)], dim=1)
    if learned:
        return resample_abs_pos_embed(pos_embed, new_grid=grid, old_grid=old_grid, num_prefix_tokens=prefix)
    table = sincos_1d(grid[0] * grid[1] + prefix, pos_embed.shape[-1]).unsqueeze(0)
    return table.to(device=pos_embed.device, dtype=pos_embed.dtype)


def pos_embed_for_image(
    pos_embed: torch.Tensor,
    image_size: torch.Size,
    patch_size: tuple[int, int],
    old_grid: tuple[int, int],
    prefix: int,
    learned: bool,
    round_up: bool = True,
    rule: str = "timm",
) -> torch.Tensor:
    """`dynamic_img_size`: the table for an image of `image_size` (the table itself for the model's
    own grid): `round_up` counts a partial cell (a conv stem pads), otherwise whole patches only.
    A leaf of torch.fx graphs (`torch.fx.wrap` below), so a traced dynamic model adapts its
    positions to each input as the eager one does. Under torch.export with symbolic sizes the
    table is always resampled: a test of the grid would pin the graph to the example's size."""
    if round_up:
        grid = (-(-image_size[0] // patch_size[0]), -(-image_size[1] // patch_size[1]))
    else:
        grid = (image_size[0] // patch_size[0], image_size[1] // patch_size[1])
    symbolic = any(isinstance(side, torch.SymInt) for side in grid)
    if not symbolic and grid == tuple(old_grid):
        return pos_embed
    return pos_embed_for_grid(pos_embed, grid, old_grid, prefix, learned, rule)


torch.fx.wrap("pos_embed_for_image")
torch.fx.wrap("factorized_for_image")


# What forward_intermediates returns per block: token maps, or (map, prefix tokens) pairs.
Intermediates = list[torch.Tensor] | list[tuple[torch.Tensor, torch.Tensor]]


def feature_take_indices(num_blocks: int, indices: int | Sequence[int] | None) -> tuple[list[int], int]:
    """timm's block selection: None = every block, an int n = the last n blocks, a list = those
    blocks (negative counts from the end). Returns the absolute indices and the largest one."""
    if indices is None:
        indices = num_blocks
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)):
        raise TypeError(f"indices={indices!r} is invalid; expected None, an int or a list of ints")
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ValueError(
                f"indices={indices} is invalid; expected the number of last blocks to take, from 1 to {num_blocks}"
            )
        taken = list(range(num_blocks - indices, num_blocks))
    else:
        taken = []
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not -num_blocks <= i < num_blocks:
                raise ValueError(
                    f"indices={list(indices)} is invalid; expected block indices from {-num_blocks} to "
                    f"{num_blocks - 1} (this model has {num_blocks} blocks)"
                )
            taken.append(i % num_blocks)
        if not taken:
            raise ValueError("indices=[] is invalid; expected at least one block index")
    return taken, max(taken)


class VisionTransformer(nn.Module):
    """A ViT and its variants. Build it from a `ViTConfig`, from keyword fields, or both (fields override)."""

    pos_embed: torch.Tensor | None  # a Parameter when learned, a non-persistent buffer when sincos, else None
    pos_embed_y: nn.Parameter | None  # pos_embed="factorized": (1, rows, D) and (1, columns, D)
    pos_embed_x: nn.Parameter | None

    def __init__(self, config: ViTConfig | None = None, /, **fields: Any) -> None:
        super().__init__()
        config = (config or ViTConfig()).replace(**fields)
        self.config = config
        self.pretrained_cfg = PretrainedCfg(input_size=config.input_size, num_classes=config.num_classes)
        D = config.embed_dim
        self.num_prefix_tokens = config.num_prefix_tokens
        self.num_features = config.neck_chans or D  # what the final norm (or SAM's neck) gives
        self.head_hidden_size = config.representation_size or config.pool_dim
        self.grad_checkpointing = False

        self.patch_embed: PatchEmbed | HybridEmbed = self._new_patch_embed()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, config.reg_tokens, D)) if config.reg_tokens else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distilled else None
        num_positions = self.patch_embed.num_patches + self._embedded_prefix_tokens()
        if config.pos_embed == "learned":
            self.pos_embed = nn.Parameter(torch.zeros(1, num_positions, D))
        elif config.pos_embed == "sincos":  # fixed sinusoids; derived from the config, so not saved in state dicts
            self.register_buffer("pos_embed", sincos_1d(num_positions, D).unsqueeze(0), persistent=False)
        else:  # positions only from the rotary embedding, or from the factorized tables below
            self.pos_embed = None
        self.pos_embed_y = self.pos_embed_x = None
        if config.pos_embed == "factorized":  # layers/pos_factorized.py
            rows, cols = self.patch_embed.grid_size
            self.pos_embed_y = nn.Parameter(torch.zeros(1, rows, D))
            self.pos_embed_x = nn.Parameter(torch.zeros(1, cols, D))
        self.rope = self._new_rope() if config.rope else None
        # timm's relpos ViT: one relative position bias MLP for every block (else each block's own)
        self.shared_rel_pos = self._new_rel_pos_mlp() if config.rel_pos_mlp_shared else None
        self.pos_drop = nn.Dropout(config.drop_rate)
        self.norm_pre = make_norm(config.norm_layer, D, config.norm_eps) if config.pre_norm else nn.Identity()

        self.blocks = self._new_blocks()
        # With fc_norm the final LayerNorm moves after the pooling (validate() ensures final_norm);
        # open_clip's CoCa holds it in its pool (config.norm_in_pool).
        final_norm_on_tokens = config.final_norm and not config.fc_norm and not config.norm_in_pool
        self.norm = make_norm(config.norm_layer, D, config.norm_eps) if final_norm_on_tokens else nn.Identity()
        self.neck = Neck(D, config.neck_chans) if config.neck_chans else None  # SAM's, in the final norm's place

        self.attn_pool = self._new_attn_pool()
        self.fc_norm = make_norm(config.norm_layer, D, config.norm_eps) if config.fc_norm else nn.Identity()
        if config.representation_size:
            self.pre_logits: nn.Module = nn.Sequential()
            self.pre_logits.add_module("fc", nn.Linear(D, config.representation_size))
            self.pre_logits.add_module("act", nn.Tanh())
        else:
            self.pre_logits = nn.Identity()
        self.head = self._new_head(config.num_classes)
        self.head_dist = self._new_head(config.num_classes) if config.distilled else None
        self.init_weights()

    # ----------------------------------------------------------------------------- timm's attributes
    # What code written for timm reads off a model; each follows the config (reset_classifier,
    # prune_intermediate_layers, set_input_size change it).
    @property
    def num_classes(self) -> int:
        return self.config.num_classes

    @property
    def embed_dim(self) -> int:
        return self.config.embed_dim

    @property
    def global_pool(self) -> str:
        return self.config.global_pool

    @property
    def feature_info(self) -> list[dict[str, Any]]:
        """One entry per block, as timm's VisionTransformer lists them: channels, stride in pixels
        of its (B, D, rows, columns) map, and the module's name."""
        reduction = max(self.patch_embed.patch_size)
        return [
            {"num_chs": self.config.embed_dim, "reduction": reduction, "module": f"blocks.{i}"}
            for i in range(len(self.blocks))
        ]

    @property
    def default_cfg(self) -> dict[str, Any]:
        """timm's pretrained cfg of this model, a plain dict: `pretrained_cfg`'s fields plus the keys
        timm derives from the architecture (fixed_input_size, first_conv, classifier)."""
        return timm_default_cfg(self.pretrained_cfg, self.config)

    # ----------------------------------------------------------------------------- set-up
    def _new_patch_embed(self) -> PatchEmbed | HybridEmbed:
        c = self.config
        if c.hybrid_stem:
            return HybridEmbed(
                kind=c.hybrid_stem,
                layers=c.hybrid_layers,
                img_size=c.img_size,
                patch_size=c.patch_size,
                in_chans=c.in_chans,
                embed_dim=c.embed_dim,
                bias=c.patch_bias,
                strict_img_size=not c.dynamic_img_size,
            )
        return PatchEmbed(
            img_size=c.img_size,
            patch_size=c.patch_size,
            in_chans=c.in_chans,
            embed_dim=c.embed_dim,
            conv_stem=c.conv_stem,
            bias=c.patch_bias,
            strict_img_size=not c.dynamic_img_size,
            drop_remainder=c.drop_remainder,
            norm=make_norm(c.norm_layer, c.embed_dim, c.norm_eps) if c.embed_norm else None,
        )

    def _first_weight(self) -> torch.Tensor:
        """The patch embedding's first weight: the model's dtype and device."""
        if isinstance(self.patch_embed, HybridEmbed):
            return self.patch_embed.first_weight
        return self.patch_embed.proj.weight

    def _new_head(self, num_classes: int) -> nn.Module:
        if num_classes <= 0:
            return nn.Identity()
        return nn.Linear(self.head_hidden_size, num_classes, bias=self.config.head_bias)

    def _new_attn_pool(self) -> AttentionPool | CocaPool | None:
        """The pool with weights of its own that `config.global_pool` names (None: a parameter-free one)."""
        c = self.config
        if c.global_pool == "coca":
            return CocaPool(
                dim=c.pool_dim,
                context_dim=c.embed_dim,
                num_heads=c.attn_pool_num_heads or c.num_heads,
                num_queries=c.attn_pool_queries or COCA_QUERIES,
                pool_type=c.attn_pool_type,
                post_norm=c.norm_in_pool,
                norm_eps=c.norm_eps,
                norm_layer=c.norm_layer,
            )
        if c.global_pool != "map":
            return None
        return AttentionPool(
            dim=c.embed_dim,
            num_heads=c.attn_pool_num_heads or c.num_heads,
            mlp_ratio=c.attn_pool_mlp_ratio or c.mlp_ratio,  # PE-Core-G's pool has a width of its own
            norm_eps=c.norm_eps,
            act_layer=c.act_layer,
            norm_layer=c.norm_layer,
        )

    def _new_blocks(self) -> nn.Sequential:
        c = self.config
        # Stochastic depth grows linearly with depth: early blocks carry more general features.
        dpr = [c.drop_path_rate * i / max(c.depth - 1, 1) for i in range(c.depth)]

        def new_block(i: int, **options: Any) -> nn.Module:  # SAM's: windows (but in global ones), relative positions
            if not self._grid_blocks:
                return make_block(c.block_type, **options)
            window = 0 if i in c.global_attn_indexes else c.window_size
            return SamBlock(window_size=window, rel_pos=c.rel_pos, grid=self.patch_embed.grid_size, **options)

        return nn.Sequential(
            *[
                new_block(
                    i,
                    dim=c.embed_dim,
                    num_heads=c.num_heads,
                    mlp_ratio=c.mlp_ratio,
                    qkv_bias=c.qkv_bias,
                    drop=c.drop_rate,
                    attn_drop=c.attn_drop_rate,
                    drop_path=dpr[i],
                    norm_eps=c.norm_eps,
                    init_values=c.init_values,
                    act_layer=c.act_layer,
                    mlp_layer=c.mlp_layer,
                    mlp_norm=c.mlp_norm,
                    attn_norm=c.attn_norm,
                    mlp_align=c.mlp_align,
                    norm_layer=c.norm_layer,
                    qkv_fused=c.qkv_fused,
                    k_bias=c.k_bias,
                    proj_bias=c.proj_bias,
                    rope_rotate_half=c.rope_rotate_half,
                    attn_layer=c.attn_layer,
                    index=i,
                    num_kv_heads=c.kv_heads[i],
                    qk_norm=c.qk_norm,
                    layer_scale_mlp=c.layer_scale_mlp,
                    **({"rel_pos": self._new_block_rel_pos()} if self._block_rel_pos else {}),
                )
                for i in range(c.depth)
            ]
        )

    @property
    def _block_rel_pos(self) -> bool:
        """Whether each block has a relative position bias of its own (BEiT's table, a relpos MLP)."""
        return self.config.rel_pos_table or bool(self.config.rel_pos_mlp and not self.config.rel_pos_mlp_shared)

    def _new_block_rel_pos(self) -> nn.Module:
        c = self.config
        return RelPosBiasTable(c.grid_size, c.num_heads) if c.rel_pos_table else self._new_rel_pos_mlp()

    def _new_rel_pos_mlp(self) -> RelPosMlp:
        c = self.config
        grid = self.patch_embed.grid_size
        return RelPosMlp(
            num_heads=c.num_heads, grid=grid, hidden_dim=c.rel_pos_mlp, prefix_tokens=self.num_prefix_tokens
        )

    def _new_rope(self) -> RotaryEmbedding2d:
        c = self.config
        return RotaryEmbedding2d(
            c.rope,
            head_dim=c.embed_dim // c.num_heads,
            num_heads=c.num_heads,
            depth=c.depth,
            grid=self.patch_embed.grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            temperature=c.rope_temperature,
            grid_indexing=c.rope_grid_indexing,
            grid_offset=c.rope_grid_offset,
            ref_feat_shape=c.rope_ref_feat_shape,
            rotate_half=c.rope_rotate_half,
            min_period=c.rope_min_period,
            max_period=c.rope_max_period,
            normalize_coords=c.rope_normalize_coords,
            shift_coords=c.rope_shift_coords,
            jitter_coords=c.rope_jitter_coords,
            rescale_coords=c.rope_rescale_coords,
        )

    @property
    def _grid_blocks(self) -> bool:
        """Whether the blocks need the (rows, columns) grid of their tokens (SAM's: layers/sam.py)."""
        return bool(self.config.window_size or self.config.rel_pos)

    def _final(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """The final norm of (B, tokens, D) tokens, or SAM's neck over their (rows, columns) grid."""
        x = self.norm(x)
        return x if self.neck is None else self.neck.tokens(x, grid)

    def _embedded_prefix_tokens(self) -> int:
        """How many prefix tokens have a row in the position table (none with no_embed_class)."""
        return 0 if self.config.no_embed_class else self.num_prefix_tokens

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's default init: truncated normal(0.02) for Linears and the position embedding,
        tiny normal for the prefix tokens, LeCun-normal-like fan-in init for the patch conv,
        LayerScale at init_values and the pooling query at std 1/sqrt(D)."""
        if self._first_weight().is_meta:
            # Built on the meta device (to count parameters, or to receive a checkpoint by
            # assignment): there is no data to initialise, and random init on meta tensors goes
            # through torch's Python reference ops, whose first use imports torch._dynamo (slow to load).
            return

        def init_module(m: nn.Module) -> None:
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
            elif isinstance(m, AttentionalPooler):
                m.init_query()
            if hasattr(m, "lambda_q1"):  # differential attention (layers/diff_attention.py)
                init_lambdas(m)

        self.apply(init_module)
        if isinstance(self.patch_embed, HybridEmbed):  # PyTorch's conv and norm init (timm's too)
            self._init_tokens()
            return
        w = self.patch_embed.proj.weight
        nn.init.trunc_normal_(w, std=math.sqrt(1.0 / (w[0].numel())))
        if self.patch_embed.proj.bias is not None:
            nn.init.zeros_(self.patch_embed.proj.bias)
        self._init_tokens()

    def _init_tokens(self) -> None:
        for table in (self.pos_embed, self.pos_embed_y, self.pos_embed_x):
            if isinstance(table, nn.Parameter):
                nn.init.trunc_normal_(table, std=0.02)
        for token in (self.cls_token, self.reg_token, self.dist_token):
            if token is not None:
                nn.init.normal_(token, std=1e-6)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier head(s) with freshly initialised ones for `num_classes` (timm's
        signature). `global_pool` may switch between "token", "avg" and "" or drop "map"; an
        attention pool cannot be added here, since its weights would be untrained."""
        changes: dict[str, Any] = {"num_classes": num_classes}
        if global_pool is not None:
            self._check_pool_switch(global_pool)
            changes["global_pool"] = global_pool
        self.config = self.config.replace(**changes)  # validates before anything changes
        if self.config.global_pool not in ("map", "coca"):
            self.attn_pool = None
        # The new head lives where the model lives, in its dtype (a bf16 model gets a bf16 head).
        like = self._first_weight()
        self.head = self._new_head(num_classes).to(device=like.device, dtype=like.dtype)
        if self.config.distilled:
            self.head_dist = self._new_head(num_classes).to(device=like.device, dtype=like.dtype)
        for head in (self.head, self.head_dist):
            if isinstance(head, nn.Linear):
                nn.init.trunc_normal_(head.weight, std=0.02)
                if head.bias is not None:
                    nn.init.zeros_(head.bias)
            if head is not None:
                head.train(self.training)
        self.pretrained_cfg = self.pretrained_cfg.replace(num_classes=num_classes, label_names=None)

    def _check_pool_switch(self, global_pool: str) -> None:
        """reset_classifier's refusals: no attention pool is added (its weights would be untrained), and
        CoCa's is not taken away (its width and, in open_clip's arrangement, the final norm are the head's input)."""
        if global_pool in ("map", "coca") and global_pool != self.config.global_pool:
            pool = "attention pooling" if global_pool == "map" else "CoCa's attentional pooler"
            raise ValueError(
                f"reset_classifier: global_pool={global_pool!r} is invalid for a model built without {pool}; "
                f"expected 'token', 'avg' or '' here, or build the model with global_pool={global_pool!r}"
            )
        if self.config.global_pool == "coca" and global_pool != "coca":
            raise ValueError(
                f"reset_classifier: global_pool={global_pool!r} is invalid for a model built with global_pool='coca': "
                "its pooler's width and norm are what the head takes; expected 'coca' (or None)"
            )

    def save_pretrained(
        self, directory: str | os.PathLike[str], *, max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE
    ) -> Path:
        """Write config.json + model.safetensors into `directory` (atomically, see vitzoo/layout.py),
        as shards and their index above `max_shard_size` (bytes, or "5GB", "500MB");
        `vitzoo.from_pretrained(directory)` reads it back."""
        return save_pretrained(self, directory, max_shard_size=max_shard_size)

    def push_to_hub(self, repo_id: str, **options: Any) -> str:
        """Upload this model to the Hugging Face Hub as one commit and return the commit's URL: the
        layout timm and transformers load where timm has the architecture (else vitzoo's), and a
        model card. The keywords are `vitzoo.push.push_to_hub`'s: private=False, revision=None,
        commit_message, token=None (else HF_TOKEN or the cached login), license=None (replaces the
        weights' own), run=None (the record of the training run, for the card), max_shard_size="5GB"
        (larger weights go up as shards and their index)."""
        pushed: str = hub_pusher()(self, repo_id, **options)
        return pushed

    def no_weight_decay(self) -> set[str]:
        """Parameter names that an optimizer should not decay (tokens and position embedding), as
        timm lists them (timm decays the attention pool's latent query like any weight)."""
        names = ("pos_embed", "pos_embed_y", "pos_embed_x", "cls_token", "reg_token", "dist_token")
        skip = {name for name in names if isinstance(getattr(self, name), nn.Parameter)}
        if self.rope is not None:  # RoPE-Mixed's learned frequencies, as timm lists them
            skip |= {f"rope.{name}" for name in self.rope.no_weight_decay()}
        # BEiT's relative position tables, as timm lists them
        skip |= {name for name, _ in self.named_parameters() if name.endswith("relative_position_bias_table")}
        return skip

    def set_grad_checkpointing(self, enable: bool = True) -> None:
        """Recompute each block's activations in the backward pass instead of keeping them
        (torch.utils.checkpoint): the same gradients, less memory, one more forward per block."""
        self.grad_checkpointing = enable

    def set_input_size(
        self, img_size: int | tuple[int, int] | None = None, patch_size: int | tuple[int, int] | None = None
    ) -> None:
        """Change the input size for good (timm's method): the learned position table is resampled
        once (bicubic, as `dynamic_img_size` does per call), a sinusoidal one recomputed, BEiT's
        relative position tables resized (layers/relpos_bias.py), a relpos MLP's offsets recomputed
        (layers/relpos_mlp.py), and `config.img_size` and
        `pretrained_cfg.input_size` follow."""
        if patch_size is not None and to_2tuple(patch_size, "patch_size") != self.patch_embed.patch_size:
            raise ValueError(
                f"set_input_size: patch_size={patch_size!r} is invalid; the patch projection's kernel is not resampled "
                f"here, expected None or the model's patch size {self.patch_embed.patch_size}"
            )
        if img_size is None:
            return
        config = self.config.replace(img_size=img_size)  # validates the size against the patch
        new_grid = self.patch_embed.dynamic_feat_size(to_2tuple(config.img_size))
        if self.pos_embed_y is not None and config.pos_resample == "timm_square" and new_grid[0] != new_grid[1]:
            raise ValueError(
                f"set_input_size: img_size={img_size!r} is invalid for an aspect-preserving factorized table "
                f"(pos_resample='timm_square'): its row and column tables resample to one length, so only a "
                f"square grid keeps them; expected a square size, or keep the size and use dynamic_img_size"
            )
        if self.pos_embed is not None:
            with torch.no_grad():
                table = self._pos_embed_for_grid(new_grid)
            if isinstance(self.pos_embed, nn.Parameter):
                self.pos_embed = nn.Parameter(table, requires_grad=self.pos_embed.requires_grad)
            else:
                self.pos_embed = table  # replaces the buffer, still non-persistent
        if self.pos_embed_y is not None and self.pos_embed_x is not None:
            # the axis tables the new grid reads, kept: forward at that grid adds the same positions
            with torch.no_grad():
                y, x = factorized_axes(self.pos_embed_y, self.pos_embed_x, new_grid, self.config.pos_resample)
            self.pos_embed_y = nn.Parameter(y.clone(), requires_grad=self.pos_embed_y.requires_grad)
            self.pos_embed_x = nn.Parameter(x.clone(), requires_grad=self.pos_embed_x.requires_grad)
        if self.rope is not None:
            self.rope.set_grid(new_grid)
        for module in self.modules():  # BEiT's tables resized as timm resizes them; relpos MLPs' offsets
            if isinstance(module, (RelPosBiasTable, RelPosMlp)):
                module.set_grid(new_grid)
        self.patch_embed.set_input_size(config.img_size)
        self.config = config
        self.pretrained_cfg = self.pretrained_cfg.replace(input_size=config.input_size)

    def prune_intermediate_layers(
        self, indices: int | Sequence[int] = 1, prune_norm: bool = False, prune_head: bool = True
    ) -> list[int]:
        """Keep only what `forward_intermediates(x, indices)` needs (timm's method): the blocks up to
        the last one taken, the final norm unless `prune_norm`, and no pooling or head when
        `prune_head` (then `model(x)` returns the token sequence). The config follows, so a pruned
        model saves and loads like any other. Returns the absolute block indices."""
        taken, last = feature_take_indices(len(self.blocks), indices)
        self.blocks = self.blocks[: last + 1]
        changes: dict[str, Any] = {"depth": last + 1}
        if isinstance(self.config.num_kv_heads, tuple):  # one per block: the kept blocks'
            changes["num_kv_heads"] = self.config.num_kv_heads[: last + 1]
        if prune_norm:
            self.norm = nn.Identity()
            if not self.config.fc_norm:
                changes["final_norm"] = False
            if isinstance(self.attn_pool, CocaPool):  # open_clip's CoCa: the final norm is its pool's
                self.attn_pool.norm = nn.Identity()
            if self.neck is not None:  # SAM's neck is its final norm (timm prunes it so too)
                self.neck, self.num_features = None, self.config.embed_dim
                changes["neck_chans"] = 0
                if not prune_head:  # a head sized for the neck's width
                    prune_head = True
        if prune_head:
            if self.config.fc_norm or self.config.norm_in_pool:  # the final norm lived after the pooling: gone with it
                changes.update(fc_norm=False, final_norm=False)
            if self.config.global_pool == "coca":  # the pool's settings go with it
                changes.update(COCA_POOL_OFF, attn_pool_num_heads=None)
            self.fc_norm = nn.Identity()
            self.attn_pool = None
            self.pre_logits = nn.Identity()
            self.head_hidden_size = self.num_features
            self.head = nn.Identity()
            if self.config.distilled:  # DeiT keeps its two pooled tokens, averaged
                self.head_dist = nn.Identity()
            else:
                changes["global_pool"] = ""
            changes.update(num_classes=0, representation_size=None)
            self.pretrained_cfg = self.pretrained_cfg.replace(num_classes=0, label_names=None)
        self.config = self.config.replace(**changes)
        return taken

    # ----------------------------------------------------------------------------- forward
    def _pos_embed_for_grid(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position table for a (rows, columns) grid of patches (see `pos_embed_for_grid`)."""
        assert self.pos_embed is not None  # the callers check
        return pos_embed_for_grid(
            self.pos_embed,
            grid,
            self.patch_embed.grid_size,
            self._embedded_prefix_tokens(),
            self.config.pos_embed == "learned",  # static: under torch.fx the table is a Proxy
            self.config.pos_resample,
        )

    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) image -> (B, prefix + N, D) tokens with positions, before the blocks."""
        image_size = x.shape[-2:]
        # A model cast for inference (create(..., dtype=torch.bfloat16)) takes fp32 images as they
        # come out of the preprocessing: the input follows the weights (a no-op when they agree).
        pos_embed = self.pos_embed
        x = self.patch_embed(x.to((self._first_weight() if pos_embed is None else pos_embed).dtype))
        if self.pos_embed_y is not None and self.pos_embed_x is not None:  # factorized: patches only
            pos_embed = self._factorized_for_image(image_size)
        elif self.config.dynamic_img_size and pos_embed is not None:
            pos_embed = pos_embed_for_image(
                pos_embed,
                image_size,
                self.patch_embed.patch_size,
                self.patch_embed.grid_size,
                self._embedded_prefix_tokens(),
                self.config.pos_embed == "learned",  # static: under torch.fx the table is a Proxy
                bool(self.config.conv_stem),
                self.config.pos_resample,
            )
        prefix = [
            t.expand(x.shape[0], -1, -1) for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None
        ]
        if self.config.no_embed_class:
            # DeiT III, big_vision: positions for the patches only, then the prefix tokens join
            x = x if pos_embed is None else x + pos_embed
            if prefix:
                x = torch.cat([*prefix, x], dim=1)
        else:
            # ViT, DeiT: [cls, (dist | reg), patches], then one position per token
            if prefix:
                x = torch.cat([*prefix, x], dim=1)
            x = x if pos_embed is None else x + pos_embed
        return self.norm_pre(self.pos_drop(x))

    def _factorized_for_image(self, image_size: torch.Size) -> torch.Tensor:
        """pos_embed="factorized": the (1, N, D) table of an image (the model's own grid unless
        `dynamic_img_size`), layers/pos_factorized.py."""
        assert self.pos_embed_y is not None and self.pos_embed_x is not None  # the caller checks
        if not self.config.dynamic_img_size:  # the tables are the grid's (set_input_size keeps it so)
            return factorized_sum(self.pos_embed_y, self.pos_embed_x)
        return factorized_for_image(
            self.pos_embed_y, self.pos_embed_x, image_size, self.patch_embed.patch_size, self.config.pos_resample
        )

    def _rope_embed(self, image_size: torch.Size) -> torch.Tensor | None:
        """The rotary embedding for an image of `image_size`: the cached one of the model's grid,
        computed for the input's grid with `dynamic_img_size`."""
        if self.rope is None:
            return None
        if self.config.dynamic_img_size:
            return self.rope.embed_for_image(image_size, self.patch_embed.patch_size)
        return self.rope.get_embed()

    def _run_block(
        self,
        i: int,
        x: torch.Tensor,
        rope: torch.Tensor | None,
        attn_mask: torch.Tensor | None = None,
        grid: tuple[int, int] | None = None,
        attn_bias: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Block i; `grid`: the (rows, columns) of the patches, for blocks that need it (SAM's);
        `attn_bias`: the relative position bias shared by every block (relpos_mlp.py), None for none."""
        block = self.blocks[i]
        if rope is not None and self.rope is not None:
            rope = self.rope.for_block(rope, i)  # "mixed": block i's own frequencies
        args: tuple[Any, ...] = (x, rope, attn_mask)
        if grid is not None and self._grid_blocks:
            args = (x, rope, attn_mask, None, grid)
        elif attn_bias is not None:
            args = (x, rope, attn_mask, attn_bias)
        if self.grad_checkpointing and torch.is_grad_enabled():
            # Keep only the block's input; its inside is recomputed during backward (dropout and
            # DropPath draw the same random numbers again: the RNG state is saved with it).
            return checkpoint(block, *args, use_reentrant=False)
        return block(*args)

    # ----------------------------------------------------------------------------- patch sequences
    def patch_sequence_refusal(self) -> str | None:
        """Why this model cannot take a patch-sequence batch (layers/naflex.py), or None if it can."""
        if self._grid_blocks or self.neck is not None:
            return (
                "this model is SAM's image encoder (window_size, rel_pos, neck_chans: layers/sam.py): its blocks "
                "and neck work on one image's grid of patches, so it cannot take a patch-sequence batch; "
                "expected a (B, C, H, W) image"
            )
        if self.config.rel_pos_table or self.config.rel_pos_mlp:
            field = "BEiT's relative position table (rel_pos_table=True)"
            if self.config.rel_pos_mlp:
                field = f"a relative position bias MLP (rel_pos_mlp={self.config.rel_pos_mlp})"
            return (
                f"this model has {field}, made for one grid: it cannot take a patch-sequence batch of images of "
                "their own grids; expected a (B, C, H, W) image"
            )
        if self.config.hybrid_stem:
            return (
                f"this model has a CNN stem (hybrid_stem={self.config.hybrid_stem!r}): its tokens are not a linear "
                "map of each patch, so it cannot take a patch-sequence batch; expected a (B, C, H, W) image"
            )
        if self.config.conv_stem:
            return (
                f"this model has a convolutional stem (conv_stem={self.config.conv_stem}): its tokens are not a "
                "linear map of each patch, so it cannot take a patch-sequence batch; expected a (B, C, H, W) image"
            )
        return None

    def _patch_sequence(self, batch: PatchBatch) -> PatchSequence:
        """A patch-sequence batch checked against this model (layers/naflex.py)."""
        refusal = self.patch_sequence_refusal()
        if refusal is not None:
            raise PatchBatchError(refusal)
        return read_patch_batch(batch, self.patch_embed.patch_size, self.config.in_chans)

    def _naflex_rows(self, grid: tuple[int, int]) -> torch.Tensor:
        """The position table's patch rows for one image's grid, by `config.pos_resample`."""
        if self.pos_embed_y is not None and self.pos_embed_x is not None:  # layers/pos_factorized.py
            return factorized_table(self.pos_embed_y, self.pos_embed_x, grid, self.config.pos_resample)[0]
        assert self.pos_embed is not None  # the caller checks
        if self.config.pos_embed != "learned":  # sinusoids: computed for the grid's token count
            return self._pos_embed_for_grid(grid)[0, self._embedded_prefix_tokens() :]
        rows = self.pos_embed[0, self._embedded_prefix_tokens() :]
        return resample_table(rows, self.patch_embed.grid_size, grid, self.config.pos_resample)

    def _embed_sequence(self, seq: PatchSequence) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Patches -> (B, prefix + L, D) tokens with each image's positions, and its rotary embedding."""
        assert isinstance(self.patch_embed, PatchEmbed)  # a hybrid stem takes no patch sequence (refused before)
        x = self.patch_embed.norm(embed_patches(seq, self.patch_embed.proj.weight, self.patch_embed.proj.bias))
        prefix = [t for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
        table, embedded = self.pos_embed, self._embedded_prefix_tokens()
        prefix_rows = table[0, :embedded] if table is not None and embedded else None
        rows = None if table is None and self.pos_embed_y is None else self._naflex_rows
        x = add_positions(seq, x, rows, prefix, prefix_rows)
        rope = None if self.rope is None else rope_for_sequence(self.rope, seq)
        return self.norm_pre(self.pos_drop(x)), rope

    def _sequence_features(self, batch: PatchBatch) -> dict[str, torch.Tensor]:
        seq = self._patch_sequence(batch)
        x, rope = self._embed_sequence(seq)
        mask = seq.attn_mask(self.num_prefix_tokens)
        for i in range(len(self.blocks)):
            x = self._run_block(i, x, rope, mask)
        return {PATCHES: self.norm(x), PATCH_VALID: seq.valid, PATCH_COORD: seq.coord}

    # ----------------------------------------------------------------------------- forward
    @typing.overload
    def forward_features(self, x: torch.Tensor) -> torch.Tensor: ...
    @typing.overload
    def forward_features(self, x: PatchBatch) -> dict[str, torch.Tensor]: ...
    def forward_features(self, x: torch.Tensor | PatchBatch) -> torch.Tensor | dict[str, torch.Tensor]:
        """(B, C, H, W) -> (B, prefix + N, D) normalised tokens. A patch-sequence batch (a dict,
        layers/naflex.py) -> timm's NaFlexVit dict: "patches" the (B, prefix + L, D) tokens,
        "patch_valid" and "patch_coord" the batch's (padding's coordinates set to 0)."""
        if is_patch_batch(x):
            return self._sequence_features(typing.cast(PatchBatch, x))
        x = typing.cast(torch.Tensor, x)  # (a torch.fx Proxy while tracing)
        rope = self._rope_embed(x.shape[-2:])
        grid = self.patch_embed.dynamic_feat_size(x.shape[-2:])
        x = self._embed(x)
        shared = None if self.shared_rel_pos is None else self.shared_rel_pos()
        if self.grad_checkpointing or rope is not None or self._grid_blocks or shared is not None:
            for i in range(len(self.blocks)):
                x = self._run_block(i, x, rope, None, grid, shared)
        else:
            x = self.blocks(x)
        return self._final(typing.cast(torch.Tensor, x), grid)

    def pool(
        self, x: torch.Tensor, pool_type: str | None = None, patch_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, tokens, D) -> (B, D) by `config.global_pool`, or by `pool_type` ("token", "avg" or ""
        for the tokens unchanged) on a model without attention pooling (timm's signature).
        `patch_valid` (B, patches): the padding of a patch-sequence batch, left out of "avg" and "map"."""
        p = self.num_prefix_tokens
        if self.attn_pool is not None:
            return self.attn_pool(*self._attn_pool_input(x, patch_valid))
        pool_type = self.config.global_pool if pool_type is None else pool_type
        if pool_type == "avg":
            return x[:, p:].mean(dim=1) if patch_valid is None else masked_mean(x[:, p:], patch_valid)
        if pool_type == "token":
            return x[:, 0]
        if pool_type == "":
            return x
        raise ValueError(f"pool_type={pool_type!r} is invalid; expected 'token', 'avg' or '' (no pooling)")

    def _attn_pool_input(
        self, x: torch.Tensor, patch_valid: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tokens an attention pool attends over and their key mask: the patch tokens only, as
        timm's ViT; all of them as its Eva (PE) and open_clip's CoCa (pool_include_prefix)."""
        p, every = self.num_prefix_tokens, self.config.pool_include_prefix
        mask = None if patch_valid is None else key_mask(patch_valid, p if every else 0)
        return (x if every else x[:, p:]), mask

    def pool_with_tokens(
        self, x: torch.Tensor, patch_valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, tokens, D) as `forward_features` gives them -> (the pooled feature `pool` gives, the
        pool's other outputs), in one pass: CoCa's caption tokens (open_clip's `tokens`: (B, queries - 1,
        attn_pool_dim) for attn_pool_type "", (B, queries, attn_pool_dim) otherwise). The image
        embedding is `head(pooled)`. A model whose pool has no other outputs refuses."""
        forward_tokens = getattr(self.attn_pool, "forward_tokens", None)
        if forward_tokens is None:
            raise ValueError(
                f"pool_with_tokens: global_pool={self.config.global_pool!r} gives no tokens beside the pooled "
                "feature; expected a model with global_pool='coca' (CoCa's caption tokens)"
            )
        pooled, tokens = forward_tokens(*self._attn_pool_input(x, patch_valid))
        return pooled, tokens

    def forward_head(
        self, x: torch.Tensor | PatchBatch, pre_logits: bool = False, patch_valid: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Tokens -> logits. With `pre_logits=True`, the pooled feature fed to the classifier.
        The tokens of a patch-sequence batch come with `patch_valid` (timm's NaFlexVit signature),
        or as the dict `forward_features` gives."""
        if is_patch_batch(x):
            features = typing.cast(PatchBatch, x)
            x, patch_valid = features[PATCHES], features[PATCH_VALID]
        x = typing.cast(torch.Tensor, x)
        feature = self.pre_logits(self.fc_norm(self.pool(x, patch_valid=patch_valid)))
        if not self.config.distilled or self.head_dist is None:  # head_dist exists iff distilled
            return feature if pre_logits else self.head(feature)
        dist_feature = self.pre_logits(x[:, 1])
        if pre_logits:
            return (feature + dist_feature) / 2
        logits, dist_logits = self.head(feature), self.head_dist(dist_feature)
        if self.training:
            return logits, dist_logits  # trained against labels and teacher separately
        return (logits + dist_logits) / 2  # DeiT's inference: average the two classifiers

    def forward(self, x: torch.Tensor | PatchBatch) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """(B, C, H, W) images, or a patch-sequence batch (layers/naflex.py) -> logits."""
        return self.forward_head(self.forward_features(x))

    def forward_intermediates(
        self,
        x: torch.Tensor | PatchBatch,
        indices: int | Sequence[int] | None = None,
        return_prefix_tokens: bool = False,
        norm: bool = False,
        stop_early: bool = False,
        output_fmt: str = "NCHW",
        intermediates_only: bool = False,
        output_dict: bool = False,
    ) -> Intermediates | tuple[torch.Tensor, Intermediates] | dict[str, Any]:
        """The outputs of chosen blocks, for dense tasks (timm's method, the same results).

        indices: None = every block, an int n = the last n, a list = those blocks (negative from
            the end); results come in block order.
        norm: pass each through the final LayerNorm. output_fmt: "NCHW" feature maps
            (B, D, rows, columns) or "NLC" token sequences (B, N, D); either way without the prefix
            tokens, which `return_prefix_tokens=True` adds as (map, (B, prefix, D)) pairs.
        stop_early: skip the blocks after the last one taken.
        Returns (final normalised tokens as forward_features gives them, intermediates), only the
        intermediates with `intermediates_only`, or timm's dict with `output_dict`.
        A patch-sequence batch (layers/naflex.py), as timm's NaFlexVit: "NLC" only (each image has
        its own grid, and padding belongs to none: `patch_coord` places the tokens), the final
        tokens are forward_features' "patches", and the dict adds "patch_valid"."""
        if output_fmt not in ("NCHW", "NLC"):
            raise ValueError(
                f"output_fmt={output_fmt!r} is invalid; expected 'NCHW' (feature maps) or 'NLC' (token sequences)"
            )
        taken, last = feature_take_indices(len(self.blocks), indices)
        valid, mask, grid = None, None, (0, 0)
        if is_patch_batch(x):
            if output_fmt == "NCHW":
                raise ValueError(
                    "output_fmt='NCHW' is invalid for a patch-sequence batch: its images have grids of their own; "
                    "expected 'NLC' (patch_coord places each token)"
                )
            seq = self._patch_sequence(typing.cast(PatchBatch, x))
            x, rope = self._embed_sequence(seq)
            valid, mask = seq.valid, seq.attn_mask(self.num_prefix_tokens)
        else:
            x = typing.cast(torch.Tensor, x)
            grid = self.patch_embed.dynamic_feat_size(x.shape[-2:])
            rope = self._rope_embed(x.shape[-2:])
            x = self._embed(x)
        shared = None if self.shared_rel_pos is None else self.shared_rel_pos()
        intermediates = []
        for i in range(last + 1 if stop_early else len(self.blocks)):
            x = self._run_block(i, x, rope, mask, grid, shared)
            if i in taken:
                intermediates.append(self._final(x, grid) if norm else x)
        final = None if intermediates_only else self._final(x, grid)
        return self._intermediates_out(intermediates, final, grid, output_fmt, return_prefix_tokens, output_dict, valid)

    def _intermediates_out(
        self,
        intermediates: list[torch.Tensor],
        final: torch.Tensor | None,
        grid: tuple[int, int],
        output_fmt: str,
        return_prefix_tokens: bool,
        output_dict: bool,
        patch_valid: torch.Tensor | None,
    ) -> Intermediates | tuple[torch.Tensor, Intermediates] | dict[str, Any]:
        """forward_intermediates' result in the form asked for (`final` None: intermediates only)."""
        p = self.num_prefix_tokens
        prefix_tokens = [y[:, :p] for y in intermediates] if p else None
        maps = [y[:, p:] for y in intermediates]
        if output_fmt == "NCHW":
            rows, cols = grid
            # The width named, not -1: an empty batch has no elements to infer it from.
            maps = [y.reshape(y.shape[0], rows, cols, y.shape[-1]).permute(0, 3, 1, 2).contiguous() for y in maps]

        if output_dict:
            result: dict[str, Any] = {"image_intermediates": maps}
            if prefix_tokens is not None and return_prefix_tokens:
                result["image_intermediates_prefix"] = prefix_tokens
            if patch_valid is not None:
                result[PATCH_VALID] = patch_valid
            if final is not None:
                result["image_features"] = final
            return result
        out: Intermediates = maps
        if return_prefix_tokens and prefix_tokens is not None:
            out = list(zip(maps, prefix_tokens))
        if final is None:
            return out
        return final, out

    def get_intermediate_layers(
        self,
        x: torch.Tensor,
        n: int | Sequence[int] = 1,
        reshape: bool = False,
        return_prefix_tokens: bool = False,
        norm: bool = False,
    ) -> Intermediates:
        """DINO's older interface to the same thing: `forward_intermediates(x, n, ...)` intermediates
        only, as token sequences unless `reshape`."""
        out = self.forward_intermediates(
            x,
            n,
            return_prefix_tokens=return_prefix_tokens,
            norm=norm,
            output_fmt="NCHW" if reshape else "NLC",
            intermediates_only=True,
        )
        return typing.cast(Intermediates, out)  # intermediates_only without output_dict: the list

    def forward_with_attention(self, x: torch.Tensor) -> tuple[Any, list[torch.Tensor]]:
        """`forward(x)` plus every block's attention weights, a list of `depth` (B, heads, N, N)
        tensors (token order: prefix tokens, then patches row-major). The weights are computed
        explicitly for this call only (see layers.attention.capture_attention); `forward` itself
        keeps the fused kernel."""
        with capture_attention(self) as weights:
            output = self(x)
        return output, weights
