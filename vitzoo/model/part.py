"""What one component of the model is to the rest of vitzoo: a `Part`.

A ViT here is a fixed sequence of components (the stem, the prefix tokens and positions, the
rotary embedding, the blocks, SAM's windows and neck, a relative position bias, the pool, CoCa's
pooler, the head). Each is one module of this package holding one `Part`, which owns the config
fields of its component: their checks and the other parts' fields it refuses, its parameter count,
its FLOPs, and the inputs it cannot take. `ViTConfig.validate`, `ViTConfig.num_params`,
`vitzoo.flops.vit_flops` and `ViTConfig.refusal` are loops over the parts (`config.PARTS`), so a
new family adds a part and touches no loop. How each part is built into modules stays in its own
module too, called by name from `VisionTransformer`, whose one forward serves every family.

The parts see the config as its fields (`ViTFields`, fields.py); config.py imports them, never the
other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .fields import ViTFields

# What an input or a use may be refused for: a patch-sequence batch (layers/naflex.py), an export
# whose height and width stay dynamic (deploy.py's dynamic_size), token merging (tome.py).
Refusal = Literal["patch_sequence", "dynamic_export", "token_merging"]
# Why token merging refuses most refusing parts: they place tokens by the grid.
MERGED = "which merged tokens no longer have"

# The FLOPs categories of vitzoo.flops.FlopBreakdown, which a part's `flops` fills.
FLOP_KINDS = ("patch_embed", "qkv_proj", "attention", "mlp", "head", "pool", "neck", "rel_pos")


class Part:
    """One component's rules; every method a no-op here, so a part writes only what it has."""

    name = "part"

    def check(self, config: ViTFields) -> None:
        """Raise ValueError (naming the fields) unless this part's fields are valid, alone and with
        the others'."""

    def params(self, config: ViTFields) -> int:
        """The parameter count of this part's modules in a model built from `config`."""
        return 0

    def flops(self, config: ViTFields) -> dict[str, int]:
        """FLOPs of one image of `config.img_size` through this part (vitzoo.flops' convention: matrix
        products only, a multiply-add is 2), by FLOP_KINDS category."""
        return {}

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        """Why a model of `config` cannot take `what` because of this part, or None if it can."""
        return None


def linear(n_in: int, n_out: int, bias: bool = True) -> int:
    """The parameter count of nn.Linear(n_in, n_out, bias)."""
    return n_in * n_out + (n_out if bias else 0)


def norm_params(config: ViTFields, n: int) -> int:
    """The parameter count of one norm of width n: LayerNorm a weight and a bias, RMSNorm a scale."""
    return 2 * n if config.norm_layer == "layernorm" else n


def head_dim(config: ViTFields) -> int:
    return config.embed_dim // config.num_heads


def either(values: Sequence[str], blank: str = "") -> str:
    """Allowed values in words, from the one tuple that holds them: "'a', 'b' or 'c'"; `blank`
    explains the empty string where it is one of them ("'' (no pooling)")."""
    words = [repr(v) + (f" ({blank})" if v == "" and blank else "") for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def one_of(values: Sequence[str]) -> str:
    """Allowed values in words, as a list: "one of 'a', 'b', 'c'"."""
    return "one of " + ", ".join(map(repr, values))


def set_fields(config: ViTFields, names: Sequence[str]) -> list[str]:
    """`name=value` of each of `names` that is set (truthy) in `config`."""
    return [f"{name}={getattr(config, name)!r}" for name in names if getattr(config, name)]
