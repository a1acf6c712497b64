"""What every subcommand shares: the usage error, the output (a table or --json), number
formatting, argument types, and running a command with its errors as one line."""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from ..checks import Range, escape_unprintable

PROG = "vitzoo"
JSON_HELP = "print JSON instead of a table"


class UsageError(Exception):
    """Arguments that parse but make no sense together: exit code 2, like argparse's own errors."""


# ------------------------------------------------------------------------------------ arguments
def describe(parser: argparse.ArgumentParser, description: str) -> None:
    """A subcommand that prints a table for people: its description, and --json for programs
    (then --debug again, so that --help lists it after --json; vitzoo's subparsers resolve the
    repeated option)."""
    parser.description = description
    parser.add_argument("--json", action="store_true", help=JSON_HELP)
    add_debug_option(parser)


def add_debug_option(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS: a subcommand's absent --debug must not overwrite `vitzoo --debug CMD`.
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show tracebacks on errors")


def add_weights_option(parser: argparse.ArgumentParser | Any, help: str) -> None:
    """--weights SRC: file, directory, hf-hub:org/repo or timm:<name>, with what it is for."""
    parser.add_argument("--weights", metavar="SRC", help=f"file, directory, hf-hub:org/repo or timm:<name> {help}")


def add_dtype_option(parser: argparse.ArgumentParser, *, auto: bool, help: str | None = None) -> None:
    """--dtype, fp32 by default: precision.CHOICES ("auto" included, `help` saying what fp32 is for
    this command) or, without `auto`, the fixed precisions only (`help` the whole text)."""
    from ..precision import CHOICES, DTYPES

    if auto:
        help = (
            f"inference precision: fp32 ({help}), bf16, fp16, or auto (bf16 where it measures faster than fp32 "
            "here: on a GPU with bf16, on a CPU by a short timed probe, remembered; else fp32; it says what it picked)"
        )
    parser.add_argument("--dtype", choices=CHOICES if auto else tuple(DTYPES), default="fp32", help=help)


def chosen_dtype(args: argparse.Namespace, device: Any, doing: str) -> Any:
    """`--dtype` as a torch dtype for `device`. "auto" says on stderr what it picked and why
    ("vitzoo: `doing` in bf16: ..."); bf16 asked for on a CPU without bf16 units says once (a
    warning) that it is emulated."""
    from ..precision import name_of, parse_dtype

    dtype, why = parse_dtype(args.dtype, device)
    if args.dtype == "auto":
        print(f"{PROG}: {doing} in {name_of(dtype)}: {why}", file=sys.stderr)
    return dtype


def add_naflex_options(parser: argparse.ArgumentParser) -> None:
    """--naflex [--max-patches N]: each image at its own aspect ratio within a patch budget
    (vitzoo.naflex; docs/naflex.md). `naflex_budget` reads them."""
    from ..naflex import DEFAULT_MAX_PATCHES, MAX_PATCHES

    group = parser.add_argument_group("native resolution (NaFlex)")
    group.add_argument(
        "--naflex",
        action="store_true",
        help="keep each image's aspect ratio: resize it to the most whole patches that fit --max-patches and "
        "give the model patch sequences instead of square crops (models that take patch sequences)",
    )
    group.add_argument(
        "--max-patches",
        type=number(int, low=1, high=MAX_PATCHES),
        default=None,
        metavar="N",
        help=f"with --naflex: patches per image (default: the weights' trained budget, else {DEFAULT_MAX_PATCHES})",
    )


def add_optimize_option(parser: argparse.ArgumentParser | Any) -> None:
    """--no-optimize: run the model as it is instead of the fastest way `vitzoo.optimize` finds here."""
    from ..inference.choose import MIN_CALLS

    parser.add_argument(
        "--no-optimize",
        dest="optimize",
        action="store_false",
        help="run the model as it is; by default a run of at least "
        f"{MIN_CALLS} batches first times the ways to run it on this machine (vitzoo.optimize: eager, written-out "
        "attention, compiled, OpenVINO, CUDA graphs where they apply), keeps the fastest that agrees with it and "
        "says which on stderr",
    )


class OptimizeNote:
    """What a command says of `vitzoo.optimize`'s choice: the summary line on stderr when it tuned
    (not when `quiet`), and the "optimize" field of its JSON output (`json()`, None when not tuned).
    Hand it to an engine as its `on_optimize`."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.report: Any = None

    def __call__(self, report: Any) -> None:
        from ..inference.batches import tuned

        self.report = report if tuned(report) else None
        if self.report is not None and not self.quiet:
            print(f"vitzoo: {report.summary()}", file=sys.stderr, flush=True)

    def json(self) -> dict[str, Any] | None:
        from ..inference.batches import report_json

        return None if self.report is None else report_json(self.report)

    def add_to(self, data: dict[str, Any]) -> dict[str, Any]:
        """`data` with the "optimize" field when the run was tuned."""
        return data if self.report is None else {**data, "optimize": self.json()}


def naflex_budget(args: argparse.Namespace) -> int | None:
    """--max-patches, refused without --naflex (a UsageError)."""
    if args.max_patches is not None and not args.naflex:
        raise UsageError("--max-patches applies to --naflex (patch sequences); add --naflex or drop --max-patches")
    return args.max_patches


def number(
    kind: type = float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    what: str | None = None,
) -> Callable[[str], Any]:
    """argparse type: an int (`kind=int`) or a finite float between the optional bounds (each
    closed unless `*_open`); a bad value is reported as "expected <the range>, got 'VALUE'", the
    range in words unless `what` says it."""
    return in_range(Range(kind, low, high, low_open, high_open), what)


def in_range(allowed: Range, what: str | None = None) -> Callable[[str], Any]:
    """argparse type: a number that `allowed` contains (nan, inf and out-of-range values refused);
    argparse prefixes the message with the flag."""

    def parse(value: str) -> Any:
        try:
            n = allowed.kind(value)
        except ValueError:
            n = None
        if not allowed.contains(n):
            raise argparse.ArgumentTypeError(f"expected {what or allowed.describe()}, got {value!r}")
        return n

    parse.__name__ = "int" if allowed.kind is int else "number"  # argparse's "invalid <name> value"
    return parse


def bounded_int(minimum: int, what: str) -> Callable[[str], int]:
    """argparse type: an int >= `minimum`; a bad value is reported as "expected `what` ..."."""
    return number(int, low=minimum, what=what)


# ------------------------------------------------------------------------------------ output
def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, numbers right-aligned, two spaces apart."""
    cells = [[printable(str(h)) for h in headers]] + [
        ["" if v is None else printable(str(v)) for v in row] for row in rows
    ]
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


def printable(text: str, keep: str = "") -> str:
    """`text` safe for a terminal: control and format characters (an escape sequence's ESC, a
    carriage return, a right-to-left override) written as Python escapes (\\x1b, \\r, \\u202e),
    except those in `keep`. Label and file names come from files: printed raw, they could move
    the cursor, recolour or hide what a table says. CSV and JSON output keep them as they are."""
    return escape_unprintable(text, keep)


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    """`data` as JSON with --json (always valid: a NaN becomes null), else `text` with its control
    characters escaped (see printable)."""
    from ..jsonio import to_json

    print(to_json(data, indent=2, default=str) if getattr(args, "json", False) else printable(text, keep="\n"))


def human_count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def significant(x: float | None, digits: int = 3) -> str:
    """`digits` significant digits without scientific notation: 123, 35.1, 0.0236, 0.0000505."""
    if x is None:
        return "?"
    if x <= 0:
        return "0"
    return f"{x:.{max(0, digits - 1 - math.floor(math.log10(x)))}f}"


def size(input_size: Sequence[Any] | None) -> str:
    return "x".join(map(str, input_size)) if input_size else "?"


def create_model(name: str, weights: str | None, **kwargs: Any) -> Any:
    """Model `name` with `weights` (--weights), or with its pretrained weights when None: a
    UsageError for a model that has none. `kwargs` go to vitzoo.create (dtype, overrides)."""
    from .. import builder, registry

    if weights is None:
        if registry.resolve(name).pretrained_cfg is None:
            raise UsageError(
                f"model {name!r} has no pretrained weights; pass --weights FILE|DIR|hf-hub:... "
                "(e.g. a directory written by model.save_pretrained)"
            )
        return builder.create(name, pretrained=True, **kwargs)
    return builder.create(name, weights=weights, **kwargs)


def checked_weights(model: Any, name: str, weights: str | None) -> Any:
    """`model`, refused where a weight holds NaN or an infinity (precision.refuse_nonfinite, naming
    them and --weights, else the model's name): the one weight check of every command that runs a
    model (predict, eval, features, segment, zeroshot, export), before it runs, in every dtype."""
    from ..precision import refuse_nonfinite

    refuse_nonfinite(model, f"the weights {weights or name}")
    return model


def require_vit(model: Any, name: str) -> Any:
    """`model` as the VisionTransformer that fine-tuning and evaluation need (they read its
    config and replace its classifier); a plugin builder may return any nn.Module."""
    from ..model import VisionTransformer

    if not isinstance(model, VisionTransformer):
        raise TypeError(
            f"model {name!r} is a {type(model).__name__}; vitzoo finetune/eval need a vitzoo VisionTransformer"
        )
    return model


# ------------------------------------------------------------------------------------ errors
def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    # KeyError wraps its message in quotes; other exceptions' own words are clearer without a type.
    return text.strip("'\"") if isinstance(exc, KeyError) else text


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    print(f"{PROG}: warning: {message}", file=sys.stderr)


def run_handler(args: argparse.Namespace) -> int:
    """Run the parsed command: exit code 0 success, 1 failure, 2 bad usage, 130 interrupted, with
    a one-line "vitzoo: error: ..." (and warnings as one line each) unless --debug."""
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
            print(f"{PROG}: error: {one_line(exc)}{hint}", file=sys.stderr)
            return code
