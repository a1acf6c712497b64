"""`vitzoo list [PATTERN...] [--pretrained] [--family F] [--license ID] [--commercial] [--source S]`:
names, sizes, compute and origin of registered models; with --pretrained, each source's licence,
marked when it is non-commercial or gated. Patterns match vitzoo's, timm's and open_clip's names;
the listing shows vitzoo's (--json: each row's aliases too). Nothing is built for a config: its
parameter count and FLOPs are arithmetic, so hundreds of names list at once."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from .base import describe, emit, human_count, significant, size, table


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from ..registry import SOURCE_KINDS

    describe(
        parser,
        "List registered models. PATTERN is a shell pattern (vit_*16); a bare word matches as a substring. "
        "Patterns match vitzoo's names and timm's and open_clip's (vit_base_patch16_clip_224*, ViT-L-14*).",
    )
    parser.add_argument(
        "patterns", nargs="*", metavar="PATTERN", help="shell-style pattern(s); a bare word matches anywhere"
    )
    parser.add_argument("--pretrained", action="store_true", help="list NAME.TAG for every pretrained source instead")
    parser.add_argument(
        "--family", action="append", metavar="NAME", help="only this family (vit, deit, clip, siglip, ...); repeatable"
    )
    parser.add_argument(
        "--license",
        action="append",
        metavar="ID",
        help="only sources under this licence (a Hub id such as apache-2.0, cc-by-nc-4.0); repeat for several",
    )
    parser.add_argument(
        "--commercial",
        action="store_true",
        help="only sources whose stated licence allows commercial use (none marked non-commercial)",
    )
    parser.add_argument(
        "--source",
        action="append",
        choices=SOURCE_KINDS,
        help="only weights in this library's layout: timm's hub, open_clip's, or another hub repo (transformers)",
    )


def as_pattern(p: str) -> str:
    """A PATTERN argument as list_models takes it (`vitzoo list` and `vitzoo bench` alike): a bare
    word is a substring search ("deit" finds every DeiT); shell wildcards are used as given."""
    return p if any(ch in p for ch in "*?[") else f"*{p}*"


def run(args: argparse.Namespace) -> int:
    from ..registry import list_models

    patterns = [as_pattern(p) for p in args.patterns] or ["*"]
    names = list_models(
        patterns,
        pretrained=True if args.pretrained else None,
        license=args.license,
        family=args.family,
        source=args.source,
        commercial=args.commercial,
    )
    if not names and not args.json:  # for people most likely a typo; for a program `[]` is the answer
        raise LookupError(
            f"no {_what(args)} matches {' '.join(args.patterns) or '*'!r} (run `vitzoo list` to see every name)"
        )
    rows, text = _pretrained_rows(names) if args.pretrained else _model_rows(names)
    emit(args, rows, text)
    return 0


def _what(args: argparse.Namespace) -> str:
    """What the filters asked for, in words: "pretrained clip model under licence mit", ..."""
    kind = " ".join([*(["pretrained"] if args.pretrained else []), *(args.family or []), "model"])
    if args.license:
        kind += " under licence " + " or ".join(args.license)
    if args.commercial:
        kind += " for commercial use"
    if args.source:
        kind += " from " + " or ".join(args.source)
    return kind


def _aliases(aliases: list[dict[str, Any]], tag: str | None) -> dict[str, list[str]]:
    """{kind: spellings} of a name (tag None: its untagged aliases) or of one release."""
    found: dict[str, list[str]] = {}
    for alias in aliases:
        if alias["tag"] == tag:
            found.setdefault(alias["kind"], []).append(alias["spelling"])
    return found


def _pretrained_rows(names: list[str]) -> tuple[list[dict[str, Any]], str]:
    """One row per NAME.TAG: its source and its kind, input size, classes, license (and what it
    restricts), origin, family and the release's other spellings."""
    from ..licenses import license_flags
    from ..registry import resolve

    rows: list[dict[str, Any]] = []
    for full in names:
        resolved = resolve(full)
        entry, cfg = resolved.entry, resolved.pretrained_cfg
        assert cfg is not None  # list_models(pretrained=True) lists tags
        rows.append(
            {
                "name": full,
                "default": cfg.tag == entry.default_tag,
                "source": cfg.source,
                "source_kind": resolved.source_kind,
                "input_size": list(cfg.input_size),
                "num_classes": cfg.num_classes,
                "license": cfg.license,
                "license_flags": list(license_flags(cfg.license)),
                "origin": entry.origin,
                "family": entry.family,
                "aliases": _aliases([dataclasses.asdict(a) for a in entry.aliases], cfg.tag),
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
    """One row per model: parameters, GFLOPs, input size, pretrained sources, origin, family and
    its other names; nothing built where the name is a config."""
    from ..registry import model_summary
    from .info import gflops_of

    rows: list[dict[str, Any]] = []
    for name in names:
        info = model_summary(name)
        config = info["config"]  # a ViTConfig, or None: a builder's model
        rows.append(
            {
                "name": name,
                "num_params": info["num_params"],
                "gflops": gflops_of(name, config, info["input_size"]),
                "input_size": info["input_size"],
                "pretrained": info["pretrained"],
                "origin": info["origin"],
                "family": info["family"],
                "aliases": _aliases(info["aliases"], None),
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
