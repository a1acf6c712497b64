"""Token merging (vitzoo/tome.py): the matching against brute force, proportional attention against
duplicated tokens, r = 0 against the model itself, and every family of the zoo merged or refused."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

import vitzoo
from vitzoo.layers import Attention
from vitzoo.model import VisionTransformer
from vitzoo.tome import (
    TokenMergingError,
    TokenMergingViT,
    apply_tome,
    bipartite_soft_matching,
    merge_average,
    merge_count,
    size_bias,
    token_counts,
    tome_refusal,
)

TINY = dict(img_size=32, patch_size=4, embed_dim=32, depth=3, num_heads=4, num_classes=5)  # 64 patches


def _tiny(**fields: object) -> VisionTransformer:
    torch.manual_seed(0)
    return VisionTransformer(**{**TINY, **fields}).eval()


def _images(model: VisionTransformer, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, *model.config.input_size, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- the matching
def _brute_force_merge(metric: torch.Tensor, x: torch.Tensor, r: int, protected: int) -> torch.Tensor:
    """The paper's rule spelled out with loops, one image at a time, as a "sum" merge."""
    out = []
    for m, xs in zip(metric, x):
        tokens = list(range(protected, len(m)))
        a, b = tokens[0::2], tokens[1::2]
        proposals = []  # (similarity, A token, its most similar B token)
        for i in a:
            sims = [F.cosine_similarity(m[i], m[j], dim=0).item() for j in b]
            best = max(range(len(b)), key=sims.__getitem__)
            proposals.append((sims[best], i, b[best]))
        merged = sorted(proposals, reverse=True)[: min(r, len(tokens) // 2)]
        gone = {i for _, i, _ in merged}
        joined = {j: xs[j] + sum((xs[i] for _, i, k in merged if k == j), torch.zeros_like(xs[j])) for j in b}
        rows = [xs[i] for i in range(protected)] + [xs[i] for i in a if i not in gone] + [joined[j] for j in b]
        out.append(torch.stack(rows))
    return torch.stack(out)


@pytest.mark.parametrize("tokens, r, protected", [(9, 2, 1), (12, 3, 0), (11, 4, 2), (8, 9, 1), (7, 0, 1)])
def test_the_matching_merges_the_pairs_brute_force_finds(tokens, r, protected):
    g = torch.Generator().manual_seed(tokens * 10 + r)
    metric, x = torch.randn(3, tokens, 5, generator=g), torch.randn(3, tokens, 4, generator=g)
    merged = bipartite_soft_matching(metric, r, protected)(x)
    expected = _brute_force_merge(metric, x, r, protected)
    assert merged.shape == (3, tokens - merge_count(tokens, r, protected), 4)
    torch.testing.assert_close(merged, expected)


def test_a_hand_made_example():
    # class token, then A = (t0, t2, t4) and B = (t1, t3, t5) by position
    metric = torch.tensor([[[9.0, 9.0], [1, 0], [0, 1], [0.1, 1], [1, 0.2], [-1, 1], [-1, 0.9]]])
    x = torch.arange(7.0).reshape(1, 7, 1)
    # t0 -> t3 (cos 0.98), t2 -> t1 (0.995), t4 -> t5 (0.998): the two strongest are t4 and t2
    matching = bipartite_soft_matching(metric, 2, protected=1)
    assert matching.merged.flatten().tolist() == [2, 1] and matching.into.flatten().tolist() == [2, 0]
    assert matching(x).flatten().tolist() == [0, 1, 2 + 3, 4, 6 + 5]
    assert matching(x, "mean").flatten().tolist() == [0, 1, 2.5, 4, 5.5]


def test_r_is_clamped_to_half_the_mergeable_tokens_and_checked():
    assert [merge_count(10, r, 1) for r in (0, 3, 4, 5, 100)] == [0, 3, 4, 4, 4]
    assert merge_count(1, 5, 1) == 0
    assert bipartite_soft_matching(torch.randn(1, 10, 3), 100, 1)(torch.randn(1, 10, 2)).shape == (1, 6, 2)
    with pytest.raises(ValueError, match=r"r=-1 .* >= 0"):
        bipartite_soft_matching(torch.randn(1, 10, 3), -1)
    with pytest.raises(ValueError, match="protected=11"):
        bipartite_soft_matching(torch.randn(1, 10, 3), 1, 11)
    model = _tiny()
    for bad in (-1, [1, 2], [1, 2, True], 1.5):
        with pytest.raises(TokenMergingError, match=r"r=.* is invalid; expected"):
            apply_tome(model, bad)  # type: ignore[arg-type]
    # a schedule larger than the tokens allow runs, each block merging what it can
    merging = apply_tome(model, 1000)
    with torch.no_grad():
        merging(_images(model))
    assert merging.tome_sizes is not None and merging.tome_sizes.shape[1] == token_counts(merging, 65)[-1] == 9


def test_sizes_always_sum_to_the_token_count():
    model = apply_tome(_tiny(reg_tokens=2, depth=4), [5, 0, 11, 3])
    with torch.no_grad():
        model(_images(model))
    sizes = model.tome_sizes
    assert sizes is not None and sizes.shape[1] == 67 - 19
    assert sizes.sum(dim=1).flatten().tolist() == [67.0, 67.0]
    assert torch.equal(sizes[:, :3], torch.ones(2, 3, 1))  # the prefix tokens are never merged
    assert torch.equal(sizes, sizes.round()) and sizes.min() >= 1


# ----------------------------------------------------------------------------- proportional attention
def _attention() -> Attention:
    torch.manual_seed(0)
    return Attention(dim=16, num_heads=2).eval()


def test_proportional_attention_with_unit_sizes_is_plain_attention():
    attn, x = _attention(), torch.randn(2, 7, 16)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, attn_bias=size_bias(torch.ones(2, 7, 1))), attn(x))


def test_a_token_of_size_two_attends_as_two_identical_tokens():
    attn, x = _attention(), torch.randn(2, 7, 16)
    twice = torch.cat([x, x[:, 2:3]], dim=1)  # token 2 (in set A) again at 7 (in set B)
    sizes = torch.ones(2, 7, 1)
    sizes[:, 2] = 2
    with torch.no_grad():
        expected = attn(twice)
        torch.testing.assert_close(attn(x, attn_bias=size_bias(sizes)), expected[:, :7])
        # the same through a merge: the duplicates are the most similar pair, and become one of size 2
        merged, merged_sizes = merge_average(bipartite_soft_matching(twice, 1), twice, None)
        out = attn(merged, attn_bias=size_bias(merged_sizes))
    assert sorted(merged_sizes.flatten().tolist()) == [1.0] * 12 + [2.0] * 2
    for b, row in itertools.product(range(2), range(7)):
        source = (twice[b] == merged[b, row]).all(dim=-1).nonzero()[0, 0]  # which token this one is
        torch.testing.assert_close(out[b, row], expected[b, source])


# ----------------------------------------------------------------------------- the merged model
EXACT_CASES = {
    "plain": {},
    "post-norm": dict(block_type="postnorm"),
    "grouped-query, qk-norm": dict(qkv_fused=False, num_kv_heads=2, qk_norm="head"),
    "distilled": dict(distilled=True),
    "registers, avg": dict(reg_tokens=4, global_pool="avg"),
    "map": dict(class_token=False, global_pool="map"),
    "coca": dict(global_pool="coca", coca_queries=4, pool_include_prefix=True),
    "layer scale, swiglu": dict(init_values=0.1, mlp_layer="swiglu"),
}


@pytest.mark.parametrize("fields", EXACT_CASES.values(), ids=EXACT_CASES.keys())
def test_r_zero_gives_exactly_the_models_outputs(fields):
    model, merging = _tiny(**fields), apply_tome(_tiny(**fields), 0)
    x = _images(model)
    with torch.no_grad():
        assert torch.equal(merging(x), model(x))


@pytest.mark.parametrize("fields", EXACT_CASES.values(), ids=EXACT_CASES.keys())
def test_merging_identical_tokens_changes_nothing(fields):
    """Two kinds of patch (the top quarter of the image one colour, the rest another) and no
    positions: merging only ever joins identical tokens, so proportional attention and the
    size-weighted pools give what the unmerged model gives, whichever pool reads them."""
    model = _tiny(**fields)
    x = torch.ones(2, 3, 32, 32) * torch.tensor([0.3, -0.2, 0.5])[:, None, None]
    x[:, :, :8] = torch.tensor([-0.4, 0.1, 0.2])[:, None, None]
    with torch.no_grad():
        model.pos_embed.zero_()  # type: ignore[union-attr]
        merging = apply_tome(model, 9)
        torch.testing.assert_close(merging(x), model(x), atol=1e-5, rtol=1e-4)
    assert merging.tome_sizes is not None and merging.tome_sizes.shape[1] == model.num_prefix_tokens + 64 - 27


def test_a_merged_vit_s_stays_close_and_loses_r_tokens_a_block():
    torch.manual_seed(0)
    model = vitzoo.create("deit_s16", depth=4).eval()
    x = F.interpolate(torch.randn(2, 3, 14, 14, generator=torch.Generator().manual_seed(2)), size=224, mode="bilinear")
    merging = apply_tome(copy.deepcopy(model), 8)
    seen: list[int] = []
    for block in merging.blocks:  # an MLP's input: the tokens after the block's merge
        block.mlp.register_forward_hook(lambda _m, args, _out: seen.append(args[0].shape[1]))
    with torch.no_grad():
        expected, merged = model.forward_head(model.forward_features(x), pre_logits=True), None
        merged = merging.forward_head(merging.forward_features(x), pre_logits=True)
    assert seen == [197 - 8 * i for i in range(1, 5)] == token_counts(merging, 197)
    assert not torch.equal(merged, expected)
    assert F.cosine_similarity(merged, expected).min() > 0.99


def test_training_with_grad_checkpointing_gives_the_same_gradients():
    def grads(checkpointing: bool) -> list[torch.Tensor]:
        model = apply_tome(_tiny(drop_path_rate=0.0), 6).train()
        model.set_grad_checkpointing(checkpointing)
        model(_images(model)).square().sum().backward()
        return [p.grad for p in model.parameters() if p.grad is not None]

    for a, b in itertools.zip_longest(grads(False), grads(True)):
        torch.testing.assert_close(a, b)


def test_apply_gives_a_view_over_the_same_weights_and_leaves_the_model_as_it_was():
    model = _tiny()
    x = _images(model)
    with torch.no_grad():
        expected = model(x)
        merging = apply_tome(model, 4)
        assert isinstance(merging, TokenMergingViT) and type(model) is VisionTransformer
        assert merging.state_dict().keys() == model.state_dict().keys()
        assert all(a is b for a, b in zip(merging.parameters(), model.parameters()))
        assert not torch.equal(merging(x), expected)
        assert torch.equal(model(x), expected)
        assert apply_tome(merging, 0)(x).equal(expected)  # a merged model given again: the new r
        merging.reset_classifier(3)
        assert merging(x).shape == (2, 3) and model(x).shape == (2, 5)  # its own head, model's kept


def test_dense_outputs_patch_batches_and_no_pooling_are_refused_on_a_merged_model():
    model = apply_tome(_tiny(), 4)
    x = _images(model)
    with pytest.raises(TokenMergingError, match="no grid of patches"):
        model.forward_intermediates(x)
    with pytest.raises(TokenMergingError, match="no grid of patches"):
        model.get_intermediate_layers(x)
    with pytest.raises(TokenMergingError, match="no grid of patches"):
        vitzoo.dense_features(model, torch.randn(1, 3, 48, 48))
    with pytest.raises(TokenMergingError, match="patch-sequence batch"):
        model({"patches": torch.zeros(1, 4, 48)})  # type: ignore[arg-type]
    with torch.no_grad():
        tokens = model.forward_features(x)
        with pytest.raises(TokenMergingError, match="pool_type=''"):
            model.pool(tokens, "")
        with pytest.raises(TokenMergingError, match="do not match the sizes"):
            model.pool(tokens[:, :-1])


# ----------------------------------------------------------------------------- which models merge
REFUSED = {
    "rope": dict(rope="cat", pos_embed="none"),
    "window_size": dict(class_token=False, global_pool="avg", window_size=4, use_rel_pos=True),
    "rel_pos_table": dict(rel_pos_table=True, pos_embed="none"),
    "rel_pos_mlp": dict(rel_pos_mlp=16, pos_embed="none"),
    "block_type='parallel'": dict(block_type="parallel"),
    "attn_layer='diff'": dict(attn_layer="diff"),
    "global_pool=''": dict(global_pool=""),
}


@pytest.mark.parametrize("field, fields", REFUSED.items(), ids=REFUSED.keys())
def test_each_refusal_names_its_reason(field, fields):
    model = _tiny(**fields)
    reason = tome_refusal(model)
    assert reason is not None and field in reason
    with pytest.raises(TokenMergingError, match=reason.split(" (")[0]):
        apply_tome(model, 2)
    assert type(model) is VisionTransformer  # left as it was


def test_only_vision_transformers_merge():
    assert "not a vitzoo VisionTransformer" in (tome_refusal(torch.nn.Linear(2, 2)) or "")
    with pytest.raises(TokenMergingError, match="not a vitzoo VisionTransformer"):
        apply_tome(torch.nn.Linear(2, 2), 1)


@pytest.mark.every_config  # the default run: the smallest model of each family; -m slow: every model
@pytest.mark.parametrize("name", vitzoo.list_models())
def test_every_family_merges_or_is_refused_by_name(name):
    """A model reduced (two blocks, a 6 x 6 grid, 16 channels a head): it merges (r = 0 exact, r = 3
    three tokens fewer a block), or says why not, naming the field that refuses."""
    config = vitzoo.model_info(name)["config"]
    patch = max(config["patch_size"]) if isinstance(config["patch_size"], list | tuple) else config["patch_size"]
    kv = config.get("num_kv_heads")
    reduced = dict(depth=2, img_size=6 * patch, embed_dim=config["num_heads"] * 16)
    model = vitzoo.create(name, **reduced, **({"num_kv_heads": kv[:2]} if isinstance(kv, list | tuple) else {}))
    reason = tome_refusal(model.eval())
    if reason is not None:
        c = model.config
        named = {"rope": c.rope, "window_size": c.window_size, "rel_pos_table": c.rel_pos_table}
        named |= {"rel_pos_mlp": c.rel_pos_mlp, "block_type='parallel'": c.block_type == "parallel"}
        named |= {"attn_layer='diff'": c.attn_layer == "diff", "global_pool=''": c.global_pool == ""}
        assert any(field in reason for field, value in named.items() if value), reason
        return
    x, tokens = _images(model), model.num_prefix_tokens + 36
    with torch.no_grad():
        expected = model(x)
        assert torch.equal(apply_tome(model, 0)(x), expected)
        merging = apply_tome(model, 3)
        merged = merging(x)
    assert merged.shape == expected.shape and torch.isfinite(merged).all()
    assert (
        merging.tome_sizes is not None
        and merging.tome_sizes.shape[1] == tokens - 6 == token_counts(merging, tokens)[-1]
    )
