"""The encoder blocks: attention and MLP with their options (layers/block.py and the layers it
names): the kind of block (`block_type`: pre-norm, post-norm, ViT-22B's parallel one), the kind of
attention (`attn_layer`: softmax or differential), grouped-query attention, QK-norm, the attention's
sub-LN, EVA's q/k/v layouts, the MLP (plain or SwiGLU, its sub-norm and width rounding), LayerScale.
SAM's blocks (windows, decomposed relative positions) are sam.py's; a relative position bias in
each block is relpos.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

from ..checks import check_fields
from ..layers.activations import ACTIVATIONS
from ..layers.block import check_block_type, make_block
from ..layers.gqa import check_kv_heads
from ..layers.qk_norm import QK_NORMS
from ..layers.swiglu import MLPS, mlp_hidden_dim
from . import relpos, sam
from .fields import ATTN_LAYERS
from .part import Part, Refusal, head_dim, linear, norm_params, one_of

if TYPE_CHECKING:
    from .fields import ViTFields


class Blocks(Part):
    name = "blocks"

    def check(self, config: ViTFields) -> None:
        c = config
        check_fields(
            c,
            [
                (c.mlp_ratio > 0, "mlp_ratio", "a positive number"),
                (c.act_layer in ACTIVATIONS, "act_layer", one_of(ACTIVATIONS)),
                (c.mlp_layer in MLPS, "mlp_layer", one_of(MLPS)),
                (c.mlp_align >= 0, "mlp_align", "an int >= 0"),
                (c.init_values is None or c.init_values > 0, "init_values", "None or a positive number"),
                (c.postnorm_init is None or c.postnorm_init > 0, "postnorm_init", "None or a positive number"),
                (c.qk_norm in QK_NORMS, "qk_norm", one_of(QK_NORMS)),
                (c.attn_layer in ATTN_LAYERS, "attn_layer", one_of(ATTN_LAYERS)),
            ],
        )
        check_block_type(c.block_type)
        _check_postnorm(c)
        _check_attention(c)
        _check_mlp(c)
        _check_fused(c)

    def params(self, config: ViTFields) -> int:
        return sum(_block_params(config, heads) for heads in config.kv_heads)

    def flops(self, config: ViTFields) -> dict[str, int]:
        """Per block: q, k, v (D -> 3D) and proj (D -> D) on every token; q k^T and attn v are each
        (tokens x tokens x D) multiply-adds summed over heads; fc1 (D -> hidden) and fc2 back.
        Grouped-query attention: k and v are (D -> kv heads * head_dim) each; the attention itself
        repeats them for every query head, so its count is unchanged (qk-norm: element-wise).
        Differential attention multiplies its two maps (half-width q, k) by all of v each: q k^T
        costs the same, attn v twice. The parallel block's fused projections are the same products.
        SAM's windowed attention is counted by sam.py."""
        c, d = config, config.embed_dim
        tokens = c.grid_size[0] * c.grid_size[1] + c.num_prefix_tokens
        hidden = mlp_hidden_dim(c.mlp_layer, d, c.mlp_ratio, c.mlp_align)
        fc1 = (2 if c.mlp_layer != "mlp" else 1) * d * hidden  # a gated MLP projects to gate and input
        counts = {"mlp": c.depth * 2 * tokens * (fc1 + hidden * d)}
        if not sam.grid_blocks(c):
            kv_widths = [head_dim(c) * heads for heads in c.kv_heads]
            counts["qkv_proj"] = sum(2 * tokens * d * (d + 2 * kv + d) for kv in kv_widths)
            counts["attention"] = c.depth * 2 * ((3 if c.attn_layer == "diff" else 2) * tokens * tokens * d)
        return counts

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what != "token_merging":
            return None
        if config.block_type == "parallel":
            return "parallel blocks (block_type='parallel') have no point between attention and MLP"
        if config.attn_layer == "diff":
            return "differential attention (attn_layer='diff') takes no log-size attention bias"
        return None


BLOCKS = Blocks()


def _check_postnorm(config: ViTFields) -> None:
    """init_values is LayerScale's start, which a post-norm block has none of; postnorm_init its norms'."""
    if config.block_type == "postnorm" and config.init_values is not None:
        raise ValueError(
            f"init_values={config.init_values!r} with block_type='postnorm' is invalid: a post-norm block has no "
            f"LayerScale; expected postnorm_init={config.init_values!r} for its norms' initial weight"
        )
    if config.block_type != "postnorm" and config.postnorm_init is not None:
        raise ValueError(
            f"postnorm_init={config.postnorm_init!r} with block_type={config.block_type!r} is invalid: it is the "
            "post-norm block's norms' initial weight; expected block_type='postnorm' (LayerScale's start is init_values)"
        )


def _check_attention(config: ViTFields) -> None:
    """num_kv_heads and layer_scale_mlp: each alone, and with the fields they need."""
    kv = config.num_kv_heads
    if isinstance(kv, tuple) and len(kv) != config.depth:
        raise ValueError(
            f"num_kv_heads={kv!r} has {len(kv)} entries for depth={config.depth}; expected one per block "
            "(or one int for every block)"
        )
    for heads in config.kv_heads:
        try:
            check_kv_heads(config.num_heads, heads, config.qkv_fused)
        except ValueError as e:
            raise ValueError(f"num_kv_heads={kv!r} is invalid: {e}") from None
    if not config.layer_scale_mlp and not config.init_values:
        raise ValueError(
            "layer_scale_mlp=False places LayerScale on the attention branch only, so it needs init_values; "
            "expected init_values set (e.g. 1.0) or layer_scale_mlp=True"
        )


def _check_mlp(config: ViTFields) -> None:
    if config.mlp_align and config.mlp_layer != "swiglu":
        raise ValueError(
            f"mlp_align={config.mlp_align} cannot be combined with mlp_layer={config.mlp_layer!r}: only the "
            "unpacked SwiGLU rounds its width; expected mlp_layer='swiglu' or mlp_align=0"
        )
    width = int(config.embed_dim * config.mlp_ratio)
    if config.mlp_layer == "swiglu_packed" and width % 2:
        raise ValueError(
            f"mlp_ratio={config.mlp_ratio} is invalid for mlp_layer='swiglu_packed': fc1's width "
            f"int(embed_dim * mlp_ratio) = {width} holds gate and input halves; expected it even"
        )


def _check_fused(config: ViTFields) -> None:
    """The parallel block and differential attention: what they do not combine with."""
    if config.attn_layer == "diff" and head_dim(config) % 2:
        raise ValueError(
            f"attn_layer='diff' needs an even head width; embed_dim {config.embed_dim} / num_heads "
            f"{config.num_heads} = {head_dim(config)}; expected it even"
        )
    if config.block_type != "parallel" and config.attn_layer != "diff":
        return
    refused = {
        "rope": config.rope != "",
        "qkv_fused": not config.qkv_fused,
        "k_bias": not config.k_bias,
        "proj_bias": not config.proj_bias,
        "attn_norm": config.attn_norm,  # the sub-LN is the plain attention's
        "rel_pos_table": config.rel_pos_table,
        "rel_pos_mlp": config.rel_pos_mlp,
    }
    if config.block_type == "parallel":
        refused.update(mlp_layer=config.mlp_layer != "mlp", mlp_norm=config.mlp_norm)
    chosen = f"block_type={config.block_type!r}" if config.block_type == "parallel" else "attn_layer='diff'"
    for name, set_ in refused.items():
        if set_:
            raise ValueError(
                f"{chosen} cannot be combined with {name}={getattr(config, name)!r}: it has one fused qkv "
                f"projection with a plain MLP and no rotary embedding; expected {name}="
                f"{getattr(type(config), name)!r}"
            )


def _block_params(config: ViTFields, kv_heads: int) -> int:
    c, d = config, config.embed_dim
    # differential attention: four lambda vectors of half a head, the sub-norm's scale over a head
    diff = 3 * head_dim(c) if c.attn_layer == "diff" else 0
    if c.block_type == "parallel":
        return _parallel_block_params(c) + diff
    kv = head_dim(c) * kv_heads  # the width of k and of v (d without grouped-query attention)
    q_and_v_bias = c.qkv_bias and not c.k_bias
    bias = int(c.proj_bias)  # of the output projection and the MLP's layers
    attn = 2 * d * d + 2 * d * kv + bias * d  # q, k, v and the output projection
    attn += d + 2 * kv if c.qkv_bias and c.k_bias else d + kv if q_and_v_bias else 0
    attn += norm_params(c, d) if c.attn_norm else 0  # the sub-LN before proj
    if c.qk_norm:  # one norm of q and one of k, over a head or over all heads
        attn += 2 * norm_params(c, head_dim(c)) if c.qk_norm == "head" else norm_params(c, d + kv)
    hidden = mlp_hidden_dim(c.mlp_layer, d, c.mlp_ratio, c.mlp_align)
    inputs = 1 if c.mlp_layer == "mlp" else 2  # a gated MLP projects to gate and input
    mlp = inputs * (d * hidden + bias * hidden) + hidden * d + bias * d
    mlp += norm_params(c, hidden) if c.mlp_norm else 0
    scales = (1 + int(c.layer_scale_mlp)) * d if c.init_values else 0  # LayerScale (none post-norm)
    return attn + mlp + 2 * norm_params(c, d) + scales + diff


def _parallel_block_params(config: ViTFields) -> int:
    """layers/parallel_block.py: one norm, in_proj (MLP hidden + q, k, v), the output projection(s)."""
    d, hidden = config.embed_dim, int(config.mlp_ratio * config.embed_dim)
    in_proj = d * (hidden + 3 * d) + (hidden + 3 * d if config.qkv_bias else hidden)  # else mlp_bias
    out = (d + hidden) * d + d if config.attn_layer == "diff" else linear(d, d) + linear(hidden, d)
    return norm_params(config, d) + in_proj + out + (d if config.init_values else 0)


def new_blocks(config: ViTFields, grid: tuple[int, int]) -> nn.Sequential:
    """The `depth` blocks for a grid of patches (SAM's and a per-block relative position bias need it)."""
    c = config
    # Stochastic depth grows linearly with depth: early blocks carry more general features.
    dpr = [c.drop_path_rate * i / max(c.depth - 1, 1) for i in range(c.depth)]

    def options(i: int) -> dict[str, Any]:
        return dict(
            dim=c.embed_dim,
            num_heads=c.num_heads,
            mlp_ratio=c.mlp_ratio,
            qkv_bias=c.qkv_bias,
            drop=c.drop_rate,
            attn_drop=c.attn_drop_rate,
            drop_path=dpr[i],
            norm_eps=c.norm_eps,
            # LayerScale's start, or a post-norm block's norms' initial weight (timm's names both init_values)
            init_values=c.postnorm_init if c.block_type == "postnorm" else c.init_values,
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
            **({"rel_pos": relpos.new_block_rel_pos(c, grid)} if relpos.per_block(c) else {}),
        )

    if sam.grid_blocks(c):
        return nn.Sequential(*[sam.new_block(c, i, grid, **options(i)) for i in range(c.depth)])
    return nn.Sequential(*[make_block(c.block_type, **options(i)) for i in range(c.depth)])
