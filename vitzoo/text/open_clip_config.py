"""open_clip's `open_clip_config.json`: {"model_cfg": {embed_dim, quick_gelu, vision_cfg, text_cfg,
...}, "preprocess_cfg": {mean, std, interpolation, resize_mode}} -> our configs.

The image tower is either open_clip's own ViT (vision_cfg states its widths) or a timm model
(`timm_model_name`, whose names and config are a registered vitzoo model's). Options no vitzoo
module implements (a Hugging Face text model, CoCa's class token, attentional pooling, ...) are
refused by name rather than loaded into the wrong computation. CoCa's image tower (attentional_pool:
True, "parallel" or "cascade") is `ViTConfig.global_pool="coca"`; its text tower (a class token
appended, embed_cls) is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..model import ViTConfig
from ..pretrained_cfg import CLIP_MEAN, CLIP_STD, PretrainedCfg, check_pretrained_fields
from ..weights.errors import WeightsFileError
from ..weights.norm_eps import NORM_EPS
from .bpe import CONTEXT_LENGTH, VOCAB_SIZE
from .transformer import TextConfig

# Options whose open_clip default is all vitzoo implements: any other value is refused.
_TEXT_DEFAULTS: dict[str, Any] = {
    "hf_model_name": None,
    "embed_cls": False,
    "pad_id": 0,
    "proj_type": "linear",
    "qk_norm": False,
    "ls_init_value": None,
    "output_tokens": False,
    "attn_pooler_heads": 8,
    "use_pad_mask": False,
}
# open_clip's image-tower pooling -> ViTConfig.global_pool ('none', all tokens projected, is refused)
_VISION_POOLS = {"tok": "token", "avg": "avg"}
# open_clip's text pooling -> TextConfig.pool ('first' and 'none' are refused)
_TEXT_POOLS = ("argmax", "last", "eos")
_VISION_DEFAULTS: dict[str, Any] = {
    "pos_embed_type": "learnable",
    "qk_norm": False,
    "timm_model_pretrained": False,
    "timm_proj_bias": False,
}
# open_clip's text tower sizes where text_cfg leaves them out
_TEXT_SIZES: dict[str, Any] = {
    "vocab_size": VOCAB_SIZE,
    "context_length": CONTEXT_LENGTH,
    "width": 512,
    "layers": 12,
    "heads": 8,
    "mlp_ratio": 4.0,
    "proj_bias": False,
}
_IGNORED = {"output_tokens", "patch_dropout", "timm_drop", "timm_drop_path", "hf_tokenizer_name", "tokenizer_kwargs"}


@dataclass
class OpenClipConfig:
    text: TextConfig
    vision_fields: dict[str, Any]
    timm_name: str | None
    tokenizer: dict[str, Any]
    preprocess: dict[str, Any] = field(default_factory=dict)
    # how the file sets each text tower field its tensors show (text/transformer.py's SHOWN_BY)
    text_says: dict[str, str] = field(default_factory=dict)

    @property
    def fc_norm(self) -> bool:
        """Whether the image tower norms after pooling (its ln_post is vitzoo's fc_norm)."""
        return bool(self.vision_fields.get("fc_norm", False))

    def preprocessing(self, vit: ViTConfig, source: str) -> PretrainedCfg:
        return tower_preprocessing(self.preprocess, vit, source)


def tower_preprocessing(preprocess: dict[str, Any], vit: ViTConfig, source: str | None) -> PretrainedCfg:
    """The image tower's preprocessing: open_clip's evaluation transform (resize the short side
    and crop the centre, or squash) at the tower's input size."""
    return PretrainedCfg(
        input_size=vit.input_size,
        num_classes=vit.num_classes,
        crop_pct=1.0,
        source=source,
        **check_pretrained_fields(preprocess),
    )


@dataclass
class ImageTower:
    """An open_clip config's image tower alone (its text tower unread)."""

    vision_fields: dict[str, Any]  # ViTConfig fields (a timm tower: those beyond its timm model's)
    timm_name: str | None
    preprocess: dict[str, Any]


def parse_image_tower(raw: dict[str, Any], where: str) -> ImageTower:
    """The image tower of an open_clip config; options vitzoo does not compute are refused by name."""
    model_cfg = _object(raw.get("model_cfg", raw), "model_cfg", where)
    vision = _object(model_cfg.get("vision_cfg", {}), "model_cfg.vision_cfg", where)
    embed_dim = _embed_dim(model_cfg, where)
    _refuse(vision, _VISION_DEFAULTS, "model_cfg.vision_cfg", where)
    return ImageTower(
        vision_fields=_vision_fields(vision, embed_dim, bool(model_cfg.get("quick_gelu", False)), where),
        timm_name=vision.get("timm_model_name"),
        preprocess=_preprocess(_object(raw.get("preprocess_cfg", {}), "preprocess_cfg", where), where),
    )


def parse_open_clip_config(raw: dict[str, Any], where: str) -> OpenClipConfig:
    model_cfg = _object(raw.get("model_cfg", raw), "model_cfg", where)
    text = _object(model_cfg.get("text_cfg", {}), "model_cfg.text_cfg", where)
    embed_dim = _embed_dim(model_cfg, where)
    _refuse(text, _TEXT_DEFAULTS, "model_cfg.text_cfg", where)
    image = parse_image_tower(raw, where)
    return OpenClipConfig(
        text=_text_config(text, embed_dim, bool(model_cfg.get("quick_gelu", False)), where),
        vision_fields=image.vision_fields,
        timm_name=image.timm_name,
        tokenizer=_tokenizer_spec(text),
        preprocess=image.preprocess,
        text_says=_text_says(text, embed_dim, "model_cfg." if "model_cfg" in raw else ""),
    )


def _embed_dim(model_cfg: dict[str, Any], where: str) -> int:
    embed_dim = model_cfg.get("embed_dim")
    if not isinstance(embed_dim, int) or embed_dim <= 0:
        raise WeightsFileError(f"{where!r}: model_cfg.embed_dim={embed_dim!r} is invalid; expected a positive integer")
    return embed_dim


def _object(value: Any, name: str, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WeightsFileError(f"{where!r}: {name} is invalid; expected a JSON object")
    return value


def _refuse(cfg: dict[str, Any], defaults: dict[str, Any], name: str, where: str) -> None:
    for key, default in defaults.items():
        if key in cfg and cfg[key] != default and key not in _IGNORED:
            raise WeightsFileError(
                f"{where!r}: {name}.{key}={cfg[key]!r} is not supported by vitzoo's towers (only {default!r})"
            )


def _act(cfg: dict[str, Any], quick_gelu: bool) -> str:
    if quick_gelu:
        return "quick_gelu"
    approximate = (cfg.get("act_kwargs") or {}).get("approximate", "none")
    return "gelu_tanh" if approximate == "tanh" else "gelu"


def _eps(cfg: dict[str, Any]) -> float:
    return float((cfg.get("norm_kwargs") or {}).get("eps", NORM_EPS["open_clip"]))


def _text_says(text: dict[str, Any], embed_dim: int, prefix: str) -> dict[str, str]:
    def says(key: str) -> str:
        value = text.get(key, _TEXT_SIZES[key])
        return f"{prefix}text_cfg.{key}={value!r}" + ("" if key in text else " (open_clip's default)")

    return {
        "width": says("width"),
        "vocab_size": says("vocab_size"),
        "context_length": says("context_length"),
        "embed_dim": f"{prefix}embed_dim={embed_dim!r}",
        "proj_bias": says("proj_bias"),
        "depth": says("layers"),
        "mlp_width": says("mlp_ratio"),
    }


def _text_config(text: dict[str, Any], embed_dim: int, quick_gelu: bool, where: str) -> TextConfig:
    pool = text.get("pool_type", "argmax")
    if pool not in _TEXT_POOLS:
        expected = ", ".join(map(repr, _TEXT_POOLS))
        raise WeightsFileError(f"{where!r}: model_cfg.text_cfg.pool_type={pool!r} is not supported ({expected})")

    def size(key: str) -> Any:
        return text.get(key, _TEXT_SIZES[key])

    try:
        return TextConfig(
            vocab_size=size("vocab_size"),
            context_length=size("context_length"),
            width=size("width"),
            depth=size("layers"),
            num_heads=size("heads"),
            mlp_ratio=float(size("mlp_ratio")),
            embed_dim=embed_dim,
            act_layer=_act(text, quick_gelu),
            norm_eps=_eps(text),
            causal=not text.get("no_causal_mask", False),
            pool=pool,
            # open_clip's TextTransformer reads eos_id (default 2) only when it pools at 'eos'
            eos_id=text.get("eos_id", 2) if pool == "eos" else None,
            proj_bias=bool(size("proj_bias")),
        )
    except (TypeError, ValueError) as e:
        raise WeightsFileError(f"{where!r}: model_cfg.text_cfg is invalid ({e})") from e


def _vision_fields(vision: dict[str, Any], embed_dim: int, quick_gelu: bool, where: str) -> dict[str, Any]:
    image_size = vision.get("image_size", 224)
    if vision.get("timm_model_name"):
        proj = vision.get("timm_proj", "linear")
        if proj not in (None, "none"):
            raise WeightsFileError(f"{where!r}: model_cfg.vision_cfg.timm_proj={proj!r} is not supported (none)")
        pool = vision.get("timm_pool", "avg")
        return {"img_size": image_size, "global_pool": pool, "num_classes": 0 if proj == "none" else embed_dim}
    pool = vision.get("pool_type", "tok")
    coca = _coca_fields(vision, embed_dim, where)
    if pool not in _VISION_POOLS:
        expected = ", ".join(map(repr, _VISION_POOLS))
        raise WeightsFileError(f"{where!r}: model_cfg.vision_cfg.pool_type={pool!r} is not supported ({expected})")
    width = vision.get("width", 768)
    head_width = vision.get("head_width", 64)
    if not isinstance(width, int) or not isinstance(head_width, int) or head_width <= 0 or width % head_width:
        raise WeightsFileError(
            f"{where!r}: model_cfg.vision_cfg width={width!r} / head_width={head_width!r} is invalid"
        )
    return {
        "img_size": image_size,
        "patch_size": vision.get("patch_size", 16),
        "embed_dim": width,
        "depth": vision.get("layers", 12),
        "num_heads": width // head_width,
        "mlp_ratio": float(vision.get("mlp_ratio", 4.0)),
        "init_values": vision.get("ls_init_value"),
        # CLIPA: no ln_pre; ln_post on the pooled token (final_ln_after_pool), which is
        # vitzoo's fc_norm (for the class token, the same as norming every token first)
        "pre_norm": not vision.get("no_ln_pre", False),
        "global_pool": _VISION_POOLS[pool],
        "fc_norm": bool(vision.get("final_ln_after_pool", False)),
        "patch_bias": False,
        "head_bias": False,
        "norm_eps": _eps(vision),
        "act_layer": _act(vision, quick_gelu),
        "num_classes": embed_dim,
        **coca,
    }


def _coca_fields(vision: dict[str, Any], embed_dim: int, where: str) -> dict[str, Any]:
    """CoCa's attentional pooler (vision_cfg.attentional_pool) as ViTConfig fields; {} without it.
    Its width is embed_dim (the projection's input and output); its queries attend over every token;
    open_clip's released setup (True) pools by the first query ("tok") and norms after the pooler,
    where final_ln_after_pool has no effect."""
    kind = vision.get("attentional_pool", False)
    if kind is False:
        return {}
    if kind is not True and kind not in ("parallel", "cascade"):
        raise WeightsFileError(
            f"{where!r}: model_cfg.vision_cfg.attentional_pool={kind!r} is not supported (False, True, 'parallel', 'cascade')"
        )
    pool = vision.get("pool_type", "tok")
    if kind is True and pool != "tok":
        raise WeightsFileError(
            f"{where!r}: model_cfg.vision_cfg.pool_type={pool!r} with attentional_pool=True is not supported "
            "(only 'tok': the pooler's first output is the pooled feature)"
        )
    queries, heads = vision.get("attn_pooler_queries", 256), vision.get("attn_pooler_heads", 8)
    for key, value in (("attn_pooler_queries", queries), ("attn_pooler_heads", heads)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise WeightsFileError(
                f"{where!r}: model_cfg.vision_cfg.{key}={value!r} is invalid; expected a positive integer"
            )
    return {
        "global_pool": "coca",
        "coca_pool_type": "" if kind is True else kind,
        "coca_queries": None if queries == 256 else queries,  # ViTConfig's None is open_clip's 256
        "coca_dim": None if embed_dim == vision.get("width", 768) else embed_dim,
        "attn_pool_num_heads": heads,
        "pool_include_prefix": True,
        "fc_norm": False,  # final_ln_after_pool is ignored beside the attentional pooler
    }


def _tokenizer_spec(text: dict[str, Any]) -> dict[str, Any]:
    repo = text.get("hf_tokenizer_name")
    if not repo:
        return {"kind": "clip"}
    kwargs = text.get("tokenizer_kwargs") or {}
    other = sorted(set(kwargs) - {"clean"}) if isinstance(kwargs, dict) else ["(not a JSON object)"]
    if other:  # options of transformers' tokenizers (CLIPA's strip_sep_token: BERT's WordPiece)
        return {
            "kind": "unsupported",
            "reason": f"model_cfg.text_cfg.tokenizer_kwargs {', '.join(other)} (hf_tokenizer_name={repo!r}) "
            "configure a tokenizer vitzoo does not implement (it has CLIP's BPE and SigLIP's SentencePiece); "
            "the text tower takes token ids",
        }
    return {"kind": "sentencepiece", "repo": repo, "clean": kwargs.get("clean", "whitespace")}


def _preprocess(pre: dict[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {"mean": pre.get("mean", CLIP_MEAN), "std": pre.get("std", CLIP_STD)}
    out["interpolation"] = pre.get("interpolation", "bicubic")
    mode = pre.get("resize_mode", "shortest")
    if mode not in ("shortest", "squash"):
        raise WeightsFileError(
            f"{where!r}: preprocess_cfg.resize_mode={mode!r} is not supported ('shortest', 'squash')"
        )
    out["crop_mode"] = "center" if mode == "shortest" else "squash"
    for key in ("mean", "std"):
        if isinstance(out[key], (int, float)):
            out[key] = (float(out[key]),) * 3
        out[key] = tuple(out[key]) if isinstance(out[key], list) else out[key]
    return out
