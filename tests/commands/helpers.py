"""Running `vitzoo` in-process for the command tests (the same code path as the console script)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from vitzoo import cli


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def digit_images(tmp_path: Path) -> list[Path]:
    """Two 32x32 grayscale PNGs (the input size of vit_mnist_tiny: no resize involved)."""
    rng = np.random.default_rng(0)
    paths = []
    for i in range(2):
        path = tmp_path / f"digit{i}.png"
        Image.fromarray(rng.integers(0, 256, (32, 32), dtype=np.uint8), mode="L").save(path)
        paths.append(path)
    return paths


def refuse_optimize(monkeypatch) -> None:
    """From now on any call of vitzoo.optimize fails the test (what --no-optimize must skip)."""
    from vitzoo.inference import choose

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("vitzoo.optimize was called under --no-optimize")

    monkeypatch.setattr(choose, "optimize", refuse)  # what the commands' loops call (inference/batches.py)


def optimize_lines(err: str) -> list[str]:
    """The lines of stderr in which a command says what vitzoo.optimize chose."""
    return [line for line in err.splitlines() if line.startswith("vitzoo: optimize: ")]
