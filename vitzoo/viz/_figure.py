"""Figure plumbing shared by every picture: the lazy matplotlib import, atomic PNG writes and
tile mosaics.

Figures are built as `matplotlib.figure.Figure` objects on an Agg canvas, never through pyplot:
no global backend is switched, no window can open, and figures are not kept alive by pyplot's
registry (a loop drawing hundreds of pictures does not leak).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..atomic import atomic_path
from ..checks import check_picture_size

if TYPE_CHECKING:  # matplotlib is optional: imported for type checkers only
    from matplotlib.figure import Figure

INSTALL_HINT = "pip install 'vitzoo[viz]'"


def require_matplotlib() -> Any:
    """Import matplotlib or fail with a message that names the extra which installs it."""
    try:
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError as err:
        raise ImportError(
            f"vitzoo.viz draws with matplotlib, which is not installed ({err}); install the viz extra: {INSTALL_HINT}"
        ) from err
    return matplotlib


def new_figure(width_in: float, height_in: float, *, constrained: bool = True) -> Figure:
    """A Figure of `width_in` x `height_in` inches attached to an Agg canvas."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), layout="constrained" if constrained else None)
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, out: str | os.PathLike[str], *, dpi: int = 100) -> Path:
    """Write `fig` as a PNG of exactly figsize * dpi pixels, atomically (vitzoo/atomic.py): a
    crash never leaves a half-written PNG behind."""
    path = Path(out)
    if path.suffix.lower() != ".png":
        raise ValueError(f"output path '{path}' must end in .png (vitzoo.viz writes PNG files)")
    width_in, height_in = fig.get_size_inches()
    check_picture_size(float(width_in), float(height_in), dpi)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        fig.savefig(f, format="png", dpi=dpi)  # no bbox_inches="tight": the size stays predictable
    return path


def finish(fig: Figure, out: str | os.PathLike[str] | None, dpi: int) -> Figure:
    """Save `fig` when an output path is given; always hand the figure back."""
    if out is not None:
        save_png(fig, out, dpi=dpi)
    return fig


def mosaic(tiles: torch.Tensor, *, ncols: int, pad: int = 1, pad_value: float | tuple[float, ...] = 1.0) -> np.ndarray:
    """Lay out (K, C, h, w) tiles row by row, `ncols` per row, `pad` pixels apart, the gaps filled
    with `pad_value` (one value, or one per channel).

    Returns an (H, W) array for one channel, (H, W, 3) for three. One image with one `imshow` is
    much faster to draw than K small axes, and keeps the tiles exactly aligned."""
    if tiles.ndim != 4:
        raise ValueError(f"mosaic expects (K, C, h, w) tiles, got shape {tuple(tiles.shape)}")
    k, c, h, w = tiles.shape
    ncols = max(1, min(ncols, k))
    nrows = -(-k // ncols)
    canvas = np.empty((c, nrows * (h + pad) - pad, ncols * (w + pad) - pad), dtype=np.float32)
    canvas[:] = np.asarray(pad_value, dtype=np.float32).reshape(-1, 1, 1)
    data = tiles.detach().float().cpu().numpy()
    for i in range(k):
        r, col = divmod(i, ncols)
        canvas[:, r * (h + pad) : r * (h + pad) + h, col * (w + pad) : col * (w + pad) + w] = data[i]
    return canvas[0] if c == 1 else canvas.transpose(1, 2, 0)


GAP_COLOR = (0.55, 0.75, 0.95)  # light blue gaps: never mistaken for gray or colour image content


def tile_picture(tiles: torch.Tensor, *, ncols: int, pad: int = 1) -> np.ndarray:
    """An RGB mosaic of (K, C, h, w) tiles in [0, 1] (gray tiles repeated to RGB, the first three
    channels of others) with light blue gaps, ready for `imshow`."""
    rgb = tiles.expand(-1, 3, -1, -1) if tiles.shape[1] == 1 else tiles[:, :3]
    return mosaic(rgb, ncols=ncols, pad=pad, pad_value=GAP_COLOR)


def to_numpy_image(image: torch.Tensor) -> np.ndarray:
    """(C, H, W) in [0, 1] -> (H, W) for one channel or (H, W, 3) for RGB, ready for imshow."""
    array = image.detach().float().clamp(0, 1).cpu().numpy()
    return array[0] if array.shape[0] == 1 else array.transpose(1, 2, 0)


def show_image(ax: Any, image: torch.Tensor, title: str | None = None) -> None:
    """Draw a (C, H, W) image in [0, 1] (gray for one channel) without ticks."""
    array = to_numpy_image(image)
    ax.imshow(array, cmap="gray" if array.ndim == 2 else None, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=9)


def normalise_tiles(tiles: torch.Tensor) -> torch.Tensor:
    """Stretch each (C, h, w) tile to [0, 1] on its own, as filter pictures are usually shown
    (the sign and scale of a filter carry no meaning, only its pattern does)."""
    flat = tiles.reshape(tiles.shape[0], -1)
    low, high = flat.min(dim=1).values, flat.max(dim=1).values
    span = (high - low).clamp_min(1e-12)
    return ((flat - low[:, None]) / span[:, None]).reshape_as(tiles)
