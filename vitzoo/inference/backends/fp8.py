"""float8 weights and activations through torchao (GPUs of compute capability 8.9 and newer)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..outputs import Runner


def fp8(model: nn.Module, x: torch.Tensor) -> Runner:
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

    quantized = copy.deepcopy(model)
    quantize_(quantized, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()))
    return torch.compile(quantized, dynamic=False)
