"""`vitzoo list [PATTERN...] [--pretrained] [--license ID]`: names, sizes, compute and origin of
registered models; with --pretrained, each source's licence, marked when it is non-commercial or gated."""

from __future__ import annotations

import argparse
from typing import Any

from .base import describe, emit, human_count, significant, size, table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "List registered models. PATTERN is a shell pattern (vit_*16); a bare word matches as a substring.",
    )
    parser.add_argument(
        "patterns", nargs="*", metavar="PATTERN", help="shell-style pattern(s); a bare word matches anywhere"
    )
    parser.add_argument("--pretrained", action="store_true", help="list NAME.TAG for every pretrained source instead")
    parser.add_argument(
        "--license",
        action="append",
        metavar="ID",
        help="only sources under this licence (a Hub id such as apache-2.0, cc-by-nc-4.0); repeat for several",
    )


def _pattern(p: str) -> str:
    # A bare word is a substring search ("deit" finds every DeiT); shell wildcards are used as given.
    return p if any(ch in p for ch in "*?[") else f"*{p}*"


def run(args: argparse.Namespace) -> int:
    from ..registry import list_models

    patterns = [_pattern(p) for p in args.patterns] or ["*"]
    names = list_models(patterns, pretrained=True if args.pretrained else None, license=args.license)
    if not names and not args.json:  # for people most likely a typo; for a program `[]` is the answer
        what = " ".join(args.patterns) if args.patterns else "*"
        kind = "pretrained model" if args.pretrained else "model"
        if args.license:
            kind += " under licence " + " or ".join(args.license)
        raise LookupError(f"no {kind} matches {what!r} (run `vitzoo list` to see every name)")
    rows, text = _pretrained_rows(names) if args.pretrained else _model_rows(names)
    emit(args, rows, text)
    return 0


def _pretrained_rows(names: list[str]) -> tuple[list[dict[str, Any]], str]:
    """One row per NAME.TAG: its source, input size, classes, license (and what it restricts) and origin."""
    from ..pretrained_cfg import license_flags
    from ..registry import get_entry

    rows: list[dict[str, Any]] = []
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
                "license_flags": list(license_flags(cfg.license)),
                "origin": entry.origin,
            }
        )
    text = table(
        ["NAME.TAG", "DEFAULT", "SOURCE", "INPUT", "CLASSES", "LICENSE", "RESTRICTED"],
        [
            [
                r["name"],
                "*" if r["default"] else "",
                r["source"],
                size(r["input_size"]),
                r["num_classes"],
                r["license"] or "-",
                ", ".join(r["license_flags"]) or "-",
            ]
            for r in rows
        ],
    )
    return rows, text


def _model_rows(names: list[str]) -> tuple[list[dict[str, Any]], str]:
    """One row per model: parameters, GFLOPs, input size, pretrained sources and origin."""
    from ..registry import model_info
    from .info import gflops_of

    rows: list[dict[str, Any]] = []
    for name in names:
        info = model_info(name)
        rows.append(
            {
                "name": name,
                "num_params": info["num_params"],
                "gflops": gflops_of(name, info),
                "input_size": list(info["preprocessing"]["input_size"]),
                "pretrained": list(info["pretrained"]),
                "origin": info["origin"],
            }
        )
    text = table(
        ["NAME", "PARAMS", "GFLOPS", "INPUT", "PRETRAINED", "ORIGIN"],
        [
            [
                r["name"],
                human_count(r["num_params"]),
                significant(r["gflops"]),
                size(r["input_size"]),
                len(r["pretrained"]) or "-",
                r["origin"],
            ]
            for r in rows
        ],
    )
    return rows, text
