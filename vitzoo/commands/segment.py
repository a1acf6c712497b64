"""`vitzoo segment MODEL DATA --out RUN`: a linear segmentation probe of a frozen backbone (mIoU).

The engine is vitzoo.segment (docs/segmentation.md); the data layouts are vitzoo.data.masks."""

from __future__ import annotations

import argparse
from typing import Any

from ..checks import IMAGE_SIDE
from .base import (
    OptimizeNote,
    add_dtype_option,
    add_optimize_option,
    add_weights_option,
    bounded_int,
    chosen_dtype,
    describe,
    emit,
    in_range,
    number,
    table,
)
from .finetune import threads_arg

_POSITIVE = bounded_int(1, "an int >= 1")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo segment MODEL DATA --out RUN`."""
    from ..data.masks import CLASS_COUNT
    from ..segment.infer import EVAL_MODES

    describe(
        parser,
        "Train DINOv3's linear head (dropout, BatchNorm, 1x1 convolution) on a frozen backbone's patch tokens "
        "and measure it on the validation split: mIoU, pixel accuracy, IoU per class. DATA is a folder "
        "(train/ and val/ with images/ and masks/; Pascal VOC; ADE20K; a datasets save_to_disk folder) or "
        "hf:PATH_OR_NAME. RUN receives segment.json, head.safetensors, examples.png and the cached features.",
    )
    parser.add_argument("model", help="a registered model name, e.g. dinov3_s16 or vit_mnist")
    parser.add_argument("data", metavar="DATA", help="the dataset folder, or hf:PATH_OR_NAME")
    parser.add_argument("--out", required=True, metavar="RUN", help="the run folder (new, empty or an earlier run)")
    add_weights_option(parser, "instead of the model's pretrained weights")
    parser.add_argument(
        "--layers", type=_POSITIVE, default=1, help="the last N blocks' tokens, concatenated (1 or 4; default 1)"
    )
    parser.add_argument(
        "--crop", type=in_range(IMAGE_SIDE), help="window / crop side in pixels (default: the model's input)"
    )
    parser.add_argument(
        "--stride", type=in_range(IMAGE_SIDE), help="between windows, pixels (default: two thirds of --crop)"
    )
    parser.add_argument(
        "--size", type=in_range(IMAGE_SIDE), help="resize images' shorter side to N pixels (default: keep)"
    )
    parser.add_argument(
        "--augment",
        action="store_true",
        help="train on random scale-jittered (0.5-2x), flipped crops, the backbone run every step "
        "(default: the windows' features computed once and cached in RUN)",
    )
    parser.add_argument("--steps", type=_POSITIVE, default=1000, help="training steps (default 1000)")
    parser.add_argument("--batch-size", type=_POSITIVE, default=16, metavar="N", help="crops a step (default 16)")
    parser.add_argument("--lr", type=number(low=0, low_open=True), default=1e-3, help="AdamW peak lr (default 1e-3)")
    parser.add_argument("--weight-decay", type=number(low=0), default=1e-2, help="AdamW weight decay (default 1e-2)")
    parser.add_argument("--dropout", type=number(low=0, high=1, high_open=True), default=0.1, help="(default 0.1)")
    parser.add_argument(
        "--eval-mode", choices=EVAL_MODES, default="slide", help="slide: windows of --crop (default); whole: one pass"
    )
    parser.add_argument("--predictions", metavar="DIR", help="write the predicted masks as DIR/<image name>.png")
    parser.add_argument(
        "--num-classes",
        type=in_range(CLASS_COUNT),
        help=f"the class count, where no classes.txt says it ({CLASS_COUNT.describe()})",
    )
    parser.add_argument("--hf-image-column", metavar="NAME", help="a datasets dataset's image column")
    parser.add_argument("--hf-mask-column", metavar="NAME", help="a datasets dataset's mask column")
    parser.add_argument("--seed", type=bounded_int(0, "an int >= 0"), default=0, help="(default 0)")
    parser.add_argument("--workers", type=bounded_int(0, "an int >= 0"), default=0, help="--augment's loaders")
    parser.add_argument(
        "--threads", type=threads_arg, default=None, help="CPU threads: N, or auto (default: the free cores)"
    )
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (default: auto, CUDA when there is one)")
    add_dtype_option(parser, auto=True, help="the backbone's precision; the head trains in fp32")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    add_optimize_option(parser)


def run(args: argparse.Namespace) -> int:
    """Train and measure the probe; print the metrics (a table, or --json)."""
    from ..data.masks import load_segmentation
    from ..segment import SegmentSettings, segment_probe
    from ..train.placement import resolve_device
    from .features import backbone_from_args

    data = load_segmentation(
        args.data,
        num_classes=args.num_classes,
        image_column=args.hf_image_column,
        mask_column=args.hf_mask_column,
        progress=not args.no_progress,
    )
    model = backbone_from_args(args)
    device = resolve_device(args.device)
    dtype = chosen_dtype(args, device, "backbone")
    settings = SegmentSettings(
        layers=args.layers,
        crop=args.crop,
        stride=args.stride,
        size=args.size,
        augment=args.augment,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        dropout=args.dropout,
        eval_mode=args.eval_mode,
        seed=args.seed,
        workers=args.workers,
    )
    note = OptimizeNote(quiet=args.no_progress)
    report = segment_probe(
        model,
        data,
        args.out,
        settings,
        device=device,
        dtype=dtype,
        predictions_dir=args.predictions,
        threads=args.threads,
        progress=not args.no_progress,
        about={"name": args.model, "weights": args.weights or "pretrained"},
        optimize=args.optimize,
        on_optimize=note,
    )
    metrics = note.add_to({key: report[key] for key in ("miou", "pixel_accuracy", "per_class_iou")})
    emit(args, metrics, _text(report, args.out))
    return 0


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}"


def _text(report: dict[str, Any], out: str) -> str:
    rows = [(name, _percent(iou)) for name, iou in report["per_class_iou"].items()]
    seconds = sum(report["seconds"].values())
    return (
        table(("class", "IoU %"), rows)
        + f"\nmIoU {_percent(report['miou'])}%, pixel accuracy {_percent(report['pixel_accuracy'])}% "
        f"on {report['data']['val']} images ({seconds:.1f} s, peak memory {report['peak_memory_mb']:.0f} MiB); "
        f"wrote {out}"
    )
