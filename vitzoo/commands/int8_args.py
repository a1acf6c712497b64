"""The int8 options of `vitzoo predict`, `features`, `eval` and `export`: `--int8 --calibration DIR
[--agreement F]`, checked before the model loads (`check_int8_args`), then read into the engines'
`Int8Wish` once the model is there (`int8_wish`: the folder's images prepared as its inputs)."""

from __future__ import annotations

import argparse
from typing import Any

from .base import UsageError, number

AGREEMENT = 0.99


def add_int8_options(parser: argparse.ArgumentParser, *, export: bool = False) -> None:
    group = parser.add_argument_group("int8")
    where = "write an int8 model" if export else "run the model in int8"
    group.add_argument(
        "--int8",
        action="store_true",
        help=f"{where} (NNCF's post-training quantization through OpenVINO, or PyTorch's PT2E path; needs "
        'pip install "vitzoo[int8]"), calibrated on --calibration\'s images; refused, with nothing written, '
        "where its answers on the images held out from calibration (every 4th) change beyond --agreement",
    )
    group.add_argument(
        "--calibration",
        metavar="DIR",
        help="with --int8: a folder of images like the ones the model will see (subfolders too; at least 16, "
        "up to 400 are read)",
    )
    group.add_argument(
        "--agreement",
        type=number(float, low=0.0, high=1.0, low_open=True),
        default=None,
        metavar="F",
        help=f"with --int8: the share of held-out images whose top-1 class (a classifier) or nearest neighbour and "
        f"embedding direction (a feature model) must stay the model's (default {AGREEMENT})",
    )


def check_int8_args(args: argparse.Namespace) -> None:
    """The int8 options' combinations, before anything loads (UsageError naming the flags)."""
    if not args.int8:
        given = [
            flag for flag, value in (("--calibration", args.calibration), ("--agreement", args.agreement)) if value
        ]
        if given:
            raise UsageError(f"{' and '.join(given)} apply to --int8; add --int8 or drop them")
        return
    if args.calibration is None:
        raise UsageError("--int8 needs --calibration DIR: a folder of images to calibrate and check it on")
    if getattr(args, "optimize", True) is False:
        raise UsageError(
            "--int8 and --no-optimize contradict each other: int8 is one of the ways optimize runs a model"
        )
    if getattr(args, "naflex", False):
        raise UsageError("--int8 takes image batches of one size; --naflex's patch sequences run in float")
    if getattr(args, "dtype", None) == "fp16":
        raise UsageError("--int8 calibrates from fp32 or bf16 weights; expected --dtype fp32, bf16 or auto")


def int8_wish(args: argparse.Namespace, model: Any) -> Any:
    """The engines' Int8Wish for `model` (None without --int8): --calibration's images prepared as
    its inputs, the bounds from --agreement."""
    if not args.int8:
        return None
    from ..data.calibration import calibration_images
    from ..inference.batches import Int8Wish
    from ..inference.guard import Bounds

    agreement = AGREEMENT if args.agreement is None else args.agreement
    return Int8Wish(calibration_images(model, args.calibration), Bounds(agreement=agreement))
