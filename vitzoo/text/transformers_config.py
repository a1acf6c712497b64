"""The text tower of a transformers CLIPModel / SiglipModel / Siglip2Model config.json -> TextConfig,
and which tokenizer goes with it.

transformers saves only the values that differ from its defaults, so each model type's defaults
are spelled out here. CLIP pools at the end-of-text token: transformers takes the largest id when
`eos_token_id` is 2 (its older configs) and the first end-of-text id otherwise, which for CLIP's
vocabulary is the same token (end-of-text is its largest id). MetaCLIP 2 always pools at the first
`eos_token_id` (its worldwide releases: XLM-V's </s>, 2). SigLIP pools at the last position.
"""

from __future__ import annotations

from typing import Any

from ..weights.errors import WeightsFileError
from ..weights.norm_eps import NORM_EPS
from ..weights.transformers_files import ACTIVATIONS
from .bpe import CONTEXT_LENGTH, EOT_ID, VOCAB_SIZE
from .transformer import TextConfig

_CLIP_TEXT = dict(
    vocab_size=VOCAB_SIZE,
    hidden_size=512,
    intermediate_size=2048,
    num_hidden_layers=12,
    num_attention_heads=8,
    max_position_embeddings=CONTEXT_LENGTH,
    hidden_act="quick_gelu",
    layer_norm_eps=NORM_EPS["clip_text"],
)
_SIGLIP_TEXT = dict(
    vocab_size=32000,
    hidden_size=768,
    intermediate_size=3072,
    num_hidden_layers=12,
    num_attention_heads=12,
    max_position_embeddings=64,
    hidden_act="gelu_pytorch_tanh",
    layer_norm_eps=NORM_EPS["siglip_text"],
)
_METACLIP_2_TEXT = dict(_CLIP_TEXT, eos_token_id=EOT_ID)
TEXT_MODEL_TYPES = {"clip": _CLIP_TEXT, "metaclip_2": _METACLIP_2_TEXT, "siglip": _SIGLIP_TEXT, "siglip2": _SIGLIP_TEXT}


def transformers_text_config(cfg: dict[str, Any], where: str) -> tuple[TextConfig, dict[str, Any]]:
    model_type = cfg.get("model_type")
    if model_type not in TEXT_MODEL_TYPES:
        raise WeightsFileError(
            f"{where!r}: model_type={model_type!r} has no text tower vitzoo reads; expected one of "
            f"{', '.join(map(repr, TEXT_MODEL_TYPES))} (or an open_clip directory with open_clip_config.json)"
        )
    text = cfg.get("text_config") or {}
    if not isinstance(text, dict):
        raise WeightsFileError(f"{where!r}: text_config is invalid; expected a JSON object")
    values = {**TEXT_MODEL_TYPES[model_type], **text}
    act = ACTIVATIONS.get(values["hidden_act"])
    if act is None:
        raise WeightsFileError(f"{where!r}: text_config.hidden_act={values['hidden_act']!r} is not supported")
    width, mlp = values["hidden_size"], values["intermediate_size"]
    clip = model_type in ("clip", "metaclip_2")
    _, embed_dim = _projection(cfg, clip, values)
    eos = values.get("eos_token_id") if model_type == "metaclip_2" else None
    if not isinstance(embed_dim, int):
        raise WeightsFileError(f"{where!r}: the projection size {embed_dim!r} is invalid; expected an integer")
    try:
        config = TextConfig(
            vocab_size=values["vocab_size"],
            context_length=values["max_position_embeddings"],
            width=width,
            depth=values["num_hidden_layers"],
            num_heads=values["num_attention_heads"],
            mlp_ratio=mlp / width,
            embed_dim=embed_dim,
            act_layer=act,
            norm_eps=float(values["layer_norm_eps"]),
            causal=clip,
            pool="eos" if eos is not None else "argmax" if clip else "last",
            eos_id=eos,
            proj_bias=not clip,
        )
    except (TypeError, ValueError, ZeroDivisionError) as e:
        raise WeightsFileError(f"{where!r}: text_config is invalid ({e})") from e
    if model_type == "metaclip_2" and (config.vocab_size, eos) != (VOCAB_SIZE, EOT_ID):
        reason = (
            f"text_config vocab_size={config.vocab_size}, eos_token_id={eos}: a tokenizer other than CLIP's "
            "(MetaCLIP 2 worldwide: XLM-V), which vitzoo does not implement; the text tower takes token ids"
        )
        return config, {"kind": "unsupported", "reason": reason}
    if clip:
        return config, {"kind": "clip"}
    # SigLIP's vocabulary is T5's (spiece.model); SigLIP 2's, in a SiglipModel (fixed resolution) as in a
    # Siglip2Model (NaFlex), Gemma's (tokenizer.model): the files present, and tokenizer_config.json, say.
    return config, {"kind": "sentencepiece", "repo": None, "clean": "canonicalize"}


def _projection(cfg: dict[str, Any], clip: bool, values: dict[str, Any]) -> tuple[str, Any]:
    """(the key that sets the joint space's size, its value): CLIP's projection_dim (top level, else
    in text_config, else 512); SigLIP's projection_size, else the text width (no projection)."""
    if clip:
        if "projection_dim" in cfg:
            return "projection_dim", cfg["projection_dim"]
        return "text_config.projection_dim", values.get("projection_dim", 512)
    if values.get("projection_size"):
        return "text_config.projection_size", values["projection_size"]
    return "text_config.hidden_size", values["hidden_size"]


def transformers_text_says(cfg: dict[str, Any]) -> dict[str, str]:
    """How a config.json that transformers_text_config accepted sets each of the text tower's
    fields the tensors show (text/transformer.py's SHOWN_BY), for the errors naming them."""
    model_type = cfg["model_type"]
    text = cfg.get("text_config") or {}
    values = {**TEXT_MODEL_TYPES[model_type], **text}
    clip = model_type in ("clip", "metaclip_2")
    embed_key, embed_dim = _projection(cfg, clip, values)

    def says(key: str, value: Any) -> str:
        stated = key in cfg or key.removeprefix("text_config.") in text
        return f"{key}={value!r}" + ("" if stated else f" ({model_type}'s default)")

    return {
        "width": says("text_config.hidden_size", values["hidden_size"]),
        "vocab_size": says("text_config.vocab_size", values["vocab_size"]),
        "context_length": says("text_config.max_position_embeddings", values["max_position_embeddings"]),
        "embed_dim": says(embed_key, embed_dim),
        "proj_bias": f"model_type={model_type!r} (a text projection {'without' if clip else 'with'} a bias)",
        "depth": says("text_config.num_hidden_layers", values["num_hidden_layers"]),
        "mlp_width": says("text_config.intermediate_size", values["intermediate_size"]),
    }
