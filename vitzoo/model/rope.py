"""The 2D rotary position embedding of q and k in every block (layers/rope.py): "cat" (EVA-02, PE,
RoPE-ViT axial), "mixed" (RoPE-ViT's learned frequencies), "dinov3"; the class and register tokens
are not rotated. Its choices and what the layer cannot build are the layer's rules
(`check_rope_args`), checked here once for the config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import check_fields
from ..layers.rope import RotaryEmbedding2d, check_rope_args
from .part import MERGED, Part, Refusal, head_dim

if TYPE_CHECKING:
    from .fields import ViTFields


class Rope(Part):
    name = "rope"

    def check(self, config: ViTFields) -> None:
        c = config
        check_rope_args(
            c.rope, head_dim(c), c.rope_rotate_half, c.rope_grid_indexing, c.rope_normalize_coords, optional=True
        )
        check_fields(
            c,
            [
                (c.rope_temperature > 0, "rope_temperature", "a positive number"),
                (
                    c.rope_ref_feat_shape is None or min(c.rope_ref_feat_shape) > 0,
                    "rope_ref_feat_shape",
                    "None or a list of 2 positive ints",
                ),
                (c.rope_min_period is None or c.rope_min_period > 0, "rope_min_period", "None or a positive number"),
                (c.rope_max_period is None or c.rope_max_period > 0, "rope_max_period", "None or a positive number"),
                (c.rope_shift_coords is None or c.rope_shift_coords >= 0, "rope_shift_coords", "None or >= 0"),
                (c.rope_jitter_coords is None or c.rope_jitter_coords >= 1, "rope_jitter_coords", "None or >= 1"),
                (c.rope_rescale_coords is None or c.rope_rescale_coords >= 1, "rope_rescale_coords", "None or >= 1"),
            ],
        )
        if (c.rope_min_period is None) != (c.rope_max_period is None):
            raise ValueError(
                f"rope_min_period={c.rope_min_period!r} and rope_max_period={c.rope_max_period!r}: "
                "expected both (DINOv3's period range) or neither (periods from rope_temperature)"
            )
        if c.rope == "mixed" and any(h != c.num_heads for h in c.kv_heads):
            raise ValueError(
                f"num_kv_heads={c.num_kv_heads!r} cannot be combined with rope='mixed': its learned frequencies are "
                "per query head; expected rope='cat' or 'dinov3', or num_kv_heads=None"
            )

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what == "token_merging" and config.rope:
            return f"rotary position embeddings (rope={config.rope!r}) rotate each token by its grid position, {MERGED}"
        return None

    def params(self, config: ViTFields) -> int:
        if config.rope != "mixed":
            return 0
        # learned frequencies: (x, y) per block and head, a quarter of the head width each
        return 2 * config.depth * config.num_heads * 2 * -(-head_dim(config) // 4)


ROPE = Rope()


def new_rope(config: ViTFields, grid: tuple[int, int]) -> RotaryEmbedding2d:
    c = config
    return RotaryEmbedding2d(
        c.rope,
        head_dim=head_dim(c),
        num_heads=c.num_heads,
        depth=c.depth,
        grid=grid,
        num_prefix_tokens=c.num_prefix_tokens,
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
