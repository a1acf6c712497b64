"""The pool: the tokens to one feature by `global_pool`: "token" (the class token), "avg" (the mean
of the patch tokens), "prefix_avg" (the mean of the prefix tokens: Pixio's 8 class tokens), "map"
(SigLIP's attention pooling, layers/pool.py: one learned query, its own MLP; PE's head count and
prefix tokens, PE-Core-G's MLP width), "aimv2" (AIMv2's attention-pooling head,
layers/aimv2_pool.py: one learned query used as it is, k/v and output projections, no MLP) or ""
(none: the head sees every token). "coca" is coca.py's; the heads of every attention pool are
checked here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..checks import check_fields
from ..layers.aimv2_pool import Aimv2Pool
from ..layers.pool import AttentionPool
from .fields import GLOBAL_POOLS
from .part import Part, Refusal, either, linear, norm_params

if TYPE_CHECKING:
    from .fields import ViTFields


class Pool(Part):
    name = "pool"

    def check(self, config: ViTFields) -> None:
        c = config
        coca = c.global_pool == "coca"
        heads_of = c.pool_dim if coca else c.embed_dim
        check_fields(
            c,
            [
                (c.global_pool in GLOBAL_POOLS, "global_pool", either(GLOBAL_POOLS, "no pooling")),
                (
                    c.attn_pool_num_heads is None
                    or (c.attn_pool_num_heads > 0 and heads_of % c.attn_pool_num_heads == 0),
                    "attn_pool_num_heads",
                    f"None or a divisor of {'coca_dim' if coca else 'embed_dim'} {heads_of}",
                ),
                (
                    c.attn_pool_mlp_ratio is None or c.attn_pool_mlp_ratio > 0,
                    "attn_pool_mlp_ratio",
                    "None or a positive number",
                ),
            ],
        )
        if c.global_pool == "token" and not c.class_token:
            raise ValueError("global_pool='token' needs class_token=True; use global_pool='avg' without a class token")
        if c.global_pool == "prefix_avg" and not c.class_token:
            raise ValueError(
                "global_pool='prefix_avg' (the mean of the class and register tokens) needs class_token=True; "
                "use global_pool='avg' without a class token"
            )
        if c.distilled and c.global_pool in ("map", "coca", "aimv2", "", "prefix_avg"):
            raise ValueError(
                f"distilled=True cannot be combined with global_pool={c.global_pool!r}: DeiT pools its class and "
                "distillation tokens separately; expected global_pool='token' or 'avg'"
            )

    def params(self, config: ViTFields) -> int:
        d = config.embed_dim
        if config.global_pool == "aimv2":  # the query, k and v (biased as the blocks' q/k/v), the projection
            return d + linear(d, 2 * d, bias=config.qkv_bias) + linear(d, d)
        if config.global_pool != "map":
            return 0
        hidden = map_hidden(config)  # latent query, q, kv, proj, norm and a plain MLP
        return (
            d
            + linear(d, d)
            + linear(d, 2 * d)
            + linear(d, d)
            + norm_params(config, d)
            + linear(d, hidden)
            + linear(hidden, d)
        )

    def flops(self, config: ViTFields) -> dict[str, int]:
        """ "map": one learned query attends over the patch tokens (every token with
        pool_include_prefix): q (D -> D) on the query, k and v (D -> 2D) on each of them, q k^T and
        attn v, the output projection, then the MLP. "aimv2": the same without q and the MLP."""
        if config.global_pool not in ("map", "aimv2"):
            return {}
        d, keys = config.embed_dim, pool_keys(config)
        attend = 2 * keys * d * 2 * d + 2 * (2 * keys * d) + 2 * d * d  # k and v, q k^T and attn v, the projection
        if config.global_pool == "aimv2":
            return {"pool": attend}
        return {"pool": 2 * d * d + attend + 2 * (2 * d * map_hidden(config))}

    def refusal(self, config: ViTFields, what: Refusal) -> str | None:
        if what == "token_merging" and config.global_pool == "":
            return "no pooling (global_pool=''): the output would be the token sequence merging reorders"
        return None


POOL = Pool()


def map_hidden(config: ViTFields) -> int:
    """The "map" pool's MLP width: its own ratio (PE-Core-G) or the blocks'."""
    return int(config.embed_dim * (config.attn_pool_mlp_ratio or config.mlp_ratio))


def pool_keys(config: ViTFields) -> int:
    """How many tokens an attention pool attends over: the patches, or every token (pool_include_prefix)."""
    gh, gw = config.grid_size
    return gh * gw + (config.num_prefix_tokens if config.pool_include_prefix else 0)


def new_attention_pool(config: ViTFields) -> AttentionPool | Aimv2Pool:
    """The "map" or "aimv2" pool of `config`."""
    c = config
    if c.global_pool == "aimv2":
        return Aimv2Pool(dim=c.embed_dim, num_heads=c.attn_pool_num_heads or c.num_heads, kv_bias=c.qkv_bias)
    return AttentionPool(
        dim=c.embed_dim,
        num_heads=c.attn_pool_num_heads or c.num_heads,
        mlp_ratio=c.attn_pool_mlp_ratio or c.mlp_ratio,  # PE-Core-G's pool has a width of its own
        norm_eps=c.norm_eps,
        act_layer=c.act_layer,
        norm_layer=c.norm_layer,
    )


def check_pool_switch(config: ViTFields, global_pool: str) -> None:
    """reset_classifier's refusals: no attention pool is added (its weights would be untrained), and
    CoCa's is not taken away (its width and, in open_clip's arrangement, the final norm are the head's input)."""
    if global_pool in ("map", "coca", "aimv2") and global_pool != config.global_pool:
        pool = {"map": "attention pooling", "coca": "CoCa's attentional pooler"}.get(global_pool, "AIMv2's head")
        raise ValueError(
            f"reset_classifier: global_pool={global_pool!r} is invalid for a model built without {pool}; "
            f"expected 'token', 'avg', 'prefix_avg' or '' here, or build the model with global_pool={global_pool!r}"
        )
    if config.global_pool == "coca" and global_pool != "coca":
        raise ValueError(
            f"reset_classifier: global_pool={global_pool!r} is invalid for a model built with global_pool='coca': "
            "its pooler's width and norm are what the head takes; expected 'coca' (or None)"
        )
