"""`vitzoo zeroshot MODEL IMAGE|DIR... --labels a,b,c`: classify images by comparing them with
prompts made from class names (CLIP: softmax over the classes; SigLIP: a sigmoid per class)."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
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
    describe,
    emit,
    naflex_budget,
    table,
)

TEMPLATE_HELP = (
    "prompt templates, '{}' standing for the class name, or a built-in set: 'openai' (CLIP's 80 ImageNet "
    "prompts) or 'simple'; several are averaged (default: 'a photo of a {}.')"
)
DEFAULT_TEMPLATE = "a photo of a {}."
_SHOWN = 10  # repeated class names an error lists


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Zero-shot classification with an image-text model (CLIP, SigLIP): each label becomes prompts, "
        "the text tower embeds them, and every image is compared with them. The weights (--weights or the "
        "name's default source) must hold the text tower: an open_clip directory or hub repo "
        "(open_clip_config.json), or a transformers CLIPModel / SiglipModel / Siglip2Model. Output: the "
        "records of `vitzoo predict`.",
    )
    parser.add_argument("name", metavar="NAME[.TAG]", help="a registered model (clip_b16, siglip_b16, ...)")
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="image files or folders of them")
    add_weights_option(parser, "instead of the default source")
    labels = parser.add_mutually_exclusive_group(required=True)
    labels.add_argument("--labels", metavar="A,B,C", help="the class names, comma-separated")
    labels.add_argument("--labels-file", metavar="FILE", help="a UTF-8 text file with one class name per line")
    parser.add_argument("--templates", nargs="+", metavar="T", help=TEMPLATE_HELP)
    parser.add_argument("--topk", type=int, default=5, metavar="K", help="how many classes per image (default: 5)")
    parser.add_argument("--output", metavar="FILE", help="write the predictions to FILE (.csv or .jsonl)")
    parser.add_argument("--format", choices=["csv", "jsonl"], help="format of --output (default: from its suffix)")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N", help="images per forward pass (default: 32)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_dtype_option(parser, auto=True, help="default")
    add_optimize_option(parser)
    add_naflex_options(parser)


def read_labels(args: argparse.Namespace) -> list[str]:
    if args.labels is not None:
        names = [n.strip() for n in args.labels.split(",")]
        where = "--labels"
    else:
        path = Path(args.labels_file)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"--labels-file {args.labels_file!r}: cannot read it as UTF-8 text ({e})") from None
        names = [n.strip() for n in text.splitlines() if n.strip()]
        where = f"--labels-file {args.labels_file!r}"
    if not names:
        raise UsageError(f"{where}: expected at least one class name")
    empty = next((i for i, n in enumerate(names) if not n), None)
    if empty is not None:
        raise UsageError(f"{where}: class name {empty + 1} of {len(names)} is empty; expected non-empty class names")
    # counted in one pass: a file of any length is checked in linear time
    repeated = sorted(n for n, count in Counter(names).items() if count > 1)
    if repeated:
        shown = ", ".join(repeated[:_SHOWN]) + (
            f" (and {len(repeated) - _SHOWN} more)" if len(repeated) > _SHOWN else ""
        )
        raise UsageError(f"{where}: {len(repeated)} class name(s) given twice: {shown}")
    return names


def read_templates(values: list[str] | None) -> list[str]:
    from ..text import templates

    if not values:
        return [DEFAULT_TEMPLATE]
    out: list[str] = []
    for value in values:
        if value in ("openai", "simple"):
            out += templates(value)
        elif "{}" in value:
            out.append(value)
        else:
            raise UsageError(f"--templates: {value!r} has no '{{}}' for the class name and is no built-in set")
    return out


def run(args: argparse.Namespace) -> int:
    from .. import builder, predict
    from ..precision import cast_model
    from ..text.model import ZeroShotClassifier

    for option in ("topk", "batch_size"):
        if getattr(args, option) < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    naflex_budget(args)
    labels, prompts = read_labels(args), read_templates(args.templates)
    fmt = None
    if args.output is not None:
        try:
            fmt = predict.output_format(args.output, args.format)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    elif args.format is not None:
        raise UsageError("--format applies to --output FILE; without --output use --json")
    paths, _ = predict.find_images(args.images)
    pretrained = args.weights is None
    dtype = chosen_dtype(args, "cpu", "classifying")
    model: Any = builder.create(args.name, pretrained=pretrained, weights=args.weights, text=True).eval()
    model = cast_model(checked_weights(model, args.name, args.weights), dtype)
    classifier = ZeroShotClassifier(model, labels, prompts).eval()
    topk = min(args.topk, len(labels))
    note = OptimizeNote(quiet=args.no_progress)
    records = predict.predict_images(
        classifier,
        paths,
        topk=topk,
        batch_size=args.batch_size,
        workers=0,
        strict=args.output is None,
        progress=args.output is not None and not args.no_progress,
        activation=classifier.activation,
        naflex=args.naflex,
        max_patches=args.max_patches,
        optimize=args.optimize,
        on_optimize=note,
    )
    if args.output is not None:
        count = predict.write_predictions(records, args.output, topk=topk, fmt=fmt)
        emit(
            args,
            note.add_to({"output": args.output, "format": fmt, "images": count}),
            f"wrote {count} prediction(s) to {args.output}",
        )
        return 0
    results = list(records)
    rows = [
        [r["image"] if rank == 0 else "", rank + 1, f"{p['probability']:.4f}", p["index"], p["label"]]
        for r in results
        for rank, p in enumerate(r["predictions"])
    ]
    emit(args, results, table(["IMAGE", "RANK", "PROB", "CLASS", "LABEL"], rows))
    return 0
