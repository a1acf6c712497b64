"""Checkpoint layouts -> vitzoo's parameter names, one explicit key map per layout.

vitzoo's names are timm's (see model.py), so "timm" and "vitzoo" checkpoints need no renaming.
Every other layout is a table of (pattern, our name) rules plus the few tensor reshapes it needs:

    layout        detected by the key                                   source
    timm/vitzoo   patch_embed.proj.weight                               timm, vitzoo save_pretrained
    transformers  [vit.|deit.]embeddings.patch_embeddings.projection.weight
                                                                        ViTModel, ViTForImageClassification,
                                                                        DeiTForImageClassificationWithTeacher
    torchvision   conv_proj.weight                                      torchvision vit_b_16 & co.
    npz           [opt/target/|params/]embedding/kernel                 Google's original JAX/Flax ViT

The layout is detected from the keys, never from the file name. A key that no rule of the
detected layout maps is reported as unexpected (strict) rather than silently dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import UnknownFormatError, WeightsMismatchError
from .files import StateDict

FORMATS = ("vitzoo", "transformers", "torchvision", "npz")
TRANSFORMERS_EPS = 1e-12  # transformers' ViT/DeiT default LayerNorm eps (timm and Google: 1e-6)


@dataclass
class Converted:
    """A checkpoint in vitzoo's names, with what its layout tells about the architecture."""

    state: StateDict
    format: str
    hints: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields the layout implies


# ----------------------------------------------------------------------------- detection
def detect_format(keys: list[str], *, file: str = "<state dict>") -> str:
    """The layout of a checkpoint, from its keys."""
    keyset = set(keys)
    if "patch_embed.proj.weight" in keyset or any(k.startswith("blocks.0.") for k in keyset):
        return "vitzoo"
    if any(re.fullmatch(r"((vit|deit)\.)?embeddings\.patch_embeddings\.projection\.weight", k) for k in keyset):
        return "transformers"
    if "conv_proj.weight" in keyset or "encoder.pos_embedding" in keyset:
        return "torchvision"
    if any(k.endswith("embedding/kernel") or k.startswith("Transformer/") for k in keyset):
        return "npz"
    sample = ", ".join(sorted(keys)[:6]) or "(no keys)"
    raise UnknownFormatError(
        f"{file}: unknown checkpoint layout (first keys: {sample}); vitzoo reads timm/vitzoo "
        "(patch_embed.proj.weight), transformers (embeddings.patch_embeddings.projection.weight), "
        "torchvision (conv_proj.weight) and Google .npz (embedding/kernel) checkpoints"
    )


def to_vitzoo(state: StateDict, *, file: str = "<state dict>", fmt: str | None = None) -> Converted:
    """Rename (and reshape) a checkpoint of any known layout to vitzoo's names."""
    fmt = fmt or detect_format(list(state), file=file)
    if fmt not in _CONVERTERS:
        raise UnknownFormatError(f"{file}: unknown checkpoint layout {fmt!r}; known: {', '.join(FORMATS)}")
    return _CONVERTERS[fmt](state, file)


# ----------------------------------------------------------------------------- rule engine
Rule = tuple[str, str]  # (regex over the source key, replacement in our names)


def _apply_rules(state: StateDict, rules: list[Rule], ignore: list[str], *, file: str, fmt: str) -> StateDict:
    compiled = [(re.compile(p), r) for p, r in rules]
    ignored = [re.compile(p) for p in ignore]
    out: StateDict = {}
    unmapped: list[str] = []
    for key, value in state.items():
        for pattern, repl in compiled:
            if pattern.fullmatch(key):
                out[pattern.sub(repl, key)] = value
                break
        else:
            if not any(p.fullmatch(key) for p in ignored):
                unmapped.append(key)
    if unmapped:
        raise WeightsMismatchError(
            f"{file}: {len(unmapped)} key(s) of the {fmt} layout have no vitzoo counterpart: "
            f"{', '.join(sorted(unmapped)[:20])}{' ...' if len(unmapped) > 20 else ''}"
        )
    return out


def _merge_qkv(state: StateDict, *, file: str) -> StateDict:
    """Concatenate separate q/k/v projections (blocks.i.attn.{q,k,v}.*) into blocks.i.attn.qkv.*,
    in the q, k, v order that our fused Linear splits them back into."""
    out: StateDict = {}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        m = re.fullmatch(r"(blocks\.\d+\.attn)\.([qkv])\.(weight|bias)", key)
        if m:
            parts.setdefault(f"{m.group(1)}.qkv.{m.group(3)}", {})[m.group(2)] = value
        else:
            out[key] = value
    for key, qkv in parts.items():
        missing = [n for n in "qkv" if n not in qkv]
        if missing:
            raise WeightsMismatchError(
                f"{file}: {key} cannot be assembled, the {'/'.join(missing)} projection is missing"
            )
        dtypes = {t.dtype for t in qkv.values()}
        if len(dtypes) > 1:  # torch.cat would promote silently (int8 parts would become floats)
            found = ", ".join(f"{n}: {str(qkv[n].dtype).removeprefix('torch.')}" for n in "qkv")
            raise WeightsMismatchError(f"{file}: {key} cannot be assembled, its q/k/v parts differ in dtype ({found})")
        out[key] = torch.cat([qkv["q"], qkv["k"], qkv["v"]], dim=0)
    return out


# ----------------------------------------------------------------------------- timm / vitzoo
def _from_vitzoo(state: StateDict, file: str) -> Converted:
    # Identical names; the representation layer of old timm checkpoints is `pre_logits.fc` too.
    return Converted(dict(state), "vitzoo")


# ----------------------------------------------------------------------------- transformers
_HF_LAYER = r"(?:encoder\.layer|layers)\.(\d+)\."  # transformers <5 saved names | 5.x module names
TRANSFORMERS_RULES: list[Rule] = [
    (r"(?:vit\.|deit\.)?embeddings\.cls_token", "cls_token"),
    (r"(?:vit\.|deit\.)?embeddings\.distillation_token", "dist_token"),
    (r"(?:vit\.|deit\.)?embeddings\.position_embeddings", "pos_embed"),
    (r"(?:vit\.|deit\.)?embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.attention\.query\.(weight|bias)", r"blocks.\1.attn.q.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.attention\.key\.(weight|bias)", r"blocks.\1.attn.k.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.attention\.value\.(weight|bias)", r"blocks.\1.attn.v.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.q_proj\.(weight|bias)", r"blocks.\1.attn.q.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.k_proj\.(weight|bias)", r"blocks.\1.attn.k.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.v_proj\.(weight|bias)", r"blocks.\1.attn.v.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.output\.dense\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}intermediate\.dense\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}output\.dense\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}mlp\.fc([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (rf"(?:vit\.|deit\.)?{_HF_LAYER}layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
    (r"(?:vit\.|deit\.)?layernorm\.(weight|bias)", r"norm.\1"),
    (r"(?:vit\.|deit\.)?pooler\.dense\.(weight|bias)", r"pre_logits.fc.\1"),  # ViTModel's pooler (Linear + Tanh)
    (r"classifier\.(weight|bias)", r"head.\1"),  # ViTForImageClassification
    (r"cls_classifier\.(weight|bias)", r"head.\1"),  # DeiTForImageClassificationWithTeacher
    (r"distillation_classifier\.(weight|bias)", r"head_dist.\1"),
]
# The masked-image-modelling token is unused by a classifier.
TRANSFORMERS_IGNORE = [r"(?:vit\.|deit\.)?embeddings\.mask_token"]


def _from_transformers(state: StateDict, file: str) -> Converted:
    out = _merge_qkv(
        _apply_rules(state, TRANSFORMERS_RULES, TRANSFORMERS_IGNORE, file=file, fmt="transformers"), file=file
    )
    return Converted(out, "transformers", {"norm_eps": TRANSFORMERS_EPS})


# ----------------------------------------------------------------------------- torchvision
_TV_LAYER = r"encoder\.layers\.encoder_layer_(\d+)\."
TORCHVISION_RULES: list[Rule] = [
    (r"class_token", "cls_token"),
    (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"encoder\.pos_embedding", "pos_embed"),
    (rf"{_TV_LAYER}ln_1\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (rf"{_TV_LAYER}ln_2\.(weight|bias)", r"blocks.\1.norm2.\2"),
    # nn.MultiheadAttention packs q, k, v in one in_proj in the same order as our qkv Linear.
    (rf"{_TV_LAYER}self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (rf"{_TV_LAYER}self_attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_TV_LAYER}mlp\.(?:0|linear_1)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),  # MLPBlock v2 | v1 names
    (rf"{_TV_LAYER}mlp\.(?:3|linear_2)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"encoder\.ln\.(weight|bias)", r"norm.\1"),
    (r"heads\.pre_logits\.(weight|bias)", r"pre_logits.fc.\1"),
    (r"heads\.head\.(weight|bias)", r"head.\1"),
]


def _from_torchvision(state: StateDict, file: str) -> Converted:
    return Converted(_apply_rules(state, TORCHVISION_RULES, [], file=file, fmt="torchvision"), "torchvision")


# ----------------------------------------------------------------------------- Google .npz
# Flax stores Dense kernels as (in, out) and convolutions as (H, W, in, out); attention kernels
# keep the heads axis: query/key/value (D, heads, head_dim), out (heads, head_dim, D).
_NPZ_BLOCK = r"Transformer/encoderblock_(\d+)/"
_NPZ_ATTN = _NPZ_BLOCK + r"MultiHeadDotProductAttention_1/"


def _dense(w: torch.Tensor) -> torch.Tensor:
    return w.T


def _qkv_kernel(w: torch.Tensor) -> torch.Tensor:  # (D, heads, head_dim) -> (heads * head_dim, D)
    return w.reshape(w.shape[0], -1).T


def _out_kernel(w: torch.Tensor) -> torch.Tensor:  # (heads, head_dim, D) -> (D, heads * head_dim)
    return w.reshape(-1, w.shape[-1]).T


def _flat(w: torch.Tensor) -> torch.Tensor:
    return w.reshape(-1)


def _conv(w: torch.Tensor) -> torch.Tensor:  # HWIO -> OIHW
    return w.permute(3, 2, 0, 1)


def _same(w: torch.Tensor) -> torch.Tensor:
    return w


NPZ_RULES: list[tuple[str, str, Callable[[torch.Tensor], torch.Tensor]]] = [
    (r"embedding/kernel", "patch_embed.proj.weight", _conv),
    (r"embedding/bias", "patch_embed.proj.bias", _same),
    (r"cls", "cls_token", _same),
    (r"Transformer/posembed_input/pos_embedding", "pos_embed", _same),
    (r"Transformer/encoder_norm/scale", "norm.weight", _same),
    (r"Transformer/encoder_norm/bias", "norm.bias", _same),
    (_NPZ_BLOCK + r"LayerNorm_0/scale", r"blocks.\1.norm1.weight", _same),
    (_NPZ_BLOCK + r"LayerNorm_0/bias", r"blocks.\1.norm1.bias", _same),
    (_NPZ_BLOCK + r"LayerNorm_2/scale", r"blocks.\1.norm2.weight", _same),
    (_NPZ_BLOCK + r"LayerNorm_2/bias", r"blocks.\1.norm2.bias", _same),
    (_NPZ_ATTN + r"query/kernel", r"blocks.\1.attn.q.weight", _qkv_kernel),
    (_NPZ_ATTN + r"key/kernel", r"blocks.\1.attn.k.weight", _qkv_kernel),
    (_NPZ_ATTN + r"value/kernel", r"blocks.\1.attn.v.weight", _qkv_kernel),
    (_NPZ_ATTN + r"query/bias", r"blocks.\1.attn.q.bias", _flat),
    (_NPZ_ATTN + r"key/bias", r"blocks.\1.attn.k.bias", _flat),
    (_NPZ_ATTN + r"value/bias", r"blocks.\1.attn.v.bias", _flat),
    (_NPZ_ATTN + r"out/kernel", r"blocks.\1.attn.proj.weight", _out_kernel),
    (_NPZ_ATTN + r"out/bias", r"blocks.\1.attn.proj.bias", _same),
    (_NPZ_BLOCK + r"MlpBlock_3/Dense_0/kernel", r"blocks.\1.mlp.fc1.weight", _dense),
    (_NPZ_BLOCK + r"MlpBlock_3/Dense_0/bias", r"blocks.\1.mlp.fc1.bias", _same),
    (_NPZ_BLOCK + r"MlpBlock_3/Dense_1/kernel", r"blocks.\1.mlp.fc2.weight", _dense),
    (_NPZ_BLOCK + r"MlpBlock_3/Dense_1/bias", r"blocks.\1.mlp.fc2.bias", _same),
    (r"pre_logits/kernel", "pre_logits.fc.weight", _dense),  # the ImageNet-21k representation layer
    (r"pre_logits/bias", "pre_logits.fc.bias", _same),
    (r"head/kernel", "head.weight", _dense),
    (r"head/bias", "head.bias", _same),
]
NPZ_PREFIXES = ("opt/target/", "params/")  # training-state and big_vision wrappers


def _from_npz(state: StateDict, file: str) -> Converted:
    prefix = next((p for p in NPZ_PREFIXES if f"{p}embedding/kernel" in state), "")
    if prefix:
        # Optimizer slots and other non-parameter arrays live outside the prefix.
        state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    compiled = [(re.compile(p), r, fn) for p, r, fn in NPZ_RULES]
    out: StateDict = {}
    unmapped: list[str] = []
    hints: dict[str, Any] = {}
    for key, value in state.items():
        for pattern, repl, fn in compiled:
            if pattern.fullmatch(key):
                out[pattern.sub(repl, key)] = fn(value).contiguous()
                if key.endswith("query/kernel") and value.ndim == 3:
                    hints["num_heads"] = int(value.shape[1])  # the head count is stored in the shape
                break
        else:
            unmapped.append(key)
    if unmapped:
        raise WeightsMismatchError(
            f"{file}: {len(unmapped)} array(s) of the Google .npz layout have no vitzoo counterpart: "
            f"{', '.join(sorted(unmapped)[:20])}{' ...' if len(unmapped) > 20 else ''}"
        )
    return Converted(_merge_qkv(out, file=file), "npz", hints)


_CONVERTERS: dict[str, Callable[[StateDict, str], Converted]] = {
    "vitzoo": _from_vitzoo,
    "timm": _from_vitzoo,
    "transformers": _from_transformers,
    "torchvision": _from_torchvision,
    "npz": _from_npz,
}


# ----------------------------------------------------------------------------- vitzoo -> timm
def to_timm(state: StateDict, *, what: str = "model") -> StateDict:
    """Our state dict in timm's names. timm 1.x's VisionTransformer has no representation layer
    (timm drops `pre_logits.*` when loading), so a model that has one cannot be exported."""
    if any(k.startswith("pre_logits.") for k in state):
        raise WeightsMismatchError(
            f"{what} has a representation layer (pre_logits.fc), which timm's VisionTransformer does "
            "not have: timm would drop it and compute different logits; export to 'vitzoo' instead"
        )
    if any(k.startswith("patch_embed.stem.") for k in state):
        raise WeightsMismatchError(
            f"{what} has a convolutional stem (patch_embed.stem.*), which timm's VisionTransformer builds only "
            "through a custom embed_layer: timm cannot load it by name; export to 'vitzoo' instead"
        )
    return dict(state)


# ----------------------------------------------------------------------------- config from weights
def infer_config_fields(state: StateDict, *, file: str = "<state dict>") -> dict[str, Any]:
    """The ViTConfig fields a vitzoo-named state dict determines by its shapes. The head count is
    not among them (no tensor depends on it); callers get it from a config or the layout hints."""
    try:
        proj = state["patch_embed.proj.weight"]
        pos = state.get("pos_embed")
    except KeyError as e:
        raise WeightsMismatchError(f"{file}: cannot infer the architecture, key {e} is missing") from None
    for key, tensor, ndim in (("patch_embed.proj.weight", proj, 4), ("pos_embed", pos, 3)):
        if tensor is not None and tensor.ndim != ndim:
            raise WeightsMismatchError(f"{file}: {key} has shape {tuple(tensor.shape)}; expected {ndim} dimensions")
    embed_dim, in_chans, ph, pw = proj.shape
    # A convolutional stem: conv weights at stem.0, stem.3, ... (conv, BatchNorm, ReLU per stage).
    stem = [state[f"patch_embed.stem.{3 * i}.weight"] for i in range(64) if f"patch_embed.stem.{3 * i}.weight" in state]
    conv_stem: tuple[int, ...] = ()
    if stem:
        conv_stem = tuple(int(w.shape[0]) for w in stem)
        in_chans = stem[0].shape[1]
        ph = pw = 2 ** (len(stem) + 1)
    depth = len({int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})
    class_token, distilled = "cls_token" in state, "dist_token" in state
    fields: dict[str, Any] = dict(
        embed_dim=int(embed_dim),
        in_chans=int(in_chans),
        patch_size=(int(ph), int(pw)) if ph != pw else int(ph),
        depth=depth,
        class_token=class_token,
        distilled=distilled,
        final_norm="norm.weight" in state,
        qkv_bias="blocks.0.attn.qkv.bias" in state if depth else True,
        global_pool="token" if class_token else "avg",
        conv_stem=conv_stem,
    )
    if depth:
        fields["mlp_ratio"] = state["blocks.0.mlp.fc1.weight"].shape[0] / embed_dim
    if "pre_logits.fc.weight" in state:
        fields["representation_size"] = int(state["pre_logits.fc.weight"].shape[0])
    fields["num_classes"] = int(state["head.weight"].shape[0]) if "head.weight" in state else 0
    if pos is None:
        fields["pos_embed"] = "sincos"
    else:
        n = pos.shape[1] - int(class_token) - int(distilled)
        side = round(n**0.5)
        if side * side == n:  # a square grid is the only one the token count alone determines
            fields["img_size"] = side * int(ph) if ph == pw else (side * int(ph), side * int(pw))
    return fields
