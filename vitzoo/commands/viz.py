"""`vitzoo viz KIND ...`: every picture of vitzoo.viz one command away. Errors are raised (the
command prints them as one line; --debug shows the traceback).

    vitzoo viz patches   [NAME] [--image IMG] [--patch-size P] [--out PNG]
    vitzoo viz embedding NAME [--image IMG] [--weights SRC | --pretrained] [--out PNG]
    vitzoo viz posembed  NAME [--weights SRC | --pretrained] [--out PNG]
    vitzoo viz attention NAME [--image IMG] [--weights SRC | --pretrained] [--layer L] [--head H]
                              [--what both|heads|rollout] [--out PNG]     (rollout alone without class token)
    vitzoo viz curves    --metrics RUN/metrics.jsonl [--keys PATTERN ...] [--out PNG]
    vitzoo viz pca       NAME IMAGE... [--weights SRC | --pretrained] [--size S] [--layer L]
                              [--mask FILE ...] [--out PNG]        (one --mask per image, in order)
    vitzoo viz similarity NAME IMAGE... --query ROW,COL [--weights SRC | --pretrained] [--size S]
                              [--layer L] [--out PNG]             (the query patch of the first image)

Every KIND prints where the picture went, or with --json {"kind", "out", "width", "height", "dpi"}.
Without --image, a synthetic test card is drawn. matplotlib is imported only when a picture is
drawn, so `vitzoo viz --help` works without the [viz] extra.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..checks import DPI, IMAGE_SIDE
from ..jsonio import to_json
from .base import add_debug_option, in_range

KINDS = {
    "patches": "an image cut into its patch grid, and the flattened patch sequence",
    "embedding": "the patch embedding: identity kernel, learned kernels, their principal components",
    "posembed": "cosine similarity of the position embeddings on the patch grid",
    "attention": "class-token attention per head of a layer, and attention rollout across layers",
    "curves": "loss and accuracy curves from a fine-tuning run's metrics.jsonl",
    "pca": "DINOv3's PCA of the patch features on the foreground, one fit shared by the images, beside them",
    "similarity": "cosine similarity of one patch (--query ROW,COL of the first image) with every patch",
}
# The pictures of a model: KIND -> (vitzoo.viz function, its positional arguments after the model,
# its keyword options), each an attribute of the parsed arguments.
_MODEL_PICTURES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "embedding": ("plot_patch_embedding", ("image",), ("num_filters", "num_components")),
    "posembed": ("plot_position_embedding", (), ()),
    "attention": ("plot_attention", ("image",), ("layer", "head", "what", "residual")),
    "pca": ("plot_pca", ("images",), ("size", "layer", "masks")),
    "similarity": ("plot_similarity", ("images", "query"), ("size", "layer")),
}
_JSON_HELP = "print what was written as JSON (kind, out, width, height, dpi) instead of a sentence"


def _positive_int(text: str) -> int:
    """argparse type: an int >= 1 (a patch size, a count, a dpi)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {value}")
    return value


# ----------------------------------------------------------------------------- arguments
def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the KIND sub-commands and their options to the `vitzoo viz` parser."""
    parser.description = "Draw what a Vision Transformer does as PNG pictures. KIND is one of: " + ", ".join(KINDS)
    parser.add_argument("--json", action="store_true", help=_JSON_HELP)
    kinds = parser.add_subparsers(dest="kind", metavar="KIND", required=True)

    p = _add_kind(kinds, "patches")
    _add_model_args(p, optional=True)
    _add_image_arg(p)
    p.add_argument(
        "--patch-size", type=_positive_int, metavar="P", help="patch side in pixels (default: the model's, else 16)"
    )
    _add_output_args(p, "patches")

    p = _add_kind(kinds, "embedding")
    _add_model_args(p)
    _add_image_arg(p)
    for option, default, what in (("filters", 32, "learned filters"), ("components", 28, "principal components")):
        p.add_argument(
            f"--num-{option}",
            type=_positive_int,
            default=default,
            metavar="K",
            help=f"{what} to show (default: {default})",
        )
    _add_output_args(p, "embedding")

    p = _add_kind(kinds, "posembed")
    _add_model_args(p)
    _add_output_args(p, "posembed")

    _add_attention_kind(kinds)
    _add_dense_kinds(kinds)

    p = _add_kind(kinds, "curves")
    p.add_argument(
        "--metrics", metavar="JSONL", required=True, help="a run's metrics.jsonl, or the run directory that holds it"
    )
    p.add_argument("--title", help="figure title (default: the file name and record count)")
    p.add_argument(
        "--keys",
        nargs="+",
        metavar="PATTERN",
        help="only these metrics, shell-style patterns (e.g. '*loss' '*acc'); default: all numeric keys",
    )
    _add_output_args(p, "curves")


def _add_kind(kinds: Any, kind: str) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = kinds.add_parser(kind, help=KINDS[kind], description=KINDS[kind] + ".")
    return parser


def _add_attention_kind(kinds: Any) -> None:
    p = _add_kind(kinds, "attention")
    _add_model_args(p)
    _add_image_arg(p)
    p.add_argument(
        "--layer",
        type=int,
        default=None,
        metavar="L",
        help="block whose heads to draw; negative counts from the end (default: -1, the last)",
    )
    p.add_argument(
        "--head", type=int, default=None, metavar="H", help="draw only this head (default: all heads and their mean)"
    )
    p.add_argument(
        "--what",
        choices=["both", "heads", "rollout"],
        default=None,
        help="per-head class-token maps, rollout, or both (default: both; rollout alone for a model without class token)",
    )
    p.add_argument(
        "--residual", type=float, default=0.5, metavar="R", help="share of the identity in rollout (default: 0.5)"
    )
    _add_output_args(p, "attention")


def _query(text: str) -> tuple[int, int]:
    """argparse type: ROW,COL, two ints (a patch of the first image)."""
    parts = text.split(",")
    try:
        row, column = (int(part) for part in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected ROW,COL (two ints, e.g. 12,20), got {text!r}") from None
    return row, column


def _add_dense_kinds(kinds: Any) -> None:
    """`pca` and `similarity`: pictures of the patch features of whole photos."""
    for kind in ("pca", "similarity"):
        p = _add_kind(kinds, kind)
        _add_model_args(p)
        p.add_argument("images", metavar="IMAGE", nargs="+", help="image files; several share one picture")
        if kind == "similarity":
            p.add_argument(
                "--query",
                type=_query,
                required=True,
                metavar="ROW,COL",
                help="the patch (row and column in the first image's patch grid, from 0) to compare with every patch",
            )
        p.add_argument(
            "--size",
            type=in_range(IMAGE_SIDE),
            metavar="S",
            help="the images' shorter side in pixels, aspect ratio kept (default: the model's input size)",
        )
        p.add_argument(
            "--layer",
            type=int,
            default=-1,
            metavar="L",
            help="the block whose features to draw (default: -1, the last)",
        )
        if kind == "pca":
            p.add_argument(
                "--mask",
                dest="masks",
                action="append",
                metavar="FILE",
                help="the foreground of an image (bright pixels; the image's size or one pixel per patch); "
                "one --mask per image, in order (default: the first component's sign, as DINOv2)",
            )
        _add_output_args(p, kind)


def _add_model_args(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    p.add_argument(
        "model",
        metavar="NAME[.TAG]",
        nargs="?" if optional else None,
        default=None,
        help="a registered model (`vitzoo list`); a .TAG loads those pretrained weights"
        + (" — optional: without it the image is used at its own size" if optional else ""),
    )
    p.add_argument("--weights", metavar="SRC", help="weights to load: file, directory, hf-hub:org/repo or timm:<name>")
    p.add_argument(
        "--pretrained", action="store_true", default=None, help="load the model's default pretrained weights"
    )


def _add_image_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--image", metavar="IMG", help="image file (PNG, JPEG, ...); default: a synthetic test card")


def _add_output_args(p: argparse.ArgumentParser, kind: str) -> None:
    p.add_argument(
        "--out", metavar="PNG", default=f"viz_{kind}.png", help=f"where to write the picture (default: viz_{kind}.png)"
    )
    p.add_argument("--dpi", type=in_range(DPI), default=100, help="pixels per inch of the PNG (default: 100)")
    # SUPPRESS: an absent option of the KIND must not overwrite `vitzoo viz --json KIND`.
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=_JSON_HELP)
    add_debug_option(p)


# ----------------------------------------------------------------------------- drawing
def run(args: argparse.Namespace) -> int:
    """Draw the picture `args.kind` asks for, write it to `args.out`, print where it went."""
    from ..checks import check_picture_size
    from ..viz import require_matplotlib

    require_matplotlib()  # fail before any model is built when the extra is missing
    fig = _draw(args)
    width_in, height_in = fig.get_size_inches()
    width, height = check_picture_size(float(width_in), float(height_in), args.dpi)
    if getattr(args, "json", False):
        data = {"kind": args.kind, "out": str(Path(args.out)), "width": width, "height": height, "dpi": args.dpi}
        print(to_json(data, indent=2))
    else:
        print(f"wrote {Path(args.out)} ({width}x{height} px)")
    return 0


def _draw(args: argparse.Namespace) -> Any:
    """The Figure of `args.kind`, written to `args.out`."""
    from .. import viz

    if args.kind == "patches":
        return _patches(args)
    if args.kind == "curves":
        return viz.plot_curves(args.metrics, out=args.out, dpi=args.dpi, title=args.title, keys=args.keys)
    if args.kind not in _MODEL_PICTURES:  # argparse's choices make this unreachable from the command line
        raise ValueError(f"unknown picture kind {args.kind!r}; expected one of {', '.join(KINDS)}")
    function, positional, options = _MODEL_PICTURES[args.kind]
    values = [getattr(args, name) for name in positional]
    chosen = {name: getattr(args, name) for name in options}
    return getattr(viz, function)(_create_model(args), *values, **chosen, out=args.out, dpi=args.dpi)


def _create_model(args: argparse.Namespace) -> Any:
    from ..builder import create

    model = create(args.model, pretrained=args.pretrained, weights=args.weights)
    return model.eval()


def _patches(args: argparse.Namespace) -> Any:
    from ..layers import to_2tuple
    from ..viz import plot_patches, prepare_image, read_image, synthetic_image

    if args.model is not None:
        model = _create_model(args)
        image, _ = prepare_image(model, args.image)  # fitted to the model's input size
        patch = args.patch_size or model.patch_embed.patch_size
    else:
        if args.weights or args.pretrained:
            raise ValueError("--weights / --pretrained need a model NAME (`vitzoo viz patches NAME ...`)")
        image = read_image(args.image) if args.image else synthetic_image(224)
        patch = args.patch_size or 16
        # Without a model any image size is fine: crop it to whole patches (centred).
        ph, pw = to_2tuple(patch, "--patch-size")
        h, w = image.shape[1:]
        if ph > h or pw > w:
            raise ValueError(f"--patch-size {patch} does not fit the {h}x{w} image; expected 1..{min(h, w)}")
        top, left = (h % ph) // 2, (w % pw) // 2
        image = image[:, top : top + h - h % ph, left : left + w - w % pw]
    return plot_patches(image, patch, out=args.out, dpi=args.dpi)
