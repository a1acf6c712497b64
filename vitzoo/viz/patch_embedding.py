"""`embedding`: what the patch embedding does to each patch.

The patch embedding is one linear map per patch (a Conv2d with kernel = stride = patch size).
Three ways to look at it:

* the *identity kernel*: with D = C * ph * pw output channels and kernel d = a one-hot on input
  value d, every token is just its patch's pixels, and folding the tokens back gives the image
  unchanged: the embedding loses nothing by construction, all it does is choose a basis;
* the *learned kernels*: the model's filters, and the maps they produce over the image;
* the *principal components* of the learned filters (ViT paper, Fig. 7 left): the few patterns
  that span most of what the embedding looks for.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import PatchEmbed, to_2tuple
from ..layers.hybrid_embed import HybridEmbed
from ._figure import finish, mosaic, new_figure, normalise_tiles, show_image, tile_picture
from .images import prepare_image

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def identity_patch_embed(
    *, img_size: int | tuple[int, int], patch_size: int | tuple[int, int], in_chans: int
) -> PatchEmbed:
    """A PatchEmbed whose token for each patch is that patch's pixels, flattened channel-major
    (the order of `layers.patchify`): D = in_chans * ph * pw, kernel d is one-hot on value d."""
    ph, pw = to_2tuple(patch_size, "patch_size")
    dim = in_chans * ph * pw
    embed = PatchEmbed(img_size=img_size, patch_size=(ph, pw), in_chans=in_chans, embed_dim=dim)
    with torch.no_grad():
        embed.proj.weight.copy_(torch.eye(dim).reshape(dim, in_chans, ph, pw))
        if embed.proj.bias is not None:
            embed.proj.bias.zero_()
    return embed


def unpatchify(
    tokens: torch.Tensor, *, img_size: int | tuple[int, int], patch_size: int | tuple[int, int]
) -> torch.Tensor:
    """(B, N, C * ph * pw) patch vectors (channel-major) -> (B, C, H, W): the inverse of patchify."""
    ph, pw = to_2tuple(patch_size, "patch_size")
    return F.fold(
        tokens.transpose(1, 2), output_size=to_2tuple(img_size, "img_size"), kernel_size=(ph, pw), stride=(ph, pw)
    )


def filter_principal_components(weight: torch.Tensor, k: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Principal components of patch-embedding filters (D, C, ph, pw).

    Each filter is one sample of a C * ph * pw dimensional vector; after removing the mean filter
    the right singular vectors are the components. Returns the first `k` components, shaped
    (k, C, ph, pw) with unit norm, and the fraction of the filters' variance each one explains."""
    if weight.ndim != 4:
        raise ValueError(f"expected patch-embedding filters of shape (D, C, ph, pw), got {tuple(weight.shape)}")
    flat = weight.detach().reshape(weight.shape[0], -1).double().cpu()
    flat = flat - flat.mean(dim=0, keepdim=True)
    _, s, vh = torch.linalg.svd(flat, full_matrices=False)
    variance = s**2
    explained = variance / variance.sum().clamp_min(1e-300)
    k = vh.shape[0] if k is None else min(k, vh.shape[0])
    return vh[:k].reshape(k, *weight.shape[1:]).float(), explained[:k].float()


def _token_pca_rgb(tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """(N, D) token embeddings -> (3, gh, gw) image of their first three principal components,
    each stretched to [0, 1]: tokens the embedding treats alike get alike colours."""
    centred = tokens.double() - tokens.double().mean(dim=0, keepdim=True)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)
    proj = centred @ vh[: min(3, vh.shape[0])].T  # (N, <=3)
    if proj.shape[1] < 3:  # fewer than three directions (tiny embed_dim): pad with gray
        proj = torch.cat([proj, torch.zeros(proj.shape[0], 3 - proj.shape[1], dtype=proj.dtype)], dim=1)
    rgb = normalise_tiles(proj.T.reshape(3, 1, *grid)).reshape(3, *grid)
    return rgb.float()


def plot_patch_embedding(
    model: nn.Module,
    image: torch.Tensor | str | os.PathLike[str] | None = None,
    *,
    num_filters: int = 32,
    num_components: int = 28,
    out: str | os.PathLike[str] | None = None,
    dpi: int = 100,
) -> Figure:
    """Identity kernel, learned kernels and their principal components for `model`'s patch
    embedding, applied to `image` (a file, a (C, H, W) tensor in [0, 1], or None for a synthetic
    test card). Writes a 1200 x 800 px PNG (at dpi 100) when `out` is given; returns the figure."""
    patch_embed = _linear_patch_embed(model)
    display, x = prepare_image(model, image)
    c, h, w = display.shape
    ph, pw = patch_embed.patch_size
    gh, gw = patch_embed.grid_size

    with torch.no_grad():
        identity = identity_patch_embed(img_size=(h, w), patch_size=(ph, pw), in_chans=c)
        rebuilt = unpatchify(identity(display.unsqueeze(0)), img_size=(h, w), patch_size=(ph, pw))[0]
        tokens = patch_embed(x)[0].float().cpu()  # (N, D) with the learned kernels
    max_err = (rebuilt - display).abs().max().item()
    weight = patch_embed.proj.weight.detach().float().cpu()
    d = weight.shape[0]

    fig = new_figure(12, 8)
    top, bottom = fig.subfigures(2, 1, squeeze=False, height_ratios=[1, 1.1])[:, 0]
    axes = top.subplots(1, 4)
    show_image(axes[0], display, f"input {h}x{w}, {gh}x{gw} patches of {ph}x{pw}")
    show_image(
        axes[1],
        rebuilt.clamp(0, 1),
        f"identity kernel (D = {c}*{ph}*{pw} = {c * ph * pw}),\nfolded back: max |diff| = {max_err:g}",
    )

    # Channel maps: output channel j of the learned embedding at every patch, one (gh, gw) map each.
    n_maps = min(16, d)
    maps = tokens.T[:n_maps].reshape(n_maps, 1, gh, gw)
    axes[2].imshow(
        mosaic(normalise_tiles(maps), ncols=4, pad=1, pad_value=float("nan")), cmap="viridis", interpolation="nearest"
    )
    axes[2].set_title(f"learned kernels: channels 0-{n_maps - 1}\nof {d}, each over the {gh}x{gw} grid", fontsize=9)
    show_image(
        axes[3],
        _token_pca_rgb(tokens, (gh, gw)),
        "learned embedding of each patch:\nfirst 3 principal components as RGB",
    )
    for ax in axes[2:]:
        ax.set_xticks([])
        ax.set_yticks([])
    _draw_filters(bottom, weight, num_filters, num_components)
    return finish(fig, out, dpi)


def _linear_patch_embed(model: nn.Module) -> PatchEmbed:
    """`model`'s patch embedding, which must be a linear map of pixel patches (no conv stem)."""
    patch_embed = getattr(model, "patch_embed", None)
    if isinstance(patch_embed, HybridEmbed):
        raise ValueError(
            f"this model's patch embedding is a CNN stem (hybrid_stem={patch_embed.kind!r}): its tokens are not a "
            "linear map of pixel patches, so there are no patch filters to draw; use `vitzoo viz attention` / "
            "`posembed` / `pca` for this one"
        )
    if not isinstance(patch_embed, PatchEmbed):
        raise ValueError(
            f"{type(model).__name__} has no vitzoo PatchEmbed at .patch_embed; expected a vitzoo VisionTransformer"
        )
    if patch_embed.stem is not None:
        raise ValueError(
            f"this model's patch embedding has a convolutional stem (conv_stem={patch_embed.conv_stem}): its tokens are "
            "not a linear map of pixel patches, so there are no patch filters to draw; use a plain ViT "
            "(e.g. vit_mnist_tiny, vit_ti16), or `vitzoo viz attention` / `posembed` for this one"
        )
    return patch_embed


def _draw_filters(bottom: Any, weight: torch.Tensor, num_filters: int, num_components: int) -> None:
    """The figure's bottom row: the first learned filters (D, C, ph, pw) and their principal components."""
    d, c, ph, pw = weight.shape
    ax_filters, ax_pcs = bottom.subplots(1, 2)
    n_filters = min(num_filters, d)
    filters = normalise_tiles(weight[:n_filters])
    ax_filters.imshow(tile_picture(filters, ncols=8), interpolation="nearest")
    ax_filters.set_title(
        f"learned filters 0-{n_filters - 1} of {d} ({c}x{ph}x{pw}, each stretched to [0, 1])", fontsize=9
    )

    components, explained = filter_principal_components(weight, num_components)
    k = components.shape[0]
    ax_pcs.imshow(tile_picture(normalise_tiles(components), ncols=7), interpolation="nearest")
    ax_pcs.set_title(
        f"first {k} principal components of the filters\n(explain {100 * explained.sum().item():.1f}% of their variance; "
        f"PC1 {100 * explained[0].item():.1f}%)",
        fontsize=9,
    )
    for ax in (ax_filters, ax_pcs):
        ax.set_xticks([])
        ax.set_yticks([])
