"""Write vitzoo/zoo/timm_releases.py: every ViT-family release of the installed timm that ViTConfig
expresses, one line of data each, and why the others are left out.

    python tools/zoo_from_timm.py            # rewrites vitzoo/zoo/timm_releases.py, then ruff-formats it

Each timm architecture with released weights is built on the meta device and read as vitzoo reads a
live timm model (weights/timm_files.timm_model_fields): its ViTConfig fields, or the refusal that
names the part vitzoo does not compute. Each tag contributes its preprocessing, class count and
licence from timm's pretrained cfg. tests/zoo/test_timm_releases.py proves every line against the
installed timm; this script only saves writing the lines by hand.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from fractions import Fraction
from pathlib import Path
from typing import Any

import timm
import torch
from tqdm import tqdm

from vitzoo.model import VisionTransformer, ViTConfig
from vitzoo.pretrained_cfg import CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD
from vitzoo.weights.keymaps import to_vitzoo
from vitzoo.weights.timm_files import timm_model_fields
from vitzoo.weights.timm_modules import timm_on_meta
from vitzoo.zoo.curated import CURATED
from vitzoo.zoo.families import family_of

OUT = Path(__file__).resolve().parents[1] / "vitzoo" / "zoo" / "timm_releases.py"
MODULES = (
    "vision_transformer",
    "deit",
    "eva",
    "naflexvit",
    "vision_transformer_hybrid",
    "vision_transformer_relpos",
    "vision_transformer_sam",
    "beit",
)
NORMS = {
    (IMAGENET_MEAN, IMAGENET_STD): "imagenet",
    (INCEPTION_MEAN, INCEPTION_STD): "inception",
    (CLIP_MEAN, CLIP_STD): "clip",
}
SIZES = {"tiny": "ti", "small": "s", "base": "b", "large": "l", "huge": "h", "giant": "g", "gigantic": "bigg"}
_DEFAULTS = ViTConfig().to_dict()
# Releases whose weights timm fetches from no Hub repository, and the Hub repository holding the same
# checkpoint in another layout vitzoo reads (transformers' `ijepa`: Meta's I-JEPA, converted by its authors).
HUB_COPIES = {
    "vit_huge_patch14_gap_224.in1k_ijepa": "facebook/ijepa_vith14_1k",
    "vit_huge_patch14_gap_224.in22k_ijepa": "facebook/ijepa_vith14_22k",
    "vit_huge_patch16_gap_448.in1k_ijepa": "facebook/ijepa_vith16_1k",
    "vit_giant_patch16_gap_224.in22k_ijepa": "facebook/ijepa_vitg16_22k",
}


def short_name(arch: str) -> str:
    """vitzoo's name for a timm architecture: its size abbreviated and the patch glued to it, the
    default 224 px dropped ("vit_base_patch32_clip_224" -> "vit_b32_clip")."""
    name = re.sub(r"_patch(\d+)", r"\1", arch)
    name = re.sub(r"(?<=_)(" + "|".join(SIZES) + r")(?=\d|_|$)", lambda m: SIZES[m.group(1)], name)
    return name.removesuffix("_224")


def config_fields(arch: str) -> dict[str, Any]:
    """The ViTConfig fields of timm's `arch` (its default tag's classes and size) that differ from ViTConfig()."""
    model = timm_on_meta(timm, arch)
    _, fields, _ = timm_model_fields(model, f"timm:{arch}")
    # NaFlexVit has no such attribute: it takes any size (the reader says so, `dynamic_img_size=True`)
    fields["dynamic_img_size"] = bool(getattr(model, "dynamic_img_size", fields.get("dynamic_img_size", False)))
    for ratio in ("mlp_ratio", "attn_pool_mlp_ratio"):
        if fields.get(ratio) is not None:
            fields[ratio] = stated_ratio(fields["embed_dim"], fields[ratio])
    if fields.get("attn_pool_num_heads") == fields["num_heads"]:
        del fields["attn_pool_num_heads"]  # None: the blocks' head count, as timm's default is
    _check_tensors(arch, ViTConfig(**fields))
    config = ViTConfig(**fields).to_dict()
    return {k: v for k, v in config.items() if v != _DEFAULTS[k]}


def stated_ratio(dim: int, ratio: float) -> float:
    """The MLP ratio timm states, from the one the tensors show (hidden / dim, exact only at this width):
    a simple fraction (EVA-02's 8/3), else the shortest decimal (so150m's 2.572), giving the same hidden width."""
    hidden = int(dim * ratio)
    candidates = [float(Fraction(ratio).limit_denominator(16))]
    for digits in range(1, 7):
        candidates += [round(ratio, digits), round(ratio, digits) + 10**-digits]
    return next((r for r in candidates if int(dim * r) == hidden), ratio)


def _check_tensors(arch: str, config: ViTConfig) -> None:
    """Refuse an architecture whose tensors (names and shapes, at depth 2) vitzoo's model of `config` lacks."""
    reduced: dict[str, Any] = {"depth": 2}
    if family_of(arch) == "sapiens2":  # timm states a key/value head count per block of its own depth:
        reduced["num_kv_heads"] = (config.kv_heads[0], min(config.kv_heads))  # a full block, a grouped one
    theirs = to_vitzoo(dict(timm_on_meta(timm, arch, **reduced).state_dict()), file=arch).state
    with torch.device("meta"):
        ours = VisionTransformer(config.replace(**reduced)).state_dict()
    differ = sorted(set(ours) ^ set(theirs)) or [k for k in ours if ours[k].shape != theirs[k].shape]
    if differ:
        raise ValueError(f"timm:{arch}: its tensors differ from the ViTConfig's model ({', '.join(differ[:4])})")


def release_row(arch: str, tag: str) -> tuple[Any, ...] | str:
    """(arch, tag, classes, size, norm, crop_pct, crop_mode, interpolation, licence[, hub repository
    where it is not timm/<arch>.<tag>]), or why it is left out."""
    cfg = timm.models.get_pretrained_cfg(f"{arch}.{tag}").to_dict()
    repo = HUB_COPIES.get(f"{arch}.{tag}") or cfg.get("hf_hub_id") or ""
    if repo in ("", "timm/") or "/" not in repo.strip("/") or repo.startswith(("http:", "https:")):
        if repo != "timm/":
            return f"weights on no Hub repository ({repo or cfg.get('url') or 'none'})"
        repo = f"timm/{arch}.{tag}"
    norm = NORMS.get((tuple(cfg["mean"]), tuple(cfg["std"])), (tuple(cfg["mean"]), tuple(cfg["std"])))
    size = tuple(cfg["input_size"][1:])
    return (
        arch,
        tag,
        int(cfg["num_classes"]),
        size[0] if size[0] == size[1] else size,
        norm,
        float(cfg["crop_pct"]),
        cfg["crop_mode"],
        cfg["interpolation"],
        cfg.get("license") or "unknown",  # timm states none
        *([repo] if repo != f"timm/{arch}.{tag}" else []),
    )


def collect() -> tuple[dict[str, tuple[str, str, dict[str, Any]]], list[tuple[Any, ...]], dict[str, str]]:
    covered = {cfg.source for m in CURATED for cfg in m.pretrained.values()}
    names = sorted(set(timm.list_models(module=list(MODULES), pretrained=True)))
    by_arch: dict[str, list[str]] = defaultdict(list)
    for name in names:
        arch, _, tag = name.partition(".")
        by_arch[arch].append(tag)
    archs, rows, left_out = {}, [], {}
    for arch, tags in tqdm(sorted(by_arch.items()), desc="timm architectures"):
        if arch.startswith("test_"):
            left_out[arch] = "timm's own unit-test model, not a release"
            continue
        default = timm.models.get_pretrained_cfg(arch).tag  # timm's default release of the architecture first
        tags.sort(key=lambda tag: tag != default)
        try:
            fields = config_fields(arch)
        except Exception as e:  # refused (a part vitzoo does not compute) or not buildable
            left_out[arch] = str(e).splitlines()[0]
            continue
        archs[arch] = (short_name(arch), family_of(arch), fields)
        for tag in tags:
            row = release_row(arch, tag)
            if isinstance(row, str):
                left_out[f"{arch}.{tag}"] = row
            elif f"hf-hub:timm/{arch}.{tag}" not in covered:
                rows.append(row)
    return archs, rows, left_out


def render(
    archs: dict[str, tuple[str, str, dict[str, Any]]],
    rows: list[tuple[Any, ...]],
    left_out: dict[str, str],
    open_clip: dict[str, str],
) -> str:
    used = {row[0] for row in rows}
    archs = {a: v for a, v in archs.items() if a in used}
    bases: dict[str, dict[str, Any]] = {}
    for fam in sorted({v[1] for v in archs.values()}):
        members = [v[2] for v in archs.values() if v[1] == fam]
        bases[fam] = (
            {k: v for k, v in members[0].items() if all(m.get(k) == v for m in members)} if len(members) > 1 else {}
        )
    lines = [
        '"""timm\'s ViT-family releases that ViTConfig expresses, as data: generated by tools/zoo_from_timm.py',
        f"from timm {timm.__version__}; tests/zoo/test_timm_releases.py proves each line against the installed timm.",
        "",
        "ARCHITECTURES: timm architecture -> (vitzoo name, family, ViTConfig fields beyond the family's base).",
        "RELEASES: (architecture, tag, classes, input size, normalisation, crop_pct, crop_mode, interpolation, licence",
        "[, the Hub repository holding the weights where it is not timm/<architecture>.<tag>]).",
        "LEFT_OUT: what the generator found and did not register, with the reason.",
        "OPEN_CLIP_NAMES: open_clip's name of a release (its weights in a timm hub repository) -> timm's name.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from typing import Any",
        "",
        "# fmt: off",
        "FAMILY_BASES: dict[str, dict[str, Any]] = {",
        *(f"    {fam!r}: {base!r}," for fam, base in bases.items()),
        "}",
        "ARCHITECTURES: dict[str, tuple[str, str, dict[str, Any]]] = {",
    ]
    for arch, (name, fam, fields) in archs.items():
        own = {k: v for k, v in fields.items() if k not in bases[fam]}
        lines.append(f"    {arch!r}: ({name!r}, {fam!r}, {own!r}),")
    lines += ["}", "RELEASES: tuple[tuple[Any, ...], ...] = ("]
    lines += [f"    {row!r}," for row in rows]
    lines += [")", "LEFT_OUT: dict[str, str] = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in sorted(left_out.items())]
    lines += ["}", "OPEN_CLIP_NAMES: dict[str, str] = {"]
    lines += [f"    {k!r}: {v!r}," for k, v in sorted(open_clip.items())]
    lines += ["}", "# fmt: on", ""]
    return "\n".join(lines)


def open_clip_names(archs: dict[str, tuple[str, str, dict[str, Any]]], rows: list[tuple[Any, ...]]) -> dict[str, str]:
    """{open_clip "MODEL.PRETRAINED": timm "arch.tag"} for open_clip's releases whose weights are a timm
    hub repository of a registered release; QuickGELU models take the QuickGELU twin's release."""
    import open_clip

    by_repo: dict[str, list[str]] = defaultdict(list)
    for m in CURATED:
        for cfg in m.pretrained.values():
            if (cfg.source or "").startswith("hf-hub:timm/") and m.timm_name:
                by_repo[cfg.source.removeprefix("hf-hub:")].append(cfg.source.removeprefix("hf-hub:timm/"))
    for row in rows:
        by_repo[row[9] if len(row) > 9 else f"timm/{row[0]}.{row[1]}"].append(f"{row[0]}.{row[1]}")
    names = {}
    for model, tag in open_clip.list_pretrained():
        repo = (open_clip.get_pretrained_cfg(model, tag).get("hf_hub") or "").strip("/")
        quick = bool((open_clip.get_model_config(model) or {}).get("quick_gelu"))
        found = sorted(by_repo.get(repo, []), key=lambda name: ("quickgelu" in name) != quick)
        if found:
            names[f"{model}.{tag}"] = found[0]
    return names


def main() -> int:
    archs, rows, left_out = collect()
    OUT.write_text(render(archs, rows, left_out, open_clip_names(archs, rows)), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "ruff", "format", "-q", str(OUT)], check=True)
    print(f"{OUT}: {len(rows)} releases of {len({r[0] for r in rows})} architectures; {len(left_out)} left out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
