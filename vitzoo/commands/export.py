"""`vitzoo export NAME --out FILE`: an ONNX file, a torch.export program or an OpenVINO IR (.onnx/.pt2/.xml)."""

from __future__ import annotations

import argparse
import warnings
from typing import Any

from ..checks import IMAGE_SIDE
from .base import UsageError, add_dtype_option, add_weights_option, checked_weights, describe, emit, in_range, size
from .int8_args import add_int8_options, check_int8_args, int8_wish


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Write a model as an ONNX file (onnxruntime, TensorRT, OpenVINO, ...; needs "
        'pip install "vitzoo[onnx]"), as a torch.export program (.pt2) or as an OpenVINO IR (.xml and its '
        '.bin; needs pip install "vitzoo[openvino]"), for any batch size. The input is a float32 image batch '
        "at the model's input size (--img-size changes it).",
    )
    parser.add_argument("name", metavar="NAME[.TAG]", help="a registered model (a .TAG loads those pretrained weights)")
    parser.add_argument("--out", required=True, metavar="FILE", help="where to write it (.onnx, .pt2 or .xml)")
    parser.add_argument(
        "--format",
        choices=["onnx", "torch-export", "openvino"],
        help="what to write (default: from the suffix of --out)",
    )
    parser.add_argument(
        "--pretrained", action="store_true", default=None, help="load the model's default pretrained weights"
    )
    add_weights_option(parser, "to load instead")
    add_dtype_option(
        parser,
        auto=False,
        help="precision of the weights (default: fp32); the input stays float32, the output has this precision",
    )
    parser.add_argument("--opset", type=int, metavar="N", help="ONNX opset version (default: the exporter's)")
    parser.add_argument(
        "--img-size", type=in_range(IMAGE_SIDE), metavar="N", help="input height and width (default: the model's)"
    )
    parser.add_argument(
        "--dynamic-size",
        action="store_true",
        help="any input height and width (multiples of the patch size), not only the example's: the model "
        "is built with dynamic_img_size and its positions computed in the graph (torch >= 2.9 for ONNX; "
        "not for OpenVINO)",
    )
    add_int8_options(parser, export=True)


def _check(args: argparse.Namespace) -> str:
    """The format to write; a bad name, format or option fails here, before the model loads."""
    from .. import deploy

    try:
        fmt = deploy.format_of(args.out, args.format)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.opset is not None and (fmt != "onnx" or args.opset < 1):
        raise UsageError(
            f"--opset {args.opset} is invalid; expected a positive ONNX opset version, with --format onnx only"
        )
    if args.dynamic_size and fmt == "openvino":
        raise UsageError(
            "--dynamic-size is not available for an OpenVINO IR (its converter traces a fixed height and width); "
            "expected a fixed size, or an ONNX file, which OpenVINO also reads"
        )
    if args.pretrained and args.weights is not None:
        raise UsageError("--pretrained and --weights both choose the weights; pass one of them")
    check_int8_args(args)
    if args.int8 and (fmt not in ("onnx", "openvino") or args.dynamic_size):
        raise UsageError("--int8 writes an OpenVINO IR (.xml) or an ONNX file (.onnx) of a fixed size")
    return fmt


def run(args: argparse.Namespace) -> int:
    from .. import builder, deploy, registry
    from ..precision import DTYPES
    from ..pretrained_cfg import pretrained_cfg_of

    fmt = _check(args)
    deploy.check_available(fmt)  # a missing package or an old torch, before the weights load
    overrides: dict[str, Any] = {} if args.img_size is None else {"img_size": args.img_size}
    if args.dynamic_size:
        overrides["dynamic_img_size"] = True
    model = builder.create(
        args.name, pretrained=args.pretrained, weights=args.weights, dtype=DTYPES[args.dtype], **overrides
    )
    checked_weights(model, args.name, args.weights)
    if not (args.pretrained or args.weights or registry.split_name(args.name)[1]):  # a .TAG loads weights
        warnings.warn(
            f"exporting {args.name} with randomly initialised weights; pass --pretrained or --weights SRC "
            "for trained ones",
            stacklevel=1,
        )
    if args.int8:
        return _export_int8(args, model, fmt)
    path = deploy.export(model, args.out, fmt, opset=args.opset, dynamic_size=args.dynamic_size)
    cfg = pretrained_cfg_of(model)
    input_shape: list[Any] = ["batch", *(cfg.input_size if cfg else ())]
    if args.dynamic_size and len(input_shape) == 4:
        input_shape[2:] = ["height", "width"]
    data = {"output": str(path), "format": fmt, "dtype": args.dtype, "input": input_shape, "opset": args.opset}
    text = f"wrote {path} ({fmt}, {args.dtype} weights, input {deploy.INPUT_NAME!r} float32 {size(input_shape)})"
    emit(args, data, text)
    return 0


def _export_int8(args: argparse.Namespace, model: Any, fmt: str) -> int:
    """--int8: the model quantized, its answers on the held-out calibration images checked, then written."""
    from .. import deploy
    from ..deploy_int8 import export_int8

    wish = int8_wish(args, model)
    written = export_int8(model, args.out, wish.images, fmt=fmt, bounds=wish.bounds)
    input_shape: list[Any] = ["batch", *model.pretrained_cfg.input_size]
    data = {
        "output": str(written.path),
        "format": fmt,
        "dtype": "int8",
        "input": input_shape,
        "int8": {"setting": written.setting, "check": written.check.to_dict(), "tried": written.tried},
    }
    text = (
        f"wrote {written.path} ({fmt}, int8: {written.setting}; input {deploy.INPUT_NAME!r} float32 "
        f"{size(input_shape)}); answers held: {written.check.line()}"
    )
    emit(args, data, text)
    return 0
