"""Write vitzoo/zoo/open_clip_releases.py: every open_clip release whose image tower vitzoo computes
exactly, one line of data each, and why the others are left out.

    python tools/zoo_from_open_clip.py       # rewrites vitzoo/zoo/open_clip_releases.py, then ruff-formats it

Each release of the installed open_clip's `list_pretrained()` is read as vitzoo reads an
`open_clip_config.json` (vitzoo/text/open_clip_config.py's `parse_image_tower`, and for a timm
tower vitzoo/text/load.py's `image_tower_config`): its image tower's ViTConfig, or the refusal that
names the option vitzoo does not compute. A release whose tower equals a registered model's (its
config, or its config with one of its tags' model_args) joins that model as one more tag; the others
become models of their own, named from open_clip's model name.
tests/zoo/test_open_clip_releases.py proves every line against the installed open_clip.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import open_clip
from tqdm import tqdm
from zoo_from_timm import NORMS, SIZES, config_fields, stated_ratio

from vitzoo import zoo
from vitzoo.errors import VitzooError
from vitzoo.model import ViTConfig
from vitzoo.text.load import OPEN_CLIP_WEIGHTS, image_tower_config
from vitzoo.text.open_clip_config import parse_image_tower, parse_open_clip_config
from vitzoo.zoo.timm_releases import OPEN_CLIP_NAMES as TIMM_HOSTED

OUT = Path(__file__).resolve().parents[1] / "vitzoo" / "zoo" / "open_clip_releases.py"
_DEFAULTS = ViTConfig().to_dict()
# Image towers that are no ViT, by open_clip's vision_cfg (a timm model's name prefix).
NOT_VIT = {"convnext": "ConvNeXt", "fastvit": "FastViT", "vitamin": "ViTamin (MBConv stages)"}
# open_clip states no licence: the one timm states for other releases of the same publisher's
# weights (its CLIP / SigLIP / DFN / MetaCLIP / MobileCLIP tags), matched on the repository or tag; else
# "unknown". MobileCLIP before DFN: MobileCLIP 2's tag names its DFN data (timm's apple_mclip2_dfndr2b).
LICENCES = (
    ("MobileCLIP", "apple-amlr"),
    ("metaclip", "cc-by-nc-4.0"),
    ("apple/DFN", "apple-ascl"),
    ("dfn", "apple-ascl"),
    ("laion/", "mit"),
    ("UCSC-VLAA/", "mit"),
    ("SigLIP", "apache-2.0"),
    ("timm/PE-", "apache-2.0"),
)
PREPROCESS_KEYS = ("mean", "std", "interpolation", "resize_mode")


def short_name(model: str) -> str:
    """vitzoo's name for an open_clip model: "ViT-B-32-256" -> "openclip_vit_b32_256"."""
    name = re.sub(r"ViT-([A-Za-z0-9]+)-(\d+)", lambda m: f"vit_{m.group(1).lower()}{m.group(2)}", model)
    name = re.sub(r"(?<=vit_)(" + "|".join(SIZES) + r")(?=\d)", lambda m: SIZES[m.group(1)], name.lower())
    return "openclip_" + re.sub(r"[^a-z0-9]+", "_", name).strip("_")


def not_vit(model_cfg: dict[str, Any]) -> str | None:
    vision = model_cfg.get("vision_cfg", {})
    if isinstance(vision.get("layers"), list | tuple):
        return "ResNet image tower (open_clip's ModifiedResNet)"
    timm_name = vision.get("timm_model_name") or ""
    return next((f"{what} image tower (timm's {timm_name})" for k, what in NOT_VIT.items() if k in timm_name), None)


def tower(model: str, tag: str) -> tuple[ViTConfig, dict[str, Any], str] | str:
    """(image tower config, preprocessing, hub repository) of a release, or why it is left out."""
    model_cfg = open_clip.get_model_config(model)
    pcfg = open_clip.get_pretrained_cfg(model, tag)
    hub = (pcfg.get("hf_hub") or "").strip("/")
    if not hub:
        return f"weights on no Hub repository ({pcfg.get('url') or 'none'})"
    if model_cfg is None:
        return "open_clip has no config of the model"
    reason = not_vit(model_cfg)
    if reason:
        return reason
    repo, _, file = hub.partition("/")[2].partition("/")
    if file and file not in OPEN_CLIP_WEIGHTS:
        return f"weights in {hub!r}, not an open_clip layout vitzoo reads ({', '.join(OPEN_CLIP_WEIGHTS)})"
    preprocess = {k: pcfg[k] for k in PREPROCESS_KEYS if pcfg.get(k) is not None}
    try:
        image = parse_image_tower({"model_cfg": model_cfg, "preprocess_cfg": preprocess}, f"open_clip:{model}")
        config = image_tower_config(image, f"open_clip:{model}")
    except VitzooError as e:
        return str(e).splitlines()[0]
    config = config.replace(mlp_ratio=stated_ratio(config.embed_dim, float(config.mlp_ratio)))
    if image.timm_name is not None:
        # the reader takes the registered model of the timm name: it must be timm's architecture
        theirs = ViTConfig(**config_fields(image.timm_name)).replace(**image.vision_fields).to_dict()
        if int(config.embed_dim * theirs["mlp_ratio"]) == int(config.embed_dim * config.mlp_ratio):
            config = config.replace(mlp_ratio=theirs["mlp_ratio"])  # the same width, as timm states it
        differ = {k: v for k, v in config.to_dict().items() if theirs[k] != v}
        if differ:
            return f"vitzoo's reader builds timm's {image.timm_name} with {differ}, timm's model has not"
    return config, image.preprocess, f"{hub.partition('/')[0]}/{repo}"


def licence(model: str, tag: str, repo: str) -> str:
    text = f"{repo} {model}.{tag}"
    return next((name for rule, name in LICENCES if rule in text), "unknown")


class Joiner:
    """Which model (and tag) each release's tower joins: a registered one of equal config, else a new one."""

    def __init__(self) -> None:
        self.models = {m.name: m for m in zoo.CURATED_AND_TIMM}
        self.configs: list[tuple[ViTConfig, str]] = []
        for m in self.models.values():
            self.configs.append((m.config, m.name))
            self.configs += [(m.config.replace(**c.model_args), m.name) for c in m.pretrained.values()]
        self.tags: dict[str, set[str]] = {name: set(m.pretrained) for name, m in self.models.items()}
        self.new: dict[str, str] = {}  # new model name -> the open_clip model it was made for

    def join(self, model: str, tag: str, config: ViTConfig) -> str:
        # open_clip's projection has no bias where timm's CLIP head has a zero one: the tag's
        # model_args state head_bias=False, the rest of the tower must be the model's
        name = next((n for c, n in self.configs if c.replace(head_bias=config.head_bias) == config), None)
        if name is None:
            name = short_name(model)
            if name in self.tags:
                raise ValueError(f"{model}: its name {name!r} is another tower's")
            self.configs.append((config, name))
            self.tags[name] = set()
            self.new[name] = model
        unique = next(t for t in (tag, f"openclip_{tag}", f"{short_name(model)}_{tag}") if t not in self.tags[name])
        self.tags[name].add(unique)
        return f"{name}.{unique}"


def collect() -> tuple[dict[str, dict[str, Any]], list[tuple[Any, ...]], dict[str, str], dict[str, str]]:
    joiner = Joiner()
    archs: dict[str, dict[str, Any]] = {}
    rows: list[tuple[Any, ...]] = []
    text_refused: dict[str, str] = {}
    left_out: dict[str, str] = {}
    for model, tag in tqdm(open_clip.list_pretrained(), desc="open_clip releases"):
        name = f"{model}.{tag}"
        if name in TIMM_HOSTED:
            continue  # registered with timm's release of the same repository (timm_releases.py)
        found = tower(model, tag)
        if isinstance(found, str):
            left_out[name] = found
            continue
        config, preprocess, repo = found
        try:
            parse_open_clip_config({"model_cfg": open_clip.get_model_config(model)}, f"open_clip:{model}")
        except VitzooError as e:
            text_refused[name] = str(e).splitlines()[0]
        archs[model] = {k: v for k, v in config.to_dict().items() if v != _DEFAULTS[k]}
        norm = NORMS.get((tuple(preprocess["mean"]), tuple(preprocess["std"])))
        size = config.input_size[1:]
        rows.append(
            (
                model,
                tag,
                repo,
                norm or (tuple(preprocess["mean"]), tuple(preprocess["std"])),
                size[0] if size[0] == size[1] else size,
                preprocess["interpolation"],
                "shortest" if preprocess["crop_mode"] == "center" else "squash",
                licence(model, tag, repo),
                joiner.join(model, tag, config),
            )
        )
    return archs, rows, text_refused, left_out


def _dict_lines(name: str, kind: str, items: dict[str, Any]) -> list[str]:
    return [f"{name}: {kind} = {{", *(f"    {k!r}: {v!r}," for k, v in sorted(items.items())), "}"]


def render(
    archs: dict[str, dict[str, Any]],
    rows: list[tuple[Any, ...]],
    text_refused: dict[str, str],
    left_out: dict[str, str],
) -> str:
    lines = [
        '"""open_clip\'s releases whose image tower vitzoo computes, as data: generated by tools/zoo_from_open_clip.py',
        f"from open_clip {open_clip.__version__}; tests/zoo/test_open_clip_releases.py proves each line against it.",
        "",
        "ARCHITECTURES: open_clip model -> its image tower's ViTConfig fields (beyond ViTConfig's defaults), as",
        "vitzoo's open_clip config reader gives them.",
        "RELEASES: (open_clip model, tag, Hub repository, normalisation, input size, interpolation, resize mode,",
        'licence, the vitzoo "name.tag" it is registered as: a model of equal config, or a new one).',
        "TEXT_REFUSED: releases whose text tower vitzoo does not read (create(..., text=True) refuses), why.",
        "LEFT_OUT: what the generator found and did not register, with the reason.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        "# fmt: off",
        *_dict_lines("ARCHITECTURES", "dict[str, dict[str, Any]]", archs),
        "RELEASES: tuple[tuple[Any, ...], ...] = (",
        *(f"    {row!r}," for row in rows),
        ")",
        *_dict_lines("TEXT_REFUSED", "dict[str, str]", text_refused),
        *_dict_lines("LEFT_OUT", "dict[str, str]", left_out),
        "# fmt: on",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    archs, rows, text_refused, left_out = collect()
    OUT.write_text(render(archs, rows, text_refused, left_out), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(OUT)], check=True)
    print(
        f"{OUT}: {len(rows)} releases of {len(archs)} open_clip models (+{len(TIMM_HOSTED)} timm-hosted ones in "
        f"timm_releases.py); {len(left_out)} left out; {len(text_refused)} text towers refused"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
