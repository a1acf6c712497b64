"""The gated MLP (SwiGLU) in both layouts against timm's SwiGLU / SwiGLUPacked and transformers'
Dinov2SwiGLUFFN, its sub-norm, the width rules, and the MLP chosen by name."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch
from torch import nn

from vitzoo.layers import Mlp, SwiGLU, SwiGLUPacked, make_mlp
from vitzoo.layers.swiglu import dinov2_swiglu_hidden_dim, mlp_hidden_dim, packed_mlp_ratio

EXACT = dict(rtol=0, atol=1e-6)


def _same_weights(ours: nn.Module, theirs: nn.Module) -> None:
    """Random weights at a scale that exercises the gate, shared by name (our names are timm's)."""
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
    ours.load_state_dict(theirs.state_dict(), strict=True)


def test_swiglu_is_silu_gate_times_input_then_fc2():
    torch.manual_seed(0)
    mlp = SwiGLU(dim=6, hidden_dim=10).eval()
    x = torch.randn(3, 6)
    with torch.no_grad():
        expected = mlp.fc2(nn.functional.silu(mlp.fc1_g(x)) * mlp.fc1_x(x))
        torch.testing.assert_close(mlp(x), expected)
    packed = SwiGLUPacked(dim=6, hidden_dim=10).eval()
    with torch.no_grad():
        gate, inp = packed.fc1(x)[:, :10], packed.fc1(x)[:, 10:]  # the gate is the first half
        torch.testing.assert_close(packed(x), packed.fc2(nn.functional.silu(gate) * inp))


@pytest.mark.parametrize("sub_norm", [None, "layernorm", "rmsnorm"])
def test_unpacked_equals_timm_swiglu(sub_norm):
    layers = pytest.importorskip("timm.layers")
    if sub_norm == "rmsnorm":
        import timm

        if tuple(int(p) for p in timm.__version__.split(".")[:3]) < (1, 0, 13):
            pytest.skip(
                f"timm {timm.__version__}'s RmsNorm divides by the variance (timm >= 1.0.13 by the mean square)"
            )
    norms = {None: None, "layernorm": functools.partial(nn.LayerNorm, eps=1e-6), "rmsnorm": layers.RmsNorm}
    torch.manual_seed(0)
    theirs = layers.SwiGLU(in_features=16, hidden_features=40, norm_layer=norms[sub_norm]).eval()
    ours = SwiGLU(dim=16, hidden_dim=40, norm_layer=sub_norm).eval()
    _same_weights(ours, theirs)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), **EXACT)


@pytest.mark.parametrize("sub_norm", [None, "layernorm"])
def test_packed_equals_timm_swiglu_packed(sub_norm):
    layers = pytest.importorskip("timm.layers")
    norm = functools.partial(nn.LayerNorm, eps=1e-6) if sub_norm else None
    torch.manual_seed(0)
    theirs = layers.SwiGLUPacked(in_features=16, hidden_features=80, norm_layer=norm).eval()
    ours = make_mlp("swiglu_packed", dim=16, mlp_ratio=5.0, act_layer="silu", norm_layer=sub_norm).eval()
    _same_weights(ours, theirs)
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), **EXACT)


def test_aligned_width_equals_timm_align_to():
    layers = pytest.importorskip("timm.layers")
    if "align_to" not in inspect.signature(layers.SwiGLU).parameters:
        pytest.skip("this timm's SwiGLU has no align_to (added after timm 1.0.3)")
    theirs = layers.SwiGLU(in_features=24, hidden_features=int(24 * 2.5), align_to=8)
    ours = make_mlp("swiglu", dim=24, mlp_ratio=2.5, act_layer="silu", align=8)
    assert ours.fc1_g.out_features == theirs.fc1_g.out_features == 64  # 60 rounded up to 64
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in theirs.state_dict().items()}


def test_dinov2_giant_widths_are_timms_and_transformers():
    """DINOv2-g: dim 1536, transformers' mlp_ratio 4 -> 4096 hidden units; timm's packed
    ratio 2.66667 * 2 -> fc1 8192 = gate + input; our conversion of 4096 gives the same ratio."""
    assert dinov2_swiglu_hidden_dim(1536, 4.0) == 4096
    assert mlp_hidden_dim("swiglu_packed", 1536, 2.66667 * 2) == 4096
    ratio = packed_mlp_ratio(1536, 4096)
    assert abs(ratio - 2.66667 * 2) < 1e-12 and int(1536 * ratio) == 8192
    for dim in (64, 96, 384, 1024, 1536, 4096):  # the ratio survives rounding at any width
        hidden = dinov2_swiglu_hidden_dim(dim, 4.0)
        assert mlp_hidden_dim("swiglu_packed", dim, packed_mlp_ratio(dim, hidden)) == hidden


def test_packed_equals_transformers_dinov2_swiglu_ffn():
    dinov2 = pytest.importorskip("transformers.models.dinov2.modeling_dinov2")
    config = pytest.importorskip("transformers").Dinov2Config(hidden_size=48, mlp_ratio=4, use_swiglu_ffn=True)
    theirs = dinov2.Dinov2SwiGLUFFN(config).eval()
    hidden = dinov2_swiglu_hidden_dim(48, 4.0)
    ours = make_mlp("swiglu_packed", dim=48, mlp_ratio=packed_mlp_ratio(48, hidden), act_layer="silu").eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.normal_(0, 0.3)
        if hasattr(theirs, "weights_in"):  # transformers 4.x: one packed projection, gate first
            fc1, fc2 = theirs.weights_in, theirs.weights_out
        else:  # 5.x: gate_proj and up_proj apart (its checkpoints still store weights_in)
            fc1 = nn.Linear(48, 2 * hidden)
            fc1.weight.copy_(torch.cat([theirs.gate_proj.weight, theirs.up_proj.weight]))
            fc1.bias.copy_(torch.cat([theirs.gate_proj.bias, theirs.up_proj.bias]))
            fc2 = theirs.down_proj
        state = {"fc1.weight": fc1.weight, "fc1.bias": fc1.bias, "fc2.weight": fc2.weight, "fc2.bias": fc2.bias}
        ours.load_state_dict(state)
        x = torch.randn(2, 5, 48)
        torch.testing.assert_close(ours(x), theirs(x), **EXACT)


def test_plain_mlp_sub_norm_sits_before_fc2():
    torch.manual_seed(0)
    mlp = Mlp(dim=6, hidden_dim=10, norm_layer="layernorm").eval()
    assert isinstance(mlp.norm, nn.LayerNorm) and mlp.norm.normalized_shape == (10,)
    x = torch.randn(3, 6)
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), mlp.fc2(mlp.norm(nn.functional.gelu(mlp.fc1(x)))))
    assert Mlp(dim=6, hidden_dim=10).norm is None  # off: no module, no parameters


def test_make_mlp_names_the_kind_and_refuses_others():
    assert isinstance(make_mlp("mlp", dim=8, mlp_ratio=2.0), Mlp)
    assert isinstance(make_mlp("swiglu", dim=8, mlp_ratio=2.0), SwiGLU)
    assert isinstance(make_mlp("swiglu_packed", dim=8, mlp_ratio=2.0), SwiGLUPacked)
    with pytest.raises(ValueError, match=r"mlp_layer='geglu' is invalid; expected one of 'mlp', 'swiglu'"):
        make_mlp("geglu", dim=8, mlp_ratio=2.0)
