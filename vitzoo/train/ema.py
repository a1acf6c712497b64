"""An exponential moving average (EMA) of a model's weights, the model that gets evaluated.

After every optimizer step

    ema <- d * ema + (1 - d) * weights,    d = min(decay, (1 + t) / (10 + t)),  t = steps so far

The averaged weights sit near the centre of the region the optimizer wanders in at the end of
training, which generalises better than the last point of the walk; the warm-up of `d` keeps
the average from remembering the random initialisation in short runs (with decay 0.9998 and
no warm-up, 15% of the average would still be the initial weights after 9,400 steps).

Buffers (BatchNorm running statistics) are themselves averages, so they are copied, not averaged.
The step count comes from the caller (the engine's global step): a resumed run computes the same
decays as an uninterrupted one.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class WeightEma:
    """`WeightEma(model, decay=0.9995)`; call `update(model, step)` after each optimizer step and
    use `.module` (an eval-mode copy of the model) for evaluation and export."""

    def __init__(self, model: nn.Module, *, decay: float) -> None:
        if not 0.0 < decay < 1.0:
            raise ValueError(f"ema decay={decay!r} is invalid; expected a float in (0, 1), e.g. 0.9995")
        self.decay = decay
        self.module = copy.deepcopy(model).eval().requires_grad_(False)

    def decay_at(self, step: int) -> float:
        return min(self.decay, (1 + step) / (10 + step))

    @torch.no_grad()
    def update(self, model: nn.Module, step: int) -> None:
        """Fold `model`'s current weights in; `step` counts optimizer steps from 1."""
        ema_params: list[torch.Tensor] = []
        params: list[torch.Tensor] = []
        for e, p in zip(self.module.parameters(), model.parameters(), strict=True):
            if p.is_floating_point():
                ema_params.append(e)
                params.append(p.detach())
        if ema_params:
            torch._foreach_lerp_(ema_params, params, 1.0 - self.decay_at(step))
        for ema_buffer, buffer in zip(self.module.buffers(), model.buffers(), strict=True):
            ema_buffer.copy_(buffer)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.module.state_dict()

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.module.load_state_dict(state)
