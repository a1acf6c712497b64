"""`vitzoo convert SRC DST [--to vitzoo|timm]`: rewrite a checkpoint in another layout."""

from __future__ import annotations

import argparse

from .base import describe, emit


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Read a checkpoint in any supported layout (timm, transformers, Google .npz, "
        "torchvision, vitzoo) and write it in vitzoo's layout (a save_pretrained directory) or timm's.",
    )
    parser.add_argument("src", metavar="SRC", help="file, directory, hf-hub:org/repo or timm:<name>")
    parser.add_argument("dst", metavar="DST", help="where to write the converted checkpoint")
    parser.add_argument("--to", choices=["vitzoo", "timm"], default="vitzoo", help="target layout (default: vitzoo)")
    parser.add_argument(
        "--model", metavar="NAME", help="the vitzoo model the checkpoint belongs to (when it cannot be inferred)"
    )


def run(args: argparse.Namespace) -> int:
    from ..builder import convert

    # A missing or unreadable source is reported by vitzoo.weights, naming the file.
    dst = str(convert(args.src, args.dst, to=args.to, model=args.model))
    data = {"src": args.src, "dst": dst, "to": args.to, "model": args.model}
    emit(args, data, f"converted {args.src} -> {dst} ({args.to} layout)")
    return 0
