"""`vitzoo download NAME[.TAG]...`: fill the weights cache ahead of air-gapped use."""

from __future__ import annotations

import argparse

from .base import describe, emit, table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Fetch weights into the Hugging Face cache ahead of time, for later offline use "
        "(HF_HUB_OFFLINE=1). Honours HF_ENDPOINT, HF_HOME and HF_HUB_CACHE.",
    )
    parser.add_argument(
        "names", nargs="+", metavar="NAME[.TAG]", help="models (their default source, or the tag's), or hf-hub:org/repo"
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="the whole image-text model (CLIP, SigLIP): open_clip's or transformers' files with the text tower, "
        "and the tokenizer's vocabulary (what `vitzoo zeroshot` and create(..., text=True) read)",
    )


def run(args: argparse.Namespace) -> int:
    from ..builder import download

    result: dict[str, list[str]] = {}
    for name in args.names:
        if args.text:
            from ..text.load import download_image_text

            result[name] = [str(p) for p in download_image_text(name)]
        else:
            result[name] = [str(p) for p in download(name)]
    rows = [[name, path] for name, paths in result.items() for path in paths]
    emit(args, result, table(["NAME", "CACHED FILE"], rows))
    return 0
