"""timm's selection of blocks and the forms `VisionTransformer.forward_intermediates` gives their
outputs in: token sequences or feature maps, with or without the prefix tokens, or timm's dict."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..layers.naflex import PATCH_VALID

# What forward_intermediates returns per block: token maps, or (map, prefix tokens) pairs.
Intermediates = list[torch.Tensor] | list[tuple[torch.Tensor, torch.Tensor]]


def feature_take_indices(num_blocks: int, indices: int | Sequence[int] | None) -> tuple[list[int], int]:
    """timm's block selection: None = every block, an int n = the last n blocks, a list = those
    blocks (negative counts from the end). Returns the absolute indices and the largest one."""
    if indices is None:
        indices = num_blocks
    if isinstance(indices, bool) or not isinstance(indices, (int, Sequence)):
        raise TypeError(f"indices={indices!r} is invalid; expected None, an int or a list of ints")
    if isinstance(indices, int):
        if not 0 < indices <= num_blocks:
            raise ValueError(
                f"indices={indices} is invalid; expected the number of last blocks to take, from 1 to {num_blocks}"
            )
        taken = list(range(num_blocks - indices, num_blocks))
    else:
        taken = []
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int) or not -num_blocks <= i < num_blocks:
                raise ValueError(
                    f"indices={list(indices)} is invalid; expected block indices from {-num_blocks} to "
                    f"{num_blocks - 1} (this model has {num_blocks} blocks)"
                )
            taken.append(i % num_blocks)
        if not taken:
            raise ValueError("indices=[] is invalid; expected at least one block index")
    return taken, max(taken)


def intermediates_out(
    intermediates: list[torch.Tensor],
    final: torch.Tensor | None,
    grid: tuple[int, int],
    output_fmt: str,
    return_prefix_tokens: bool,
    output_dict: bool,
    patch_valid: torch.Tensor | None,
    num_prefix_tokens: int,
) -> Intermediates | tuple[torch.Tensor, Intermediates] | dict[str, Any]:
    """forward_intermediates' result in the form asked for (`final` None: intermediates only): each
    map without its first `num_prefix_tokens` tokens, as (B, D, rows, columns) for "NCHW"."""
    p = num_prefix_tokens
    prefix_tokens = [y[:, :p] for y in intermediates] if p else None
    maps = [y[:, p:] for y in intermediates]
    if output_fmt == "NCHW":
        rows, cols = grid
        # The width named, not -1: an empty batch has no elements to infer it from.
        maps = [y.reshape(y.shape[0], rows, cols, y.shape[-1]).permute(0, 3, 1, 2).contiguous() for y in maps]

    if output_dict:
        result: dict[str, Any] = {"image_intermediates": maps}
        if prefix_tokens is not None and return_prefix_tokens:
            result["image_intermediates_prefix"] = prefix_tokens
        if patch_valid is not None:
            result[PATCH_VALID] = patch_valid
        if final is not None:
            result["image_features"] = final
        return result
    out: Intermediates = maps
    if return_prefix_tokens and prefix_tokens is not None:
        out = list(zip(maps, prefix_tokens))
    if final is None:
        return out
    return final, out
