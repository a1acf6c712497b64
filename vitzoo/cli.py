"""The `vitzoo` command (also `python -m vitzoo`).

    vitzoo list [PATTERN...] [--pretrained]       names, sizes, compute, origin (--family, --license,
                                                   --commercial, --source timm|open_clip|transformers)
    vitzoo info NAME[.TAG]                         config, parameters, GFLOPs, sources, preprocessing
    vitzoo download NAME[.TAG]...                  fill the weights cache ahead of air-gapped use
    vitzoo convert SRC DST [--to vitzoo|timm]      rewrite a checkpoint in another layout
    vitzoo predict NAME IMAGE|DIR... [--output F]  top-k labels and probabilities (F: .csv/.jsonl)
    vitzoo export NAME --out FILE                  an ONNX file or a torch.export program (.onnx/.pt2)
    vitzoo finetune / eval / viz ...               training, evaluation and pictures
    vitzoo push RUN_DIR_OR_WEIGHTS REPO_ID         upload to the Hub (timm / transformers load it)

NAME may be spelled as vitzoo, timm ("arch.tag") or open_clip ("MODEL.PRETRAINED") name it.
Each subcommand is a module of vitzoo/commands/ (`configure_parser` + `run`), listed in its one
table, COMMANDS. Every subcommand has --help, prints a table for people and JSON with --json.
Exit codes: 0 success, 2 bad usage (argparse's convention), 1 failure, with a one-line
"vitzoo: error: ..." on stderr; --debug shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from .commands import COMMANDS
from .commands.base import PROG, add_debug_option, run_handler


def _configure(parser: argparse.ArgumentParser, command: str) -> None:
    """Import `command`'s module and let it add its arguments; a module that cannot be imported
    leaves a parser whose run is a one-line error saying why."""
    module_name, _ = COMMANDS[command]
    try:
        module = importlib.import_module(module_name)
        configure, run = module.configure_parser, module.run
    except (ImportError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        # Accept any arguments so that the one-line error below is what the user sees.
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        parser.description = f"{parser.description} — not available in this installation ({reason})"

        def unavailable(args: argparse.Namespace) -> int:
            raise RuntimeError(f"`vitzoo {command}` is not available in this installation ({reason})")

        parser.set_defaults(handler=unavailable)
        return
    configure(parser)
    parser.set_defaults(handler=run)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The `vitzoo` parser: every subcommand with its help; the arguments only of `command` (its
    module is imported only then, so `vitzoo --help` and `vitzoo list` stay fast)."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="A Vision Transformer model zoo: list, inspect, download, convert, predict, fine-tune.",
        epilog="Exit codes: 0 success, 1 failure, 2 bad usage. `vitzoo CMD --help` describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"vitzoo {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, conflict_handler="resolve")
        add_debug_option(p)
        if name == command:
            _configure(p, name)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv: the first word that is not a top-level option."""
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code (the console script passes it to sys.exit)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command_in(argv))
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (2)
        return int(exc.code or 0)
    return run_handler(args)


if __name__ == "__main__":
    sys.exit(main())
