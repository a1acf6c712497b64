"""`vitzoo eval MODEL --weights SRC ...`: accuracy and confusion matrix on the evaluation split."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .base import (
    OptimizeNote,
    add_dtype_option,
    add_naflex_options,
    add_optimize_option,
    checked_weights,
    chosen_dtype,
    in_range,
    printable,
    require_vit,
)
from .data_args import add_data_arguments, data_spec, load_splits, naflex_data
from .int8_args import add_int8_options, check_int8_args, int8_wish


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Arguments of `vitzoo eval MODEL --weights SRC ...`."""
    parser.add_argument("model", help="the registered model name the weights belong to, e.g. vit_mnist")
    parser.add_argument(
        "--weights", required=True, help="a run's best/ directory, a weights file, hf-hub:org/repo or timm:<name>"
    )
    add_data_arguments(parser)
    from ..train.config import TRAIN_RANGES  # the ranges finetune's flags and TrainConfig check

    parser.add_argument("--batch-size", type=in_range(TRAIN_RANGES["batch_size"]), default=500)
    parser.add_argument(
        "--seed", type=in_range(TRAIN_RANGES["seed"]), default=0, help="seed of the folder split (must match training)"
    )
    parser.add_argument("--device", default="auto")
    add_dtype_option(parser, auto=True, help="the default, the numbers training reported")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    add_optimize_option(parser)
    add_naflex_options(parser)
    add_int8_options(parser)


def saved_overrides(weights: str) -> dict[str, Any]:
    """num_classes / img_size / in_chans of a saved vitzoo directory, so the model is rebuilt as
    trained instead of with the registered defaults."""
    from ..jsonio import JSONFileError, read_json

    config = Path(weights) / "config.json"
    if not config.is_file():
        return {}
    fields = read_json(config, what="a vitzoo config (written by save_pretrained)").get("config", {})
    if not isinstance(fields, dict):
        raise JSONFileError(f'{str(config)!r}: its "config" is a {type(fields).__name__}; expected a JSON object')
    return {k: fields[k] for k in ("num_classes", "img_size", "in_chans") if k in fields}


def run(args: argparse.Namespace) -> int:
    """Accuracy and confusion matrix of `--weights` on the evaluation split of `--data`."""
    from ..builder import create
    from ..train import evaluate_split, format_confusion, resolve_device

    spec = data_spec(args)
    naflex_data(args, spec)
    check_int8_args(args)
    overrides = saved_overrides(args.weights) or {"num_classes": spec.num_classes()}
    dtype = chosen_dtype(args, resolve_device(args.device), "evaluating")
    model = require_vit(create(args.model, weights=args.weights, dtype=dtype, **overrides), args.model)
    checked_weights(model, args.model, args.weights)
    splits = load_splits(args, spec, model, args.seed)
    if model.config.num_classes != splits.val.num_classes:
        raise ValueError(
            f"the weights {args.weights} predict {model.config.num_classes} classes but {splits.val.source} has "
            f"{splits.val.num_classes}; evaluate on the data the model was trained for"
        )
    note = OptimizeNote()
    result = evaluate_split(
        model,
        splits.val,
        kind=splits.kind,
        batch_size=args.batch_size,
        device=args.device,
        workers=args.workers,
        naflex=args.naflex,
        max_patches=args.max_patches,
        optimize=args.optimize,
        on_optimize=note,
        int8=int8_wish(args, model),
    )
    if args.json:
        from ..jsonio import to_json

        data = {
            "accuracy": result.accuracy,
            "loss": result.loss,
            "count": result.count,
            "confusion": result.confusion.tolist(),
            "classes": list(splits.classes),
        }
        print(to_json(note.add_to(data)))
        return 0
    print(printable(f"{args.model} with {args.weights} on {splits.val.source}"))
    print(
        f"accuracy {100 * result.accuracy:.2f}% ({int(result.confusion.trace())}/{result.count}), loss {result.loss:.4f}"
    )
    # Class names come from folder names or a dataset's features: escaped before the columns are aligned.
    print(format_confusion(result.confusion, [printable(c) for c in splits.classes]))
    return 0
