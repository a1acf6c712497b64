"""The dense workflow (issue 34): a segmentation probe on digits pasted on photos, measured.

1. The data: `vitzoo.data.synthetic_seg.build_digit_scenes` (--train / --val scenes of 96x128
   pixels, 1 to 3 digits of 28-42 px each on crops of scikit-image's photos; nothing downloaded).
   The probe resizes them 2x (`--size 192`): vit_mnist's 8-px tokens are too coarse for a 28-px
   digit's 3-px strokes, so the digits are shown at the scale the backbones are trained at, 56 px.
2. The backbones: the zoo's vit_mnist at a 56-px input (7x7 tokens), each saved without its head:
   random       as initialised (seed 0);
   mnist        trained on the MNIST sample's 4,000 digits (on black, as published) scaled to 56 px;
   tiles        trained on the same digits pasted on 56-px crops of the training photos
                (`digit_tiles`: no scene, no mask, no validation photo, no test digit);
   --epochs epochs each with the sample's recipe (Python API, `vitzoo.train.fit`).
3. For each backbone, `vitzoo segment` in a fresh process (wall time of the whole command, peak
   memory VmHWM), --layers 4: the features of the training windows (--crop 56) computed once and
   cached, DINOv3's linear head trained on them, evaluation by sliding windows (`slide`); then the
   same run evaluated by one pass over the whole image (`--eval-mode whole`: the 7x7 position
   table resampled to 24x32), which reads the cached features. The tiles backbone once more with
   --layers 1.

Prints a Markdown table (docs/recipes.md keeps one); --json writes every number. On a machine
shared with other work the wall times are noisy.

Usage: python benchmarks/dense.py [--out runs/dense] [--epochs 15] [--train 200] [--val 50]
       [--steps 1000] [--lr 1e-2] [--threads N] [--arms random,mnist,tiles]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from backbone_workflow import run_vitzoo  # one `vitzoo` command in a fresh process: result, time, peak

MODEL = "vit_mnist"
SIDE = 56  # the backbones' input: a digit at 2x, 7x7 tokens
SIZE, CROP = "192", "56"  # the probe: scenes resized 2x, windows of the backbones' input


def training_data(arm: str) -> Any:
    """The classification data of a trained arm, at SIDE pixels."""
    import torch.nn.functional as F

    from vitzoo.data import DataSplits, ImageTensors, load_mnist_sample
    from vitzoo.data.synthetic_seg import digit_tiles

    if arm == "tiles":
        return DataSplits(
            train=digit_tiles("train", side=SIDE), val=digit_tiles("val", side=SIDE), name=arm, kind="digits"
        )
    sample = load_mnist_sample()
    scaled = [
        ImageTensors(
            F.interpolate(split.images.float(), size=SIDE, mode="bilinear", antialias=True).round().byte(),
            split.labels,
            split.classes,
            f"{split.source} at {SIDE} px",
        )
        for split in (sample.train, sample.val)
    ]
    return DataSplits(train=scaled[0], val=scaled[1], name=arm, kind="digits")


def backbone(out: Path, arm: str, epochs: int, threads: int | None) -> tuple[Path, dict[str, Any]]:
    """Train (or not) the `arm` backbone; save it headless as out/<arm>. Returns (its folder, its record)."""
    import torch

    import vitzoo
    from vitzoo.train import TrainConfig, fit, recipe_defaults

    torch.manual_seed(0)
    model = vitzoo.create(MODEL, img_size=SIDE)
    record: dict[str, Any] = {}
    if arm != "random":
        recipe = {**recipe_defaults("mnist-sample", False, MODEL), "epochs": epochs}
        config = TrainConfig(**recipe, threads=threads, progress=False)
        result = fit(model, training_data(arm), config=config, out_dir=out / f"{arm}-run")
        record = {"val_acc": result.final_acc, "train_seconds": result.train_seconds}
        print(f"  {arm}: {100 * result.final_acc:.2f}% on its own validation digits", flush=True)
    model.reset_classifier(0)
    vitzoo.save_pretrained(model, out / arm)
    return out / arm, record


def segment(out: Path, data: Path, weights: Path, name: str, args: argparse.Namespace, *extra: str) -> dict[str, Any]:
    argv = ["segment", MODEL, str(data), "--weights", str(weights), "--out", str(out / f"seg-{name.split('-')[0]}")]
    argv += ["--size", SIZE, "--crop", CROP, "--steps", str(args.steps), "--lr", str(args.lr), "--dtype", "fp32"]
    argv += ["--no-progress", "--json", *(["--threads", str(args.threads)] if args.threads else []), *extra]
    return run_vitzoo(out, name, *argv)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("runs/dense"))
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--train", type=int, default=200)
    parser.add_argument("--val", type=int, default=50)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--arms", default="random,mnist,tiles")
    parser.add_argument("--json", type=Path, help="write every number here")
    args = parser.parse_args()

    from vitzoo.data.synthetic_seg import build_digit_scenes

    args.out.mkdir(parents=True, exist_ok=True)
    data = args.out / "scenes"
    if not data.exists():
        build_digit_scenes(data, train=args.train, val=args.val)
    report: dict[str, Any] = {"settings": {k: str(v) for k, v in vars(args).items()}, "arms": {}}
    for arm in args.arms.split(","):
        weights, record = backbone(args.out, arm, args.epochs, args.threads)
        runs = {"slide": segment(args.out, data, weights, f"{arm}-slide", args, "--layers", "4")}
        runs["whole"] = segment(args.out, data, weights, f"{arm}-whole", args, "--layers", "4", "--eval-mode", "whole")
        if arm == "tiles":
            runs["slide, layers 1"] = segment(args.out, data, weights, f"{arm}1-slide", args, "--layers", "1")
        report["arms"][arm] = {"backbone": record, **runs}
    print(_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


def _table(report: dict[str, Any]) -> str:
    lines = [
        "| backbone | eval | mIoU % | pixel acc. % | digits' mean IoU % | wall s | peak MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for arm, runs in report["arms"].items():
        for mode, run in runs.items():
            if mode == "backbone":
                continue
            result = run["result"]
            digits = [v for k, v in result["per_class_iou"].items() if k != "background" and v is not None]
            lines.append(
                f"| {arm} | {mode} | {100 * result['miou']:.1f} | {100 * result['pixel_accuracy']:.1f} | "
                f"{100 * sum(digits) / max(1, len(digits)):.1f} | {run['seconds']:.1f} | {run['peak_mb']:.0f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
