"""The prefix tokens (class, DeiT's distillation token, registers) and the absolute positions: a
learned table, sinusoids, none (RoPE alone), or NaViT's factorized row and column tables
(layers/pos_factorized.py); each resampled to another grid by `pos_resample` (layers/naflex.py).
CLIP's `pre_norm` (norm_pre, after the positions) belongs here too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn

from ..checks import check_fields
from ..layers import PatchEmbed, sincos_1d
from ..layers.hybrid_embed import HybridEmbed
from ..layers.naflex import POS_RESAMPLE, resample_table
from ..layers.pos_embed import resample_abs_pos_embed
from ..layers.pos_factorized import FACTORIZED_RULES, factorized_axes, factorized_table
from .fields import POS_EMBEDS
from .part import Part, either, norm_params, one_of

if TYPE_CHECKING:
    from .fields import ViTFields


class Tables(Protocol):
    """What the functions below read and set on a VisionTransformer: its position tables, its stem and
    its config (a Protocol: this module is below the model's)."""

    pos_embed: torch.Tensor | None
    pos_embed_y: nn.Parameter | None
    pos_embed_x: nn.Parameter | None

    @property
    def patch_embed(self) -> PatchEmbed | HybridEmbed: ...

    @property
    def config(self) -> ViTFields: ...

    def register_buffer(self, name: str, tensor: torch.Tensor | None, persistent: bool = True) -> None: ...


class Positions(Part):
    name = "positions"

    def check(self, config: ViTFields) -> None:
        check_fields(
            config,
            [
                (config.reg_tokens >= 0, "reg_tokens", "an int >= 0"),
                (config.pos_embed in POS_EMBEDS, "pos_embed", either(POS_EMBEDS)),
                (config.pos_resample in POS_RESAMPLE, "pos_resample", one_of(POS_RESAMPLE)),
            ],
        )
        _check_factorized(config)
        if config.distilled and not config.class_token:
            raise ValueError("distilled=True needs class_token=True (DeiT token order is [cls, dist, patches])")
        # The distillation head reads token 1 next to the class token's pooled feature; register
        # tokens would give that second token another meaning.
        if config.distilled and config.reg_tokens:
            raise ValueError(
                f"distilled=True cannot be combined with reg_tokens={config.reg_tokens}: DeiT's distillation token "
                "takes the place after the class token that register tokens would; expected one or the other"
            )

    def params(self, config: ViTFields) -> int:
        d, (gh, gw) = config.embed_dim, config.grid_size
        total = config.num_prefix_tokens * d + (norm_params(config, d) if config.pre_norm else 0)
        if config.pos_embed == "learned":
            total += (gh * gw + embedded_prefix_tokens(config)) * d
        elif config.pos_embed == "factorized":  # one vector per row and one per column
            total += (gh + gw) * d
        return total


POSITIONS = Positions()


def _check_factorized(config: ViTFields) -> None:
    if config.pos_embed != "factorized":
        return
    if config.num_prefix_tokens and not config.no_embed_class:
        raise ValueError(
            "pos_embed='factorized' gives positions to the patches only; expected no_embed_class=True "
            f"(this config has {config.num_prefix_tokens} prefix token(s))"
        )
    if config.pos_resample not in FACTORIZED_RULES:
        raise ValueError(
            f"pos_embed='factorized' with pos_resample={config.pos_resample!r} is invalid; its row and column "
            "tables resample linearly, per axis ('timm') or aspect-preserving ('timm_square')"
        )
    if config.conv_stem:
        raise ValueError(
            "pos_embed='factorized' cannot be combined with conv_stem: timm's factorized tables count whole "
            "patches, a conv stem pads; expected one or the other"
        )


def embedded_prefix_tokens(config: ViTFields) -> int:
    """How many prefix tokens have a row in the position table (none with no_embed_class)."""
    return 0 if config.no_embed_class else config.num_prefix_tokens


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
    A leaf of torch.fx graphs (vision_transformer.py wraps it where it calls it), so a traced
    dynamic model adapts its positions to each input as the eager one does. Under torch.export
    with symbolic sizes the table is always resampled: a test of the grid would pin the graph to
    the example's size."""
    if round_up:
        grid = (-(-image_size[0] // patch_size[0]), -(-image_size[1] // patch_size[1]))
    else:
        grid = (image_size[0] // patch_size[0], image_size[1] // patch_size[1])
    symbolic = any(isinstance(side, torch.SymInt) for side in grid)
    if not symbolic and grid == tuple(old_grid):
        return pos_embed
    return pos_embed_for_grid(pos_embed, grid, old_grid, prefix, learned, rule)


def add_tables(model: Tables, config: ViTFields) -> None:
    """The model's position tables: `pos_embed` a Parameter when learned, a non-persistent buffer when
    sincos (derived from the config, so not saved in state dicts), else None; `pos_embed_y` and
    `pos_embed_x` the factorized (1, rows, D) and (1, columns, D) tables (layers/pos_factorized.py)."""
    d, (rows, cols) = config.embed_dim, model.patch_embed.grid_size
    num_positions = model.patch_embed.num_patches + embedded_prefix_tokens(config)
    if config.pos_embed == "learned":
        model.pos_embed = nn.Parameter(torch.zeros(1, num_positions, d))
    elif config.pos_embed == "sincos":
        model.register_buffer("pos_embed", sincos_1d(num_positions, d).unsqueeze(0), persistent=False)
    else:  # positions only from the rotary embedding, or from the factorized tables
        model.pos_embed = None
    model.pos_embed_y = model.pos_embed_x = None
    if config.pos_embed == "factorized":
        model.pos_embed_y = nn.Parameter(torch.zeros(1, rows, d))
        model.pos_embed_x = nn.Parameter(torch.zeros(1, cols, d))


def table_for_grid(model: Tables, grid: tuple[int, int]) -> torch.Tensor:
    """The model's position table for a (rows, columns) grid of patches (see `pos_embed_for_grid`)."""
    assert model.pos_embed is not None  # the callers check
    return pos_embed_for_grid(
        model.pos_embed,
        grid,
        model.patch_embed.grid_size,
        embedded_prefix_tokens(model.config),
        model.config.pos_embed == "learned",  # static: under torch.fx the table is a Proxy
        model.config.pos_resample,
    )


def resize_tables(model: Tables, new_grid: tuple[int, int], img_size: Any) -> None:
    """set_input_size's positions: the learned table resampled once, a sinusoidal one recomputed, the
    factorized axis tables the new grid reads kept (forward at that grid adds the same positions)."""
    rule = model.config.pos_resample
    if model.pos_embed_y is not None and rule == "timm_square" and new_grid[0] != new_grid[1]:
        raise ValueError(
            f"set_input_size: img_size={img_size!r} is invalid for an aspect-preserving factorized table "
            f"(pos_resample='timm_square'): its row and column tables resample to one length, so only a "
            f"square grid keeps them; expected a square size, or keep the size and use dynamic_img_size"
        )
    with torch.no_grad():
        if model.pos_embed is not None:
            table = table_for_grid(model, new_grid)
            if isinstance(model.pos_embed, nn.Parameter):
                model.pos_embed = nn.Parameter(table, requires_grad=model.pos_embed.requires_grad)
            else:
                model.pos_embed = table  # replaces the buffer, still non-persistent
        if model.pos_embed_y is not None and model.pos_embed_x is not None:
            y, x = factorized_axes(model.pos_embed_y, model.pos_embed_x, new_grid, rule)
            model.pos_embed_y = nn.Parameter(y.clone(), requires_grad=model.pos_embed_y.requires_grad)
            model.pos_embed_x = nn.Parameter(x.clone(), requires_grad=model.pos_embed_x.requires_grad)


def naflex_rows(model: Tables, grid: tuple[int, int]) -> torch.Tensor:
    """The position table's patch rows for one image's grid of a patch-sequence batch, by `pos_resample`."""
    config = model.config
    if model.pos_embed_y is not None and model.pos_embed_x is not None:  # layers/pos_factorized.py
        return factorized_table(model.pos_embed_y, model.pos_embed_x, grid, config.pos_resample)[0]
    assert model.pos_embed is not None  # the caller checks
    if config.pos_embed != "learned":  # sinusoids: computed for the grid's token count
        return table_for_grid(model, grid)[0, embedded_prefix_tokens(config) :]
    rows = model.pos_embed[0, embedded_prefix_tokens(config) :]
    return resample_table(rows, model.patch_embed.grid_size, grid, config.pos_resample)
