"""The three MLP activations against their formulas, and bad names."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers import make_activation


def test_each_activation_is_its_formula():
    x = torch.linspace(-6, 6, 101, dtype=torch.float64)
    phi = 0.5 * (1 + torch.erf(x / math.sqrt(2)))  # the standard normal CDF
    tanh_approx = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    torch.testing.assert_close(make_activation("gelu")(x), x * phi)
    torch.testing.assert_close(make_activation("gelu_tanh")(x), tanh_approx)
    torch.testing.assert_close(make_activation("quick_gelu")(x), x / (1 + torch.exp(-1.702 * x)))
    # Close relatives, not the same function: weights need the one they were trained with.
    assert (make_activation("quick_gelu")(x) - x * phi).abs().max() > 1e-2


def test_each_call_builds_a_fresh_module():
    assert make_activation("gelu") is not make_activation("gelu")


def test_unknown_name_is_a_value_error_listing_the_choices():
    with pytest.raises(
        ValueError, match=r"act_layer='relu' is invalid; expected one of 'gelu', 'gelu_tanh', 'quick_gelu'"
    ):
        make_activation("relu")
