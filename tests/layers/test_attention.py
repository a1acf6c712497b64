"""Multi-head self-attention against an explicit softmax(q k^T / sqrt(d)) v written out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers import Attention


def reference_attention(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """The textbook computation: separate q, k, v projections (rows [q | k | v] of the fused
    weight), one softmax per head, heads concatenated, output projection."""
    _B, _N, D = x.shape
    H = attn.num_heads
    d = D // H
    w, b = attn.qkv.weight, attn.qkv.bias
    heads = []
    for h in range(H):
        rows = [slice(part * D + h * d, part * D + (h + 1) * d) for part in range(3)]
        q, k, v = (x @ w[r].T + (b[r] if b is not None else 0) for r in rows)  # (B, N, d) each
        weights = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), dim=-1)  # (B, N, N)
        heads.append(weights @ v)
    return attn.proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("dim, num_heads, qkv_bias", [(12, 3, True), (16, 1, True), (8, 4, False)])
def test_matches_explicit_softmax_reference(dim, num_heads, qkv_bias):
    torch.manual_seed(0)
    attn = Attention(dim=dim, num_heads=num_heads, qkv_bias=qkv_bias).eval()
    if qkv_bias:
        torch.nn.init.normal_(attn.qkv.bias)  # nonzero, so the bias layout is checked too
    else:
        assert attn.qkv.bias is None
    x = torch.randn(2, 5, dim)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), reference_attention(attn, x), rtol=1e-5, atol=1e-5)


def test_scale_is_inverse_sqrt_head_dim():
    attn = Attention(dim=64, num_heads=4)
    assert attn.head_dim == 16
    assert attn.scale == pytest.approx(0.25)


def test_attention_dropout_only_in_train():
    torch.manual_seed(0)
    attn = Attention(dim=8, num_heads=2, attn_drop=0.5)
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        attn.eval()
        torch.testing.assert_close(attn(x), reference_attention(attn, x), rtol=1e-5, atol=1e-5)
        attn.train()
        assert not torch.allclose(attn(x), reference_attention(attn, x))


@pytest.mark.parametrize("dim, num_heads", [(10, 3), (8, 0)])
def test_embed_dim_not_divisible_by_num_heads_is_a_value_error(dim, num_heads):
    with pytest.raises(ValueError, match=rf"embed_dim {dim} is not divisible by num_heads {num_heads}"):
        Attention(dim=dim, num_heads=num_heads)


@pytest.mark.parametrize("qkv_fused", [True, False])
def test_eva_layouts_with_rope_equal_timms_eva_attention(qkv_fused):
    """EVA's q/v-only biases (fused: q_bias, v_bias beside a bias-free qkv; unfused: a bias-free
    k_proj), with a rotary embedding and a class token, equal timm's EvaAttention."""
    eva = pytest.importorskip("timm.models.eva")
    import timm

    if tuple(int(p) for p in timm.__version__.split(".")[:3]) < (1, 0, 16):
        pytest.skip(f"timm {timm.__version__}'s EvaAttention has no scale_norm (timm >= 1.0.16)")
    from vitzoo.layers.rope import RotaryEmbedding2d

    torch.manual_seed(0)
    theirs = eva.EvaAttention(32, num_heads=2, qkv_fused=qkv_fused, num_prefix_tokens=1, scale_norm=False).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_()
    ours = Attention(dim=32, num_heads=2, qkv_fused=qkv_fused, k_bias=False).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)  # timm's names
    rope = RotaryEmbedding2d("cat", head_dim=16, num_heads=2, depth=1, grid=(3, 4), num_prefix_tokens=1)
    x = torch.randn(2, 13, 32)
    with torch.no_grad():
        expected = theirs(x, rope=rope.get_embed()[1:])
        torch.testing.assert_close(ours(x, rope.get_embed()), expected, atol=1e-6, rtol=0)
    names = {n for n, _ in ours.named_parameters()}
    assert names == (
        {"qkv.weight", "q_bias", "v_bias", "proj.weight", "proj.bias"}
        if qkv_fused
        else {
            "q_proj.weight",
            "q_proj.bias",
            "k_proj.weight",
            "v_proj.weight",
            "v_proj.bias",
            "proj.weight",
            "proj.bias",
        }
    )


@pytest.mark.parametrize("is_causal", [False, True])
def test_bf16_training_on_a_cpu_writes_the_attention_out_with_the_fused_kernels_result(monkeypatch, is_causal):
    """Under bf16 autocast with autograd on a CPU the layer skips the fused kernel (its backward is
    the slow part there) and computes the same softmax(q k^T / sqrt(d)) v: output and gradients
    agree with the fused kernel's within bf16 rounding. fp32 training and bf16 inference keep it."""
    import torch.nn.functional as F

    from vitzoo.layers import attention

    torch.manual_seed(0)
    attn = Attention(dim=64, num_heads=4, is_causal=is_causal)
    x = torch.randn(2, 20, 64)
    runs = {}
    for name in ("fused", "explicit"):
        if name == "fused":
            monkeypatch.setattr(attention, "explicit_is_faster", lambda q: False)
        else:
            monkeypatch.undo()
        attn.zero_grad()
        xi = x.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = attn(xi)
        out.float().square().mean().backward()
        runs[name] = (out.detach().float(), xi.grad, attn.qkv.weight.grad.clone())
    for fused, explicit in zip(runs["fused"], runs["explicit"], strict=True):
        torch.testing.assert_close(explicit, fused, rtol=0.05, atol=0.02 * float(fused.abs().max()))

    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or a[0])
    attn(x)  # fp32 training
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        attn(x)  # bf16 inference
    assert len(calls) == 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attn(x)  # bf16 training: written out
    assert len(calls) == 2
