"""AMD's zentorch compiler backend (`torch.compile(backend="zentorch")`)."""

from __future__ import annotations

import copy
import os

import torch
from torch import nn

from ..outputs import Runner


def import_zentorch() -> None:
    """Import zentorch (registering its torch.compile backend) with its weight cache out of place.
    By default ZenDNN re-lays out each weight tensor in place on first use: the eager model sharing
    those tensors then computes garbage, and a later model whose weights land in the freed memory is
    refused ("weight-cache miss on a buffer an earlier in-place (WC=2) reorder already rewrote").
    Out of place (ZENDNNL_MATMUL_WEIGHT_CACHE=1, read at each call) keeps a re-laid-out copy instead.
    A value the user set is left alone."""
    os.environ.setdefault("ZENDNNL_MATMUL_WEIGHT_CACHE", "1")
    import zentorch  # noqa: F401

    # Its cache is keyed by where a weight lives: a model built where a freed one lived would be
    # served the old one's entries (seen: an output off by 130%). Out of place, a cleared cache only
    # costs live models one more re-layout.
    clear = getattr(torch.ops.zentorch, "zentorch_clear_weight_cache", None)
    if clear is not None and os.environ["ZENDNNL_MATMUL_WEIGHT_CACHE"] == "1":
        clear()


def zentorch(model: nn.Module, x: torch.Tensor) -> Runner:
    import_zentorch()
    in_place = os.environ["ZENDNNL_MATMUL_WEIGHT_CACHE"] not in ("0", "1")
    # in place, ZenDNN would rewrite the eager model's weights (the fallback and the reference): a copy
    return torch.compile(copy.deepcopy(model) if in_place else model, backend="zentorch", dynamic=False)
