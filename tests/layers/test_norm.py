"""RMSNorm against its formula and timm's RmsNorm; the norms by name."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.layers import RMSNorm, make_norm


def test_rmsnorm_is_its_formula_with_a_scale_and_no_bias():
    torch.manual_seed(0)
    norm = RMSNorm(8, eps=1e-5)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    expected = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    torch.testing.assert_close(norm.double()(x), expected)


def _skip_before_timm_rmsnorm_fix() -> None:
    """timm before 1.0.13 normalised by the variance (mean removed), not the mean square."""
    import timm

    if tuple(int(p) for p in timm.__version__.split(".")[:3]) < (1, 0, 13):
        pytest.skip(f"timm {timm.__version__}'s RmsNorm divides by the variance (timm >= 1.0.13 by the mean square)")


def test_rmsnorm_equals_timm_bit_for_bit():
    layers = pytest.importorskip("timm.layers")
    _skip_before_timm_rmsnorm_fix()
    torch.manual_seed(0)
    theirs = layers.RmsNorm(16, eps=1e-6)
    with torch.no_grad():
        theirs.weight.normal_()
    ours = RMSNorm(16, eps=1e-6)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    x = torch.randn(2, 7, 16) * 3
    assert torch.equal(ours(x), theirs(x))


def test_make_norm_by_name():
    assert isinstance(make_norm("layernorm", 4, 1e-5), nn.LayerNorm) and make_norm("layernorm", 4, 1e-5).eps == 1e-5
    assert isinstance(make_norm("rmsnorm", 4, 1e-5), RMSNorm) and make_norm("rmsnorm", 4, 1e-5).eps == 1e-5
    with pytest.raises(ValueError, match=r"norm_layer='batchnorm' is invalid; expected one of 'layernorm', 'rmsnorm'"):
        make_norm("batchnorm", 4, 1e-5)
