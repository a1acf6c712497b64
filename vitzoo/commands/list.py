"""`vitzoo list [PATTERN...] [--pretrained] [--family F] [--license ID] [--commercial] [--source S]
[--columns C,...] [--sort KEY]`: names, sizes, compute and origin of registered models; with
--pretrained, each source's licence, marked when it is non-commercial or gated. Patterns match
vitzoo's, timm's and open_clip's names; the listing shows vitzoo's (--json: each row's aliases too).
--columns shows fields of each row's card (vitzoo/cards.py: ImageNet accuracy, parameters, GFLOPs,
licence, ...; a name's card is its default release's) and --sort orders by one, a row without it
last. Nothing is built for a config: its parameter count and FLOPs are arithmetic, so hundreds of
names list at once."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from .base import describe, emit, human_count, significant, size, table


def _top1_of(dataset: str) -> Callable[[dict[str, Any]], Any]:
    return lambda card: card.get("accuracy", {}).get(dataset, {}).get("top1")


def _yes_no(value: bool | None) -> str | None:
    return None if value is None else "yes" if value else "no"


def _percent(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


# The card columns: name -> (header, the value in a card (None: absent), its text in the table).
# --json rows carry each asked column under its name, with the value as the card holds it.
COLUMNS: dict[str, tuple[str, Callable[[dict[str, Any]], Any], Callable[[Any], Any]]] = {
    "top1": ("TOP1", lambda c: c.get("top1"), _percent),
    "top5": ("TOP5", lambda c: c.get("top5"), _percent),
    "top1_real": ("TOP1_REAL", _top1_of("imagenet-real"), _percent),
    "top1_v2": ("TOP1_V2", _top1_of("imagenetv2"), _percent),
    "top1_sketch": ("TOP1_SKETCH", _top1_of("sketch"), _percent),
    "top1_r": ("TOP1_R", _top1_of("imagenet-r"), _percent),
    "top1_a": ("TOP1_A", _top1_of("imagenet-a"), _percent),
    "eval_size": ("EVAL", lambda c: c.get("accuracy", {}).get("img_size"), str),
    "params": ("PARAMS", lambda c: c.get("num_params"), human_count),
    "gflops": ("GFLOPS", lambda c: c.get("gflops"), significant),
    "input": ("INPUT", lambda c: c.get("input_size"), size),
    "classes": ("CLASSES", lambda c: c.get("num_classes"), str),
    "license": ("LICENSE", lambda c: c.get("license"), str),
    "commercial": ("COMMERCIAL", lambda c: c.get("commercial_use"), _yes_no),
    "gated": ("GATED", lambda c: c.get("gated"), _yes_no),
    "pooling": ("POOLING", lambda c: c.get("pooling", {}).get("global_pool"), repr),
    "family": ("FAMILY", lambda c: c.get("family"), str),
    "timm": ("TIMM", lambda c: c.get("timm_name"), str),
}
# --sort: key -> whether the largest comes first (accuracy: the best first; size and compute: the smallest).
SORTS: dict[str, bool] = {"name": False, "top1": True, "top5": True, "params": False, "gflops": False}


def _columns(text: str) -> list[str]:
    """argparse type of --columns: comma-separated card columns, each one of COLUMNS."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    unknown = [c for c in names if c not in COLUMNS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown column {', '.join(map(repr, unknown)) or repr(text)}; choose from {', '.join(COLUMNS)}"
        )
    return names


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
    parser.add_argument(
        "--columns",
        type=_columns,
        metavar="C,...",
        help="show these fields of each row's card instead (a name's: its default release's): " + ", ".join(COLUMNS),
    )
    parser.add_argument(
        "--sort",
        choices=SORTS,
        default="name",
        help="order by: name (default), top1 / top5 (ImageNet, best first), params / gflops (smallest first); "
        "a row without it comes last",
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
    if args.columns or args.sort != "name":
        rows, text = _with_cards(rows, args.columns or [], args.sort, args.pretrained)
    emit(args, rows, text)
    return 0


def _with_cards(
    rows: list[dict[str, Any]], columns: list[str], sort: str, pretrained: bool
) -> tuple[list[dict[str, Any]], str]:
    """`rows` ordered by `sort` (a row without the field last), each with the asked `columns` of its
    card, and their table: NAME and those columns (without any, the listing's own columns)."""
    from ..cards import card
    from ..registry import resolve

    cards = {row["name"]: card(resolve(row["name"])) for row in rows}
    if sort != "name":
        getter, largest_first = COLUMNS[sort][1], SORTS[sort]
        present = [r for r in rows if getter(cards[r["name"]]) is not None]
        present.sort(key=lambda r: getter(cards[r["name"]]), reverse=largest_first)
        rows = present + [r for r in rows if getter(cards[r["name"]]) is None]
    for row in rows:
        row.update({c: COLUMNS[c][1](cards[row["name"]]) for c in columns})
    if not columns:
        return rows, _pretrained_text(rows) if pretrained else _model_text(rows)
    headers = ["NAME.TAG" if pretrained else "NAME", *(COLUMNS[c][0] for c in columns)]
    return rows, table(headers, [[r["name"], *(_cell(c, r[c]) for c in columns)] for r in rows])


def _cell(column: str, value: Any) -> Any:
    """A card value as the table shows it; an absent one blank."""
    return None if value is None else COLUMNS[column][2](value)


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
    return rows, _pretrained_text(rows)


def _pretrained_text(rows: list[dict[str, Any]]) -> str:
    return table(
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
    return rows, _model_text(rows)


def _model_text(rows: list[dict[str, Any]]) -> str:
    return table(
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
