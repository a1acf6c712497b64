"""vitzoo/layers/relpos_mlp.py: the offsets, log coordinates and bias equal timm's RelPosMlp ("cr"),
at the model's grid and after a change of grid; the block adds its own bias or the shared one; LoRA
leaves the bias MLP alone; the timm export puts the MLP back in the attention."""

from __future__ import annotations

import pytest
import torch

from vitzoo.layers import Block, RelPosMlp
from vitzoo.layers.relpos_mlp import log_relative_coords, relative_position_index

pos_embed_rel = pytest.importorskip("timm.layers.pos_embed_rel")


@pytest.mark.parametrize("grid", [(3, 5), (4, 4), (1, 2)])
def test_offsets_and_log_coordinates_equal_timms(grid):
    assert torch.equal(relative_position_index(grid), pos_embed_rel.gen_relative_position_index(grid).view(-1))
    expected = pos_embed_rel.gen_relative_log_coords(grid, mode="cr")
    torch.testing.assert_close(log_relative_coords(grid), expected, rtol=0, atol=0)


def _pair(grid, prefix):
    torch.manual_seed(0)
    theirs = pos_embed_rel.RelPosMlp(window_size=grid, num_heads=3, hidden_dim=16, prefix_tokens=prefix).eval()
    ours = RelPosMlp(num_heads=3, grid=grid, hidden_dim=16, prefix_tokens=prefix).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.5)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    return ours, theirs


@pytest.mark.parametrize("prefix", [0, 1])
def test_bias_equals_timms_and_follows_the_grid(prefix):
    ours, theirs = _pair((3, 4), prefix)
    with torch.no_grad():
        bias = ours()
        torch.testing.assert_close(bias, theirs.get_bias(), rtol=0, atol=1e-6)
        assert bias.shape == (1, 3, 12 + prefix, 12 + prefix)
        assert not bias[..., :prefix, :].any() and not bias[..., :, :prefix].any()  # prefix tokens: no bias
        ours.set_grid((5, 3))
        assert ours().shape == (1, 3, 15 + prefix, 15 + prefix)
        if hasattr(theirs, "set_window_size"):  # timm >= 1.0.20
            theirs.set_window_size((5, 3))
            torch.testing.assert_close(ours(), theirs.get_bias(), rtol=0, atol=1e-6)


def test_a_block_adds_its_own_bias_else_the_shared_one():
    torch.manual_seed(0)
    mlp = RelPosMlp(num_heads=2, grid=(2, 2), hidden_dim=8, prefix_tokens=1)
    own = Block(dim=8, num_heads=2, rel_pos=mlp).eval()
    plain = Block(dim=8, num_heads=2).eval()
    plain.load_state_dict({k: v for k, v in own.state_dict().items() if not k.startswith("rel_pos.")})
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        bias = mlp()
        torch.testing.assert_close(own(x), plain(x, attn_bias=bias), rtol=0, atol=1e-6)
        assert (own(x) - plain(x)).abs().max() > 1e-4  # the bias changes the output


def test_lora_leaves_the_bias_mlp_alone_and_timms_names_are_kept():
    from vitzoo.layers.lora import add_lora
    from vitzoo.model import VisionTransformer
    from vitzoo.weights.exporter import timm_state_dict

    fields = dict(img_size=32, depth=2, embed_dim=16, num_heads=2, rel_pos_mlp=8, pos_embed="none", init_values=0.1)
    model = VisionTransformer(**fields, class_token=False, global_pool="avg")
    exported = timm_state_dict(model)
    assert "blocks.0.attn.rel_pos.mlp.fc1.weight" in exported and "blocks.0.ls1.gamma" in exported
    adapted = add_lora(model, rank=2, targets="q,v,mlp")
    assert adapted and not [name for name in adapted if "rel_pos" in name]
