"""Train a Vision Transformer from scratch on handwritten digits or fashion items.

    python examples/finetune_mnist.py                                   # the embedded 4,000-digit MNIST sample, offline
    python examples/finetune_mnist.py --data mnist                      # full MNIST (downloads via torchvision)
    python examples/finetune_mnist.py --data fashion-mnist --data-dir /usr/share/datasets/fashion-mnist
    python examples/finetune_mnist.py --model vit_mnist_tiny --epochs 40   # the 5.7k-parameter tutorial model
    torchrun --nproc_per_node=2 examples/finetune_mnist.py --epochs 5   # the same script, two processes

Everything goes through vitzoo's training engine (`vitzoo.train.fit`, the one `vitzoo finetune`
uses): the recipe below is `vitzoo.train.recipe_defaults`, and the run directory receives
metrics.jsonl, curves.png, checkpoint.safetensors (resume with --resume) and best/.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import vitzoo
from vitzoo.data import load_data
from vitzoo.train import TrainConfig, fit, log_to_terminal, recipe_defaults


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model", default="vit_mnist", help="vit_mnist (default), vit_mnist_tiny or any registered name"
    )
    parser.add_argument("--data", default="mnist-sample", choices=["mnist-sample", "mnist", "fashion-mnist"])
    parser.add_argument(
        "--data-dir", default=None, help="folder with the raw IDX files (.gz or not); downloads go here"
    )
    parser.add_argument("--epochs", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--out", default=None, help="run directory (default runs/example-<model>-<data>-<time>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: auto, the cores left free)"
    )
    args = parser.parse_args()

    # 1. Data: decoded once into uint8 tensors, augmented a batch at a time during training.
    splits = load_data(args.data, data_dir=args.data_dir)

    # 2. Model: from scratch, head sized to the data. The seed fixes the initial weights.
    torch.manual_seed(args.seed)
    model = vitzoo.create(args.model, num_classes=splits.train.num_classes)

    # 3. Recipe: AdamW (no decay on norms/biases/tokens), warmup + cosine, label smoothing, clipping.
    recipe = recipe_defaults(args.data, from_pretrained=False, model=args.model)
    if args.epochs is not None:
        recipe["epochs"] = args.epochs
    config = TrainConfig(**recipe, seed=args.seed, threads=args.threads)

    out = args.out or f"runs/example-{args.model}-{args.data}-{time.strftime('%Y%m%d-%H%M%S')}"
    log_to_terminal()  # the epoch lines (the `vitzoo.train` logger; any logging setup works too)
    result = fit(model, splits, config=config, out_dir=out, resume=args.resume, run_info={"model": args.model})
    if int(os.environ.get("RANK", "0")) == 0:  # under torchrun only rank 0 reports
        state = "interrupted (continue with --resume)" if result.interrupted else "finished"
        print(
            f"{state}: best test accuracy {100 * result.best_acc:.2f}% at epoch {result.best_epoch + 1}; "
            f"run directory {out} (curves.png, metrics.jsonl, best/)"
        )
    return 130 if result.interrupted else 0


if __name__ == "__main__":
    raise SystemExit(main())
