"""Fine-tune a pretrained ImageNet ViT or DeiT on your own images (an ImageNet-style folder).

    images/train/<class>/*.jpg  +  images/val/<class>/*.jpg     (or class folders only: a seeded 80/20 split)

    python examples/finetune_folder.py images/                                   # deit_s16, pretrained, 224 px
    python examples/finetune_folder.py images/ --model vit_ti16 --img-size 112   # smaller input: ~4x faster
    python examples/finetune_folder.py images/ --linear-probe                    # train only the new head
    python examples/finetune_folder.py images/ --weights path/to/best            # start from local weights
    torchrun --nproc_per_node=2 examples/finetune_folder.py images/

The pretrained weights come from the model's default source (`vitzoo.create(name, pretrained=True)`;
the Hugging Face Hub, cached after the first download) or from --weights. The head is replaced for
your classes; a different --img-size resamples the position embedding. Preprocessing (resize,
crop, mean/std, interpolation) follows the weights' pretrained_cfg; training adds random resized
crops, flips and RandAugment. Recipe: lr 5e-4 with layer-wise decay 0.75, warmup + cosine.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import vitzoo
from vitzoo.data import load_image_folder, store_size_for
from vitzoo.train import TrainConfig, fit, log_to_terminal, recipe_defaults


def count_classes(root: str) -> int:
    base = os.path.join(root, "train") if os.path.isdir(os.path.join(root, "train")) else root
    return sum(1 for e in os.scandir(base) if e.is_dir() and not e.name.startswith("."))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", help="ImageNet-style folder: train/ and val/, or one folder of class folders")
    parser.add_argument(
        "--model", default="deit_s16", help="a ViT or DeiT with pretrained weights (vitzoo list --pretrained)"
    )
    parser.add_argument("--weights", default=None, help="local weights instead of the default pretrained source")
    parser.add_argument(
        "--img-size", type=int, default=None, help="input size (default: the weights'); smaller is faster"
    )
    parser.add_argument("--epochs", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--linear-probe", action="store_true", help="freeze the backbone; train only the head")
    parser.add_argument("--val-split", type=float, default=None, help="fraction for validation when there is no val/")
    parser.add_argument("--strict", action="store_true", help="fail on an unreadable image instead of skipping it")
    parser.add_argument("--out", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    # 1. The pretrained model with a new head for our classes (and resampled positions for --img-size).
    overrides = {"num_classes": count_classes(args.folder)}
    if args.img_size:
        overrides["img_size"] = args.img_size
    torch.manual_seed(args.seed)  # the new head's initialisation
    if args.weights:
        model = vitzoo.create(args.model, weights=args.weights, **overrides)
    else:
        model = vitzoo.create(args.model, pretrained=True, **overrides)

    # 2. Images decoded once at the size the weights' preprocessing implies (input / crop_pct);
    #    a folder too large for memory is streamed from disk instead (vitzoo/data/stream.py).
    cfg = model.pretrained_cfg
    splits = load_image_folder(
        args.folder,
        store_size=store_size_for(max(cfg.input_size[1:]), cfg.crop_pct),
        val_split=args.val_split,
        seed=args.seed,
        strict=args.strict,
    )

    # 3. The pretrained recipe, with any overrides.
    recipe = recipe_defaults("folder", from_pretrained=True)
    for key in ("epochs", "batch_size", "lr"):
        if getattr(args, key) is not None:
            recipe[key] = getattr(args, key)
    config = TrainConfig(**recipe, linear_probe=args.linear_probe, seed=args.seed, threads=args.threads)

    out = args.out or f"runs/example-{args.model}-folder-{time.strftime('%Y%m%d-%H%M%S')}"
    log_to_terminal()  # the epoch lines (the `vitzoo.train` logger; any logging setup works too)
    result = fit(
        model,
        splits,
        config=config,
        out_dir=out,
        resume=args.resume,
        run_info={"model": args.model, "weights": args.weights or "pretrained"},
    )
    if int(os.environ.get("RANK", "0")) == 0:
        print(
            f"best val accuracy {100 * result.best_acc:.2f}% (epoch {result.best_epoch + 1}); classes {list(splits.classes)}; "
            f"run directory {out}; predict with: vitzoo predict {args.model} --weights {out}/best IMAGE"
        )
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
