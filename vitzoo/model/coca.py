"""CoCa's attentional pooler as the pool (`global_pool="coca"`, layers/attn_pooler.py): learned caption
queries (`coca_queries`, open_clip's 256 where None) of its own width (`coca_dim`, open_clip's
embed_dim, what its proj takes), arranged by `coca_pool_type`: "" open_clip's released CoCa (one
pooler, its first output pooled, the final norm after it), "parallel" / "cascade" the paper's (a
one-query contrastive pooler beside / after the caption one). Its caption tokens come from
`VisionTransformer.pool_with_tokens`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..checks import check_fields
from ..layers.attn_pooler import COCA_POOL_TYPES, CocaPool, coca_pool_params
from .part import Part, norm_params, one_of
from .pools import pool_keys

if TYPE_CHECKING:
    from .fields import ViTFields

COCA_QUERIES = 256  # open_clip's attn_pooler_queries, where coca_queries is None
# The "coca" pool's own fields, and their values without it (prune_intermediate_layers resets them).
COCA_POOL_OFF: dict[str, Any] = {"coca_queries": None, "coca_dim": None, "coca_pool_type": ""}


class Coca(Part):
    name = "coca"

    def check(self, config: ViTFields) -> None:
        c = config
        check_fields(
            c,
            [
                (c.coca_queries is None or c.coca_queries >= 1, "coca_queries", "None or an int >= 1"),
                (c.coca_dim is None or c.coca_dim >= 1, "coca_dim", "None or an int >= 1"),
                (c.coca_pool_type in COCA_POOL_TYPES, "coca_pool_type", one_of(COCA_POOL_TYPES)),
            ],
        )
        if c.global_pool != "coca":
            stray = [f"{k}={getattr(c, k)!r}" for k, off in COCA_POOL_OFF.items() if getattr(c, k) != off]
            if stray:
                raise ValueError(
                    f"{', '.join(stray)} with global_pool={c.global_pool!r} is invalid: these are the settings of "
                    "CoCa's attentional pooler; expected global_pool='coca', or leave them unset"
                )
            return
        clash = [
            f"{name}={value!r}"
            for name, value, off in (
                ("attn_pool_mlp_ratio", c.attn_pool_mlp_ratio, None),  # the "map" pool's MLP
                ("representation_size", c.representation_size, None),
                ("fc_norm", c.fc_norm, False),
            )
            if value != off
        ]
        if clash:
            raise ValueError(
                f"global_pool='coca' cannot be combined with {', '.join(clash)}: CoCa's pooler has no MLP, its "
                "outputs go to the head (open_clip's proj) as they are, and its final norm sits where coca_pool_type "
                "says ('': after the pooler; 'parallel' / 'cascade': on the tokens); expected them unset"
            )

    def params(self, config: ViTFields) -> int:
        """Its poolers, and its norm where it holds the final one (config.norm_in_pool)."""
        c = config
        if c.global_pool != "coca":
            return 0
        dim = c.pool_dim
        return coca_pool_params(dim, c.embed_dim, queries(c), c.coca_pool_type, c.norm_in_pool, norm_params(c, dim))

    def flops(self, config: ViTFields) -> dict[str, int]:
        """What `model(x)` runs: the caption pooler ("" and "cascade", its first output pooled) and the
        contrastive one ("parallel": over the tokens, alone; "cascade": over the caption outputs)."""
        c = config
        if c.global_pool != "coca":
            return {}
        keys, n = pool_keys(c), queries(c)
        if c.coca_pool_type == "parallel":
            return {"pool": _pooler_flops(c, 1, keys, c.embed_dim)}
        caption = _pooler_flops(c, n, keys, c.embed_dim)
        if c.coca_pool_type == "cascade":
            caption += _pooler_flops(c, 1, n, c.pool_dim)
        return {"pool": caption}


COCA = Coca()


def queries(config: ViTFields) -> int:
    return config.coca_queries or COCA_QUERIES


def _pooler_flops(config: ViTFields, n: int, keys: int, inputs: int) -> int:
    """One AttentionalPooler: n queries of the pool's width attend over `keys` tokens of width
    `inputs`: q (dim -> dim) on the queries, k and v (inputs -> 2 dim) on the tokens, q k^T and
    attn v, the output projection."""
    dim = config.pool_dim
    return 2 * n * dim * dim + 2 * keys * inputs * 2 * dim + 2 * (2 * n * keys * dim) + 2 * n * dim * dim


def new_coca_pool(config: ViTFields) -> CocaPool:
    c = config
    return CocaPool(
        dim=c.pool_dim,
        context_dim=c.embed_dim,
        num_heads=c.attn_pool_num_heads or c.num_heads,
        num_queries=queries(c),
        pool_type=c.coca_pool_type,
        post_norm=c.norm_in_pool,
        norm_eps=c.norm_eps,
        norm_layer=c.norm_layer,
    )
