"""Whole image-text checkpoints -> vitzoo's names: the image tower's (vitzoo's ViT = timm's names),
the text tower's (text/transformer.py) and the logit scale and bias.

    layout                     image tower keys                      text tower keys
    open_clip, CLIP            visual.conv1, visual.transformer...   token_embedding, transformer.resblocks...
    open_clip, timm towers     visual.trunk.<timm names>             text.token_embedding, text.transformer...
    transformers CLIPModel,    vision_model.* (vitzoo.weights reads) text_model.embeddings..., text_projection /
    SiglipModel, Siglip2Model                                        text_model.head

Each layout is a table of (pattern, our name) rules; a key no rule maps is an error naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ..weights.errors import WeightsMismatchError
from ..weights.files import StateDict
from ..weights.keymaps import merge_qkv  # the one home of q/k/v concatenation (same names)

Rule = tuple[str, str]


@dataclass
class Split:
    """A whole checkpoint in vitzoo's names, tower by tower."""

    visual: StateDict
    text: StateDict
    logit_scale: torch.Tensor | None
    logit_bias: torch.Tensor | None


# open_clip's residual blocks (its VisionTransformer and TextTransformer share them).
def _resblock_rules(src: str, dst: str) -> list[Rule]:
    layer = rf"{src}\.resblocks\.(\d+)\."
    return [
        (rf"{layer}ln_([12])\.(weight|bias)", rf"{dst}.\1.norm\2.\3"),
        (rf"{layer}attn\.in_proj_(weight|bias)", rf"{dst}.\1.attn.qkv.\2"),
        (rf"{layer}attn\.out_proj\.(weight|bias)", rf"{dst}.\1.attn.proj.\2"),
        (rf"{layer}mlp\.c_fc\.(weight|bias)", rf"{dst}.\1.mlp.fc1.\2"),
        (rf"{layer}mlp\.c_proj\.(weight|bias)", rf"{dst}.\1.mlp.fc2.\2"),
        (rf"{layer}ls_([12])\.gamma", rf"{dst}.\1.ls\2.gamma"),
    ]


_T = r"(?:text\.)?"  # CustomTextCLIP keeps its text tower under "text."
OPEN_CLIP_TEXT: list[Rule] = [
    (rf"{_T}token_embedding\.weight", "token_embed.weight"),
    (rf"{_T}positional_embedding", "pos_embed"),  # (L, W): reshaped below
    *_resblock_rules(rf"{_T}transformer", "blocks"),
    (rf"{_T}ln_final\.(weight|bias)", r"norm.\1"),
    (rf"{_T}text_projection", "proj.weight"),  # a (W, E) matrix: transposed below
    (rf"{_T}text_projection\.(weight|bias)", r"proj.\1"),  # an nn.Linear (SigLIP)
]
OPEN_CLIP_VISUAL: list[Rule] = [
    (r"visual\.trunk\.(.+)", r"\1"),  # a timm model: its names are ours
    (r"visual\.conv1\.weight", "patch_embed.proj.weight"),
    (r"visual\.class_embedding", "cls_token"),  # (D,): reshaped below
    (r"visual\.positional_embedding", "pos_embed"),  # (N, D): reshaped below
    (r"visual\.ln_pre\.(weight|bias)", r"norm_pre.\1"),
    *_resblock_rules(r"visual\.transformer", "blocks"),
    (r"visual\.ln_post\.(weight|bias)", r"norm.\1"),
    (r"visual\.proj", "head.weight"),  # (D, E): transposed below
]
OPEN_CLIP_POST_POOL_NORM: Rule = (r"visual\.ln_post\.(weight|bias)", r"fc_norm.\1")
OPEN_CLIP_IGNORE = [r"(?:text\.)?attn_mask", r"visual\.attn_mask"]

_TM = r"text_model\."
_TL = rf"{_TM}encoder\.layers\.(\d+)\."
TRANSFORMERS_TEXT: list[Rule] = [
    (rf"{_TM}embeddings\.token_embedding\.weight", "token_embed.weight"),
    (rf"{_TM}embeddings\.position_embedding\.weight", "pos_embed"),  # (L, W): reshaped below
    (rf"{_TL}self_attn\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_TL}self_attn\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_TL}layer_norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (rf"{_TL}mlp\.fc([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    (rf"{_TM}final_layer_norm\.(weight|bias)", r"norm.\1"),
    (r"text_projection\.weight", "proj.weight"),  # CLIPModel: a Linear without bias
    (rf"{_TM}head\.(weight|bias)", r"proj.\1"),  # SiglipModel: a Linear with bias
]
TRANSFORMERS_IGNORE = [rf"{_TM}embeddings\.position_ids"]


def _rename(state: StateDict, rules: list[Rule], *, file: str, fmt: str) -> tuple[StateDict, StateDict]:
    """(the keys `rules` map, renamed; the others, untouched)."""
    compiled = [(re.compile(p), r) for p, r in rules]
    mapped: StateDict = {}
    rest: StateDict = {}
    for key, value in state.items():
        for pattern, repl in compiled:
            if pattern.fullmatch(key):
                new = pattern.sub(repl, key)
                if new in mapped:
                    raise WeightsMismatchError(f"{file}: two keys of the {fmt} layout map to {new!r}")
                mapped[new] = value
                break
        else:
            rest[key] = value
    return mapped, rest


def _refuse_rest(rest: StateDict, ignore: list[str], *, file: str, fmt: str) -> None:
    left = sorted(k for k in rest if not any(re.fullmatch(p, k) for p in ignore))
    if left:
        raise WeightsMismatchError(
            f"{file}: {len(left)} key(s) of the {fmt} layout have no vitzoo counterpart: {', '.join(left[:20])}"
        )


def _take_scalars(rest: StateDict) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    scale, bias = rest.pop("logit_scale", None), rest.pop("logit_bias", None)
    return scale, bias


def split_open_clip(state: StateDict, *, file: str, fc_norm: bool = False) -> Split:
    """open_clip's `open_clip_model.safetensors` (or an open_clip state dict) -> towers in our names.
    `fc_norm`: open_clip's own ViT norms after pooling (CLIPA's final_ln_after_pool), so its ln_post
    is vitzoo's fc_norm."""
    state = dict(state)
    scale, bias = _take_scalars(state)
    rules = [OPEN_CLIP_POST_POOL_NORM, *OPEN_CLIP_VISUAL] if fc_norm else OPEN_CLIP_VISUAL  # the first match wins
    visual, rest = _rename(state, rules, file=file, fmt="open_clip")
    text, rest = _rename(rest, OPEN_CLIP_TEXT, file=file, fmt="open_clip")
    _refuse_rest(rest, OPEN_CLIP_IGNORE, file=file, fmt="open_clip")
    if visual.get("cls_token") is not None and visual["cls_token"].dim() == 1:
        visual["cls_token"] = visual["cls_token"].reshape(1, 1, -1)
    if visual.get("pos_embed") is not None and visual["pos_embed"].dim() == 2:
        visual["pos_embed"] = visual["pos_embed"].unsqueeze(0)
    head = visual.get("head.weight")
    if head is not None and "visual.proj" in state:
        visual["head.weight"] = head.T.contiguous()
    for key in ("text_projection", "text.text_projection"):  # a (W, E) matrix (CLIP, PE-Core), not a Linear
        if key in state:
            text["proj.weight"] = state[key].T.contiguous()
    _text_positions(text)
    return Split(visual, text, scale, bias)


def split_transformers_text(
    state: StateDict, *, file: str
) -> tuple[StateDict, torch.Tensor | None, torch.Tensor | None]:
    """The text tower and scalars of a transformers CLIPModel / SiglipModel / Siglip2Model
    (the vision tower is read by vitzoo.weights)."""
    state = {k: v for k, v in state.items() if k.startswith(("text_model.", "text_projection"))} | {
        k: state[k] for k in ("logit_scale", "logit_bias") if k in state
    }
    scale, bias = _take_scalars(state)
    text, rest = _rename(state, TRANSFORMERS_TEXT, file=file, fmt="transformers")
    _refuse_rest(rest, TRANSFORMERS_IGNORE, file=file, fmt="transformers")
    if not text:
        raise WeightsMismatchError(f"{file}: no text tower (text_model.*): an image-only checkpoint")
    text = merge_qkv(text, file=file)
    _text_positions(text)
    return text, scale, bias


def _text_positions(text: StateDict) -> None:
    pos = text.get("pos_embed")
    if pos is not None and pos.dim() == 2:
        text["pos_embed"] = pos.unsqueeze(0)
