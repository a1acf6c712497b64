"""SAM's image encoder (layers/sam.py), on the grid of patches alone (no prefix tokens): attention
within windows of window_size x window_size patches (0: global) except in the blocks of
global_attn_indexes; decomposed relative positions in every block (use_rel_pos), or SAM 3's rotary
positions of each block's window or grid (window_rope); a convolutional neck to neck_chans channels in
place of the final norm (0: none). All of it follows one image's grid."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checks import MAX_TOKENS, check_fields
from ..layers.sam import Neck, SamBlock, neck_params, sam_rel_pos_params
from .part import Part, Refusal, head_dim, set_fields

if TYPE_CHECKING:
    from .fields import ViTFields


class Sam(Part):
    name = "sam"

    def check(self, config: ViTFields) -> None:
        c = config
        check_fields(
            c,
            [
                (c.window_size >= 0, "window_size", "an int >= 0 (0: no windows)"),
                (c.neck_chans >= 0, "neck_chans", "an int >= 0 (0: no neck)"),
                (
                    all(i >= 0 for i in c.global_attn_indexes)
                    and len(set(c.global_attn_indexes)) == len(c.global_attn_indexes),
                    "global_attn_indexes",
                    "distinct block indices >= 0",
                ),
            ],
        )
        if c.window_size:
            _check_window_grid(c)
        if c.window_rope:
            _check_window_rope(c)
        if c.global_attn_indexes and not c.window_size:
            raise ValueError(
                f"global_attn_indexes={c.global_attn_indexes} needs window_size > 0: without windows every "
                "block attends globally; expected window_size (SAM: 14) or global_attn_indexes=()"
            )
        named = ", ".join(set_fields(c, ("window_size", "use_rel_pos", "window_rope", "neck_chans")))
        if named:
            _check_refused(c, named)

    def params(self, config: ViTFields) -> int:
        """SAM's relative position tables (a window's, or the grid's in a global block) and neck."""
        c = config
        total = neck_params(c.embed_dim, c.neck_chans) if c.neck_chans else 0
        if c.use_rel_pos:
            for i in range(c.depth):
                total += sam_rel_pos_params(block_grid(c, i), head_dim(c))
        return total

    def flops(self, config: ViTFields) -> dict[str, int]:
        """(projections, attention) of SAM's blocks: a windowed block projects and attends over its
        windows, the grid padded to whole windows; with use_rel_pos each query also meets the
        relative-position rows of its window's (or grid's) rows and columns (two products, q . table);
        SAM 3's rotation (window_rope) is element-wise, not counted. The neck: a 1x1 (D -> C) and a 3x3 (C -> C) convolution at every patch."""
        c, d = config, config.embed_dim
        (gh, gw), ch = c.grid_size, c.neck_chans
        counts = {"neck": 2 * gh * gw * (d * ch + 9 * ch * ch)}
        if not grid_blocks(c):
            return counts
        qkv_proj = attention = 0
        for i in range(c.depth):
            rows, cols = block_grid(c, i)
            tokens = -(-gh // rows) * rows * -(-gw // cols) * cols
            qkv_proj += 2 * tokens * d * 4 * d
            attention += 2 * (2 * tokens * rows * cols * d)
            if c.use_rel_pos:
                attention += 2 * tokens * (rows + cols) * d
        return {**counts, "qkv_proj": qkv_proj, "attention": attention}

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what == "patch_sequence" and (grid_blocks(config) or config.neck_chans):
            return (
                "this model is SAM's image encoder (window_size, use_rel_pos, neck_chans: layers/sam.py): its blocks "
                "and neck work on one image's grid of patches, so it cannot take a patch-sequence batch; "
                "expected a (B, C, H, W) image"
            )
        if what == "token_merging" and (grid_blocks(config) or config.neck_chans):
            return "SAM's windows, relative positions, neck (window_size, use_rel_pos, neck_chans) need the grid"
        if what == "dynamic_export" and grid_blocks(config):
            return (
                "dynamic_size=True is not available for SAM's image encoder (window_size, use_rel_pos: layers/sam.py): "
                "its window padding and relative-position tables follow the grid, which the exported graph would "
                "pin to the example's size; export at a fixed input_size instead (one file per size)"
            )
        return None


SAM = Sam()


def grid_blocks(config: ViTFields) -> bool:
    """Whether the blocks need the (rows, columns) grid of their tokens (SAM's: layers/sam.py)."""
    return bool(config.window_size or config.use_rel_pos or config.window_rope)


def block_grid(config: ViTFields, i: int) -> tuple[int, int]:
    """What block i attends over: a window, or the whole grid (no windows, or a global block)."""
    ws = config.window_size
    return (ws, ws) if ws and i not in config.global_attn_indexes else config.grid_size


def _check_window_grid(config: ViTFields) -> None:
    """No tensor shows the window where relative positions are off: it is bounded as a grid is, the
    grid padded to whole windows holding at most MAX_TOKENS patches (a window may exceed the grid:
    timm pads it, as at reduced sizes)."""
    (gh, gw), ws = config.grid_size, config.window_size
    rows, cols = -(-gh // ws) * ws, -(-gw // ws) * ws
    if rows * cols > MAX_TOKENS:
        raise ValueError(
            f"window_size={ws} is invalid for the {gh}x{gw} grid of patches: its windows pad it to "
            f"{rows}x{cols} = {rows * cols} patches; expected windows that pad the grid to at most {MAX_TOKENS} "
            "patches (SAM: 14)"
        )


def _check_window_rope(config: ViTFields) -> None:
    """SAM 3's rotary positions: within windows (their span), instead of relative tables, on a head
    width of pairs for two axes."""
    c = config
    if not c.window_size or c.use_rel_pos:
        raise ValueError(
            f"window_rope=True with window_size={c.window_size!r}, use_rel_pos={c.use_rel_pos!r} is invalid: "
            "SAM 3's rotary positions span a window; expected window_size > 0 (SAM 3: 24; a transformers "
            "checkpoint states it in its config.json) and use_rel_pos=False"
        )
    if head_dim(c) % 4:
        raise ValueError(
            f"window_rope=True needs a head width (embed_dim / num_heads) divisible by 4, got {head_dim(c)}; "
            "expected embed_dim and num_heads that give one"
        )


def _check_refused(config: ViTFields, named: str) -> None:
    """SAM's fields together, on a grid of patches without prefix tokens, in pre-norm blocks of plain
    attention, the neck in the final norm's place."""
    c = config
    if c.num_prefix_tokens:
        raise ValueError(
            f"{named} works on the grid of patches alone, so it cannot be combined with class, distillation or "
            "register tokens; expected class_token=False, distilled=False, reg_tokens=0"
        )
    if grid_blocks(c) and c.rope:
        raise ValueError(f"{named} cannot be combined with rope={c.rope!r}; expected rope=''")
    if c.neck_chans and (c.final_norm or c.fc_norm or c.global_pool in ("map", "aimv2")):
        raise ValueError(
            f"neck_chans={c.neck_chans}: SAM's neck ends in its own LayerNorm and takes the final norm's "
            "place; expected final_norm=False, fc_norm=False and global_pool 'avg' or ''"
        )
    if grid_blocks(c) and (c.block_type != "prenorm" or c.attn_layer != "attn" or not c.proj_bias):
        raise ValueError(
            f"{named} cannot be combined with block_type={c.block_type!r} / attn_layer={c.attn_layer!r} / "
            f"proj_bias={c.proj_bias!r}; "
            "expected SAM's pre-norm blocks of plain attention"
        )
    if c.neck_chans and c.representation_size:
        raise ValueError(f"neck_chans={c.neck_chans} cannot be combined with representation_size")


def new_block(config: ViTFields, i: int, grid: tuple[int, int], **options: Any) -> SamBlock:
    """Block i: windowed (but in the global ones), with relative positions if use_rel_pos, SAM 3's
    rotary positions if window_rope."""
    c = config
    window = 0 if i in c.global_attn_indexes else c.window_size
    rope: dict[str, Any] = {"rope_temperature": c.rope_temperature, "rope_span": c.window_size} if c.window_rope else {}
    return SamBlock(window_size=window, use_rel_pos=c.use_rel_pos, grid=grid, **rope, **options)


def new_neck(config: ViTFields) -> Neck | None:
    """SAM's neck, in the final norm's place (None without one)."""
    return Neck(config.embed_dim, config.neck_chans) if config.neck_chans else None
