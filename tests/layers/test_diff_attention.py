"""Differential attention (vitzoo/layers/diff_attention.py) against timm's DiffAttention, the paper's
formula written out, and its recorded maps."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers.attention import capture_attention
from vitzoo.layers.diff_attention import DiffAttention, lambda_full, lambda_init_for


def _random(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0, 0.2)
    return module.eval()


def _by_hand(attn: DiffAttention, x: torch.Tensor) -> torch.Tensor:
    """The paper's computation, head by head, from the fused qkv's rows."""
    D = x.shape[-1]
    H = attn.num_heads
    d = D // H
    qkv = attn.qkv(x)
    lam = lambda_full(attn, attn.lambda_init)
    heads = []
    for h in range(H):
        q, k, v = (qkv[..., part * D + h * d : part * D + (h + 1) * d] for part in range(3))
        maps = [
            torch.softmax(q[..., s] @ k[..., s].transpose(1, 2) / math.sqrt(d // 2), dim=-1)
            for s in (slice(0, d // 2), slice(d // 2, d))
        ]
        heads.append(attn.sub_norm((maps[0] - lam * maps[1]) @ v) * (1 - attn.lambda_init))
    return attn.proj(torch.cat(heads, dim=-1))


def test_lambda_init_grows_with_depth_as_the_paper_sets_it():
    assert lambda_init_for(0) == pytest.approx(0.2)
    assert lambda_init_for(5) == pytest.approx(0.8 - 0.6 * math.exp(-1.5))
    assert lambda_init_for(100) == pytest.approx(0.8)


@pytest.mark.parametrize("index", [0, 3])
def test_matches_the_formula_written_out_fused_and_explicit(index):
    attn = _random(DiffAttention(dim=24, num_heads=3, index=index))
    x = torch.randn(2, 7, 24)
    with torch.no_grad():
        expected = _by_hand(attn, x)
        torch.testing.assert_close(attn(x), expected, rtol=0, atol=1e-5)
        attn.explicit = True
        torch.testing.assert_close(attn(x), expected, rtol=0, atol=1e-5)


def test_matches_timms_diff_attention():
    pytest.importorskip("timm")
    diff = pytest.importorskip("timm.layers.diff_attention", reason="timm >= 1.0.20 has DiffAttention")
    theirs = _random(diff.DiffAttention(32, num_heads=4, qkv_bias=True, depth=2))
    ours = DiffAttention(dim=32, num_heads=4, index=2).eval()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=1e-5)


def test_captured_maps_are_the_differential_maps_and_padding_is_masked():
    attn = _random(DiffAttention(dim=16, num_heads=2, index=1))
    x = torch.randn(2, 5, 16)
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])[:, None, None, :]
    with torch.no_grad(), capture_attention(attn) as maps:
        out = attn(x, attn_mask=mask)
    assert len(maps) == 1 and maps[0].shape == (2, 2, 5, 5)
    lam = lambda_full(attn, attn.lambda_init).detach()
    torch.testing.assert_close(maps[0].sum(-1), torch.full((2, 2, 5), float(1 - lam)), rtol=0, atol=1e-5)
    assert (maps[0][1, :, :, 3:] == 0).all()  # padding keys get no weight
    with torch.no_grad():
        torch.testing.assert_close(attn(x, attn_mask=mask), out, rtol=0, atol=1e-5)  # the fused path agrees


def test_odd_head_width_and_rotary_embedding_are_refused():
    with pytest.raises(ValueError, match="even head width"):
        DiffAttention(dim=12, num_heads=4)
    with pytest.raises(ValueError, match="rotary"):
        DiffAttention(dim=16, num_heads=2)(torch.randn(1, 4, 16), rope=torch.zeros(4, 16))
