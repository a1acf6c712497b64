"""Regenerate the README's vitzoo.viz pictures (docs/images/viz_*.png).

    # 1. a briefly trained model and its metrics (any run on 28x28 digits works):
    vitzoo finetune vit_mnist --data mnist --data-dir MNIST_RAW_DIR --no-download --epochs 30 --batch-size 64 --out runs/mnist30
    # 2. the pictures:
    python docs/images/make_images.py --run runs/mnist30 --mnist MNIST_RAW_DIR

The model is rebuilt from the run's own saved config (best/config.json), so the pictures show the
architecture that was trained. The README's run (30 epochs on the 4,000-digit MNIST sample, best
val accuracy 89.7%) used vit_mnist's earlier config: 4x4 patches and a class token. Today's
vit_mnist (7x7 patches, average pooling, no class token) gets the rollout-only attention picture.

The photo for `patches` is matplotlib's own sample image (Grace Hopper, public domain), so no
download is involved; the digit is the first test image of the given label from the MNIST files.
Nothing here runs in the tests or in the package: it only draws the documentation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib import cbook

from vitzoo import viz
from vitzoo.data.idx import read_idx
from vitzoo import from_pretrained

HERE = Path(__file__).resolve().parent


def mnist_digit(raw_dir: Path, label: int) -> torch.Tensor:
    """The first test digit with `label`, as a (1, 28, 28) image in [0, 1]."""
    images = read_idx(raw_dir / "t10k-images-idx3-ubyte")
    labels = read_idx(raw_dir / "t10k-labels-idx1-ubyte")
    index = int((labels == label).nonzero()[0])
    return images[index].unsqueeze(0).float() / 255.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a vit_mnist fine-tuning run directory (best/, metrics.jsonl)")
    parser.add_argument("--mnist", type=Path, required=True, help="folder with the raw MNIST IDX files")
    parser.add_argument("--label", type=int, default=3, help="which digit to draw (default: 3)")
    parser.add_argument("--dpi", type=int, default=80, help="pixels per inch (default: 80, keeps each PNG small)")
    args = parser.parse_args()

    photo = viz.read_image(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    photo = viz.images.fit_image(photo, 160)  # 5x5 patches of 32: few enough to number them
    model = from_pretrained(args.run / "best").eval()
    digit = mnist_digit(args.mnist, args.label)

    # A photo compresses worst of all: a lower dpi keeps this PNG near 100 KB.
    viz.plot_patches(photo, 32, out=HERE / "viz_patches.png", dpi=round(args.dpi * 0.8))
    viz.plot_patch_embedding(model, digit, out=HERE / "viz_embedding.png", dpi=args.dpi)
    viz.plot_position_embedding(model, out=HERE / "viz_posembed.png", dpi=args.dpi)
    what = "both" if model.cls_token is not None else "rollout"  # per-head maps need a class token
    viz.plot_attention(model, digit, layer=-1, what=what, out=HERE / "viz_attention.png", dpi=args.dpi)
    viz.plot_curves(args.run / "metrics.jsonl", out=HERE / "viz_curves.png", dpi=args.dpi, keys=["*loss", "*acc", "lr"],
                    title=f"a ViT trained from scratch on 4,000 MNIST digits ({args.run.name}/metrics.jsonl)")
    for path in sorted(HERE.glob("viz_*.png")):
        print(f"{path.relative_to(HERE.parent.parent)}  {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
