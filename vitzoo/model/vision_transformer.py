"""The Vision Transformer (Dosovitskiy et al., 2021) and the variants of it that today's pretrained
families use: one model class over every family (its config and parts: config.py, part.py).

    tokens  = [cls, (dist | reg_1 ... reg_R), patch_1 ... patch_N] + position embedding
    tokens  = LayerNorm(tokens)                 (only with pre_norm: CLIP's ln_pre)
    tokens  = Block(tokens) x depth             (pre-norm encoder, optional LayerScale: layers/block.py)
    feature = pool(LayerNorm(tokens))           (class token, mean of the patch tokens, or attention)
    logits  = head(Tanh(Linear(feature)))       (the representation layer is optional)

Each component is built by its part's module (stem.py, positions.py, rope.py, blocks.py, sam.py,
relpos.py, pools.py, coca.py, head.py); this module holds the one forward, the one
`forward_intermediates`, `set_input_size`, pruning and the patch-sequence path over all of them.

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

import functools
import os
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..layers import PatchEmbed, capture_attention, to_2tuple
from ..layers.attn_pooler import CocaPool
from ..layers.hybrid_embed import HybridEmbed
from ..layers.naflex import (
    PATCH_COORD,
    PATCH_VALID,
    PATCHES,
    PatchBatch,
    PatchBatchError,
    PatchSequence,
    add_positions,
    embed_patches,
    is_patch_batch,
    key_mask,
    masked_mean,
    read_patch_batch,
    rope_for_sequence,
)
from ..layers.norm import make_norm
from ..layers.pos_factorized import factorized_for_image, factorized_sum
from ..layers.relpos_bias import RelPosBiasTable
from ..layers.relpos_mlp import RelPosMlp
from ..layout import save_pretrained
from ..pretrained_cfg import PretrainedCfg
from ..upload import push_to_hub
from ..weight_shards import DEFAULT_MAX_SHARD_SIZE
from . import relpos, stem
from .blocks import new_blocks
from .coca import COCA_POOL_OFF, new_coca_pool
from .config import ViTConfig
from .head import final_norm_on_tokens, new_pre_logits
from .init import first_weight, init_weights
from .intermediates import Intermediates, feature_take_indices, intermediates_out
from .pools import check_pool_switch, new_attention_pool
from .positions import add_tables, embedded_prefix_tokens, naflex_rows, pos_embed_for_image, resize_tables
from .rope import new_rope
from .sam import grid_blocks, new_neck
from .timm_cfg import timm_default_cfg

# Leaves of torch.fx graphs, wrapped where this module calls them: a traced dynamic model adapts its
# positions to each input as the eager one does.
torch.fx.wrap("pos_embed_for_image")
torch.fx.wrap("factorized_for_image")


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

        self.patch_embed: PatchEmbed | HybridEmbed = stem.new_patch_embed(config)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, D)) if config.class_token else None
        self.reg_token = nn.Parameter(torch.zeros(1, config.reg_tokens, D)) if config.reg_tokens else None
        self.dist_token = nn.Parameter(torch.zeros(1, 1, D)) if config.distilled else None
        add_tables(self, config)  # pos_embed, pos_embed_y, pos_embed_x
        self.rope = new_rope(config, self.patch_embed.grid_size) if config.rope else None
        # timm's relpos ViT: one relative position bias MLP for every block (else each block's own)
        self.shared_rel_pos = relpos.new_shared(config, self.patch_embed.grid_size)
        self.pos_drop = nn.Dropout(config.drop_rate)
        self.norm_pre = make_norm(config.norm_layer, D, config.norm_eps) if config.pre_norm else nn.Identity()

        self.blocks = new_blocks(config, self.patch_embed.grid_size)
        # With fc_norm the final LayerNorm moves after the pooling (validate() ensures final_norm);
        # open_clip's CoCa holds it in its pool (config.norm_in_pool).
        on_tokens = final_norm_on_tokens(config)
        self.norm = make_norm(config.norm_layer, D, config.norm_eps) if on_tokens else nn.Identity()
        self.neck = new_neck(config)  # SAM's, in the final norm's place

        self.attn_pool = _new_attn_pool(config)
        self.fc_norm = make_norm(config.norm_layer, D, config.norm_eps) if config.fc_norm else nn.Identity()
        self.pre_logits = new_pre_logits(config)
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

    def _new_head(self, num_classes: int) -> nn.Module:
        if num_classes <= 0:
            return nn.Identity()
        return nn.Linear(self.head_hidden_size, num_classes, bias=self.config.head_bias)

    def _final(self, x: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """The final norm of (B, tokens, D) tokens, or SAM's neck over their (rows, columns) grid."""
        x = self.norm(x)
        return x if self.neck is None else self.neck.tokens(x, grid)

    @torch.no_grad()
    def init_weights(self) -> None:
        """timm's default init (init.py): truncated normal(0.02) for Linears and the position table,
        tiny normal for the prefix tokens, fan-in init for the patch conv, LayerScale at init_values."""
        tokens = (self.cls_token, self.reg_token, self.dist_token)
        init_weights(self, self.patch_embed, (self.pos_embed, self.pos_embed_y, self.pos_embed_x), tokens)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        """Replace the classifier head(s) with freshly initialised ones for `num_classes` (timm's
        signature). `global_pool` may switch between "token", "avg", "prefix_avg" and "" or drop "map"; an
        attention pool cannot be added here, since its weights would be untrained."""
        changes: dict[str, Any] = {"num_classes": num_classes}
        if global_pool is not None:
            check_pool_switch(self.config, global_pool)
            changes["global_pool"] = global_pool
        self.config = self.config.replace(**changes)  # validates before anything changes
        if self.config.global_pool not in ("map", "coca", "aimv2"):
            self.attn_pool = None
        # The new head lives where the model lives, in its dtype (a bf16 model gets a bf16 head).
        like = first_weight(self.patch_embed)
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

    def save_pretrained(
        self, directory: str | os.PathLike[str], *, max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE
    ) -> Path:
        """Write config.json + model.safetensors into `directory` (atomically, see vitzoo/layout.py),
        as shards and their index above `max_shard_size` (bytes, or "5GB", "500MB");
        `vitzoo.from_pretrained(directory)` reads it back."""
        return save_pretrained(self, directory, max_shard_size=max_shard_size)

    def push_to_hub(self, repo_id: str, **options: Any) -> str:
        """Upload this model to the Hugging Face Hub as one commit and return the commit's URL: the
        layout timm and transformers load where timm has the architecture (for a model that
        vitzoo.create or from_pretrained made; else vitzoo's), and a model card. The keywords are
        `vitzoo.upload.push_to_hub`'s: private=False, revision=None,
        commit_message, token=None (else HF_TOKEN or the cached login), license=None (replaces the
        weights' own), run=None (the record of the training run, for the card), max_shard_size="5GB"
        (larger weights go up as shards and their index)."""
        return push_to_hub(self, repo_id, **options)

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
        resize_tables(self, new_grid, img_size)
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
    def _embed(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) image -> (B, prefix + N, D) tokens with positions, before the blocks."""
        image_size = x.shape[-2:]
        # A model cast for inference (create(..., dtype=torch.bfloat16)) takes fp32 images as they
        # come out of the preprocessing: the input follows the weights (a no-op when they agree).
        pos_embed = self.pos_embed
        x = self.patch_embed(x.to((first_weight(self.patch_embed) if pos_embed is None else pos_embed).dtype))
        if self.pos_embed_y is not None and self.pos_embed_x is not None:  # factorized: patches only
            pos_embed = self._factorized_for_image(image_size)
        elif self.config.dynamic_img_size and pos_embed is not None:
            pos_embed = pos_embed_for_image(
                pos_embed,
                image_size,
                self.patch_embed.patch_size,
                self.patch_embed.grid_size,
                embedded_prefix_tokens(self.config),
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
        if grid is not None and grid_blocks(self.config):
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
        """Why this model cannot take a patch-sequence batch (layers/naflex.py), or None if it can:
        the parts' answer (ViTConfig.refusal)."""
        return self.config.refusal("patch_sequence")

    def _patch_sequence(self, batch: PatchBatch) -> PatchSequence:
        """A patch-sequence batch checked against this model (layers/naflex.py)."""
        refusal = self.patch_sequence_refusal()
        if refusal is not None:
            raise PatchBatchError(refusal)
        return read_patch_batch(batch, self.patch_embed.patch_size, self.config.in_chans)

    def _embed_sequence(self, seq: PatchSequence) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Patches -> (B, prefix + L, D) tokens with each image's positions, and its rotary embedding."""
        assert isinstance(self.patch_embed, PatchEmbed)  # a hybrid stem takes no patch sequence (refused before)
        x = self.patch_embed.norm(embed_patches(seq, self.patch_embed.proj.weight, self.patch_embed.proj.bias))
        prefix = [t for t in (self.cls_token, self.dist_token, self.reg_token) if t is not None]
        table, embedded = self.pos_embed, embedded_prefix_tokens(self.config)
        prefix_rows = table[0, :embedded] if table is not None and embedded else None
        rows = None if table is None and self.pos_embed_y is None else functools.partial(naflex_rows, self)
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
        if self.grad_checkpointing or rope is not None or grid_blocks(self.config) or shared is not None:
            for i in range(len(self.blocks)):
                x = self._run_block(i, x, rope, None, grid, shared)
        else:
            x = self.blocks(x)
        return self._final(typing.cast(torch.Tensor, x), grid)

    def pool(
        self, x: torch.Tensor, pool_type: str | None = None, patch_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """(B, tokens, D) -> (B, D) by `config.global_pool`, or by `pool_type` ("token", "avg", "prefix_avg" or ""
        for the tokens unchanged) on a model without attention pooling (timm's signature).
        `patch_valid` (B, patches): the padding of a patch-sequence batch, left out of "avg" and "map"."""
        p = self.num_prefix_tokens
        if self.attn_pool is not None:
            return self.attn_pool(*self._attn_pool_input(x, patch_valid))
        pool_type = self.config.global_pool if pool_type is None else pool_type
        if pool_type == "avg":
            return x[:, p:].mean(dim=1) if patch_valid is None else masked_mean(x[:, p:], patch_valid)
        if pool_type == "token" or (pool_type == "prefix_avg" and p):  # prefix_avg: Pixio's class tokens
            return x[:, 0] if pool_type == "token" else x[:, :p].mean(dim=1)
        if pool_type == "":
            return x
        raise ValueError(f"pool_type={pool_type!r} is invalid; expected 'token', 'avg', 'prefix_avg' or '' (none)")

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
        coca_dim) for coca_pool_type "", (B, queries, coca_dim) otherwise). The image
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
        return intermediates_out(
            intermediates, final, grid, output_fmt, return_prefix_tokens, output_dict, valid, self.num_prefix_tokens
        )

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


def _new_attn_pool(config: ViTConfig) -> nn.Module | None:
    """The pool with weights of its own that `config.global_pool` names (None: a parameter-free one)."""
    if config.global_pool == "coca":
        return new_coca_pool(config)
    return new_attention_pool(config) if config.global_pool in ("map", "aimv2") else None
