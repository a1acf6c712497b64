"""`vitzoo info NAME[.TAG]`: config, parameters, GFLOPs, sources, preprocessing, origin and the
release's card (vitzoo/cards.py: ImageNet accuracy, licence, pooled output, what no source states)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import describe, emit, human_count, significant, size

if TYPE_CHECKING:
    from ..model import ViTConfig


def configure_parser(parser: argparse.ArgumentParser) -> None:
    describe(
        parser,
        "Describe one model: its config, parameter count, GFLOPs at its input size, "
        "pretrained sources, preprocessing and origin (built-in, plugin or user code), and the card of "
        "the release it names (its default one without a tag): timm's published ImageNet accuracy, "
        "licence and commercial use, what its pooled output is.",
    )
    parser.add_argument(
        "name",
        metavar="NAME[.TAG]",
        help="a registered model, optionally with a pretrained tag; timm's and open_clip's names too",
    )
    parser.add_argument(
        "--weights-size",
        action="store_true",
        help="ask the Hub how large the release's weights are as stored (one metadata request per file, "
        "nothing downloaded; a release in the local cache is sized there, offline too)",
    )


def gflops_of(name: str, config: ViTConfig | None, input_size: Sequence[int]) -> float | None:
    """GFLOPs of one image at the model's input size (arithmetic for a ViTConfig); None when it
    cannot be measured."""
    from ..flops import measure_flops, vit_flops

    if config is not None:
        return vit_flops(config).total / 1e9
    from ..registry import build_meta

    try:  # a builder that returns something other than our ViT: count it on the meta device
        channels, height, width = input_size
        return measure_flops(build_meta(name), (channels, height, width)) / 1e9
    except Exception:
        return None


def run(args: argparse.Namespace) -> int:
    from ..model import ViTConfig
    from ..registry import model_info, resolve

    resolved = resolve(args.name)  # once: the spelling given (timm's, open_clip's) names one entry and tag
    info = model_info(resolved)
    pre = info["preprocessing"]
    config = ViTConfig.from_dict(info["config"]) if info["config"] is not None else None
    info["gflops"] = gflops_of(args.name, config, pre["input_size"])
    if args.weights_size:
        _ask_weights_size(resolved.name, info["card"])
    lines = [info["name"] + (f" — {info['description']}" if info["description"] else "")]
    flops = (
        "unknown (this model cannot run on the meta device)"
        if info["gflops"] is None
        else (f"{significant(info['gflops'], 4)} at {size(pre['input_size'])} (one image, multiply-add = 2 FLOPs)")
    )
    names = [f"{a['spelling']} ({a['kind']})" for a in info["aliases"] if a["tag"] is None]
    lines += [f"  also named   {', '.join(names)}"] if names else []
    lines += [
        f"  origin       {info['origin']}",
        f"  parameters   {info['num_params']:,}"
        + (f" ({human_count(info['num_params'])})" if info["num_params"] >= 1e5 else ""),
        f"  GFLOPs       {flops}",
    ]
    if info["config"]:
        lines.append("config")
        lines += [f"  {key:<20} {value}" for key, value in info["config"].items()]
    lines += _sources(info)
    lines += _preprocessing(info)
    lines += _card(info["card"])
    emit(args, info, "\n".join(lines))
    return 0


def _ask_weights_size(name: str, card: dict[str, Any]) -> None:
    """The card's `weights_size` as the Hub or the local cache states it; when neither can say,
    `not_stated` says why (the rest of the card is still shown)."""
    from ..builder import weights_size
    from ..weights import WeightsError

    try:
        card["weights_size"] = weights_size(name).to_dict()
    except WeightsError as e:
        card["not_stated"]["weights_size"] = f"the Hub could not say: {e}"
    else:
        card["not_stated"].pop("weights_size", None)


def _sources(info: dict[str, Any]) -> list[str]:
    """The pretrained sources, each with its licence (marked non-commercial / gated where it is so;
    the JSON gets the same as `license_flags`)."""
    from ..licenses import license_flags

    lines = ["pretrained sources" + (" (the first is the default)" if info["pretrained"] else "")]
    if not info["pretrained"]:
        lines.append("  none (random init; use --weights / vitzoo.create(..., weights=...) for your own)")
    for tag, cfg in info["pretrained"].items():
        spellings = [f"{a['spelling']} ({a['kind']})" for a in info["aliases"] if a["tag"] == tag]
        lines.append(f"  {info['name']}.{tag}" + (f"   also {', '.join(spellings)}" if spellings else ""))
        flags = license_flags(cfg["license"])
        cfg["license_flags"] = list(flags)
        restricted = f" ({', '.join(flags)})" if flags else ""
        lines.append(f"      source   {cfg['source']}   license {cfg['license'] or '-'}{restricted}")
        if cfg["description"]:
            lines.append(f"      about    {cfg['description']}")
    return lines


def _preprocessing(info: dict[str, Any]) -> list[str]:
    pre = info["preprocessing"]
    which = f" ({info['name']}.{info['default_pretrained']})" if info["default_pretrained"] else ""
    labels = pre["label_names"]
    if labels:
        label_text = f"{len(labels)} names: {', '.join(labels[:5])}{', ...' if len(labels) > 5 else ''}"
    else:  # a named set (resolved when weights load) or none: predictions show class indices
        label_text = f"{pre['label_set']} label names" if pre.get("label_set") else "no names: class indices"
    return [
        f"preprocessing{which}",
        f"  input_size     {size(pre['input_size'])}",
        f"  mean / std     {tuple(pre['mean'])} / {tuple(pre['std'])}",
        f"  interpolation  {pre['interpolation']}, crop_pct {pre['crop_pct']}",
        f"  classes        {pre['num_classes']} ({label_text})",
    ]


def _card(card: dict[str, Any]) -> list[str]:
    """The card's lines: accuracy with its source, licence, pooled output, and what no source states."""
    lines = [f"card ({card['name']})"]
    accuracy = card.get("accuracy")
    if accuracy:
        source = (
            f"timm's {accuracy['imagenet']['file']} at {accuracy['timm_commit'][:8]}, {accuracy['timm_commit_date']}"
        )
        lines.append(
            f"  ImageNet     top-1 {card['top1']:.3f}, top-5 {card['top5']:.3f} ({source}; "
            f"{accuracy['img_size']} px, crop_pct {accuracy['crop_pct']}, {accuracy['interpolation']})"
        )
        others = [f"{d} {v['top1']:.2f}" for d, v in accuracy.items() if isinstance(v, dict) and d != "imagenet"]
        siblings = "timm's sibling files at the same size and crop; imagenet-r and -a over their 200 classes"
        lines += [f"  also top-1   {', '.join(others)} ({siblings})"] if others else []
    stored = card.get("weights_size")
    if stored:
        from ..memory import human_bytes

        files = stored["files"]
        what = files[0] if len(files) == 1 else f"{len(files)} shards"
        lines.append(
            f"  weights      {stored['bytes']:,} bytes ({human_bytes(stored['bytes'])}; {what} of {stored['source']})"
        )
    if "license" in card:
        gated = "" if "gated" not in card else "; gated on the Hub" if card["gated"] else "; not gated"
        allowed = "allows" if card["commercial_use"] else "does not allow"
        lines.append(f"  licence      {card['license']}: {allowed} commercial use{gated}")
    pooling = card.get("pooling")
    if pooling:
        lines.append(f"  pools        global_pool={pooling['global_pool']!r}: {pooling['computes']}")
        if "authors" in pooling:
            lines.append(f"  its authors  global_pool={pooling['authors']!r}: {pooling['authors_computes']}")
        lines += [f"      ask      {pooling['ask']}"] if "ask" in pooling else []
    by_why: dict[str, list[str]] = {}  # top1 and top5 share their reason: one line
    for field, why in card["not_stated"].items():
        by_why.setdefault(why, []).append(field)
    lines += [f"  not stated   {', '.join(fields)}: {why}" for why, fields in by_why.items()]
    return lines
