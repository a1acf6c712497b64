"""CoCa's attentional pooler and its arrangements (layers/attn_pooler.py) against their definition
written out with explicit softmax, and against open_clip's AttentionalPooler with the same weights."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers.attn_pooler import AttentionalPooler, CocaPool, coca_pool_params


def explicit_pooler(pool: AttentionalPooler, x: torch.Tensor) -> torch.Tensor:
    """Each normed query attends over the normed tokens, per head; then the output projection."""
    B, L, _ = x.shape
    N, D = pool.query.shape
    heads, d = pool.num_heads, D // pool.num_heads
    q = pool.q(pool.ln_q(pool.query)).reshape(N, heads, d)
    k, v = pool.kv(pool.ln_k(x)).reshape(B, L, 2, heads, d).unbind(2)
    weights = torch.softmax(torch.einsum("nhd,blhd->bhnl", q, k) / d**0.5, dim=-1)
    return pool.proj(torch.einsum("bhnl,blhd->bnhd", weights, v).reshape(B, N, D))


def _random(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.3)
    return module.eval()


def test_pooler_equals_the_explicit_computation():
    pool = _random(AttentionalPooler(dim=12, context_dim=20, num_heads=3, num_queries=5))
    x = torch.randn(4, 7, 20)
    with torch.no_grad():
        out = pool(x)
        assert out.shape == (4, 5, 12)
        torch.testing.assert_close(out, explicit_pooler(pool, x))


def test_parameter_layout():
    pool = AttentionalPooler(dim=8, context_dim=6, num_heads=2, num_queries=3)
    shapes = {name: tuple(p.shape) for name, p in pool.named_parameters()}
    assert shapes == {
        "query": (3, 8),
        "ln_q.weight": (8,),
        "ln_q.bias": (8,),
        "ln_k.weight": (6,),
        "ln_k.bias": (6,),
        "q.weight": (8, 8),
        "q.bias": (8,),
        "kv.weight": (16, 6),
        "kv.bias": (16,),
        "proj.weight": (8, 8),
        "proj.bias": (8,),
    }


def test_masked_tokens_are_not_attended():
    pool = _random(AttentionalPooler(dim=8, context_dim=8, num_heads=2, num_queries=2))
    x = torch.randn(1, 6, 8)
    mask = torch.tensor([True, True, True, True, False, False]).reshape(1, 1, 1, 6)
    with torch.no_grad():
        torch.testing.assert_close(pool(x, mask), pool(x[:, :4]))


@pytest.mark.parametrize("pool_type", ["", "parallel", "cascade"])
def test_coca_pool_arrangements(pool_type):
    pool = _random(CocaPool(dim=8, context_dim=12, num_heads=2, num_queries=4, pool_type=pool_type))
    x = torch.randn(3, 5, 12)
    with torch.no_grad():
        pooled, tokens = pool.forward_tokens(x)
        torch.testing.assert_close(pool(x), pooled)
        caption = pool.caption(x)
        if pool_type == "":  # one pooler, normed after: the first output pooled, the others the tokens
            normed = pool.norm(caption)
            torch.testing.assert_close(pooled, normed[:, 0])
            torch.testing.assert_close(tokens, normed[:, 1:])
        else:
            assert pool.contrastive is not None and isinstance(pool.norm, torch.nn.Identity)
            torch.testing.assert_close(tokens, caption)
            over = x if pool_type == "parallel" else caption
            torch.testing.assert_close(pooled, pool.contrastive(over)[:, 0])
    params = sum(p.numel() for p in pool.parameters())
    assert params == coca_pool_params(8, 12, 4, pool_type, True, 16)


def test_unknown_arrangement_is_refused():
    with pytest.raises(ValueError, match="pool_type='serial' is invalid"):
        CocaPool(dim=8, context_dim=8, num_heads=2, num_queries=2, pool_type="serial")  # type: ignore[arg-type]


@pytest.mark.parametrize("context_dim", [8, 12], ids=["packed in_proj", "separate q/k/v"])
def test_equals_open_clips_attentional_pooler(context_dim):
    """open_clip's nn.MultiheadAttention layout (one in_proj where the widths agree) read into ours."""
    open_clip = pytest.importorskip("open_clip")
    theirs = _random(open_clip.transformer.AttentionalPooler(8, context_dim, n_head=2, n_queries=3))
    ours = AttentionalPooler(dim=8, context_dim=context_dim, num_heads=2, num_queries=3).eval()
    attn = theirs.attn
    if attn.in_proj_weight is not None:
        q_w, kv_w = attn.in_proj_weight[:8], attn.in_proj_weight[8:]
    else:
        q_w, kv_w = attn.q_proj_weight, torch.cat([attn.k_proj_weight, attn.v_proj_weight])
    state = {"query": theirs.query, "q.weight": q_w, "kv.weight": kv_w, "q.bias": attn.in_proj_bias[:8]}
    state |= {"kv.bias": attn.in_proj_bias[8:], "proj.weight": attn.out_proj.weight, "proj.bias": attn.out_proj.bias}
    state |= {f"ln_{s}.{k}": getattr(getattr(theirs, f"ln_{s}"), k) for s in "qk" for k in ("weight", "bias")}
    ours.load_state_dict(state, strict=True)
    x = torch.randn(2, 6, context_dim)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-6)
