"""Figure plumbing: exact PNG sizes, atomic writes, tile mosaics, and the lazy matplotlib import."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from vitzoo.viz._figure import mosaic, new_figure, normalise_tiles, save_png


def test_png_has_figsize_times_dpi_pixels_and_normal_permissions(tmp_path, png_size):
    fig = new_figure(3, 2)
    fig.subplots().plot([0, 1], [1, 0])
    out = save_png(fig, tmp_path / "sub" / "line.png", dpi=50)  # parent folders are created
    assert png_size(out) == (150, 100)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    assert [p.name for p in out.parent.iterdir()] == ["line.png"]  # no temporary file left


def test_non_png_path_is_rejected_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"output path '.*picture.jpg' must end in .png"):
        save_png(new_figure(1, 1), tmp_path / "picture.jpg")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_old_file_and_no_partial_one(tmp_path):
    out = tmp_path / "keep.png"
    out.write_bytes(b"old picture")
    fig = new_figure(1, 1)

    def broken_savefig(f, **kwargs):
        f.write(b"\x89PNG half")
        raise RuntimeError("disk full")

    fig.savefig = broken_savefig
    with pytest.raises(RuntimeError, match="disk full"):
        save_png(fig, out)
    assert out.read_bytes() == b"old picture"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.png"]


def test_mosaic_places_tiles_row_major_with_gaps():
    tiles = torch.arange(3, dtype=torch.float32).reshape(3, 1, 1, 1).expand(3, 1, 2, 2)
    grid = mosaic(tiles, ncols=2, pad=1, pad_value=-1.0)
    assert grid.shape == (5, 5)
    assert (grid[0:2, 0:2] == 0).all() and (grid[0:2, 3:5] == 1).all() and (grid[3:5, 0:2] == 2).all()
    assert (grid[2, :] == -1).all() and (grid[:, 2] == -1).all() and (grid[3:5, 3:5] == -1).all()
    rgb = mosaic(torch.zeros(2, 3, 2, 2), ncols=2, pad=1, pad_value=(0.1, 0.2, 0.3))
    assert rgb.shape == (2, 5, 3) and np.allclose(rgb[0, 2], [0.1, 0.2, 0.3])


def test_normalise_tiles_stretches_each_tile_to_unit_range():
    tiles = torch.tensor([[-2.0, 0.0, 2.0], [5.0, 5.0, 5.0]]).reshape(2, 1, 1, 3)
    out = normalise_tiles(tiles)
    assert torch.equal(out[0].flatten(), torch.tensor([0.0, 0.5, 1.0]))
    assert torch.equal(out[1].flatten(), torch.zeros(3))  # a constant tile stays finite


@pytest.mark.slow
def test_without_matplotlib_import_works_and_drawing_names_the_extra():
    # A fresh interpreter in which `import matplotlib` fails, as it does without the extra.
    code = """
import sys
sys.modules['matplotlib'] = None
import vitzoo.viz
from vitzoo.cli import main
assert main(['viz', '--help']) == 0, 'help must work without matplotlib'
try:
    vitzoo.viz.plot_curves([{'epoch': 1, 'loss': 1.0}])
except ImportError as err:
    print('ERR', err)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ERR vitzoo.viz draws with matplotlib" in result.stdout
    assert "pip install 'vitzoo[viz]'" in result.stdout
