"""`attention`: where the model looks.

* Class-token attention of one layer, per head: row 0 of that layer's softmax weights (what the
  class token reads from each patch), reshaped to the patch grid and laid over the image.
* Attention rollout (Abnar & Zuidema, 2020) across all layers: the residual connection is
  accounted for by mixing each layer's head-averaged weights with the identity,
  A_l = (1 - r) * mean_heads(W_l) + r * I, and the layers are chained, R = A_L ... A_2 A_1.
  Every A_l is row-stochastic, so R is too: row i of R says how much of token i's final state
  traces back to each input token. The class token's row is the map; a model without a class
  token (average-pooled) uses the mean of the patch tokens' rows, which is what its pooled
  feature is made of.

The weights come from `layers.attention.capture_attention`, the explicit path that runs only when
asked; the model itself is unchanged.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from ..layers.attention import attention_layers, capture_attention
from ._figure import finish, new_figure, show_image
from .images import prepare_image

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

HEAT_CMAP = "inferno"
_HEADS_PER_ROW = 7


def attention_weights(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """One forward pass of `model` on `x` in eval mode without gradients; returns every block's
    attention weights, (B, heads, T, T) each, in block order. The model's mode is restored."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), capture_attention(model) as weights:
            model(x)
    finally:
        model.train(was_training)
    return [w.float().cpu() for w in weights]


def check_index(value: int, size: int, *, what: str, context: str) -> int:
    """Python-style index check (negative counts from the end) with a message that says what the
    valid range is; returns the index as a non-negative int."""
    if size <= 0:
        raise ValueError(f"{what} {value} is out of range: {context}, nothing to draw")
    if not -size <= value < size:
        raise ValueError(f"{what} {value} is out of range: {context}; expected an index in [{-size}, {size - 1}]")
    return value % size


def _model_layout(model: nn.Module) -> tuple[int, tuple[int, int], bool]:
    """(number of prefix tokens, patch grid, has a class token) of a vitzoo ViT."""
    patch_embed = getattr(model, "patch_embed", None)
    num_prefix_tokens = getattr(model, "num_prefix_tokens", None)
    if patch_embed is None or num_prefix_tokens is None:
        raise ValueError(
            f"{type(model).__name__} is not a vitzoo VisionTransformer (no patch_embed / num_prefix_tokens)"
        )
    return num_prefix_tokens, patch_embed.grid_size, getattr(model, "cls_token", None) is not None


def class_token_attention(weights: torch.Tensor, *, num_prefix_tokens: int, grid: tuple[int, int]) -> torch.Tensor:
    """One layer's weights (B, heads, T, T) -> (B, heads, gh, gw): how much the class token
    (token 0) attends to each patch. Attention to prefix tokens is left out, so a map sums to
    at most 1."""
    if num_prefix_tokens < 1:
        raise ValueError("class-token attention needs a class token, but the model has no prefix tokens")
    gh, gw = grid
    return weights[:, :, 0, num_prefix_tokens:].reshape(*weights.shape[:2], gh, gw)


def attention_rollout(
    weights: list[torch.Tensor], *, residual: float = 0.5, head_fusion: Literal["mean", "max"] = "mean"
) -> torch.Tensor:
    """Chain the layers' weights into one (B, T, T) row-stochastic matrix (see the module doc).
    `residual` is the share of the identity (the skip connection); `head_fusion` combines heads."""
    if not weights:
        raise ValueError("attention rollout needs the weights of at least one layer, got none")
    if not 0.0 <= residual <= 1.0:
        raise ValueError(f"residual={residual} is invalid; expected a share in [0, 1]")
    if head_fusion not in ("mean", "max"):
        raise ValueError(f"head_fusion={head_fusion!r} is invalid; expected 'mean' or 'max'")
    b, _, t, _ = weights[0].shape
    eye = torch.eye(t, dtype=torch.float64)
    rollout = eye.expand(b, t, t)
    for w in weights:
        fused = w.double().mean(dim=1) if head_fusion == "mean" else w.double().amax(dim=1)
        fused = fused / fused.sum(dim=-1, keepdim=True)  # "max" breaks row sums; "mean" keeps them
        layer = (1.0 - residual) * fused + residual * eye
        rollout = layer @ rollout  # later layers act on what earlier layers produced
    return rollout.float()


def rollout_map(
    rollout: torch.Tensor, *, num_prefix_tokens: int, grid: tuple[int, int], class_token: bool
) -> torch.Tensor:
    """(B, T, T) rollout -> (B, gh, gw) map over the patches: the class token's row, or for a
    model without one the mean of the patch tokens' rows."""
    gh, gw = grid
    if class_token:
        rows = rollout[:, 0, num_prefix_tokens:]
    else:
        rows = rollout[:, num_prefix_tokens:, num_prefix_tokens:].mean(dim=1)
    return rows.reshape(rollout.shape[0], gh, gw)


def _overlay(ax: Axes, display: torch.Tensor, heat: torch.Tensor, title: str) -> None:
    """The image in gray with a heat map stretched over it (one value per patch cell). The map is
    stretched from its minimum to its maximum, which the title states: near-uniform attention
    (e.g. random weights) still shows its pattern, and the range says how faint it is."""
    c, h, w = display.shape
    gray = display.mean(dim=0, keepdim=True) if c > 1 else display
    low, high = heat.min().item(), heat.max().item()
    show_image(ax, gray, f"{title}\n[{low:.3g}, {high:.3g}]")
    ax.imshow(
        heat.numpy(),
        cmap=HEAT_CMAP,
        alpha=0.6,
        vmin=low,
        vmax=high if high > low else low + 1e-12,
        extent=(-0.5, w - 0.5, h - 0.5, -0.5),
        interpolation="bilinear",
    )


def plot_attention(
    model: nn.Module,
    image: torch.Tensor | str | os.PathLike[str] | None = None,
    *,
    layer: int | None = None,
    head: int | None = None,
    what: Literal["both", "heads", "rollout"] | None = None,
    residual: float = 0.5,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
) -> Figure:
    """Class-token attention of block `layer` (default: the last) per head (or only `head`) and/or
    the attention rollout across all blocks, over `image` (a file, a (C, H, W) tensor in [0, 1], or
    None for a synthetic test card). `what` defaults to "both" for a model with a class token and
    to "rollout" for one without (whose per-head class-token maps do not exist). The figure is 12
    inches wide; writes a PNG when `out` is given."""
    if what not in (None, "both", "heads", "rollout"):
        raise ValueError(f"what={what!r} is invalid; expected 'both', 'heads' or 'rollout'")
    num_prefix, grid, has_cls = _model_layout(model)
    name = type(model).__name__
    no_cls = (
        f"{name} has no class token (class_token=False, global_pool='avg'), so class-token attention is "
        "undefined; draw the attention rollout only (what='rollout', `--what rollout`), which averages "
        "the patch tokens' rows instead"
    )
    if what is None:
        if not has_cls and (layer is not None or head is not None):
            raise ValueError(f"a layer / head was asked for, but {no_cls}")
        what = "both" if has_cls else "rollout"
    if what != "rollout" and not has_cls:
        raise ValueError(no_cls)
    depth = len(attention_layers(model))
    layer = check_index(-1 if layer is None else layer, depth, what="layer", context=f"the {name} has {depth} blocks")
    display, x = prepare_image(model, image)
    weights = attention_weights(model, x)
    num_heads = weights[layer].shape[1]
    if head is not None:
        head = check_index(head, num_heads, what="head", context=f"layer {layer} has {num_heads} heads")

    panels_top: list[tuple[str, torch.Tensor]] = []
    if what != "rollout":
        per_head = class_token_attention(weights[layer], num_prefix_tokens=num_prefix, grid=grid)[0]
        heads = [head] if head is not None else list(range(num_heads))
        panels_top = [(f"layer {layer}, head {h}", per_head[h]) for h in heads]
        if head is None and num_heads > 1:
            panels_top.append((f"layer {layer}, mean of {num_heads} heads", per_head.mean(dim=0)))

    ncols = _HEADS_PER_ROW  # fixed, so every panel has the same size whatever the head count
    top_rows = -(-(len(panels_top) + 1) // ncols) if panels_top else 0
    # Rows of 2.2 inches for the heads (input first), 3.6 inches for the rollout row.
    heights = ([2.2 * top_rows] if panels_top else []) + ([3.6] if what != "heads" else [])
    fig = new_figure(12, sum(heights))
    subfigs = fig.subfigures(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]

    if panels_top:
        axes = subfigs[0].subplots(top_rows, ncols, squeeze=False).ravel()
        show_image(axes[0], display, "input")
        for ax, (title, heat) in zip(axes[1:], panels_top):
            _overlay(ax, display, heat, title)
        for ax in axes[len(panels_top) + 1 :]:
            ax.set_axis_off()
        subfigs[0].suptitle(
            "class token -> patches attention (each map stretched over its own [min, max])", fontsize=10
        )

    if what != "heads":
        rollout = attention_rollout(weights, residual=residual)
        heat = rollout_map(rollout, num_prefix_tokens=num_prefix, grid=grid, class_token=has_cls)[0]
        axes = subfigs[-1].subplots(1, 3)
        show_image(axes[0], display, "input")
        image_map = axes[1].imshow(heat.numpy(), cmap=HEAT_CMAP, interpolation="nearest")
        axes[1].set_xticks([])
        axes[1].set_yticks([])
        source = "class token's row" if has_cls else "mean of patch rows"
        axes[1].set_title(f"rollout over {depth} layers ({source})", fontsize=9)
        subfigs[-1].colorbar(image_map, ax=axes[1], shrink=0.8)
        _overlay(axes[2], display, heat, f"rollout on the image (residual share {residual:g})")
    return finish(fig, out, dpi)
