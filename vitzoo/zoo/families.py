"""The family of a built-in model: the first rule whose text its names contain (vitzoo's name, then
timm's architecture). `vitzoo list --family` filters by it; the generated table groups by it."""

from __future__ import annotations

FAMILY_RULES: tuple[tuple[str, str], ...] = (
    ("mnist", "mnist"),
    ("aimv2", "aimv2"),
    ("radio", "radio"),  # C-RADIO, classic and NaFlexVit forms of the same weights
    ("pixio", "pixio"),
    ("webssl", "webssl"),  # Web-DINO and Web-MAE
    ("naflexvit", "naflexvit"),
    ("dinov3", "dinov3"),
    ("sapiens2", "sapiens2"),
    ("dinov2", "dinov2"),
    ("dino_", "dino"),
    ("mae_", "mae"),
    ("eva02", "eva02"),
    ("eva_", "eva"),
    ("beit3", "beit3"),
    ("deit3", "deit3"),
    ("deit", "deit"),
    ("_pe_", "pe"),
    ("relpos", "relpos_vit"),
    ("rope", "rope_vit"),
    ("siglip2", "siglip2"),
    ("siglip", "siglip"),
    ("coca", "coca"),  # open_clip's CoCa image towers (attentional pooler)
    ("clip", "clip"),
    ("flexivit", "flexivit"),
    ("sam3", "sam3"),
    ("samvit", "sam"),
    ("beit", "beit"),
    ("_mci", "mobileclip"),
    ("_r_s16", "vit_hybrid"),
    ("_r26_", "vit_hybrid"),
    ("_r50_", "vit_hybrid"),
    ("", "vit"),
)


def family_of(*names: str | None) -> str:
    """The family the first matching rule gives `names` (e.g. a vitzoo name and a timm architecture)."""
    text = " ".join(n for n in names if n)
    return next(fam for rule, fam in FAMILY_RULES if rule in text)
