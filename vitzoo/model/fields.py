"""The fields of `ViTConfig` (config.py), what follows from them alone (the grid, the prefix tokens,
the key/value heads, the pooled width), and the values the fields with fixed choices allow: the
`Literal` of the annotation, its tuple (`get_args`) the one home the checks and their messages read.
The fields stay flat (the names timm's and saved config.json files use); the part (part.py) that
checks a field owns it. This module imports no part, so every part may name `ViTFields`.

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
    global_pool      "token", "avg", "map" (SigLIP's attention pooling, layers/pool.py), "prefix_avg"
                     (the mean of the class and register tokens: Pixio) or "" (none);
                     attn_pool_num_heads, pool_include_prefix: PE's pool (8 heads, over every token);
                     attn_pool_mlp_ratio: its MLP's own width (PE-Core-G); "coca": CoCa's attentional
                     pooler (layers/attn_pooler.py; coca_queries, coca_dim, coca_pool_type),
                     its caption tokens from pool_with_tokens(forward_features(x)); "aimv2":
                     AIMv2's attention-pooling head (layers/aimv2_pool.py: a learned query, k/v and
                     output projections, no MLP)
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
                     (timm's ResPostBlock, EVA-02-CLIP-E; layers/block.py; postnorm_init the norms'
                     initial weight), or "parallel": attention and MLP side by side from one norm,
                     their input projections fused (ViT-22B; layers/parallel_block.py)
    attn_layer       "attn" or "diff": differential attention, two softmax maps subtracted
                     (layers/diff_attention.py)
    attn_norm        the attention's sub-LN before its output projection (BEiT-3, EVA-02-CLIP B/L;
                     layers/attention.py)
    num_kv_heads     grouped-query attention (layers/gqa.py): fewer key/value heads, per block (Sapiens2)
    qk_norm          a norm of q and k per head or over all heads (layers/qk_norm.py; ViT-22B, Sapiens2)
    window_size, global_attn_indexes, use_rel_pos, neck_chans   SAM's image encoder (layers/sam.py):
                     windowed attention but in a few global blocks, decomposed relative positions,
                     a conv neck in the final norm's place; no prefix tokens; window_rope: SAM 3's
                     rotary positions of each block's window, or of the grid spanning one window
    rel_pos_table    BEiT: a learned relative position bias per block, added to the attention logits
                     (layers/relpos_bias.py); resized once by set_input_size, no dynamic_img_size
    rel_pos_mlp, rel_pos_mlp_shared   timm's relpos ViT: a relative position bias from an MLP over
                     log-spaced patch offsets, per block or shared (layers/relpos_mlp.py)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from ..layers import to_2tuple
from ..layers.activations import ActName
from ..layers.attn_pooler import CocaPoolType
from ..layers.naflex import PosResample
from ..layers.norm import DEFAULT_NORM_EPS, NormName
from ..layers.qk_norm import QKNormName
from ..layers.rope import GridIndexing, NormalizeCoords, RopeKind
from ..layers.swiglu import MlpName

if TYPE_CHECKING:
    from types import FrameType

HybridStem = Literal["", "resnetv2", "mci"]  # "" and layers/hybrid_embed.py's HYBRID_STEMS (a test holds them equal)
BlockType = Literal["prenorm", "postnorm", "parallel"]  # layers/block.py's BLOCKS (a test holds them equal)
AttnLayer = Literal["attn", "diff"]
ATTN_LAYERS: tuple[str, ...] = get_args(AttnLayer)
PosEmbed = Literal["learned", "sincos", "none", "factorized"]
POS_EMBEDS: tuple[str, ...] = get_args(PosEmbed)
GlobalPool = Literal["token", "avg", "prefix_avg", "map", "coca", "aimv2", ""]
GLOBAL_POOLS: tuple[str, ...] = get_args(GlobalPool)

# Fields renamed (issue 52): the old name -> the new. config.json files saved before, and overrides
# written before, still give the old names: `renamed_fields` reads them as the new ones, with a
# DeprecationWarning; `ViTConfig.to_dict` writes only the new names.
RENAMED_FIELDS: dict[str, str] = {
    "rel_pos": "use_rel_pos",  # SAM's flag (timm's and transformers' name), not a block's bias module
    "attn_pool_queries": "coca_queries",  # CoCa's pooler alone, not the "map" pool's attn_pool_*
    "attn_pool_dim": "coca_dim",
    "attn_pool_type": "coca_pool_type",
}
# And one field whose post-norm meaning moved: init_values with block_type="postnorm" was the
# blocks' norms' initial weight, now postnorm_init (init_values is LayerScale's start alone).
POSTNORM_INIT_WAS = "init_values"


def renamed_fields(fields: Mapping[str, Any], *, postnorm: bool = False) -> dict[str, Any]:
    """`fields` in today's names: each old name (RENAMED_FIELDS) as its new one and, where the config
    is a post-norm one (`postnorm`), a given init_values as postnorm_init; a DeprecationWarning names
    both. ValueError where the old name and the new are both given, with different values."""
    out = dict(fields)
    moves = [(old, new) for old, new in RENAMED_FIELDS.items() if old in out]
    if postnorm and out.get(POSTNORM_INIT_WAS) is not None:
        moves.append((POSTNORM_INIT_WAS, "postnorm_init"))
    for old, new in moves:
        value = out.pop(old)
        where = ' with block_type="postnorm"' if new == "postnorm_init" else ""
        if new in out and out[new] != value:
            raise ValueError(
                f"{old}={value!r} and {new}={out[new]!r} are both given; {old}{where} is {new}'s old name: "
                f"give {new} alone"
            )
        out[new] = value
        warnings.warn(
            f"ViTConfig field {old!r}{where} is now {new!r}; {old}={value!r} is read as {new}={value!r}",
            DeprecationWarning,
            stacklevel=_caller_outside_vitzoo(),
        )
    return out


def _caller_outside_vitzoo() -> int:
    """The stacklevel of the first caller outside vitzoo: a DeprecationWarning is shown where it is
    attributed to the user's script, and hidden (Python's default filter) where attributed to vitzoo."""
    package = __name__.split(".")[0]
    frame: FrameType | None = sys._getframe(1)  # renamed_fields' frame: stacklevel 1
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == package:
        frame, level = frame.f_back, level + 1
    return level


@dataclass(frozen=True)
class ViTFields:
    """Every architecture field of a VisionTransformer (checked by its subclass `ViTConfig`)."""

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
    hybrid_stem: HybridStem = ""
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
    # branch, no LayerScale; timm's ResPostBlock); or "parallel" (attention and MLP from one norm,
    # one fused input projection: timm's ParallelScalingBlock; layers/parallel_block.py).
    block_type: BlockType = "prenorm"
    # "postnorm" only: the initial weight of the blocks' norms (timm's ResPostBlock's init_values,
    # which a checkpoint replaces); None: 1.
    postnorm_init: float | None = None
    # "attn" (softmax attention) or "diff": differential attention (layers/diff_attention.py);
    # with block_type="parallel", timm's DiffParallelScalingBlock (one fused output projection).
    attn_layer: AttnLayer = "attn"
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
    init_values: float | None = None  # LayerScale on both residual branches, gamma starting here (not "postnorm")
    layer_scale_mlp: bool = True  # False (with init_values): LayerScale on the attention branch only (Sapiens2)
    class_token: bool = True
    reg_tokens: int = 0  # register tokens after the class token (DINOv2 with registers)
    distilled: bool = False  # DeiT: a second token and head; needs class_token
    # "none": no absolute table (RoPE alone); "factorized": a row table plus a column table, summed
    # (NaViT, timm's NaFlexVit; layers/pos_factorized.py), patches only (no_embed_class)
    pos_embed: PosEmbed = "learned"
    no_embed_class: bool = False  # the position embedding covers the patches only, not the prefix tokens
    pre_norm: bool = False  # LayerNorm `norm_pre` after the position embedding, before the blocks (CLIP)
    # "token": the class token; "avg": the mean of the patch tokens; "map": attention pooling
    # (SigLIP); "coca": CoCa's attentional pooler (layers/attn_pooler.py); "aimv2": AIMv2's
    # attention-pooling head (layers/aimv2_pool.py); "": none, the head sees every token (what
    # prune_intermediate_layers leaves); "prefix_avg": the mean of the prefix tokens, class token
    # and registers (Pixio's 8 class tokens).
    global_pool: GlobalPool = "token"
    # "map", "coca", "aimv2": heads of the pooling attention (PE, CoCa: 8); None: num_heads
    attn_pool_num_heads: int | None = None
    attn_pool_mlp_ratio: float | None = None  # "map": the pool MLP's width ratio (PE-Core-G: 4); None: mlp_ratio
    pool_include_prefix: bool = False  # attention pools: the queries attend over the prefix tokens too (PE, CoCa)
    # "coca" only: the caption queries (open_clip's attn_pooler_queries; None: 256), the pooler's width
    # (open_clip's embed_dim, what its proj takes; None: embed_dim), and how its poolers are arranged:
    # "" open_clip's released CoCa (one pooler, its first output pooled, the final norm after it),
    # "parallel" / "cascade" the paper's (a one-query contrastive pooler beside / after the caption one).
    coca_queries: int | None = None
    coca_dim: int | None = None
    coca_pool_type: CocaPoolType = ""
    representation_size: int | None = None  # Linear + Tanh before the head (ImageNet-21k ViT)
    final_norm: bool = True  # LayerNorm after the last block (the MNIST tutorial has none)
    fc_norm: bool = False  # move the final LayerNorm after the pooling (timm's MAE fine-tuning)
    head_bias: bool = True  # bias of the classifier / projection head
    norm_eps: float = (
        DEFAULT_NORM_EPS  # timm's; transformers' ViT checkpoints use 1e-12, CLIP 1e-5 (weights/norm_eps.py)
    )
    dynamic_img_size: bool = False  # any input size, multiples of the patch; positions resampled per call
    # How the learned table is resized to another grid (each image's of a patch-sequence batch,
    # dynamic_img_size, set_input_size; layers/naflex.py): "timm" (bicubic), "timm_square" (NaFlexVit's
    # aspect-preserving square, cropped) or "siglip2" (transformers' SigLIP 2: bilinear), antialiased;
    # "radio" / "radio_corners" (C-RADIO: bilinear to the square, cropped, not antialiased).
    pos_resample: PosResample = "timm"
    # 2D rotary position embedding in every block (layers/rope.py); "" is none. timm's names.
    rope: Literal["", RopeKind] = ""
    rope_temperature: float = 10000.0  # the frequency base ("dinov3": of the periods)
    rope_grid_indexing: GridIndexing = "ij"  # coordinate channels (row, col) or (col, row)
    rope_grid_offset: float = 0.0  # added to the patch indices ("cat", "dinov3")
    rope_ref_feat_shape: tuple[int, int] | None = None  # "cat": positions rescaled to span this grid (EVA)
    rope_rotate_half: bool = False  # pairs channel i with i + head_dim/2, not 2i with 2i+1
    rope_min_period: float | None = None  # "dinov3": geometric periods from min to max instead of the base
    rope_max_period: float | None = None
    rope_normalize_coords: NormalizeCoords = "separate"  # "dinov3": the [-1, 1] scaling
    rope_shift_coords: float | None = None  # training only: coordinate shift, per-axis jitter, shared rescale
    rope_jitter_coords: float | None = None
    rope_rescale_coords: float | None = None
    # SAM's image encoder (layers/sam.py), on the grid of patches alone (no prefix tokens): attention
    # within windows of window_size x window_size patches (0: global) except in the blocks of
    # global_attn_indexes; decomposed relative positions in every block (use_rel_pos); a convolutional
    # neck to neck_chans channels in place of the final norm (0: none).
    window_size: int = 0
    global_attn_indexes: tuple[int, ...] = ()
    use_rel_pos: bool = False
    neck_chans: int = 0
    # SAM 3 (layers/sam.py window_rope_embed): q and k rotated by the positions of what each block attends
    # over, a window's patch indices or the grid's scaled to span one window (base rope_temperature)
    window_rope: bool = False
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

    @property
    def pool_dim(self) -> int:
        """The width of the pooled feature (what the representation layer or the head takes): CoCa's
        pooler's own width, SAM's neck's, else embed_dim."""
        if self.global_pool == "coca":
            return self.coca_dim or self.embed_dim
        return self.neck_chans or self.embed_dim

    @property
    def norm_in_pool(self) -> bool:
        """Whether the final norm is the pool's (open_clip's released CoCa: ln_post after its pooler)."""
        return self.final_norm and self.global_pool == "coca" and not self.coca_pool_type

    @property
    def kv_heads(self) -> tuple[int, ...]:
        """The key/value head count of each block (num_heads where num_kv_heads is None)."""
        kv = self.num_kv_heads
        if isinstance(kv, tuple):
            return kv
        return (self.num_heads if kv is None else kv,) * self.depth

    @property
    def input_size(self) -> tuple[int, int, int]:
        """(channels, height, width) of the input: `PretrainedCfg.input_size` of a model without weights."""
        return (self.in_chans, *to_2tuple(self.img_size))

    @property
    def grid_size(self) -> tuple[int, int]:
        """The (rows, columns) of patches of an image of img_size."""
        (h, w), (ph, pw) = to_2tuple(self.img_size), to_2tuple(self.patch_size)
        if self.conv_stem:
            return (-(-h // ph), -(-w // pw))  # a stem's padding rounds up
        return (h // ph, w // pw)  # whole patches (exact unless drop_remainder)

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: class, distillation and register tokens."""
        return int(self.class_token) + int(self.distilled) + self.reg_tokens
