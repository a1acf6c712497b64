"""The model as given with every attention layer written out (`Attention.explicit`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..outputs import Runner, set_explicit


def eager_explicit(model: nn.Module, x: torch.Tensor) -> Runner:
    def run(inp: torch.Tensor) -> Any:
        set_explicit(model, True)
        try:
            return model(inp)
        finally:
            set_explicit(model, False)

    return run
