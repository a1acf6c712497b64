"""`vitzoo features MODEL DATA --out FILE`: embeddings of every image, cached for `vitzoo probe`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .base import (
    OptimizeNote,
    UsageError,
    add_naflex_options,
    add_optimize_option,
    add_weights_option,
    bounded_int,
    checked_weights,
    chosen_dtype,
    create_model,
    printable,
    require_vit,
)
from .data_args import add_data_arguments, data_spec, load_splits, naflex_data
from .int8_args import add_int8_options, check_int8_args, int8_wish

SPLIT_CHOICES = ("all", "train", "val")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo features MODEL DATA --out FILE`."""
    from ..precision import CHOICES
    from ..probe.extract import OUTPUTS

    parser.description = (
        "Embed every image of a dataset once with a model's own evaluation preprocessing and write the "
        "embeddings, labels and file names to a safetensors file (with the settings used in its metadata) "
        "for `vitzoo probe`. An interrupted run resumes where it stopped when run again with the same settings."
    )
    parser.add_argument("model", help="a registered model name, e.g. vit_b16 or vit_mnist_tiny")
    add_data_arguments(parser, positional=True)
    parser.add_argument("--out", required=True, metavar="FILE", help="the features file to write (.safetensors)")
    add_weights_option(parser, "instead of the model's pretrained weights")
    parser.add_argument(
        "--output",
        choices=OUTPUTS,
        default="pooled",
        help="pooled: what the classifier reads (default); cls: the class token; mean: the mean of the patch tokens",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=None,
        metavar="I",
        help="take --output cls or mean from block I (negative from the end) instead of the last, through the final norm",
    )
    parser.add_argument(
        "--split",
        choices=SPLIT_CHOICES,
        default="all",
        help="which split to embed (default: all, both train and val; `vitzoo probe` fits on train, tests on val)",
    )
    parser.add_argument("--batch-size", type=bounded_int(1, "an int >= 1"), default=64, metavar="N")
    parser.add_argument("--seed", type=bounded_int(0, "an int >= 0"), default=0, help="seed of a folder's val split")
    parser.add_argument("--device", default="auto", help="cpu, cuda, ... (default: auto, CUDA when there is one)")
    parser.add_argument(
        "--dtype",
        choices=CHOICES,
        default="auto",
        help="precision of the forward passes (default: auto, bf16 where it measures faster than fp32 here, "
        "else fp32; it says what it picked); the file holds float32 either way",
    )
    parser.add_argument("--no-resume", action="store_true", help="start afresh, ignoring the shards of a stopped run")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_optimize_option(parser)
    add_naflex_options(parser)
    add_int8_options(parser)


def backbone_from_args(args: argparse.Namespace) -> Any:
    from .eval import saved_overrides

    overrides = saved_overrides(args.weights) if args.weights is not None else {}
    model = checked_weights(create_model(args.model, args.weights, **overrides), args.model, args.weights)
    return require_vit(model, args.model)


def run(args: argparse.Namespace) -> int:
    """Write the features of `DATA` to `--out`."""
    from ..naflex import NaFlexSpec
    from ..probe.extract import check_output, extract_to_file
    from ..train.placement import resolve_device

    if Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a directory; expected a file name (e.g. features.safetensors)")
    spec = data_spec(args)
    naflex_data(args, spec)
    check_int8_args(args)
    if args.stream is False:
        raise UsageError("--in-memory: features stream image folders, so that every split gets the evaluation crop")
    model = backbone_from_args(args)
    check_output(model, args.output, args.block)
    device = resolve_device(args.device)
    dtype = chosen_dtype(args, device, "embedding")
    if spec.name == "folder":
        args.stream = True  # every split, train included, through the evaluation preprocessing
    splits = load_splits(args, spec, model, args.seed, eval_train=True)
    settings = {
        "model": args.model,
        "weights": args.weights or "pretrained",
        "dataset": {"name": spec.name, "path": spec.path, "seed": args.seed},
    }
    if args.naflex:  # the file records the budget used: the flag's, else the weights' or the default
        settings["naflex"] = {"max_patches": NaFlexSpec.from_model(model, args.max_patches).max_patches}
    feats = extract_to_file(
        model,
        splits,
        args.out,
        settings=settings,
        resume=not args.no_resume,
        output=args.output,
        block=args.block,
        splits=("train", "val") if args.split == "all" else (args.split,),
        batch_size=args.batch_size,
        device=device,
        dtype=dtype,
        workers=args.workers,
        progress=not args.no_progress,
        naflex=args.naflex,
        max_patches=args.max_patches,
        optimize=args.optimize,
        on_optimize=OptimizeNote(quiet=args.no_progress),
        int8=int8_wish(args, model),
    )
    counts = ", ".join(f"{n} {name}" for name, n in feats.settings["counts"].items())
    print(printable(f"wrote {args.out}: {feats.features.shape[1]}-dim {args.output} features of {counts} images"))
    return 0
