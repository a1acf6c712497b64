"""`vitzoo predict NAME IMAGE|DIR... [--output F]`: top-k labels and probabilities (F: .csv/.jsonl)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from .base import (
    OptimizeNote,
    UsageError,
    add_dtype_option,
    add_naflex_options,
    add_optimize_option,
    add_weights_option,
    checked_weights,
    chosen_dtype,
    create_model,
    describe,
    emit,
    naflex_budget,
    table,
)
from .int8_args import add_int8_options, check_int8_args, int8_wish


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Classify images with a model's pretrained weights (or --weights), using the "
        "preprocessing those weights expect. Folders are searched recursively (no symbolic link "
        "followed out of them). Without --output the results are printed (a table, or --json); with "
        "--output FILE they are streamed to a CSV or JSON-lines file in batches.",
    )
    parser.add_argument("name", metavar="NAME[.TAG]", help="a registered model")
    parser.add_argument(
        "images",
        nargs="+",
        metavar="IMAGE",
        help="image files (PNG, JPEG, ...) or folders of them; '-' or /dev/stdin reads one image from standard input",
    )
    add_weights_option(parser, "instead of the default source")
    parser.add_argument(
        "--topk", type=int, default=5, metavar="K", help="how many classes to show per image (default: 5)"
    )
    parser.add_argument(
        "--output",
        metavar="FILE",
        help="write every image's predictions to FILE (.csv or .jsonl), streaming, with a progress bar; "
        "unreadable images are skipped with a warning",
    )
    parser.add_argument("--format", choices=["csv", "jsonl"], help="format of --output (default: from its suffix)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="images per forward pass (default: 32)")
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="image-decoding processes with --output (0: none; default: the cores torch's threads leave free)",
    )
    parser.add_argument("--strict", action="store_true", help="with --output, an unreadable image is an error")
    add_dtype_option(parser, auto=True, help="default")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_optimize_option(parser)
    add_naflex_options(parser)
    add_int8_options(parser)


def run(args: argparse.Namespace) -> int:
    from .. import predict

    for option in ("topk", "batch_size"):
        if getattr(args, option) < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if args.workers is None:
        args.workers = predict.default_workers()
    if args.workers < 0:
        raise UsageError(f"--workers must be >= 0, got {args.workers}")
    naflex_budget(args)
    check_int8_args(args)
    if args.output is not None:
        return _predict_to_file(args)
    # A few files for a person: every image is read first (an unreadable one is an error, before
    # the model loads), then printed as a table or --json.
    if args.format is not None:
        raise UsageError("--format applies to --output FILE; without --output use --json")
    paths, _ = predict.find_images(args.images)
    streams = predict.read_streams(paths)  # "-" and pipes: read once, decoded twice from memory
    for path in paths:
        _check_readable(path, streams)
    model = _predict_model(args)
    results = list(
        predict.predict_images(
            model,
            paths,
            topk=args.topk,
            batch_size=args.batch_size,
            workers=0,
            strict=True,
            progress=False,
            streams=streams,
            naflex=args.naflex,
            max_patches=args.max_patches,
            optimize=args.optimize,
            on_optimize=OptimizeNote(quiet=args.no_progress),
            int8=int8_wish(args, model),
        )
    )
    rows = [
        [r["image"] if rank == 0 else "", rank + 1, f"{p['probability']:.4f}", p["index"], p["label"]]
        for r in results
        for rank, p in enumerate(r["predictions"])
    ]
    emit(args, results, table(["IMAGE", "RANK", "PROB", "CLASS", "LABEL"], rows))
    return 0


def _predict_to_file(args: argparse.Namespace) -> int:
    """--output FILE: every image streamed through the model, the predictions written as they come."""
    from .. import predict

    try:  # a bad name fails before the model loads
        fmt = predict.output_format(args.output, args.format)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    paths, _ = predict.find_images(args.images)
    model = _predict_model(args)
    skipped: list[tuple[str, str]] = []
    topk = min(args.topk, model.pretrained_cfg.num_classes)
    note = OptimizeNote(quiet=args.no_progress)
    records = predict.predict_images(
        model,
        paths,
        topk=topk,
        batch_size=args.batch_size,
        workers=args.workers,
        strict=args.strict,
        progress=not args.no_progress,
        skipped=skipped,
        naflex=args.naflex,
        max_patches=args.max_patches,
        optimize=args.optimize,
        on_optimize=note,
        int8=int8_wish(args, model),
    )
    count = predict.write_predictions(records, args.output, topk=topk, fmt=fmt)
    data = note.add_to({"output": args.output, "format": fmt, "images": count, "skipped": [p for p, _ in skipped]})
    text = f"wrote {count} prediction(s) to {args.output} ({fmt})"
    emit(args, data, text + (f"; skipped {len(skipped)} unreadable image(s)" if skipped else ""))
    return 0


def _check_readable(path: str, streams: Mapping[str, bytes]) -> None:
    """Decode `path` (or the bytes read of it) once, with the same reader and checks as the data
    pipeline, so that an unreadable image is an error before any model loads."""
    from ..data.folder import UnreadableImageError
    from ..predict import decode_input

    try:
        decode_input(path, lambda img: None, streams)
    except UnreadableImageError as exc:
        raise OSError(f"cannot read image {path!r}: {exc} (expected a PNG, JPEG or other PIL-readable image)") from None


def _predict_model(args: argparse.Namespace) -> Any:
    from ..pretrained_cfg import pretrained_cfg_of

    dtype = chosen_dtype(args, "cpu", "predicting")

    model = checked_weights(create_model(args.name, args.weights, dtype=dtype).eval(), args.name, args.weights)
    cfg = pretrained_cfg_of(model)
    if cfg is None:
        raise ValueError(f"model {args.name!r} carries no pretrained_cfg, so its labels and preprocessing are unknown")
    if cfg.num_classes <= 0:
        raise ValueError(f"model {args.name!r} has no classifier (num_classes=0), so it cannot predict labels")
    return model
