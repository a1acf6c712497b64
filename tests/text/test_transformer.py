"""The text tower: causal attention (CLIP) lets no token see a later one, and the explicit
attention of capture_attention computes what the fused kernel computes."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import capture_attention
from vitzoo.text import TextConfig, TextTransformer

SMALL = dict(vocab_size=50, context_length=8, width=16, depth=2, num_heads=2, embed_dim=12)


def test_causal_tokens_do_not_see_later_tokens():
    torch.manual_seed(0)
    tower = TextTransformer(TextConfig(**SMALL)).eval()
    ids = torch.randint(1, 49, (2, 8))
    changed = ids.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 49
    with torch.no_grad():
        a, b = tower.forward_features(ids), tower.forward_features(changed)
    assert torch.equal(a[:, :5], b[:, :5]) and not torch.allclose(a[:, 5:], b[:, 5:])
    bidirectional = TextTransformer(TextConfig(**SMALL, causal=False, pool="last")).eval()
    with torch.no_grad():
        assert not torch.allclose(
            bidirectional.forward_features(ids)[:, :5], bidirectional.forward_features(changed)[:, :5]
        )


@pytest.mark.parametrize("causal", [True, False])
def test_explicit_attention_equals_the_fused_kernel(causal):
    torch.manual_seed(0)
    tower = TextTransformer(TextConfig(**SMALL, causal=causal)).eval()
    ids = torch.randint(1, 49, (2, 8))
    with torch.no_grad():
        fused = tower(ids)
        with capture_attention(tower) as maps:
            explicit = tower(ids)
    assert torch.allclose(fused, explicit, atol=1e-6) and len(maps) == 2
    upper = maps[0][..., torch.ones(8, 8, dtype=torch.bool).triu(1)]
    assert (upper == 0).all() if causal else (upper > 0).all()


def test_pooling_at_the_end_of_text_token():
    torch.manual_seed(0)
    tower = TextTransformer(TextConfig(**SMALL)).eval()
    ids = torch.tensor([[48, 3, 49, 0, 0, 0, 0, 0]])  # the largest id (end of text) at position 2
    with torch.no_grad():
        tokens = tower.forward_features(ids)
        assert torch.allclose(tower(ids), tower.proj(tokens[:, 2]))


def test_bad_configs_are_refused_by_field():
    with pytest.raises(ValueError, match="num_heads"):
        TextConfig(width=10, num_heads=3)
    with pytest.raises(ValueError, match="pool"):
        TextConfig(pool="mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="context"):
        TextTransformer(TextConfig(**SMALL))(torch.zeros(1, 9, dtype=torch.long))
