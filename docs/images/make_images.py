"""Regenerate the vitzoo.viz pictures of docs/pictures.md (docs/images/viz_*.png) from today's models.

    # 1. two short runs on the MNIST sample that ships with vitzoo (no download):
    vitzoo finetune vit_mnist --out runs/vit_mnist              # the README's main command
    vitzoo finetune vit_mnist_tiny --out runs/vit_mnist_tiny    # the tutorial model: plain patches, class token
    # 2. the pictures:
    python docs/images/make_images.py --run runs/vit_mnist --tiny-run runs/vit_mnist_tiny

Each model is rebuilt from its run's saved config (best/config.json), so the pictures show the
architecture that was trained. `vit_mnist` (conv stem, average pooling) gives the position
embedding, the attention rollout and the training curves; its stem has no patch filters and it has
no class token, so the patch-embedding picture comes from `vit_mnist_tiny` (16x16 patches).

The photo for `patches` is matplotlib's own sample image (Grace Hopper, public domain), so no
download is involved; the digit is the first test digit of the given label in the embedded sample.
Nothing here runs in the tests or in the package: it only draws the documentation.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from matplotlib import cbook

from vitzoo import from_pretrained, viz
from vitzoo.data import load_mnist_sample

HERE = Path(__file__).resolve().parent


def mnist_digit(label: int) -> torch.Tensor:
    """The first test digit with `label` in the embedded sample, as a (1, 28, 28) image in [0, 1]."""
    test = load_mnist_sample().val
    index = int((test.labels == label).nonzero()[0])
    return test.images[index].float() / 255.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--run", type=Path, required=True, help="a vit_mnist fine-tuning run directory (best/, metrics.jsonl)"
    )
    parser.add_argument("--tiny-run", type=Path, required=True, help="a vit_mnist_tiny run directory (best/)")
    parser.add_argument("--label", type=int, default=3, help="which digit to draw (default: 3)")
    parser.add_argument("--dpi", type=int, default=80, help="pixels per inch (default: 80, keeps each PNG small)")
    args = parser.parse_args()

    photo = viz.read_image(cbook.get_sample_data("grace_hopper.jpg", asfileobj=False))
    photo = viz.images.fit_image(photo, 160)  # 5x5 patches of 32: few enough to number them
    model = from_pretrained(args.run / "best").eval()
    tiny = from_pretrained(args.tiny_run / "best").eval()
    digit = mnist_digit(args.label)

    # A photo compresses worst of all: a lower dpi keeps this PNG near 100 KB.
    viz.plot_patches(photo, 32, out=HERE / "viz_patches.png", dpi=round(args.dpi * 0.8))
    viz.plot_patch_embedding(tiny, digit, out=HERE / "viz_embedding.png", dpi=args.dpi)
    viz.plot_position_embedding(model, out=HERE / "viz_posembed.png", dpi=args.dpi)
    what = "both" if model.cls_token is not None else "rollout"  # per-head maps need a class token
    viz.plot_attention(model, digit, layer=-1, what=what, out=HERE / "viz_attention.png", dpi=args.dpi)
    viz.plot_curves(
        args.run / "metrics.jsonl",
        out=HERE / "viz_curves.png",
        dpi=args.dpi,
        keys=["*loss", "*acc", "lr"],
        title=f"vit_mnist trained from scratch on 4,000 MNIST digits ({args.run.name}/metrics.jsonl)",
    )
    for path in sorted(HERE.glob("viz_*.png")):
        print(f"{path.relative_to(HERE.parent.parent)}  {path.stat().st_size / 1024:.0f} KB")


if __name__ == "__main__":
    main()
