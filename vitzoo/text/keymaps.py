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
import typing
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
    (r"visual\.ln_post\.(weight|bias)", r"norm.\1"),  # CoCa's released towers: the pool's (below)
    (r"visual\.proj", "head.weight"),  # (D, E): transposed below
    # CoCa's attentional poolers (layers/attn_pooler.py); nn.MultiheadAttention's q/k/v as one
    # in_proj_weight where the pooler's width is the tokens', as three otherwise: split below
    *(
        (rf"visual\.{theirs}\.{part}", rf"attn_pool.{ours}.{repl}")
        for theirs, ours in (("attn_pool", "caption"), ("attn_pool_contrastive", "contrastive"))
        for part, repl in (
            ("query", "query"),
            (r"ln_([qk])\.(weight|bias)", r"ln_\1.\2"),
            (r"attn\.out_proj\.(weight|bias)", r"proj.\1"),
            (r"attn\.(in_proj_weight|in_proj_bias|[qkv]_proj_weight)", r"mha.\1"),
        )
    ),
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
    _coca_pool(visual, file=file)
    head = visual.get("head.weight")
    if head is not None and "visual.proj" in state:
        visual["head.weight"] = head.T.contiguous()
    for key in ("text_projection", "text.text_projection"):  # a (W, E) matrix (CLIP, PE-Core), not a Linear
        if key in state:
            text["proj.weight"] = state[key].T.contiguous()
    _text_positions(text)
    return Split(visual, text, scale, bias)


_COCA_POOLERS = {"attn_pool.caption": "visual.attn_pool", "attn_pool.contrastive": "visual.attn_pool_contrastive"}


def _coca_pool(visual: StateDict, *, file: str) -> None:
    """CoCa's poolers in vitzoo's names: nn.MultiheadAttention's q and k, v projections as `q` and
    `kv`; the released setup's ln_post (one pooler, no contrastive one) as the pool's norm."""
    for pooler, theirs in _COCA_POOLERS.items():
        parts = {k.rsplit(".", 1)[1]: visual.pop(k) for k in list(visual) if k.startswith(f"{pooler}.mha.")}
        if parts:
            q_w, kv_w, bias = _q_and_kv(parts, f"{file}: {theirs}.attn")
            dim = q_w.shape[0]
            visual[f"{pooler}.q.weight"], visual[f"{pooler}.kv.weight"] = q_w, kv_w
            visual[f"{pooler}.q.bias"], visual[f"{pooler}.kv.bias"] = bias[:dim], bias[dim:]
    if "attn_pool.caption.query" in visual and "attn_pool.contrastive.query" not in visual:
        for kind in ("weight", "bias"):  # open_clip's released CoCa norms after its pooler
            if f"norm.{kind}" in visual:
                visual[f"attn_pool.norm.{kind}"] = visual.pop(f"norm.{kind}")


def _q_and_kv(parts: StateDict, what: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q weight, k and v weights stacked, the q/k/v bias) of an nn.MultiheadAttention's tensors: one
    in_proj_weight where its key width is its own, q/k/v_proj_weight where it is not."""
    bias = parts.get("in_proj_bias")
    packed = parts.get("in_proj_weight")
    split = [parts.get(f"{p}_proj_weight") for p in "qkv"]
    dim = bias.shape[0] // 3 if bias is not None and bias.ndim == 1 else 0
    if packed is not None and not any(w is not None for w in split) and dim and packed.shape[0] == 3 * dim:
        q_w, kv_w = packed[:dim], packed[dim:]
    elif packed is None and all(w is not None and w.ndim == 2 and w.shape[0] == dim for w in split) and dim:
        q_w, kv_w = typing.cast(torch.Tensor, split[0]), torch.cat(typing.cast(list[torch.Tensor], split[1:]))
    else:
        found = ", ".join(f"{k} {tuple(v.shape)}" for k, v in sorted(parts.items()))
        raise WeightsMismatchError(
            f"{what} has {found}; expected in_proj_bias (3 x width) with in_proj_weight (3 x width rows) or "
            "q_proj_weight, k_proj_weight and v_proj_weight (width rows each)"
        )
    assert bias is not None
    return q_w, kv_w, bias


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
