"""What the candidates share about a model and its outputs: a runner's type, the model's dtype, its
attention written out or fused, and how far one output is from another."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..layers.attention import attention_layers

Runner = Callable[[torch.Tensor], Any]


def set_explicit(model: nn.Module, on: bool) -> None:
    for module in attention_layers(model):
        module.explicit = on


def model_dtype(model: nn.Module) -> torch.dtype:
    return next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)


def tree_map(fn: Callable[[torch.Tensor], Any], out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(tree_map(fn, o) for o in out)
    if isinstance(out, dict):
        return {k: tree_map(fn, v) for k, v in out.items()}
    return out


def leaves(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in leaves(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in leaves(out[k])]
    return []


def relative_error(out: Any, reference: Any) -> float | None:
    """The largest relative L2 error over the output's tensors; None if the structures differ."""
    got, want = leaves(out), leaves(reference)
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return None
    worst = 0.0
    for g, w in zip(got, want):
        w32 = w.detach().float().cpu()
        diff = (g.detach().float().cpu() - w32).norm().item()
        worst = max(worst, diff / max(w32.norm().item(), 1e-12))
    return worst if worst == worst else float("inf")  # NaN disagrees
