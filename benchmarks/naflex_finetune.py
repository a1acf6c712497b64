"""NaFlex fine-tuning on crops of photos at many aspect ratios: the accuracy curve, and the same
model trained on square inputs of the same patch budget beside it.

    python benchmarks/naflex_finetune.py                     # a few minutes on 2 idle cores
    python benchmarks/naflex_finetune.py --epochs 30 --train 80 --json /tmp/naflex.json
    python benchmarks/naflex_finetune.py --smoke             # under a minute: does it run?

Builds a folder of crops of scikit-image's photos (vitzoo/data/photo_crops.py: one class per photo,
aspect ratios 1:3 to 3:1, longer sides 48-128 px) and trains a small ViT from scratch on it twice
with `vitzoo finetune`, seed 0, the same recipe and epochs:

  naflex   --naflex --max-patches N: each crop at its own aspect, at most N patches (sequence
           lengths N/4, N/2, N drawn per batch, about the same patches per batch), evaluation at
           N patches per image, aspect kept;
  square   the usual input: random resized crops to the model's square (N patches), evaluation
           resized and centre-cropped to it (the folder streamed too, from the same files).

Reported per run and epoch: training loss, validation accuracy and images per second; as lines
and as JSON (--json FILE). One seed: differences of a few points on a validation set this small
are not evidence.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import vitzoo
from vitzoo import cli
from vitzoo.data.photo_crops import build_photo_crops

MODEL = "naflex_bench_vit"
# a small ViT of the DeiT family (from scratch: nothing to download)
ARCH = dict(img_size=128, patch_size=16, embed_dim=96, depth=4, num_heads=3)


def _run(name: str, data: Path, out: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    argv = ["finetune", MODEL, "--data", "folder", str(data), "--out", str(out / name), "--no-progress"]
    argv += ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size), "--lr", str(args.lr)]
    argv += ["--warmup-epochs", "1", "--seed", "0", "--stream", *extra]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    code = cli.main(argv)
    if code != 0:
        raise SystemExit(f"{name}: vitzoo finetune exited {code}")
    records = [json.loads(line) for line in (out / name / "metrics.jsonl").read_text().splitlines()]
    curve = [{k: r[k] for k in ("epoch", "train_loss", "train_acc", "val_acc", "train_images_per_s")} for r in records]
    return {"curve": curve, "best_val_acc": max(r["val_acc"] for r in records), "final_val_acc": records[-1]["val_acc"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--train", type=int, default=60, help="training crops per class")
    parser.add_argument("--val", type=int, default=25, help="validation crops per class")
    parser.add_argument("--batch-size", type=int, default=32, help="images per batch at the longest sequence")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--max-patches", type=int, default=64, help="the patch budget (the square model's grid)")
    parser.add_argument("--runs", nargs="+", choices=("naflex", "square"), default=["naflex", "square"])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--workdir", default=None, help="keep the folder and runs here (default: a temporary one)")
    parser.add_argument("--json", default=None, help="also write the report here as JSON")
    parser.add_argument("--smoke", action="store_true", help="2 epochs on 8 crops per class")
    args = parser.parse_args()
    if args.smoke:
        args.epochs, args.train, args.val = 2, 8, 4
    side = round(math.sqrt(args.max_patches)) * ARCH["patch_size"]
    vitzoo.register(MODEL, base="deit_ti16", override=True, **{**ARCH, "img_size": side})
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.workdir or scratch)
        data = build_photo_crops(work / "crops", train=args.train, val=args.val, seed=0)
        report: dict[str, Any] = {
            "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
            "settings": {k: v for k, v in vars(args).items() if k not in ("json", "workdir")},
            "model": {**ARCH, "img_size": side},
        }
        extras = {"naflex": ["--naflex", "--max-patches", str(args.max_patches)], "square": []}
        for name in args.runs:
            report[name] = _run(name, data, work, args, extras[name])
            for point in report[name]["curve"]:
                print(
                    f"{name:7s} epoch {point['epoch'] + 1:3d}  train loss {point['train_loss']:.4f}  "
                    f"val acc {100 * point['val_acc']:6.2f}%  {point['train_images_per_s']:.0f} img/s",
                    file=sys.stderr,
                )
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
