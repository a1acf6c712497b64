"""Token merging (ToMe: Bolya et al., 2023, "Token Merging: Your ViT But Faster"), written from the paper.

A ViT spends its time on tokens, and neighbouring patches often say the same thing. ToMe merges the
r most similar pairs of tokens in every block, so the sequence shrinks as it goes (N, N - r,
N - 2r, ...) with no training: an opt-in speed knob for a model as it is.

Bipartite soft matching (`bipartite_soft_matching`), between each block's attention and its MLP:

    metric  = the attention's keys, averaged over heads              (B, N, head_dim)
    A, B    = the tokens alternately (A: 0, 2, 4, ...; B: 1, 3, 5, ...), prefix tokens left out
    edge    = each A token's most similar B token, by cosine similarity of the metric
    merge   = the r most similar edges: each of those A tokens joins its B partner

The keys are the metric because they already summarise what a token holds for attention (the
paper's ablation). Merged tokens are averaged weighted by their *size*, the number of patches each
stands for, so a merge of merges stays a mean over patches (`merge_average`). Prefix tokens (class,
distillation, register) are never merged: the head reads them.

Proportional attention: a token of size s stands for s patches, so each key gets log(s) added to
its logits, softmax(q kᵀ / sqrt(d) + log s). Then attending to one token of size 2 is exactly
attending to two identical tokens (`size_bias`, through Attention's additive `attn_bias`). The
pools see sizes too: "avg" is the size-weighted mean, the MAP and CoCa poolers add the same log s.

    import vitzoo
    model = vitzoo.create("deit_s16")
    merged = apply_tome(model, 8)   # 8 merges per block (or one r per block)
    logits = merged(images)         # 197 tokens in, 197 - 8 * 12 = 101 leave the last block

`apply_tome` returns a view of the model, a `TokenMergingViT` (a VisionTransformer subclass) over
the same weights under the same names (it saves and loads as the model does; r is a run-time
setting, never saved); the model itself is unchanged. `tome_refusal(model)` says in one line why a
model cannot merge (rotary positions, SAM, relative position biases, parallel blocks, differential
attention, no pooling), None where it can.

r larger than a block can merge is clamped, as the paper's code does: at most half the mergeable
tokens of the block (`merge_count`), so an input of any size runs. What leaves each block:
`token_counts`. Dense outputs (`forward_intermediates`, `dense_features`, features_only) need the
grid of patches that merging takes away, so a merged model refuses them; so does a patch-sequence
(NaFlex) batch, whose padding and per-image grids merging does not follow.
"""

from __future__ import annotations

import copy
import functools
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .errors import VitzooError
from .layers.attention import Attention
from .layers.block import Block, PostNormBlock
from .layers.gqa import expand_kv
from .layers.naflex import PatchBatch, is_patch_batch
from .layers.qk_norm import apply_qk_norm
from .model import VisionTransformer


class TokenMergingError(VitzooError, ValueError):
    """A model, a setting or an input token merging cannot use."""


# ----------------------------------------------------------------------------- bipartite soft matching
def merge_count(tokens: int, r: int, protected: int = 0) -> int:
    """How many of `r` merges a sequence of `tokens` (the first `protected` never merged) allows:
    at most half the mergeable tokens, as the paper's code clamps it (set A is never emptier than B)."""
    return max(0, min(r, (tokens - protected) // 2))


@dataclass(frozen=True)
class Matching:
    """One block's merge, as indices: applied alike to any (B, N, C) tensor of the same tokens (the
    hidden states, their sizes). Indices count within set A (`kept`, `merged`) or B (`into`), each
    (B, n, 1). The result is [prefix, the kept A tokens in their order, B with the merged A joined]."""

    protected: int
    kept: torch.Tensor  # the A tokens that stay
    merged: torch.Tensor  # the A tokens merged away, most similar first
    into: torch.Tensor  # the B token each of them joins

    def __call__(self, x: torch.Tensor, mode: str = "sum") -> torch.Tensor:
        """(B, N, C) -> (B, N - r, C); each B token the `mode` ("sum" or "mean") of itself and the A
        tokens merged into it. A size-weighted mean is a "sum" of x * size over a sum of sizes."""
        if mode not in ("sum", "mean"):
            raise ValueError(f"mode={mode!r} is invalid; expected 'sum' or 'mean'")
        p, C = self.protected, x.shape[-1]
        a, b = x[:, p::2], x[:, p + 1 :: 2]  # the same split as the matching's
        kept = a.gather(1, self.kept.expand(-1, -1, C))
        merged = a.gather(1, self.merged.expand(-1, -1, C))
        b = b.scatter_reduce(1, self.into.expand(-1, -1, C), merged, reduce=mode)
        return torch.cat([x[:, :p], kept, b], dim=1)


def bipartite_soft_matching(metric: torch.Tensor, r: int, protected: int = 0) -> Matching:
    """The merge of the r most similar (A, B) pairs of `metric` (B, N, C): tokens alternate between
    A and B after the first `protected`, each A token proposes its most similar B token (cosine
    similarity), the r strongest proposals are merged. r is clamped by `merge_count`."""
    if metric.dim() != 3:
        raise ValueError(f"metric of shape {tuple(metric.shape)} is invalid; expected (batch, tokens, channels)")
    if r < 0:
        raise ValueError(f"r={r} is invalid; expected a number of merges >= 0")
    if not 0 <= protected <= metric.shape[1]:
        raise ValueError(f"protected={protected} is invalid; expected 0 to the token count {metric.shape[1]}")
    r = merge_count(metric.shape[1], r, protected)
    with torch.no_grad():  # indices only: nothing here is differentiable
        metric = F.normalize(metric, dim=-1)
        a, b = metric[:, protected::2], metric[:, protected + 1 :: 2]
        similarity, partner = (a @ b.transpose(1, 2)).max(dim=-1)  # each A token's best B token
        order = similarity.argsort(dim=-1, descending=True)
        merged = order[:, :r]
        kept = order[:, r:].sort(dim=-1).values  # the tokens that stay keep their order
        into = partner.gather(1, merged)
    return Matching(protected, kept[..., None], merged[..., None], into[..., None])


def merge_average(matching: Matching, x: torch.Tensor, sizes: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge `x` (B, N, C) averaged by size, and the sizes (B, N, 1) summed; None: every size 1."""
    sizes = torch.ones_like(x[..., :1]) if sizes is None else sizes
    merged_sizes = matching(sizes)
    return matching(x * sizes) / merged_sizes, merged_sizes


def size_bias(sizes: torch.Tensor | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
    """Proportional attention: log(size) of each key, (B, N, 1) -> (B, 1, 1, N), the additive bias
    that makes one token of size s weigh as s identical tokens. None (nothing merged yet): no bias."""
    if sizes is None:
        return None
    return sizes[..., 0].log()[:, None, None, :].to(dtype or sizes.dtype)


# ----------------------------------------------------------------------------- the merging block
def attention_and_keys(
    attn: Attention, h: torch.Tensor, attn_bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention's forward, keeping its keys: (output (B, N, D), keys averaged over heads (B, N, head_dim)).
    The keys are the ones attention itself uses (its one projection, after any q/k norm), not a
    second projection; the steps are Attention.forward's without the rotary embedding, refused here."""
    q, k, v = attn._project(h)
    if attn.q_norm is not None and attn.k_norm is not None:
        q, k = apply_qk_norm(attn.q_norm, q, attn.qk_norm), apply_qk_norm(attn.k_norm, k, attn.qk_norm)
    keys = k.mean(dim=1)
    groups = attn.num_heads // attn.num_kv_heads  # grouped-query attention: each kv head to its group
    out = attn._attend(q, expand_kv(k, groups), expand_kv(v, groups), None, attn_bias)
    return out, keys


def merging_block(
    block: Block, x: torch.Tensor, sizes: torch.Tensor | None, r: int, protected: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One encoder block with r merges between its attention and its MLP (the paper's place):

    x = x + DropPath(LayerScale(Attention(Norm(x), + log size)))
    x, sizes = merge r tokens of x by the attention's keys
    x = x + DropPath(LayerScale(Mlp(Norm(x))))

    a post-norm block (PostNormBlock) with each norm after its branch instead. `sizes` None: every
    token is one patch (and no bias is added, so a block that merges nothing computes what
    Block.forward does, to the bit)."""
    post = isinstance(block, PostNormBlock)
    out, keys = attention_and_keys(block.attn, x if post else block.norm1(x), size_bias(sizes, x.dtype))
    x = x + block.drop_path1(block.norm1(out) if post else block.ls1(out))
    if merge_count(x.shape[1], r, protected):
        x, sizes = merge_average(bipartite_soft_matching(keys, r, protected), x, sizes)
    out = block.mlp(x if post else block.norm2(x))
    x = x + block.drop_path2(block.norm2(out) if post else block.ls2(out))
    return x, sizes


# ----------------------------------------------------------------------------- the merged model
class TokenMergingViT(VisionTransformer):
    """A VisionTransformer merging `tome_r[i]` tokens in block i (made by `apply_tome`, never built
    directly). `tome_sizes`: the (B, N, 1) sizes of the tokens of the last `forward_features` call
    (None when nothing was merged), which `pool` reads, as the paper keeps them beside the model."""

    tome_r: tuple[int, ...]
    tome_sizes: torch.Tensor | None

    @typing.overload
    def forward_features(self, x: torch.Tensor) -> torch.Tensor: ...
    @typing.overload
    def forward_features(self, x: PatchBatch) -> dict[str, torch.Tensor]: ...
    def forward_features(self, x: torch.Tensor | PatchBatch) -> torch.Tensor | dict[str, torch.Tensor]:
        """(B, C, H, W) -> (B, prefix + N - merges, D) normalised tokens; their sizes in `tome_sizes`."""
        if is_patch_batch(x):
            raise TokenMergingError(
                "a model merging tokens (apply_tome) takes (B, C, H, W) images, not a patch-sequence batch: merging "
                "does not follow its padding and per-image grids; use the model apply_tome was given"
            )
        x = typing.cast(torch.Tensor, x)
        grid = self.patch_embed.dynamic_feat_size(x.shape[-2:])
        x, sizes = self._embed(x), None
        for block, r in zip(self.blocks, self.tome_r):
            step = functools.partial(merging_block, typing.cast(Block, block), r=r, protected=self.num_prefix_tokens)
            if self.grad_checkpointing and torch.is_grad_enabled():
                x, sizes = checkpoint(step, x, sizes, use_reentrant=False)
            else:
                x, sizes = step(x, sizes)
        self.tome_sizes = sizes
        return self._final(x, grid)

    def _sizes_of(self, x: torch.Tensor) -> torch.Tensor | None:
        """The sizes of tokens `x` as the last forward_features left them (None: nothing merged)."""
        sizes = self.tome_sizes
        if sizes is not None and sizes.shape[:2] != x.shape[:2]:
            raise TokenMergingError(
                f"tokens of shape {tuple(x.shape)} do not match the sizes {tuple(sizes.shape[:2])} of the last "
                "forward_features call; expected that call's tokens (token merging keeps one set of sizes)"
            )
        return sizes

    def pool(
        self, x: torch.Tensor, pool_type: str | None = None, patch_valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """VisionTransformer.pool over merged tokens: the class token as ever, "avg" the size-weighted
        mean of the patch tokens, an attention pool with log(size) added to its keys."""
        sizes = self._sizes_of(x)
        if sizes is None:
            return super().pool(x, pool_type, patch_valid)
        if self.attn_pool is not None:
            return self.attn_pool(*self._sized_pool_input(x, sizes))
        p, pool_type = self.num_prefix_tokens, self.config.global_pool if pool_type is None else pool_type
        if pool_type == "avg":
            return (x[:, p:] * sizes[:, p:]).sum(dim=1) / sizes[:, p:].sum(dim=1)
        if pool_type in ("token", "prefix_avg"):  # the prefix tokens are never merged
            return super().pool(x, pool_type)
        raise TokenMergingError(
            f"pool_type={pool_type!r} is invalid on merged tokens; expected 'token', 'prefix_avg' or 'avg' ('' would hand out "
            "a token sequence whose length and order merging changed)"
        )

    def pool_with_tokens(
        self, x: torch.Tensor, patch_valid: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """CoCa's pooled feature and caption tokens, the pooler seeing the sizes (`pool`)."""
        sizes = self._sizes_of(x)
        forward_tokens = getattr(self.attn_pool, "forward_tokens", None)
        if sizes is None or forward_tokens is None:
            return super().pool_with_tokens(x, patch_valid)
        pooled, tokens = forward_tokens(*self._sized_pool_input(x, sizes))
        return pooled, tokens

    def _sized_pool_input(self, x: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens an attention pool reads, and log(size) of each as its float mask (an additive bias)."""
        tokens, _ = self._attn_pool_input(x, None)
        bias = size_bias(sizes[:, -tokens.shape[1] :], x.dtype)
        assert bias is not None  # sizes is a tensor
        return tokens, bias

    def forward_intermediates(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the blocks' maps need the grid of patches, which merged tokens no longer form."""
        raise TokenMergingError(
            "forward_intermediates (and get_intermediate_layers, dense_features, features_only) is refused on a "
            "model merging tokens: merged tokens form no grid of patches to give maps of; use the model "
            "apply_tome was given"
        )


# ----------------------------------------------------------------------------- the API
def tome_refusal(model: nn.Module) -> str | None:
    """Why token merging does not apply to `model`, in one line; None where it does."""
    if not isinstance(model, VisionTransformer):
        return (
            f"{type(model).__name__} is not a vitzoo VisionTransformer (an image-text model's image tower is its "
            "`visual`; a features_only model gives maps of the grid, which merging takes away)"
        )
    if type(model) not in (VisionTransformer, TokenMergingViT):
        return f"{type(model).__name__} subclasses VisionTransformer: token merging would replace its forward"
    reason = model.config.refusal("token_merging")  # the model's parts say which of them need the grid
    return None if reason is None else f"token merging does not apply: {reason}"


def _per_block(r: int | Sequence[int], depth: int) -> tuple[int, ...]:
    """r as one number of merges per block, checked."""
    schedule = [r] * depth if isinstance(r, int) else list(r) if isinstance(r, Sequence) else []
    if len(schedule) != depth or not all(isinstance(n, int) and not isinstance(n, bool) for n in schedule):
        raise TokenMergingError(f"r={r!r} is invalid; expected an int or a list of {depth} ints (one per block)")
    if any(n < 0 for n in schedule):
        raise TokenMergingError(f"r={r!r} is invalid; expected merges >= 0 (0: none)")
    return tuple(schedule)


def apply_tome(model: nn.Module, r: int | Sequence[int]) -> TokenMergingViT:
    """`model` merging `r` tokens in every block (an int) or r[i] in block i (a list, one per block).

    The result is a view: a new module object sharing every parameter, buffer and block with
    `model` (no weight is copied), with a table of submodules of its own (so replacing one, as
    reset_classifier does, leaves `model`'s), as vitzoo.dense views a model at another size.
    `model` itself is left as it is, and is the way back. r = 0 computes exactly what `model`
    does. A merged model given again gets the new r. A model token merging does not apply to is
    refused (`tome_refusal`)."""
    refusal = tome_refusal(model)
    if refusal is not None:
        raise TokenMergingError(refusal)
    assert isinstance(model, VisionTransformer)  # tome_refusal checks
    schedule = _per_block(r, len(model.blocks))
    view = copy.copy(model)
    view._modules = dict(model._modules)
    view.__class__ = TokenMergingViT
    merging = typing.cast(TokenMergingViT, view)
    merging.tome_r, merging.tome_sizes = schedule, None
    return merging


def token_counts(model: TokenMergingViT, tokens: int) -> list[int]:
    """How many tokens leave each block of `model` when `tokens` (prefix included) enter the first."""
    counts = []
    for r in model.tome_r[: len(model.blocks)]:
        tokens -= merge_count(tokens, r, model.num_prefix_tokens)
        counts.append(tokens)
    return counts
