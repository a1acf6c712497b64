"""The fixed sinusoidal table against the formula of "Attention Is All You Need", element by element."""

from __future__ import annotations

import math

import pytest
import torch

from vitzoo.layers import sincos_1d


@pytest.mark.parametrize("num_positions, dim", [(5, 9), (17, 8), (3, 1), (50, 64)])
def test_sincos_values_match_the_formula(num_positions, dim):
    table = sincos_1d(num_positions, dim)
    assert table.shape == (num_positions, dim)
    assert table.dtype == torch.float32
    for pos in range(num_positions):
        for j in range(dim):
            i = j // 2  # columns 2i and 2i + 1 share the frequency 1 / 10000^(2i / d)
            angle = pos / 10000 ** (2 * i / dim)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert table[pos, j].item() == pytest.approx(expected, abs=1e-6), (pos, j)


def test_odd_dim_ends_on_a_sine_column():
    table = sincos_1d(4, 9)
    last = torch.tensor([math.sin(p / 10000 ** (8 / 9)) for p in range(4)])
    torch.testing.assert_close(table[:, 8], last)
    # Position 0: sin(0) = 0 in even columns, cos(0) = 1 in odd ones.
    assert torch.equal(table[0, 0::2], torch.zeros(5))
    assert torch.equal(table[0, 1::2], torch.ones(4))


def test_sincos_is_real_data_on_the_meta_device():
    with torch.device("meta"):
        table = sincos_1d(3, 4)
    assert table.device.type == "cpu"
    torch.testing.assert_close(table, sincos_1d(3, 4))


@pytest.mark.parametrize("num_positions, dim", [(0, 4), (4, 0), (-1, 4)])
def test_non_positive_sizes_are_value_errors(num_positions, dim):
    with pytest.raises(ValueError, match="positive"):
        sincos_1d(num_positions, dim)
