"""`vitzoo finetune` and `vitzoo eval`: argument parsers and their run functions.

vitzoo/cli.py mounts these four functions as sub-commands; the example scripts call them too,
so every way of training goes through the same engine (loop.py's `fit`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import DATASETS, DataSplits, default_workers, load_data, load_hf_dataset, store_size_for
from ..data.folder import MAX_DECODED_BYTES
from ..data.hf import hf_num_classes
from ..model import VisionTransformer
from ..precision import CHOICES, name_of, parse_dtype
from ..pretrained_cfg import PretrainedCfg, pretrained_cfg_of
from .config import TrainConfig, parse_overrides
from .evaluation import evaluate_split
from .export import BEST_DIR
from .loop import fit
from .metrics import CURVES_NAME, METRICS_NAME, format_confusion
from .placement import resolve_device
from .recipes import recipe_defaults
from .resume import load_run_info

RUNS_DIR = Path("runs")


def _threads_arg(value: str) -> int | None:
    """--threads: "auto" (None) or a positive thread count."""
    if value == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a number of threads >= 1 or 'auto', got {value!r}")
    return n


# ----------------------------------------------------------------------------- shared arguments
def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("data")
    group.add_argument(
        "--data",
        nargs="+",
        metavar=("NAME", "PATH"),
        default=["mnist-sample"],
        help="mnist-sample (default: the real-MNIST sample shipped with vitzoo, offline), mnist, "
        "fashion-mnist, 'folder PATH' for an ImageNet-style folder (train/ and val/, or class folders), or "
        "hf:PATH_OR_NAME for a Hugging Face datasets image dataset, read offline: a folder written by "
        "save_to_disk, a folder of dataset files, or a name in the local datasets cache (pip install 'vitzoo[hf]')",
    )
    group.add_argument(
        "--data-dir",
        default=None,
        help="where MNIST / Fashion-MNIST raw IDX files are (plain or .gz) or get downloaded",
    )
    group.add_argument("--no-download", action="store_true", help="never download; fail if --data-dir lacks the files")
    group.add_argument(
        "--val-split", type=float, default=None, help="folder without val/: seeded validation fraction (default 0.2)"
    )
    group.add_argument(
        "--strict", action="store_true", help="folder: stop at the first unreadable image instead of skipping it"
    )
    budget = f"{MAX_DECODED_BYTES / 1024**3:.0f} GiB"
    where = group.add_mutually_exclusive_group()
    where.add_argument(
        "--stream",
        dest="stream",
        action="store_const",
        const=True,
        default=None,
        help="folder: decode the images from disk a batch at a time, in --workers processes, with random resized "
        f"crops of the full images (the default when the decoded images would take more than {budget})",
    )
    where.add_argument(
        "--in-memory",
        dest="stream",
        action="store_const",
        const=False,
        help=f"folder: decode every image once and keep them in memory (the default up to {budget}: faster for "
        "small folders)",
    )
    hf = parser.add_argument_group(
        "Hugging Face datasets (--data hf:...)",
        "Found automatically: the 'train' split, evaluation on validation/valid/val/test (else a seeded --val-split "
        "of train), the one datasets.Image column and the one ClassLabel column (its names are the classes)",
    )
    hf.add_argument("--hf-split-train", metavar="SPLIT", default=None, help="the split to train on (default: train)")
    hf.add_argument(
        "--hf-split-val",
        metavar="SPLIT",
        default=None,
        help="the split to evaluate on; 'none': a seeded --val-split fraction of the training split",
    )
    hf.add_argument(
        "--hf-image-column", metavar="COLUMN", default=None, help="the image column, when there are several"
    )
    hf.add_argument(
        "--hf-label-column", metavar="COLUMN", default=None, help="the label column, when there are several"
    )
    group.add_argument(
        "--workers",
        type=_workers_arg,
        default=None,
        metavar="N",
        help="streamed folder: processes decoding images (default: the CPU cores less one, shared among torchrun's "
        "processes, at most 8; 0: decode in the main process). Batches do not depend on it",
    )


def _workers_arg(value: str) -> int:
    """--workers: a number of processes >= 0."""
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a number of worker processes >= 0, got {value!r}")
    return n


def _parse_data(values: list[str]) -> tuple[str, str | None]:
    name, rest = values[0], values[1:]
    if name.startswith("hf:") or name == "hf":
        spec = name[3:]
        if not spec or rest:
            raise ValueError("--data hf:PATH_OR_NAME takes one argument, the dataset after 'hf:' (e.g. hf:saved_dir)")
        return "hf", spec
    if name not in DATASETS:
        if len(values) == 1 and Path(name).is_dir():
            return "folder", name  # a bare directory means an image folder
        raise ValueError(f"--data {name!r} is unknown; expected one of {', '.join(DATASETS)} (folder needs a PATH)")
    if name == "folder":
        if len(rest) != 1:
            raise ValueError("--data folder needs exactly one PATH: --data folder path/to/images")
        return name, rest[0]
    if rest:
        raise ValueError(f"--data {name} takes no path (got {' '.join(rest)}); use --data-dir for where its files are")
    return name, None


def _load_splits(args: argparse.Namespace, model: nn.Module, seed: int, *, resuming: Path | None = None) -> DataSplits:
    """The data of --data, for `model`. A folder is streamed or decoded into memory as --stream /
    --in-memory say, else as its size calls for; when `resuming` a run, as that run was (a change
    would change its batches)."""
    name, path = _parse_data(args.data)
    stream = args.stream
    if stream and name != "folder":
        raise ValueError(f"--stream applies to --data folder PATH; {name} is always decoded into memory")
    if stream is None and resuming is not None:
        stream = load_run_info(resuming).get("streamed")
    store = 256
    if name in ("folder", "hf"):
        cfg = pretrained_cfg_of(model) or PretrainedCfg()  # what InputSpec.from_model falls back to
        store = store_size_for(max(cfg.input_size[1:]), cfg.crop_pct)
    if name == "hf":
        assert path is not None  # _parse_data gives "hf" with its spec
        return load_hf_dataset(
            path,
            store_size=store,
            train_split=args.hf_split_train,
            eval_split=args.hf_split_val,
            image_column=args.hf_image_column,
            label_column=args.hf_label_column,
            val_split=args.val_split,
            seed=seed,
            strict=args.strict,
            eval_for=model,
        )
    splits = load_data(
        name,
        path=path,
        data_dir=args.data_dir,
        download=not args.no_download,
        store_size=store,
        val_split=args.val_split,
        seed=seed,
        strict=args.strict,
        eval_for=model,  # a folder's evaluation images stored the way vitzoo.data.eval_transform makes them
        stream=stream,
    )
    if splits.note and os.environ.get("RANK", "0") == "0":
        workers = default_workers() if args.workers is None else args.workers
        print(f"vitzoo: {splits.note} ({workers} worker processes, --workers)", file=sys.stderr, flush=True)
    return splits


def _peek_classes(args: argparse.Namespace) -> int:
    """Number of classes without decoding anything (the model must be built before the folder
    is decoded, because the model's input size decides the stored size)."""
    name, path = _parse_data(args.data)
    if name == "hf" and path is not None:  # its ClassLabel feature says, nothing decoded
        return hf_num_classes(path, train_split=args.hf_split_train, label_column=args.hf_label_column)
    if name != "folder" or path is None:  # only "folder" and "hf" come with a path
        return 10
    from ..data.folder import FolderDataError

    root = Path(path).expanduser()
    base = root / "train" if (root / "train").is_dir() else root
    if not base.is_dir():
        raise FolderDataError(f"image folder {root} does not exist or is not a directory")
    return sum(1 for e in base.iterdir() if e.is_dir() and not e.name.startswith("."))


def _add_distillation_arguments(parser: argparse.ArgumentParser) -> None:
    """DeiT distillation and Mixup / CutMix: TrainConfig's teacher, distill_*, mixup, cutmix and mix_* fields."""
    kd = parser.add_argument_group(
        "distillation (DeiT)",
        "A frozen teacher's predictions become a second target: loss = (1 - alpha) * CE(class head, labels) + "
        "alpha * distillation(distillation head, teacher). A student with a distillation token (deit_*_distilled, "
        "distilled=True) learns the labels with its class head and the teacher with its distillation head, and "
        "evaluation averages the two. A student WITHOUT a distillation token distils through its class head "
        "(classic knowledge distillation; --distill soft is the usual choice there).",
    )
    kd.add_argument(
        "--teacher",
        metavar="NAME|SOURCE",
        default=None,
        help="the teacher: a registered name (NAME.tag: its pretrained weights), a run directory (its best/), a "
        "saved model directory or file, hf-hub:org/repo, or timm:NAME[.TAG] (any timm model). It must predict "
        "the data's classes; its input size, channels and mean/std are adapted to each batch",
    )
    kd.add_argument(
        "--teacher-weights",
        metavar="SOURCE",
        default=None,
        help="weights for a teacher given by name (registered name or timm:NAME), e.g. a checkpoint file",
    )
    kd.add_argument(
        "--distill",
        choices=("none", "hard", "soft"),
        default=None,
        help="hard (the default with --teacher, DeiT's best): learn the teacher's top class; soft: its "
        "probabilities softened at --distill-tau (KL divergence x tau^2); none: no teacher",
    )
    kd.add_argument("--distill-tau", type=float, default=1.0, metavar="TAU", help="soft: temperature (default 1)")
    kd.add_argument(
        "--distill-alpha",
        type=float,
        default=0.5,
        metavar="ALPHA",
        help="weight of the teacher's term, 0 to 1; the labels get 1 - ALPHA (default 0.5, DeiT's)",
    )
    mix = parser.add_argument_group(
        "Mixup / CutMix (off by default)",
        "Mixed images with mixed label targets, as timm's Mixup (label smoothing folded into the targets). With "
        "--teacher the teacher sees the mixed images.",
    )
    mix.add_argument(
        "--mixup",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="Mixup: blend each image with its neighbour, weight ~ Beta(ALPHA, ALPHA) (DeiT: 0.8; 0: off)",
    )
    mix.add_argument(
        "--cutmix",
        type=float,
        default=0.0,
        metavar="ALPHA",
        help="CutMix: paste a box of the neighbour, area ~ Beta(ALPHA, ALPHA) (DeiT: 1.0; 0: off)",
    )
    mix.add_argument(
        "--mix-prob", type=float, default=1.0, metavar="P", help="probability that a batch is mixed (default 1)"
    )
    mix.add_argument(
        "--mix-switch-prob",
        type=float,
        default=0.5,
        metavar="P",
        help="with both on: probability that a mixed batch gets CutMix rather than Mixup (default 0.5)",
    )


def _distillation_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The TrainConfig fields of _add_distillation_arguments, from parsed arguments."""
    names = ("teacher", "teacher_weights", "distill", "distill_tau", "distill_alpha")
    return {name: getattr(args, name) for name in (*names, "mixup", "cutmix", "mix_prob", "mix_switch_prob")}


# ----------------------------------------------------------------------------- finetune
def configure_finetune_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo finetune MODEL ...`."""
    parser.add_argument("model", help="a registered model name, e.g. vit_mnist, vit_ti16, deit_s16 (vitzoo list)")
    _add_data_arguments(parser)
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--pretrained", action="store_true", help="start from the model's default pretrained weights")
    src.add_argument(
        "--weights", default=None, help="start from these weights: a file, a directory, hf-hub:org/repo or timm:<name>"
    )
    rec = parser.add_argument_group("recipe (defaults depend on data and on --pretrained)")
    rec.add_argument("--epochs", type=int, default=None)
    rec.add_argument("--batch-size", type=int, default=None, help="global batch size (split over torchrun processes)")
    rec.add_argument("--lr", type=float, default=None, help="peak learning rate after warmup")
    rec.add_argument("--weight-decay", type=float, default=None)
    rec.add_argument("--warmup-epochs", type=float, default=None)
    rec.add_argument("--label-smoothing", type=float, default=0.1)
    rec.add_argument("--clip-grad", type=float, default=1.0, help="max gradient norm (0 disables)")
    rec.add_argument(
        "--layer-decay",
        type=float,
        default=None,
        help="layer-wise lr decay, e.g. 0.75 (default with pretrained weights)",
    )
    rec.add_argument("--linear-probe", action="store_true", help="freeze the backbone, train only the classifier head")
    rec.add_argument("--drop-path", type=float, default=None, help="stochastic depth rate of the model")
    rec.add_argument(
        "--img-size", type=int, default=None, help="model input size (pretrained position embeddings are resampled)"
    )
    rec.add_argument(
        "--augment",
        type=float,
        default=None,
        help="digits: strength of the random affine, 0 to 3 (recipe default 1 on the MNIST sample, 0 on full MNIST / Fashion-MNIST)",
    )
    rec.add_argument(
        "--erase",
        type=float,
        default=None,
        help="random erasing: probability per training image (recipe default 0.25 on full MNIST / Fashion-MNIST, else 0)",
    )
    rec.add_argument(
        "--ema",
        dest="ema_decay",
        type=float,
        default=None,
        metavar="DECAY",
        help="evaluate and export an exponential moving average of the weights with this decay per step, e.g. 0.9995 (0 disables)",
    )
    rec.add_argument("--no-randaugment", action="store_true", help="folder data: random crop and flip only")
    rec.add_argument(
        "--amp", choices=("auto", "bf16", "off"), default="auto", help="bf16 autocast (auto: on CUDA only)"
    )
    rec.add_argument(
        "--seed", type=int, default=0, help="seed for initialisation, data order, augmentation and dropout"
    )
    _add_distillation_arguments(parser)
    run = parser.add_argument_group("run")
    run.add_argument("--out", default=None, help="run directory (default runs/<model>-<data>-<time>)")
    run.add_argument(
        "--resume", action="store_true", help="continue the run in --out (or the latest matching run in runs/)"
    )
    run.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="SETTING=VALUE",
        help="with --resume: change a setting the run was started with, e.g. epochs=30 (repeatable or "
        "comma-separated; recorded in run.json's settings_history). Without it a changed setting is refused",
    )
    run.add_argument("--device", default="auto", help="auto, cpu or cuda")
    run.add_argument(
        "--threads",
        type=_threads_arg,
        default=None,
        metavar="N|auto",
        help="CPU threads for torch: a number fixes it (runs repeat bit for bit); auto (the default) uses "
        "the cores other processes leave free, re-decided every few seconds",
    )
    run.add_argument("--no-progress", action="store_true", help="no progress bars (epoch lines still print)")
    run.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout (progress and epoch lines go to stderr)",
    )


def _run_dir(args: argparse.Namespace, data_name: str) -> Path:
    if args.out is not None:
        return Path(args.out)
    prefix = f"{args.model.replace('.', '-')}-{data_name}"
    if args.resume:
        candidates = sorted(p for p in RUNS_DIR.glob(f"{prefix}-*") if (p / "checkpoint.safetensors").is_file())
        if not candidates:
            raise FileNotFoundError(
                f"--resume: no run of {prefix} with a checkpoint under {RUNS_DIR}/; pass --out RUN_DIR"
            )
        return candidates[-1]
    return RUNS_DIR / f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}"


def build_model(args: argparse.Namespace, num_classes: int) -> nn.Module:
    import vitzoo

    overrides: dict[str, Any] = {"num_classes": num_classes}
    if args.img_size is not None:
        overrides["img_size"] = args.img_size
    if getattr(args, "drop_path", None) is not None:
        overrides["drop_path_rate"] = args.drop_path
    if args.weights is not None:
        return vitzoo.create(args.model, weights=args.weights, **overrides)
    return vitzoo.create(args.model, pretrained=args.pretrained, **overrides)


def _require_vit(model: nn.Module, name: str) -> VisionTransformer:
    """`model` as the VisionTransformer that fine-tuning and evaluation need (they read its
    config and replace its classifier); a plugin builder may return any nn.Module."""
    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model {name!r} is a {type(model).__name__}; vitzoo finetune/eval need a vitzoo VisionTransformer"
        )
    return model


def run_finetune(args: argparse.Namespace) -> int:
    """Fine-tune (or train from scratch) and report where the results went. Returns an exit code.
    With --json, stdout carries only the JSON result: everything else printed goes to stderr."""
    if not getattr(args, "json", False):
        return _finetune(args)
    result: dict[str, Any] = {}
    with contextlib.redirect_stdout(sys.stderr):
        code = _finetune(args, result)
    print(json.dumps(result))
    return code


def _finetune(args: argparse.Namespace, report: dict[str, Any] | None = None) -> int:
    overrides = parse_overrides(getattr(args, "override", None) or [])
    if overrides and not args.resume:
        raise ValueError(
            f"--override {','.join(overrides)} changes a run being resumed; add --resume, or for a new run give "
            "the settings as options (--epochs ...)"
        )
    data_name, _ = _parse_data(args.data)
    from_pretrained = bool(args.pretrained or args.weights or "." in args.model)
    recipe = recipe_defaults(data_name, from_pretrained, model=args.model)
    for key in (
        "epochs",
        "batch_size",
        "lr",
        "weight_decay",
        "warmup_epochs",
        "layer_decay",
        "augment",
        "erase",
        "ema_decay",
    ):
        if getattr(args, key, None) is not None:
            recipe[key] = getattr(args, key)
    if recipe.get("ema_decay") == 0:
        recipe["ema_decay"] = None
    config = TrainConfig(
        **recipe,
        label_smoothing=args.label_smoothing,
        clip_grad=args.clip_grad or None,
        linear_probe=args.linear_probe,
        amp=args.amp,
        seed=args.seed,
        randaugment=not args.no_randaugment,
        progress=not args.no_progress,
        device=args.device,
        threads=args.threads,
        workers=args.workers,
        **_distillation_settings(args),
    )
    out_dir = _run_dir(args, data_name)
    torch.manual_seed(args.seed)  # the model's random init (head, or everything from scratch)
    model = _require_vit(build_model(args, _peek_classes(args)), args.model)
    splits = _load_splits(args, model, args.seed, resuming=out_dir if args.resume else None)
    if splits.train.num_classes != model.config.num_classes:  # e.g. a folder class without images
        model.reset_classifier(splits.train.num_classes)
    rank0 = int(__import__("os").environ.get("RANK", "0")) == 0
    if rank0:
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"fine-tuning {args.model} ({n_params:,} parameters) on {splits.name}: {len(splits.train)} train / "
            f"{len(splits.val)} val images, {splits.train.num_classes} classes, {config.epochs} epoch{'s' if config.epochs != 1 else ''} -> {out_dir}",
            flush=True,
        )
    result = fit(
        model,
        splits,
        config=config,
        out_dir=out_dir,
        resume=args.resume,
        overrides=overrides,
        run_info={"model": args.model, "weights": args.weights, "pretrained": args.pretrained},
    )
    if not rank0:
        return 0
    if report is not None:
        report.update(
            {
                "run_dir": str(out_dir),
                "model": args.model,
                "data": splits.name,
                "interrupted": result.interrupted,
                "epochs_done": len(result.history),
                "best_acc": result.best_acc if result.best_epoch >= 0 else None,
                "best_epoch": result.best_epoch + 1 if result.best_epoch >= 0 else None,
                "final_acc": result.final_acc if result.history else None,
                "train_seconds": result.train_seconds,
                "best_dir": str(result.best_dir) if result.best_dir is not None else None,
                "metrics": str(out_dir / METRICS_NAME),
                "curves": str(out_dir / CURVES_NAME),
                "checkpoint": str(out_dir / "checkpoint.safetensors"),
            }
        )
    if result.interrupted:
        print(
            f"interrupted; resume with: vitzoo finetune {args.model} --out {out_dir} --resume (plus the same options)"
        )
        return 130
    print(
        f"done in {result.train_seconds:.0f} s of training: best val accuracy {100 * result.best_acc:.2f}% "
        f"(epoch {result.best_epoch + 1}), final {100 * result.final_acc:.2f}%\n"
        f"  run directory  {out_dir}\n"
        f"  best model     {out_dir / BEST_DIR}   (vitzoo.create({args.model.split('.')[0]!r}, weights={str(out_dir / BEST_DIR)!r}))\n"
        f"  metrics        {out_dir / METRICS_NAME}\n"
        f"  curves         {out_dir / CURVES_NAME}\n"
        f"  evaluate with  vitzoo eval {args.model.split('.')[0]} --weights {out_dir / BEST_DIR}"
        + (f" --data {' '.join(args.data)}" if data_name != "mnist-sample" else "")
    )
    return 0


# ----------------------------------------------------------------------------- eval
def configure_eval_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo eval MODEL --weights SRC ...`."""
    parser.add_argument("model", help="the registered model name the weights belong to, e.g. vit_mnist")
    parser.add_argument(
        "--weights", required=True, help="a run's best/ directory, a weights file, hf-hub:org/repo or timm:<name>"
    )
    _add_data_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0, help="seed of the folder split (must match training)")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--dtype",
        choices=CHOICES,
        default="fp32",
        help="inference precision: fp32 (the default, the numbers training reported), bf16, fp16, or auto "
        "(bf16 where the hardware multiplies it natively, else fp32; it says what it picked)",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _saved_overrides(weights: str) -> dict[str, Any]:
    """num_classes / img_size / in_chans of a saved vitzoo directory, so the model is rebuilt as
    trained instead of with the registered defaults."""
    config = Path(weights) / "config.json"
    if not config.is_file():
        return {}
    fields = json.loads(config.read_text(encoding="utf-8")).get("config", {})
    return {k: fields[k] for k in ("num_classes", "img_size", "in_chans") if k in fields}


def run_eval(args: argparse.Namespace) -> int:
    """Accuracy and confusion matrix of `--weights` on the evaluation split of `--data`."""
    import vitzoo

    overrides = _saved_overrides(args.weights) or {"num_classes": _peek_classes(args)}
    dtype, why = parse_dtype(args.dtype, resolve_device(args.device))
    if args.dtype == "auto":
        print(f"vitzoo: evaluating in {name_of(dtype)}: {why}", file=sys.stderr)
    model = _require_vit(vitzoo.create(args.model, weights=args.weights, dtype=dtype, **overrides), args.model)
    splits = _load_splits(args, model, args.seed)
    if model.config.num_classes != splits.val.num_classes:
        raise ValueError(
            f"the weights {args.weights} predict {model.config.num_classes} classes but {splits.val.source} has "
            f"{splits.val.num_classes}; evaluate on the data the model was trained for"
        )
    result = evaluate_split(
        model, splits.val, kind=splits.kind, batch_size=args.batch_size, device=args.device, workers=args.workers
    )
    if args.json:
        print(
            json.dumps(
                {
                    "accuracy": result.accuracy,
                    "loss": result.loss,
                    "count": result.count,
                    "confusion": result.confusion.tolist(),
                    "classes": list(splits.classes),
                }
            )
        )
        return 0
    print(f"{args.model} with {args.weights} on {splits.val.source}")
    print(
        f"accuracy {100 * result.accuracy:.2f}% ({int(result.confusion.trace())}/{result.count}), loss {result.loss:.4f}"
    )
    print(format_confusion(result.confusion, splits.classes))
    return 0
