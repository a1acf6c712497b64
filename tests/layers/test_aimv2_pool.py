"""AIMv2's attention-pooling head against its definition written out with an explicit softmax, and
against transformers' own Aimv2AttentionPoolingHead holding the same weights."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import Aimv2Pool


def explicit_aimv2_pool(pool: Aimv2Pool, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """The learned query, unprojected, attends over the tokens (those `keep` marks), per head; then proj."""
    B, N, D = x.shape
    heads, d = pool.num_heads, D // pool.num_heads
    q = pool.query[0, 0].reshape(heads, d)
    k, v = pool.kv(x).reshape(B, N, 2, heads, d).unbind(2)  # (B, N, heads, d) each
    logits = torch.einsum("hd,bnhd->bhn", q, k) / d**0.5
    if keep is not None:
        logits = logits.masked_fill(~keep[:, None, :], float("-inf"))
    weights = torch.softmax(logits, dim=-1)
    return pool.proj(torch.einsum("bhn,bnhd->bhd", weights, v).reshape(B, D))


@pytest.mark.parametrize("kv_bias", [False, True])
def test_pool_equals_the_explicit_computation(kv_bias):
    torch.manual_seed(0)
    pool = Aimv2Pool(dim=12, num_heads=3, kv_bias=kv_bias).eval()
    x = torch.randn(4, 7, 12)
    with torch.no_grad():
        torch.testing.assert_close(pool(x), explicit_aimv2_pool(pool, x))


def test_parameters_are_the_query_kv_and_a_biased_projection():
    shapes = {name: tuple(p.shape) for name, p in Aimv2Pool(dim=8, num_heads=2).named_parameters()}
    assert shapes == {"query": (1, 1, 8), "kv.weight": (16, 8), "proj.weight": (8, 8), "proj.bias": (8,)}
    biased = {name for name, _ in Aimv2Pool(dim=8, num_heads=2, kv_bias=True).named_parameters()}
    assert "kv.bias" in biased


def test_key_mask_leaves_the_masked_tokens_out():
    """A (B, 1, 1, N) key mask (patch-sequence padding): the pooled feature of the kept tokens alone."""
    torch.manual_seed(1)
    pool = Aimv2Pool(dim=8, num_heads=2).eval()
    x = torch.randn(2, 5, 8)
    keep = torch.tensor([[True, True, True, False, False], [True] * 5])
    with torch.no_grad():
        got = pool(x, keep[:, None, None, :])
        torch.testing.assert_close(got, explicit_aimv2_pool(pool, x, keep))
        torch.testing.assert_close(got[:1], pool(x[:1, :3]))


def test_query_is_initialised_within_two_standard_deviations():
    torch.manual_seed(0)
    pool = Aimv2Pool(dim=64, num_heads=4)
    std = 64**-0.5
    assert pool.query.abs().max() <= 2 * std and pool.query.std() > std / 2


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="num_heads 5"):
        Aimv2Pool(dim=12, num_heads=5)


@pytest.mark.parametrize("qkv_bias", [False, True])
def test_equals_transformers_attention_pooling_head(qkv_bias):
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "Aimv2VisionConfig"):
        pytest.skip(f"transformers {transformers.__version__} has no Aimv2VisionConfig (AIMv2 came with 4.54)")
    from transformers.models.aimv2.modeling_aimv2 import Aimv2AttentionPoolingHead

    config = transformers.Aimv2VisionConfig(hidden_size=16, num_attention_heads=4, qkv_bias=qkv_bias)
    torch.manual_seed(2)
    theirs = Aimv2AttentionPoolingHead(config).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours = Aimv2Pool(dim=16, num_heads=4, kv_bias=qkv_bias).eval()
    state = {"query": theirs.cls_token, "proj.weight": theirs.output_proj.weight, "proj.bias": theirs.output_proj.bias}
    state["kv.weight"] = torch.cat([theirs.k_proj.weight, theirs.v_proj.weight])
    if qkv_bias:
        state["kv.bias"] = torch.cat([theirs.k_proj.bias, theirs.v_proj.bias])
    ours.load_state_dict(state, strict=True)
    x = torch.randn(3, 9, 16)
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max().item() <= 1e-6
