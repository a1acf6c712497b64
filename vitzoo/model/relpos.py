"""A relative position bias on the attention logits, made for the model's grid: BEiT's learned table
per block (`rel_pos_table`, layers/relpos_bias.py), or timm's relpos ViT's MLP over log-spaced patch
offsets (`rel_pos_mlp` hidden units, layers/relpos_mlp.py), in every block or one shared by all
(`rel_pos_mlp_shared`). Resized for good by set_input_size, never per call. SAM's decomposed
relative positions are sam.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ..checks import check_fields
from ..layers.relpos_bias import RelPosBiasTable, num_relative_distances
from ..layers.relpos_mlp import RelPosMlp
from .part import MERGED, Part, Refusal, linear, set_fields

if TYPE_CHECKING:
    from .fields import ViTFields


class RelPos(Part):
    name = "relpos"

    def check(self, config: ViTFields) -> None:
        c = config
        _check_mlp(c)
        if c.rel_pos_table and (not c.class_token or c.num_prefix_tokens != 1):
            raise ValueError(
                f"rel_pos_table=True cannot be combined with class_token={c.class_token}, "
                f"reg_tokens={c.reg_tokens}, distilled={c.distilled}: BEiT's table has rows for one class "
                "token before the patches; expected class_token=True and no register or distillation token"
            )
        grid_bound = set_fields(c, ("rel_pos_table", "rel_pos_mlp"))
        if grid_bound and c.dynamic_img_size:
            raise ValueError(
                f"{grid_bound[0]} cannot be combined with dynamic_img_size=True: its relative position bias is made "
                "for the model's grid, changed for good by set_input_size (as timm's resize_rel_pos_bias_table and "
                "relpos ViT do), not per call; expected dynamic_img_size=False"
            )

    def params(self, config: ViTFields) -> int:
        c = config
        total = c.depth * num_relative_distances(c.grid_size) * c.num_heads if c.rel_pos_table else 0
        if c.rel_pos_mlp:  # the bias MLP, 2 -> rel_pos_mlp -> heads, per block or shared
            mlps = 1 if c.rel_pos_mlp_shared else c.depth
            total += mlps * (linear(2, c.rel_pos_mlp) + linear(c.rel_pos_mlp, c.num_heads))
        return total

    def flops(self, config: ViTFields) -> dict[str, int]:
        """The bias MLP (2 -> rel_pos_mlp -> heads) on each of the (2 rows - 1)(2 cols - 1) offsets of
        the grid, once if shared, else in every block; the gather and the bias add are element-wise,
        and BEiT's table is a gather only."""
        c = config
        if not c.rel_pos_mlp:
            return {}
        gh, gw = c.grid_size
        offsets = (2 * gh - 1) * (2 * gw - 1)
        mlps = 1 if c.rel_pos_mlp_shared else c.depth
        return {"rel_pos": mlps * 2 * offsets * (2 * c.rel_pos_mlp + c.rel_pos_mlp * c.num_heads)}

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what == "token_merging" and config.rel_pos_table:
            return f"BEiT's relative position table (rel_pos_table=True) needs grid positions, {MERGED}"
        if what == "token_merging" and config.rel_pos_mlp:
            return f"a relative position MLP (rel_pos_mlp={config.rel_pos_mlp}) needs grid positions, {MERGED}"
        if what != "patch_sequence" or not (config.rel_pos_table or config.rel_pos_mlp):
            return None
        field = "BEiT's relative position table (rel_pos_table=True)"
        if config.rel_pos_mlp:
            field = f"a relative position bias MLP (rel_pos_mlp={config.rel_pos_mlp})"
        return (
            f"this model has {field}, made for one grid: it cannot take a patch-sequence batch of images of "
            "their own grids; expected a (B, C, H, W) image"
        )


RELPOS = RelPos()


def _check_mlp(config: ViTFields) -> None:
    """timm's relpos ViT: one relative position scheme, its width > 0 when shared."""
    c = config
    check_fields(c, [(c.rel_pos_mlp >= 0, "rel_pos_mlp", "an int >= 0 (the MLP's hidden width; 0: none)")])
    if c.rel_pos_mlp_shared and not c.rel_pos_mlp:
        raise ValueError(
            "rel_pos_mlp_shared=True describes a relative position bias MLP, but rel_pos_mlp=0; expected "
            "rel_pos_mlp > 0 (its hidden width) or rel_pos_mlp_shared=False"
        )
    other = set_fields(c, ("rel_pos_table", "use_rel_pos", "window_size"))
    if c.rel_pos_mlp and other:
        raise ValueError(
            f"rel_pos_mlp={c.rel_pos_mlp} cannot be combined with {', '.join(other)}: it is a relative "
            "position bias of its own; expected one relative position scheme"
        )


def per_block(config: ViTFields) -> bool:
    """Whether each block has a relative position bias of its own (BEiT's table, a relpos MLP)."""
    return config.rel_pos_table or bool(config.rel_pos_mlp and not config.rel_pos_mlp_shared)


def new_rel_pos_mlp(config: ViTFields, grid: tuple[int, int]) -> RelPosMlp:
    c = config
    return RelPosMlp(num_heads=c.num_heads, grid=grid, hidden_dim=c.rel_pos_mlp, prefix_tokens=c.num_prefix_tokens)


def new_block_rel_pos(config: ViTFields, grid: tuple[int, int]) -> nn.Module:
    """One block's own bias: BEiT's table or a relpos MLP."""
    if config.rel_pos_table:
        return RelPosBiasTable(config.grid_size, config.num_heads)
    return new_rel_pos_mlp(config, grid)


def new_shared(config: ViTFields, grid: tuple[int, int]) -> RelPosMlp | None:
    """timm's relpos ViT: one relative position bias MLP for every block (None: each block's own, or none)."""
    return new_rel_pos_mlp(config, grid) if config.rel_pos_mlp_shared else None
