"""The `vitzoo` command (also `python -m vitzoo`).

    vitzoo list [PATTERN...] [--pretrained]       names, sizes, compute, origin
    vitzoo info NAME[.TAG]                         config, parameters, GFLOPs, sources, preprocessing
    vitzoo download NAME[.TAG]...                  fill the weights cache ahead of air-gapped use
    vitzoo convert SRC DST [--to vitzoo|timm]      rewrite a checkpoint in another layout
    vitzoo predict NAME IMAGE|DIR... [--output F]  top-k labels and probabilities (F: .csv/.jsonl)
    vitzoo export NAME --out FILE                  an ONNX file or a torch.export program (.onnx/.pt2)
    vitzoo finetune / eval / viz ...               training and pictures (vitzoo.train, vitzoo.viz)

Every subcommand has --help, prints a table for people and JSON with --json.
Exit codes: 0 success, 2 bad usage (argparse's convention), 1 failure, with a one-line
"vitzoo: error: ..." on stderr; --debug shows the traceback instead.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from collections.abc import Sequence
from typing import Any

PROG = "vitzoo"


class UsageError(Exception):
    """Arguments that parse but make no sense together: exit code 2, like argparse's own errors."""


# ------------------------------------------------------------------------------------ output
def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, numbers right-aligned, two spaces apart."""
    cells = [[str(h) for h in headers]] + [["" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [all(_is_number(r[i]) for r in cells[1:]) and len(cells) > 1 for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, numeric)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", "").removesuffix("M"))
    except ValueError:
        return False
    return True


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if getattr(args, "json", False) else text)


def _human_count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def _significant(x: float | None, digits: int = 3) -> str:
    """`digits` significant digits without scientific notation: 123, 35.1, 0.0236, 0.0000505."""
    if x is None:
        return "?"
    if x <= 0:
        return "0"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(x)))}f}"


def _size(input_size: Sequence[int] | None) -> str:
    return "x".join(map(str, input_size)) if input_size else "?"


# ------------------------------------------------------------------------------------ list / info
def _pattern(p: str) -> str:
    # A bare word is a substring search ("deit" finds every DeiT); shell wildcards are used as given.
    return p if any(ch in p for ch in "*?[") else f"*{p}*"


def _gflops_of(name: str, info: dict[str, Any]) -> float | None:
    """GFLOPs of one image at the model's input size; None when it cannot be measured."""
    from .flops import measure_flops, vit_flops
    from .model import ViTConfig

    if info["config"] is not None:
        return vit_flops(ViTConfig.from_dict(info["config"])).total / 1e9
    import torch

    from .registry import get_entry

    try:  # a builder that returns something other than our ViT: count it on the meta device
        with torch.device("meta"):
            model = get_entry(name).builder()
        return measure_flops(model, tuple(info["preprocessing"]["input_size"])) / 1e9
    except Exception:
        return None


def cmd_list(args: argparse.Namespace) -> int:
    from .registry import get_entry, list_models, model_info

    patterns = [_pattern(p) for p in args.patterns] or ["*"]
    names = list_models(patterns, pretrained=True if args.pretrained else None)
    if not names and not args.json:  # for people most likely a typo; for a program `[]` is the answer
        what = " ".join(args.patterns) if args.patterns else "*"
        kind = "pretrained model" if args.pretrained else "model"
        raise LookupError(f"no {kind} matches {what!r} (run `vitzoo list` to see every name)")
    rows: list[dict[str, Any]] = []
    if args.pretrained:
        for full in names:
            entry = get_entry(full)
            tag = full.split(".", 1)[1]
            cfg = entry.pretrained[tag]
            rows.append(
                {
                    "name": full,
                    "default": tag == entry.default_tag,
                    "source": cfg.source,
                    "input_size": list(cfg.input_size),
                    "num_classes": cfg.num_classes,
                    "license": cfg.license,
                    "origin": entry.origin,
                }
            )
        text = _table(
            ["NAME.TAG", "DEFAULT", "SOURCE", "INPUT", "CLASSES", "LICENSE"],
            [
                [
                    r["name"],
                    "*" if r["default"] else "",
                    r["source"],
                    _size(r["input_size"]),
                    r["num_classes"],
                    r["license"] or "-",
                ]
                for r in rows
            ],
        )
    else:
        for name in names:
            info = model_info(name)
            rows.append(
                {
                    "name": name,
                    "num_params": info["num_params"],
                    "gflops": _gflops_of(name, info),
                    "input_size": list(info["preprocessing"]["input_size"]),
                    "pretrained": list(info["pretrained"]),
                    "origin": info["origin"],
                }
            )
        text = _table(
            ["NAME", "PARAMS", "GFLOPS", "INPUT", "PRETRAINED", "ORIGIN"],
            [
                [
                    r["name"],
                    _human_count(r["num_params"]),
                    _significant(r["gflops"]),
                    _size(r["input_size"]),
                    len(r["pretrained"]) or "-",
                    r["origin"],
                ]
                for r in rows
            ],
        )
    _emit(args, rows, text)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from .registry import model_info

    info = model_info(args.name)
    info["gflops"] = _gflops_of(args.name, info)
    pre = info["preprocessing"]
    lines = [info["name"] + (f" — {info['description']}" if info["description"] else "")]
    flops = (
        "unknown (this model cannot run on the meta device)"
        if info["gflops"] is None
        else (f"{_significant(info['gflops'], 4)} at {_size(pre['input_size'])} (one image, multiply-add = 2 FLOPs)")
    )
    lines += [
        f"  origin       {info['origin']}",
        f"  parameters   {info['num_params']:,}"
        + (f" ({_human_count(info['num_params'])})" if info["num_params"] >= 1e5 else ""),
        f"  GFLOPs       {flops}",
    ]
    if info["config"]:
        lines.append("config")
        lines += [f"  {key:<20} {value}" for key, value in info["config"].items()]
    lines.append("pretrained sources" + (" (the first is the default)" if info["pretrained"] else ""))
    if not info["pretrained"]:
        lines.append("  none (random init; use --weights / vitzoo.create(..., weights=...) for your own)")
    for tag, cfg in info["pretrained"].items():
        lines.append(f"  {info['name']}.{tag}")
        lines.append(f"      source   {cfg['source']}   license {cfg['license'] or '-'}")
        if cfg["description"]:
            lines.append(f"      about    {cfg['description']}")
    which = f" ({info['name']}.{info['default_pretrained']})" if info["default_pretrained"] else ""
    lines.append(f"preprocessing{which}")
    labels = pre["label_names"]
    if labels:
        label_text = f"{len(labels)} names: {', '.join(labels[:5])}{', ...' if len(labels) > 5 else ''}"
    else:  # a named set (resolved when weights load) or none: predictions show class indices
        label_text = f"{pre['label_set']} label names" if pre.get("label_set") else "no names: class indices"
    lines += [
        f"  input_size     {_size(pre['input_size'])}",
        f"  mean / std     {tuple(pre['mean'])} / {tuple(pre['std'])}",
        f"  interpolation  {pre['interpolation']}, crop_pct {pre['crop_pct']}",
        f"  classes        {pre['num_classes']} ({label_text})",
    ]
    _emit(args, info, "\n".join(lines))
    return 0


# ------------------------------------------------------------------------------------ weights
def cmd_download(args: argparse.Namespace) -> int:
    from .builder import download

    result: dict[str, list[str]] = {}
    for name in args.names:
        result[name] = [str(p) for p in download(name)]
    rows = [[name, path] for name, paths in result.items() for path in paths]
    _emit(args, result, _table(["NAME", "CACHED FILE"], rows))
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    from .builder import convert

    # A missing or unreadable source is reported by vitzoo.weights, naming the file.
    dst = str(convert(args.src, args.dst, to=args.to, model=args.model))
    data = {"src": args.src, "dst": dst, "to": args.to, "model": args.model}
    _emit(args, data, f"converted {args.src} -> {dst} ({args.to} layout)")
    return 0


# ------------------------------------------------------------------------------------ predict
def _check_readable(path: str) -> None:
    """Decode `path` once (the same reader and checks as the data pipeline), so that an unreadable
    image is an error before any model loads."""
    from .data.folder import UnreadableImageError, decode_image

    try:
        decode_image(path, lambda img: None, rgb=False)
    except UnreadableImageError as exc:
        raise OSError(f"cannot read image {path!r}: {exc} (expected a PNG, JPEG or other PIL-readable image)") from None


def _predict_model(args: argparse.Namespace) -> Any:
    from . import builder, registry
    from .precision import name_of, parse_dtype
    from .pretrained_cfg import pretrained_cfg_of

    dtype, why = parse_dtype(args.dtype, "cpu")
    if args.dtype == "auto":
        print(f"vitzoo: predicting in {name_of(dtype)}: {why}", file=sys.stderr)

    if args.weights is None:
        _, pcfg = registry.get_pretrained_cfg(args.name)
        if pcfg is None:
            raise UsageError(
                f"model {args.name!r} has no pretrained weights; pass --weights FILE|DIR|hf-hub:... "
                "(e.g. a directory written by model.save_pretrained)"
            )
        model = builder.create(args.name, pretrained=True, dtype=dtype)
    else:
        model = builder.create(args.name, weights=args.weights, dtype=dtype)
    model.eval()
    cfg = pretrained_cfg_of(model)
    if cfg is None:
        raise ValueError(f"model {args.name!r} carries no pretrained_cfg, so its labels and preprocessing are unknown")
    if cfg.num_classes <= 0:
        raise ValueError(f"model {args.name!r} has no classifier (num_classes=0), so it cannot predict labels")
    return model


def cmd_predict(args: argparse.Namespace) -> int:
    from . import predict

    for option in ("topk", "batch_size"):
        if getattr(args, option) < 1:
            raise UsageError(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if args.workers is None:
        args.workers = predict.default_workers()
    if args.workers < 0:
        raise UsageError(f"--workers must be >= 0, got {args.workers}")
    if args.output is not None:
        try:  # a bad name fails before the model loads
            fmt = predict.output_format(args.output, args.format)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        paths, _ = predict.find_images(args.images)
        model = _predict_model(args)
        skipped: list[tuple[str, str]] = []
        topk = min(args.topk, model.pretrained_cfg.num_classes)
        records = predict.predict_images(
            model,
            paths,
            topk=topk,
            batch_size=args.batch_size,
            workers=args.workers,
            strict=args.strict,
            progress=not args.no_progress,
            skipped=skipped,
        )
        count = predict.write_predictions(records, args.output, topk=topk, fmt=fmt)
        data = {"output": args.output, "format": fmt, "images": count, "skipped": [p for p, _ in skipped]}
        text = f"wrote {count} prediction(s) to {args.output} ({fmt})"
        _emit(args, data, text + (f"; skipped {len(skipped)} unreadable image(s)" if skipped else ""))
        return 0

    # A few files for a person: every image is read first (an unreadable one is an error, before
    # the model loads), then printed as a table or --json.
    if args.format is not None:
        raise UsageError("--format applies to --output FILE; without --output use --json")
    paths, _ = predict.find_images(args.images)
    for path in paths:
        _check_readable(path)
    model = _predict_model(args)
    results = list(
        predict.predict_images(
            model, paths, topk=args.topk, batch_size=args.batch_size, workers=0, strict=True, progress=False
        )
    )
    rows = [
        [r["image"] if rank == 0 else "", rank + 1, f"{p['probability']:.4f}", p["index"], p["label"]]
        for r in results
        for rank, p in enumerate(r["predictions"])
    ]
    _emit(args, results, _table(["IMAGE", "RANK", "PROB", "CLASS", "LABEL"], rows))
    return 0


# ------------------------------------------------------------------------------------ export
def cmd_export(args: argparse.Namespace) -> int:
    from . import builder, deploy, registry
    from .precision import DTYPES
    from .pretrained_cfg import pretrained_cfg_of

    try:  # a bad name, format or option fails before the model loads
        fmt = deploy.format_of(args.out, args.format)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.opset is not None and (fmt != "onnx" or args.opset < 1):
        raise UsageError(
            f"--opset {args.opset} is invalid; expected a positive ONNX opset version, with --format onnx only"
        )
    if args.img_size is not None and args.img_size < 1:
        raise UsageError(f"--img-size must be >= 1, got {args.img_size}")
    if args.pretrained and args.weights is not None:
        raise UsageError("--pretrained and --weights both choose the weights; pass one of them")
    deploy.check_available(fmt)  # a missing package or an old torch, before the weights load
    overrides = {} if args.img_size is None else {"img_size": args.img_size}
    model = builder.create(
        args.name, pretrained=args.pretrained, weights=args.weights, dtype=DTYPES[args.dtype], **overrides
    )
    if not (args.pretrained or args.weights or registry.split_name(args.name)[1]):  # a .TAG loads weights
        warnings.warn(
            f"exporting {args.name} with randomly initialised weights; pass --pretrained or --weights SRC "
            "for trained ones",
            stacklevel=1,
        )
    path = deploy.export(model, args.out, fmt, opset=args.opset)
    cfg = pretrained_cfg_of(model)
    input_shape = ["batch", *(cfg.input_size if cfg else ())]
    data = {"output": str(path), "format": fmt, "dtype": args.dtype, "input": input_shape, "opset": args.opset}
    text = f"wrote {path} ({fmt}, {args.dtype} weights, input {deploy.INPUT_NAME!r} float32 {_size(input_shape)})"
    _emit(args, data, text)
    return 0


# ------------------------------------------------------------------------------------ delegated
# name -> (module, configure function, run function, help). These subcommands are other parts of
# vitzoo; their modules are imported only when that subcommand is used, so `vitzoo list` never
# pays for matplotlib or the training code.
DELEGATED = {
    "finetune": ("vitzoo.train", "configure_finetune_parser", "run_finetune", "fine-tune a model (vitzoo.train)"),
    "eval": ("vitzoo.train", "configure_eval_parser", "run_eval", "evaluate a model: accuracy and confusion matrix"),
    "viz": ("vitzoo.viz", "configure_viz_parser", "run_viz", "draw patches, embeddings and attention as PNGs"),
}


def _configure_delegated(parser: argparse.ArgumentParser, command: str) -> None:
    import importlib

    module_name, configure, run, _ = DELEGATED[command]
    try:
        module = importlib.import_module(module_name)
        configure_fn, run_fn = getattr(module, configure), getattr(module, run)
    except (ImportError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        # Accept any arguments so that the one-line error below is what the user sees.
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        parser.description = f"{parser.description} — not available in this installation ({reason})"

        def unavailable(args: argparse.Namespace) -> int:
            raise RuntimeError(f"`vitzoo {command}` is not available in this installation ({reason})")

        parser.set_defaults(handler=unavailable)
        return
    configure_fn(parser)
    parser.set_defaults(handler=run_fn)


# ------------------------------------------------------------------------------------ parser
def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of a table")
    # SUPPRESS: the subcommand's absent --debug must not overwrite `vitzoo --debug CMD`.
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
    return common


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser; a delegated subcommand's own options are added only when `command` is it."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A Vision Transformer model zoo: list, inspect, download, convert, predict, fine-tune.",
        epilog="Exit codes: 0 success, 1 failure, 2 bad usage. `vitzoo CMD --help` describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"vitzoo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = [_common()]

    p = sub.add_parser(
        "list",
        parents=common,
        help="list registered models",
        description=(
            "List registered models. PATTERN is a shell pattern (vit_*16); a bare word matches as a substring."
        ),
    )
    p.add_argument(
        "patterns", nargs="*", metavar="PATTERN", help="shell-style pattern(s); a bare word matches anywhere"
    )
    p.add_argument("--pretrained", action="store_true", help="list NAME.TAG for every pretrained source instead")
    p.set_defaults(handler=cmd_list)

    p = sub.add_parser(
        "info",
        parents=common,
        help="config, parameters, GFLOPs, sources, preprocessing, origin",
        description="Describe one model: its config, parameter count, GFLOPs at its input size, "
        "pretrained sources, preprocessing and origin (built-in, plugin or user code).",
    )
    p.add_argument("name", metavar="NAME[.TAG]", help="a registered model, optionally with a pretrained tag")
    p.set_defaults(handler=cmd_info)

    p = sub.add_parser(
        "download",
        parents=common,
        help="fetch pretrained weights into the cache",
        description="Fetch weights into the Hugging Face cache ahead of time, for later offline use "
        "(HF_HUB_OFFLINE=1). Honours HF_ENDPOINT, HF_HOME and HF_HUB_CACHE.",
    )
    p.add_argument("names", nargs="+", metavar="NAME[.TAG]", help="models (their default source, or the tag's)")
    p.set_defaults(handler=cmd_download)

    p = sub.add_parser(
        "convert",
        parents=common,
        help="convert a checkpoint between layouts",
        description="Read a checkpoint in any supported layout (timm, transformers, Google .npz, "
        "torchvision, vitzoo) and write it in vitzoo's layout (a save_pretrained directory) or timm's.",
    )
    p.add_argument("src", metavar="SRC", help="file, directory, hf-hub:org/repo or timm:<name>")
    p.add_argument("dst", metavar="DST", help="where to write the converted checkpoint")
    p.add_argument("--to", choices=["vitzoo", "timm"], default="vitzoo", help="target layout (default: vitzoo)")
    p.add_argument(
        "--model", metavar="NAME", help="the vitzoo model the checkpoint belongs to (when it cannot be inferred)"
    )
    p.set_defaults(handler=cmd_convert)

    p = sub.add_parser(
        "predict",
        parents=common,
        help="classify images: top-k labels and probabilities",
        description="Classify images with a model's pretrained weights (or --weights), using the "
        "preprocessing those weights expect. Folders are searched recursively (no symbolic link "
        "followed out of them). Without --output the results are printed (a table, or --json); with "
        "--output FILE they are streamed to a CSV or JSON-lines file in batches.",
    )
    p.add_argument("name", metavar="NAME[.TAG]", help="a registered model")
    p.add_argument("images", nargs="+", metavar="IMAGE", help="image files (PNG, JPEG, ...) or folders of them")
    p.add_argument(
        "--weights", metavar="SRC", help="file, directory, hf-hub:org/repo or timm:<name> instead of the default source"
    )
    p.add_argument("--topk", type=int, default=5, metavar="K", help="how many classes to show per image (default: 5)")
    p.add_argument(
        "--output",
        metavar="FILE",
        help="write every image's predictions to FILE (.csv or .jsonl), streaming, with a progress bar; "
        "unreadable images are skipped with a warning",
    )
    p.add_argument("--format", choices=["csv", "jsonl"], help="format of --output (default: from its suffix)")
    p.add_argument("--batch-size", type=int, default=32, metavar="N", help="images per forward pass (default: 32)")
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="image-decoding processes with --output (0: none; default: the cores torch's threads leave free)",
    )
    p.add_argument("--strict", action="store_true", help="with --output, an unreadable image is an error")
    p.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16", "fp16"],
        default="fp32",
        help="inference precision: fp32 (default), bf16, fp16, or auto (bf16 where the hardware multiplies it "
        "natively, else fp32; it says what it picked)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(handler=cmd_predict)

    p = sub.add_parser(
        "export",
        parents=common,
        help="write an ONNX file or a torch.export program for deployment",
        description="Write a model as an ONNX file (onnxruntime, TensorRT, OpenVINO, ...; needs "
        'pip install "vitzoo[onnx]") or as a torch.export program (.pt2), for any batch size. The input '
        "is a float32 image batch at the model's input size (--img-size changes it).",
    )
    p.add_argument("name", metavar="NAME[.TAG]", help="a registered model (a .TAG loads those pretrained weights)")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write it (.onnx or .pt2)")
    p.add_argument(
        "--format", choices=["onnx", "torch-export"], help="what to write (default: from the suffix of --out)"
    )
    p.add_argument("--pretrained", action="store_true", help="load the model's default pretrained weights")
    p.add_argument("--weights", metavar="SRC", help="file, directory, hf-hub:org/repo or timm:<name> to load instead")
    p.add_argument(
        "--dtype",
        choices=["fp32", "bf16", "fp16"],
        default="fp32",
        help="precision of the weights (default: fp32); the input stays float32, the output has this precision",
    )
    p.add_argument("--opset", type=int, metavar="N", help="ONNX opset version (default: the exporter's)")
    p.add_argument("--img-size", type=int, metavar="N", help="input height and width (default: the model's)")
    p.set_defaults(handler=cmd_export)

    for name, (_, _, _, help_text) in DELEGATED.items():
        p = sub.add_parser(name, help=help_text, description=help_text, conflict_handler="resolve")
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")
        if name == command:
            _configure_delegated(p, name)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv: the first word that is not a top-level option."""
    return next((a for a in argv if not a.startswith("-")), None)


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code (the console script passes it to sys.exit)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (2)
        return int(exc.code or 0)
    debug = bool(getattr(args, "debug", False))
    with warnings.catch_warnings():
        if not debug:
            warnings.showwarning = _one_line_warning
        try:
            return int(args.handler(args) or 0)
        except KeyboardInterrupt:
            print(f"{PROG}: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `vitzoo list | head`
            sys.stderr.close()
            return 0
        except Exception as exc:
            if debug:
                raise
            code = 2 if isinstance(exc, UsageError) else 1
            hint = f" (see `{PROG} {args.command} --help`)" if code == 2 else ""
            print(f"{PROG}: error: {_one_line(exc)}{hint}", file=sys.stderr)
            return code


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    # KeyError wraps its message in quotes; other exceptions' own words are clearer without a type.
    return text.strip("'\"") if isinstance(exc, KeyError) else text


if __name__ == "__main__":
    sys.exit(main())
