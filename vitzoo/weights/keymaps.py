"""Checkpoint layouts -> vitzoo's parameter names, one explicit key map per layout.

vitzoo's names are timm's (see vitzoo/model/), so "timm" and "vitzoo" checkpoints need no renaming.
Every other layout is a table of (pattern, our name) rules plus the few tensor reshapes it needs:

    layout        detected by the key                                   source
    timm/vitzoo   patch_embed.proj.weight                               timm (its Eva and BEiT: gamma_1/2 renamed;
                                                                        BEiT's attn.relative_position_bias_table
                                                                        held by the block as rel_pos),
                                                                        vitzoo save_pretrained
                  embeds.proj.weight                                    timm's NaFlexVit (its `embeds`: a Linear
                                                                        over (row, column, channel) patches, a
                                                                        (1, rows, columns, D) table of the patches)
    transformers  [vit.|deit.|ijepa.|dpt.]embeddings.patch_embeddings.projection.weight
                                                                        ViTModel, ViTForImageClassification,
                                                                        DeiTForImageClassificationWithTeacher,
                                                                        ViTMAEModel, ViTMSNModel, IJepaModel,
                                                                        DPTModel (DPTFor...: the backbone),
                                                                        InternVLVisionModel, Dinov2Model,
                                                                        Dinov2WithRegistersModel, BeitModel,
                                                                        Data2VecVisionModel (and their
                                                                        ...ForImageClassification)
                  [vision_model.]embeddings.patch_embedding.weight      CLIPVisionModel[WithProjection],
                                                                        SiglipVisionModel, CLIPModel,
                                                                        SiglipModel, Siglip2Model, MetaClip2 and
                                                                        ChineseCLIP models (their vision tower;
                                                                        SigLIP 2's patch Linear becomes a
                                                                        convolution)
                  embeddings.patch_embeddings.weight                    DINOv3ViTModel, Sapiens2Model's modules
                                                                        (RMSNorm: no norm.bias; q/k/v kept apart)
                  [backbone.]blocks.0.attn.wq.weight                    Sapiens2 as transformers saves it (Meta's
                                                                        names: the facebook/sapiens2-* files)
                  [vision_model.]embeddings.patch_embed.weight          Aimv2VisionModel, Aimv2Model (its
                                                                        vision tower; use_head's pool, the
                                                                        visual_projection as the head)
                  image_encoder.preprocessor.patchifier.proj.weight     Apple's AIMv2 LiT as its remote code
                                                                        names it (fused qkv)
                  [vision_encoder.]patch_embed.projection.weight        SamVisionModel, SamModel (its image
                                                                        encoder; the (1, rows, columns, D)
                                                                        table flattened)
    tips          [vision_encoder.]register_tokens                      TIPS / TIPSv2 (Google's names, which
                                                                        transformers' Tipsv2VisionModel and
                                                                        Tipsv2Model save)
    radio         radio_model.model.patch_generator.embedder.weight     NVIDIA's C-RADIO releases, transformers'
                                                                        RadioModel (which saves NVIDIA's names)
    torchvision   conv_proj.weight                                      torchvision vit_b_16 & co.
    npz           [opt/target/|params/]embedding/kernel                 Google's original JAX/Flax ViT

The layout is detected from the keys, never from the file name. A key that no rule of the
detected layout maps is reported as unexpected (strict) rather than silently dropped.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import UnknownFormatError, WeightsMismatchError
from .files import StateDict
from .norm_eps import NORM_EPS

FORMATS = ("vitzoo", "transformers", "tips", "radio", "torchvision", "npz")


@dataclass
class Converted:
    """A checkpoint in vitzoo's names, with what its layout tells about the architecture."""

    state: StateDict
    format: str
    hints: dict[str, Any] = field(default_factory=dict)  # ViTConfig fields the layout implies
    # How the layout's own library fits its position table to another grid (checkpoint.POS_MODES)
    pos_mode: str = "bicubic"


# ----------------------------------------------------------------------------- detection
def detect_format(keys: list[str], *, file: str = "<state dict>") -> str:
    """The layout of a checkpoint, from its keys."""
    keyset = set(keys)
    if any(re.fullmatch(rf"{_TIPS}{_TIPS_KEY}", k) for k in keyset):
        return "tips"
    if any(re.fullmatch(_SAPIENS2_KEY, k) for k in keyset):  # before timm's: its blocks are blocks.i too
        return "transformers"
    if "patch_embed.proj.weight" in keyset or any(k.startswith("blocks.0.") for k in keyset):
        return "vitzoo"
    if any(re.fullmatch(rf"{_HF}embeddings\.patch_embeddings\.projection\.weight", k) for k in keyset):
        return "transformers"
    if any(re.fullmatch(_SAM_PATCH_KEY, k) for k in keyset) or _is_sam3(keyset):  # SAM, SAM 3
        return "transformers"
    if any(re.fullmatch(_CLIP_PATCH_KEY, k) for k in keyset) or _DINOV3_PATCH_KEY in keyset:
        return "transformers"
    if any(re.fullmatch(_AIMV2_PATCH_KEY, k) for k in keyset) or _APPLE_AIMV2_KEY in keyset:
        return "transformers"
    if f"{_RADIO}patch_generator.embedder.weight" in keyset:
        return "radio"
    if "conv_proj.weight" in keyset or "encoder.pos_embedding" in keyset:
        return "torchvision"
    if any(k.endswith("embedding/kernel") or k.startswith("Transformer/") for k in keyset):
        return "npz"
    sample = ", ".join(sorted(keys)[:6]) or "(no keys)"
    raise UnknownFormatError(
        f"{file}: unknown checkpoint layout (first keys: {sample}); vitzoo reads timm/vitzoo "
        "(patch_embed.proj.weight), transformers (embeddings.patch_embeddings.projection.weight; CLIP and "
        "SigLIP: [vision_model.]embeddings.patch_embedding.weight), RADIO (radio_model.model.patch_generator.*), "
        "torchvision (conv_proj.weight) and Google .npz (embedding/kernel) checkpoints"
    )


def to_vitzoo(state: StateDict, *, file: str = "<state dict>", fmt: str | None = None) -> Converted:
    """Rename (and reshape) a checkpoint of any known layout to vitzoo's names."""
    fmt = fmt or detect_format(list(state), file=file)
    if fmt not in _CONVERTERS:
        raise UnknownFormatError(f"{file}: unknown checkpoint layout {fmt!r}; known: {', '.join(FORMATS)}")
    converted = _CONVERTERS[fmt](state, file)
    registers = converted.state.get("reg_token")
    if registers is not None and registers.ndim == 3 and registers.shape[1] == 0:
        # no registers, kept as an empty tensor (transformers' DINOv3 with num_register_tokens=0)
        del converted.state["reg_token"]
    return converted


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


def merge_qkv(state: StateDict, *, file: str) -> StateDict:
    """Concatenate separate q/k/v projections (blocks.i.attn.{q,k,v}.*) into blocks.i.attn.qkv.*,
    in the q, k, v order that our fused Linear splits them back into."""
    return _merge_parts(state, r"(blocks\.\d+\.attn)\.(q|k|v)\.(weight|bias)", ("q", "k", "v"), "qkv", file=file)


def _merge_gate(state: StateDict, *, file: str) -> StateDict:
    """Pack a SwiGLU's separate gate and input projections (blocks.i.mlp.{gate,up}.*) into
    blocks.i.mlp.fc1.*, gate first: timm's SwiGLUPacked, and the layout DINOv2 saves."""
    return _merge_parts(state, r"(blocks\.\d+\.mlp)\.(gate|up)\.(weight|bias)", ("gate", "up"), "fc1", file=file)


def _merge_parts(state: StateDict, pattern: str, names: tuple[str, ...], target: str, *, file: str) -> StateDict:
    """Concatenate the projections `names` that `pattern` matches (groups: module, part, weight or
    bias) into one `<module>.<target>.<weight|bias>`, in the order of `names`."""
    out: StateDict = {}
    parts: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in state.items():
        m = re.fullmatch(pattern, key)
        if m:
            parts.setdefault(f"{m.group(1)}.{target}.{m.group(3)}", {})[m.group(2)] = value
        else:
            out[key] = value
    for key, found in parts.items():
        missing = [n for n in names if n not in found]
        if missing:
            raise WeightsMismatchError(
                f"{file}: {key} cannot be assembled, the {'/'.join(missing)} projection is missing"
            )
        dtypes = {t.dtype for t in found.values()}
        if len(dtypes) > 1:  # torch.cat would promote silently (int8 parts would become floats)
            listed = ", ".join(f"{n}: {str(found[n].dtype).removeprefix('torch.')}" for n in names)
            sep = "/".join(names)
            raise WeightsMismatchError(f"{file}: {key} cannot be assembled, its {sep} parts differ in dtype ({listed})")
        out[key] = torch.cat([found[n] for n in names], dim=0)
    return out


# ----------------------------------------------------------------------------- timm / vitzoo
# timm's Eva (EVA-02, PE, RoPE-ViT, DINOv3) and BEiT name LayerScale's factors gamma_1 / gamma_2;
# BEiT's attention holds its relative position table, and the relpos ViT's attention its bias MLP,
# which vitzoo's block holds (layers/relpos_bias.py, relpos_mlp.py).
EVA_RULES: list[Rule] = [
    (r"blocks\.(\d+)\.gamma_([12])", r"blocks.\1.ls\2.gamma"),
    (r"blocks\.(\d+)\.attn\.relative_position_bias_table", r"blocks.\1.rel_pos.relative_position_bias_table"),
    (r"blocks\.(\d+)\.attn\.rel_pos\.(mlp\.fc[12]\.(?:weight|bias))", r"blocks.\1.rel_pos.\2"),
]
# The index buffer that BEiT's original checkpoints saved: rebuilt from the grid (timm drops it too).
_RELPOS_INDEX = re.compile(r"blocks\.\d+\.attn\.relative_position_index")


def _from_vitzoo(state: StateDict, file: str) -> Converted:
    # Identical names (timm's Eva differs in its LayerScale only); the representation layer of old
    # timm checkpoints is `pre_logits.fc` too.
    eva = [re.compile(p) for p, _ in EVA_RULES]
    hints: dict[str, Any] = {}
    if NAFLEX_PATCH_KEY in state:
        state, hints = _from_timm_naflex(state, file)
    if "neck.0.weight" in state:
        state = _from_timm_sam(state)
    out: StateDict = {}
    for key, value in state.items():
        if _RELPOS_INDEX.fullmatch(key):
            continue
        for pattern, (_, repl) in zip(eva, EVA_RULES):
            key = pattern.sub(repl, key) if pattern.fullmatch(key) else key
        out[key] = value
    return Converted(out, "vitzoo", hints)


def _from_timm_sam(state: StateDict) -> StateDict:
    """timm's SAM encoder (VisionTransformerSAM): its (1, rows, columns, D) table flattened row-major,
    its ClassifierHead's `head.fc` as the head. vitzoo's own saved SAM models pass unchanged."""
    out: StateDict = {}
    for key, value in state.items():
        if key == "pos_embed" and value.ndim == 4:
            value = value.reshape(1, value.shape[1] * value.shape[2], value.shape[3])
        out[re.sub(r"^head\.fc\.", "head.", key)] = value
    return out


def _to_timm_sam(state: StateDict, what: str) -> StateDict:
    """`_from_timm_sam` backwards: the table as (1, rows, columns, D) (a square grid: the only one
    its row count alone determines), the head as `head.fc`."""
    out: StateDict = {}
    for key, value in state.items():
        if key == "pos_embed":
            side = math.isqrt(value.shape[1])
            if side * side != value.shape[1]:
                raise WeightsMismatchError(
                    f"{what}: SAM's position table of {value.shape[1]} rows is no square grid, which timm's "
                    "(1, rows, columns, D) layout needs here; export to 'vitzoo' instead"
                )
            value = value.reshape(1, side, side, value.shape[2])
        out[re.sub(r"^head\.", "head.fc.", key)] = value
    return out


# timm's NaFlexVit keeps its patch projection, tokens and position table in `embeds`; the blocks,
# norms, pool and head have the names of its VisionTransformer (or Eva, with a rotary embedding).
NAFLEX_PATCH_KEY = "embeds.proj.weight"
_NAFLEX_EMBEDS = {"embeds.proj.bias": "patch_embed.proj.bias", "embeds.cls_token": "cls_token"}
_NAFLEX_EMBEDS["embeds.reg_token"] = "reg_token"
# pos_embed="factorized" (layers/pos_factorized.py): a (1, rows, D) and a (1, columns, D) table
_NAFLEX_EMBEDS.update({"embeds.pos_embed_y": "pos_embed_y", "embeds.pos_embed_x": "pos_embed_x"})


def _factorized_grid(out: StateDict, file: str) -> tuple[int, int] | None:
    """The (rows, columns) grid of NaFlexVit's factorized tables, None without them."""
    y, x = out.get("pos_embed_y"), out.get("pos_embed_x")
    if y is None and x is None:
        return None
    if y is None or x is None or y.dim() != 3 or x.dim() != 3 or y.shape[0] != 1 or x.shape[0] != 1:
        found = ", ".join(f"{k} {None if v is None else tuple(v.shape)}" for k, v in (("y", y), ("x", x)))
        raise WeightsMismatchError(
            f"{file}: embeds.pos_embed_y / embeds.pos_embed_x ({found}); expected both, (1, rows, D) and (1, columns, D)"
        )
    return int(y.shape[1]), int(x.shape[1])


def _from_timm_naflex(state: StateDict, file: str) -> tuple[StateDict, dict[str, Any]]:
    """NaFlexVit's `embeds.*` in ViT names: the Linear patch projection as the convolution, the
    (1, rows, columns, D) table flattened row-major. Its table covers the patches only (the prefix
    tokens have none: no_embed_class) and states the grid the model is built for."""
    out: StateDict = {}
    hints: dict[str, Any] = {}
    grid: tuple[int, int] | None = None
    unknown = [k for k in state if k.startswith("embeds.") and k not in (NAFLEX_PATCH_KEY, "embeds.pos_embed")]
    unknown = [k for k in unknown if k not in _NAFLEX_EMBEDS]
    if unknown:  # input / projection norms
        raise WeightsMismatchError(
            f"{file}: timm NaFlexVit key(s) {', '.join(sorted(unknown)[:8])} have no vitzoo counterpart; vitzoo "
            "reads NaFlexVit with a learned (rows, columns) table, factorized row and column tables or none, "
            "and no embedding norms"
        )
    for key, value in state.items():
        if key == NAFLEX_PATCH_KEY:
            out["patch_embed.proj.weight"] = value if value.dim() == 4 else _linear_patch_kernel(value, file=file)
        elif key == "embeds.pos_embed":
            if value.dim() != 4 or value.shape[0] != 1:
                raise WeightsMismatchError(
                    f"{file}: embeds.pos_embed has shape {tuple(value.shape)}; expected (1, rows, columns, D)"
                )
            out["pos_embed"] = value.reshape(1, value.shape[1] * value.shape[2], value.shape[3])
            grid = (int(value.shape[1]), int(value.shape[2]))
        else:
            out[_NAFLEX_EMBEDS.get(key, key)] = value
    grid = grid or _factorized_grid(out, file)
    if "cls_token" in out or "reg_token" in out:
        hints["no_embed_class"] = True
    if grid is not None:  # the model is built for the table's grid
        ph, pw = out["patch_embed.proj.weight"].shape[2:]
        size = (grid[0] * int(ph), grid[1] * int(pw))
        hints["img_size"] = size[0] if size[0] == size[1] else size
    return out, hints


# ----------------------------------------------------------------------------- transformers
# ViT, DeiT, ViTMAE and DINOv2 share one naming scheme (DINOv2 names its LayerNorms norm1/norm2 and
# adds LayerScale); CLIP and SigLIP share another (CLIP_RULES below).
_HF_LAYER = r"(?:encoder\.layer|layers)\.(\d+)\."  # transformers <5 saved names | 5.x module names
# the base model inside ViTFor..., DeiTFor..., ViTMAEForPreTraining, IJepaFor..., DPTFor..., BeitFor...,
# Data2VecVisionFor...
_HF = r"(?:vit\.|deit\.|ijepa\.|dpt\.|beit\.|data2vec_vision\.)?"
# BEiT's relative position table: in the attention (transformers < 5), in the layer (5.x)
_HF_RELPOS = rf"{_HF}{_HF_LAYER}(?:attention\.attention\.)?relative_position_bias\."
TRANSFORMERS_RULES: list[Rule] = [
    (rf"{_HF}embeddings\.cls_token", "cls_token"),
    (rf"{_HF}embeddings\.distillation_token", "dist_token"),
    (rf"{_HF}embeddings\.register_tokens", "reg_token"),  # Dinov2WithRegisters
    (rf"{_HF}embeddings\.position_embeddings", "pos_embed"),
    (rf"{_HF}embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_HF}{_HF_LAYER}attention\.attention\.query\.(weight|bias)", r"blocks.\1.attn.q.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.attention\.key\.(weight|bias)", r"blocks.\1.attn.k.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.attention\.value\.(weight|bias)", r"blocks.\1.attn.v.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.q_proj\.(weight|bias)", r"blocks.\1.attn.q.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.([qk])_norm\.weight", r"blocks.\1.attn.\2_norm.weight"),  # InternViT-6B
    (rf"{_HF}{_HF_LAYER}attention\.k_proj\.(weight|bias)", r"blocks.\1.attn.k.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.v_proj\.(weight|bias)", r"blocks.\1.attn.v.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.output\.dense\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_HF}{_HF_LAYER}attention\.projection_layer\.(weight|bias)", r"blocks.\1.attn.proj.\2"),  # InternViT
    (rf"{_HF}{_HF_LAYER}intermediate\.dense\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (rf"{_HF}{_HF_LAYER}output\.dense\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_HF}{_HF_LAYER}mlp\.fc([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    # DINOv2-g's SwiGLU: saved packed (weights_in: gate, then input), or as 5.x's modules apart
    (rf"{_HF}{_HF_LAYER}mlp\.weights_in\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (rf"{_HF}{_HF_LAYER}mlp\.weights_out\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_HF}{_HF_LAYER}mlp\.(gate|up)_proj\.(weight|bias)", r"blocks.\1.mlp.\2.\3"),
    (rf"{_HF}{_HF_LAYER}mlp\.down_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_HF}{_HF_LAYER}layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (rf"{_HF}{_HF_LAYER}layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
    (rf"{_HF}{_HF_LAYER}norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),  # DINOv2
    (rf"{_HF}{_HF_LAYER}layer_scale([12])\.lambda1", r"blocks.\1.ls\2.gamma"),  # DINOv2
    (rf"{_HF}{_HF_LAYER}lambda_([12])", r"blocks.\1.ls\2.gamma"),  # InternViT
    (rf"{_HF}layernorm\.(weight|bias)", r"norm.\1"),
    (rf"{_HF}pooler\.dense\.(weight|bias)", r"pre_logits.fc.\1"),  # ViTModel's pooler (Linear + Tanh)
    (rf"{_HF}pooler\.layernorm\.(weight|bias)", r"fc_norm.\1"),  # BEiT's mean pooling, then its LayerNorm
    (rf"{_HF_RELPOS}relative_position_bias_table", r"blocks.\1.rel_pos.relative_position_bias_table"),
    (r"classifier\.(weight|bias)", r"head.\1"),  # ViTForImageClassification
    (r"cls_classifier\.(weight|bias)", r"head.\1"),  # DeiTForImageClassificationWithTeacher
    (r"distillation_classifier\.(weight|bias)", r"head_dist.\1"),
]
# The masked-image-modelling token is unused by an encoder; ViTMAEForPreTraining's decoder too,
# and DPTForDepthEstimation's / DPTForSemanticSegmentation's neck and heads (the backbone is read).
TRANSFORMERS_IGNORE = [
    rf"{_HF}embeddings\.mask_token",
    rf"{_HF_RELPOS}relative_position_index",  # BEiT's index, rebuilt from the grid
    r"decoder\..*",
    r"neck\..*",
    r"(?:auxiliary_)?head\.(?:head|projection)\..*",
]

_V = r"(?:vision_model\.)?"  # the vision tower inside CLIP/SigLIP models (5.x SiglipVisionModel saves none)
_CLIP_PATCH_KEY = rf"{_V}embeddings\.patch_embedding\.weight"
_CLIP_LAYER = rf"{_V}encoder\.layers\.(\d+)\."
CLIP_RULES: list[Rule] = [
    (rf"{_V}embeddings\.class_embedding", "cls_token"),  # (D,): reshaped below
    (rf"{_V}embeddings\.patch_embedding\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_V}embeddings\.position_embedding\.weight", "pos_embed"),  # an nn.Embedding (N, D): reshaped below
    (rf"{_V}pre_layrnorm\.(weight|bias)", r"norm_pre.\1"),  # sic: transformers' CLIP spells it so
    (rf"{_CLIP_LAYER}self_attn\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_CLIP_LAYER}self_attn\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_CLIP_LAYER}layer_norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (rf"{_CLIP_LAYER}mlp\.fc([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    (rf"{_V}post_layernorm\.(weight|bias)", r"norm.\1"),
    # SigLIP's attention-pooling head: an nn.MultiheadAttention whose packed in_proj is split below
    # into our query projection and key-value projection.
    (rf"{_V}head\.probe", "attn_pool.latent"),
    (rf"{_V}head\.attention\.in_proj_(weight|bias)", r"attn_pool.in_proj.\1"),
    (rf"{_V}head\.attention\.out_proj\.(weight|bias)", r"attn_pool.proj.\1"),
    (rf"{_V}head\.layernorm\.(weight|bias)", r"attn_pool.norm.\1"),
    (rf"{_V}head\.mlp\.fc([12])\.(weight|bias)", r"attn_pool.mlp.fc\1.\2"),
    (r"visual_projection\.weight", "head.weight"),  # CLIP's projection to the joint space, no bias
]
# A whole CLIP / SigLIP model also holds its text tower and the similarity's scale (and bias);
# old CLIP files hold the position ids buffer.
CLIP_IGNORE = [
    r"text_model\..*",
    r"text_projection\.weight",
    r"logit_scale",
    r"logit_bias",
    rf"{_V}embeddings\.position_ids",
]


# DINOv3ViTModel: separate q/k/v projections, the key without bias (DINOv3 masks it: our q_bias and
# v_bias, k_bias=False), and an MLP up_proj / down_proj, with a gate_proj beside up_proj when gated
# (SwiGLU: silu(gate) * up). transformers 5 saves the encoder's layers as layer.i, its modules are model.layer.i.
_DINOV3_PATCH_KEY = "embeddings.patch_embeddings.weight"
_D3_LAYER = r"(?:model\.)?layer\.(\d+)\."
DINOV3_RULES: list[Rule] = [
    (r"embeddings\.cls_token", "cls_token"),
    (r"embeddings\.register_tokens", "reg_token"),
    (r"embeddings\.patch_embeddings\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_D3_LAYER}attention\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_D3_LAYER}attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_D3_LAYER}attention\.([qk])_norm\.weight", r"blocks.\1.attn.\2_norm.weight"),  # Sapiens2
    (rf"{_D3_LAYER}norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (rf"{_D3_LAYER}layer_scale([12])\.lambda1", r"blocks.\1.ls\2.gamma"),
    (rf"{_D3_LAYER}mlp\.gate_proj\.(weight|bias)", r"blocks.\1.mlp.fc1_g.\2"),
    (rf"{_D3_LAYER}mlp\.up_proj\.(weight|bias)", r"blocks.\1.mlp.up.\2"),  # renamed below
    (rf"{_D3_LAYER}mlp\.down_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (r"norm\.(weight|bias)", r"norm.\1"),
]
DINOV3_IGNORE = [r"embeddings\.mask_token"]


def _from_transformers_dinov3(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, DINOV3_RULES, DINOV3_IGNORE, file=file, fmt="transformers (DINOv3)")
    gated = any(k.endswith(".mlp.fc1_g.weight") for k in out)
    for key in [k for k in out if ".mlp.up." in k]:  # the gate's partner, or the plain MLP's fc1
        out[key.replace(".mlp.up.", ".mlp.fc1_x." if gated else ".mlp.fc1.")] = out.pop(key)
    if "norm.weight" in out and "norm.bias" not in out:  # Sapiens2 (RMSNorm): q/k/v apart, as timm's
        return _sapiens2_projections(out)
    return Converted(merge_qkv(_q_and_v_biases(out), file=file), "transformers", {"norm_eps": NORM_EPS["dinov3"]})


def _q_and_v_biases(out: StateDict) -> StateDict:
    """Separate q and v biases beside a bias-free key (DINOv3, BEiT) as vitzoo's fused layout holds
    them: `attn.q_bias`, `attn.v_bias` (k_bias=False)."""
    for key in [k for k in out if k.endswith(".attn.q.bias")]:
        block = key.removesuffix(".q.bias")
        if f"{block}.k.bias" not in out and f"{block}.v.bias" in out:  # the key's bias is zero
            out[f"{block}.q_bias"], out[f"{block}.v_bias"] = out.pop(key), out.pop(f"{block}.v.bias")
    return out


# Aimv2VisionModel (and Aimv2Model's vision_model): RMSNorms named rms_norm*, one after the patch
# embedding; separate q/k/v; the MLP's gate_proj / up_proj / down_proj are timm's SwiGLU fc1_g / fc1_x / fc2.
_AIMV2_PATCH_KEY = rf"{_V}embeddings\.patch_embed\.weight"
_A2_LAYER = rf"{_V}encoder\.layers\.(\d+)\."
AIMV2_RULES: list[Rule] = [
    (rf"{_V}embeddings\.patch_embed\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_V}embeddings\.rms_norm\.weight", "patch_embed.norm.weight"),
    (rf"{_V}embeddings\.position_embedding\.weight", "pos_embed"),  # an nn.Embedding (N, D): reshaped below
    (rf"{_A2_LAYER}attention\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_A2_LAYER}attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_A2_LAYER}ffn\.gate_proj\.(weight|bias)", r"blocks.\1.mlp.fc1_g.\2"),
    (rf"{_A2_LAYER}ffn\.up_proj\.(weight|bias)", r"blocks.\1.mlp.fc1_x.\2"),
    (rf"{_A2_LAYER}ffn\.down_proj\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_A2_LAYER}rms_norm([12])\.weight", r"blocks.\1.norm\2.weight"),
    (rf"{_V}rms_norm\.weight", "norm.weight"),
    # use_head's attention-pooling head (layers/aimv2_pool.py; k and v merged below), Aimv2Model's projection
    (rf"{_V}head\.cls_token", "attn_pool.query"),
    (rf"{_V}head\.([kv])_proj\.(weight|bias)", r"attn_pool.\1.\2"),
    (rf"{_V}head\.output_proj\.(weight|bias)", r"attn_pool.proj.\1"),
    (r"visual_projection\.weight", "head.weight"),
]
# a whole Aimv2Model's text tower and similarity scale; old files' position ids
AIMV2_IGNORE = [r"text_model\..*", r"text_projection\.weight", r"logit_scale", rf"{_V}embeddings\.position_ids"]


def _from_transformers_aimv2(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, AIMV2_RULES, AIMV2_IGNORE, file=file, fmt="transformers (AIMv2)")
    if "pos_embed" in out:
        out["pos_embed"] = out["pos_embed"].unsqueeze(0)
    return Converted(merge_qkv(_aimv2_head(out, file), file=file), "transformers", {"norm_eps": NORM_EPS["aimv2"]})


def _aimv2_head(out: StateDict, file: str) -> StateDict:
    """The attention-pooling head's k and v as one kv; the image projection refused without that head."""
    if "head.weight" in out and "attn_pool.query" not in out:
        raise WeightsMismatchError(
            f"{file}: visual_projection.weight without the attention-pooling head (vision_model.head.*): "
            "Aimv2Model projects the head's pooled output, which only use_head=True gives"
        )
    return _merge_parts(out, r"(attn_pool)\.(k|v)\.(weight|bias)", ("k", "v"), "kv", file=file)


# Apple's AIMv2 LiT (apple/aimv2-large-patch14-224-lit) in the names of its remote code, which
# transformers' convert_aimv2_original_pytorch_to_hf.py maps onto Aimv2Model's: timm's AIMv2 names
# under image_encoder.trunk (mlp.fc1 / fc3 the gate and input, norm_1 / norm_2), the head's k, v
# and linear, image_projector the projection; the text tower left out.
_APPLE_AIMV2_KEY = "image_encoder.preprocessor.patchifier.proj.weight"
_APPLE_BLOCK = r"image_encoder\.trunk\.blocks\.(\d+)\."
_APPLE_MLP = (("fc1", "fc1_g"), ("fc3", "fc1_x"), ("fc2", "fc2"))
APPLE_AIMV2_RULES: list[Rule] = [
    (r"image_encoder\.preprocessor\.patchifier\.(proj|norm)\.(weight|bias)", r"patch_embed.\1.\2"),
    (r"image_encoder\.preprocessor\.pos_embed", "pos_embed"),  # (1, N, D)
    (rf"{_APPLE_BLOCK}attn\.(qkv|proj)\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    *((rf"{_APPLE_BLOCK}mlp\.{theirs}\.(weight|bias)", rf"blocks.\1.mlp.{ours}.\2") for theirs, ours in _APPLE_MLP),
    (rf"{_APPLE_BLOCK}norm_([12])\.weight", r"blocks.\1.norm\2.weight"),
    (r"image_encoder\.trunk\.post_trunk_norm\.weight", "norm.weight"),
    (r"image_encoder\.head\.cls_token", "attn_pool.query"),
    (r"image_encoder\.head\.([kv])\.(weight|bias)", r"attn_pool.\1.\2"),
    (r"image_encoder\.head\.linear\.(weight|bias)", r"attn_pool.proj.\1"),
    (r"image_projector\.weight", "head.weight"),
]


def _from_apple_aimv2(state: StateDict, file: str) -> Converted:
    ignore = [r"text_encoder\..*", r"text_projector\.weight", r"log_logit_scale"]
    out = _apply_rules(state, APPLE_AIMV2_RULES, ignore, file=file, fmt="Apple's AIMv2")
    return Converted(_aimv2_head(out, file), "transformers", {"norm_eps": NORM_EPS["aimv2"]})


def _sapiens2_projections(out: StateDict) -> Converted:
    """Sapiens2Model's state in timm's names: its q, k and v projections (k and v narrower with
    grouped-query attention) as q_proj, k_proj and v_proj, never merged; its gate and input
    projections packed into fc1, gate first (the w12 of the files it saves)."""
    for key in [k for k in out if re.fullmatch(r"blocks\.\d+\.attn\.[qkv]\.(weight|bias)", k)]:
        block, part, kind = key.rsplit(".", 2)
        out[f"{block}.{part}_proj.{kind}"] = out.pop(key)
    for key in [k for k in out if ".mlp.fc1_g." in k]:
        out[key.replace(".fc1_g.", ".fc1.")] = torch.cat([out.pop(key), out.pop(key.replace(".fc1_g.", ".fc1_x."))])
    return Converted(out, "transformers", {"norm_eps": NORM_EPS["sapiens2"]})


# Sapiens2 as transformers saves it (transformers 5 writes Meta's original names back; the Hub's
# facebook/sapiens2-* files): wq / wk / wv, LayerScale inside the attention (attn.gamma), the packed
# SwiGLU as ffn.w12 (gate, then input) and ffn.w3, RMSNorms ln1 / ln2, the final one ln1, the
# registers as storage_tokens; a task model's backbone under `backbone.`, its decode head left out.
_S2 = r"(?:backbone\.)?"
_SAPIENS2_KEY = rf"{_S2}blocks\.0\.attn\.wq\.weight"
SAPIENS2_RULES: list[Rule] = [
    (rf"{_S2}cls_token", "cls_token"),
    (rf"{_S2}storage_tokens", "reg_token"),
    (rf"{_S2}patch_embed\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_S2}blocks\.(\d+)\.attn\.w([qkv])\.(weight|bias)", r"blocks.\1.attn.\2_proj.\3"),
    (rf"{_S2}blocks\.(\d+)\.attn\.(proj\.weight|proj\.bias|q_norm\.weight|k_norm\.weight)", r"blocks.\1.attn.\2"),
    (rf"{_S2}blocks\.(\d+)\.attn\.gamma\.weight", r"blocks.\1.ls1.gamma"),
    (rf"{_S2}blocks\.(\d+)\.ffn\.w12\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (rf"{_S2}blocks\.(\d+)\.ffn\.w3\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_S2}blocks\.(\d+)\.ln([12])\.weight", r"blocks.\1.norm\2.weight"),
    (rf"{_S2}ln1\.weight", "norm.weight"),
]
# the mask token of masked pre-training, rotary buffers, a task model's decode head
SAPIENS2_IGNORE = [rf"{_S2}mask_token", rf"{_S2}rope.*", r"decode_head\..*", r"scale_head\..*"]


def _from_sapiens2(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, SAPIENS2_RULES, SAPIENS2_IGNORE, file=file, fmt="transformers (Sapiens2)")
    return Converted(out, "transformers", {"norm_eps": NORM_EPS["sapiens2"]})


# SAM's image encoder (SamVisionModel; SamModel's vision_encoder, its prompt encoder and mask decoder
# left out): timm's names but `layers.i`, `layer_norm1/2`, `mlp.lin1/2`, and the neck's modules named.
_SAM = r"(?:vision_encoder\.)?"
_SAM_PATCH_KEY = rf"{_SAM}patch_embed\.projection\.weight"
_SAM_LAYER = rf"{_SAM}layers\.(\d+)\."
_SAM_NECK = {"conv1": "0", "layer_norm1": "1", "conv2": "2", "layer_norm2": "3"}
SAM_RULES: list[Rule] = [
    (rf"{_SAM}patch_embed\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
    (rf"{_SAM}pos_embed", "pos_embed"),  # (1, rows, columns, D): flattened below
    (rf"{_SAM_LAYER}layer_norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (rf"{_SAM_LAYER}attn\.(qkv|proj)\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_SAM_LAYER}attn\.(rel_pos_[hw])", r"blocks.\1.attn.\2"),
    (rf"{_SAM_LAYER}mlp\.lin([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
    *((rf"{_SAM}neck\.{name}\.(weight|bias)", rf"neck.{i}.\1") for name, i in _SAM_NECK.items()),
]
SAM_IGNORE = [r"prompt_encoder\..*", r"mask_decoder\..*", r"shared_image_embedding\..*"]


def _from_transformers_sam(state: StateDict, file: str) -> Converted:
    out = _from_timm_sam(_apply_rules(state, SAM_RULES, SAM_IGNORE, file=file, fmt="transformers (SAM)"))
    return Converted(out, "transformers", {"norm_eps": NORM_EPS["sam"]})


# SAM 3's image encoder (Sam3ViTModel; Sam3VisionModel's backbone, Sam3Model's vision_encoder.backbone,
# Sam3VideoModel's detector_model.vision_encoder.backbone): separate q/k/v, `layer_norm` before the
# blocks (CLIP's norm_pre), no final norm; its table is for pretrain_image_size, tiled to the model's
# grid at load (pos_mode "tile"). The FPN neck, text tower, detector and tracker are left out.
_SAM3 = r"(?:detector_model\.)?(?:vision_encoder\.)?(?:backbone\.)?"
_SAM3_LAYER = rf"{_SAM3}layers\.(\d+)\."
_SAM3_KEY = rf"{_SAM3_LAYER}attention\.o_proj\.weight"
SAM3_RULES: list[Rule] = [
    (rf"{_SAM3}embeddings\.patch_embeddings\.projection\.weight", "patch_embed.proj.weight"),
    (rf"{_SAM3}embeddings\.position_embeddings", "pos_embed"),
    (rf"{_SAM3}layer_norm\.(weight|bias)", r"norm_pre.\1"),
    (rf"{_SAM3_LAYER}layer_norm([12])\.(weight|bias)", r"blocks.\1.norm\2.\3"),
    (rf"{_SAM3_LAYER}attention\.([qkv])_proj\.(weight|bias)", r"blocks.\1.attn.\2.\3"),
    (rf"{_SAM3_LAYER}attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_SAM3_LAYER}mlp\.fc([12])\.(weight|bias)", r"blocks.\1.mlp.fc\2.\3"),
]
SAM3_IGNORE = [
    rf"{_SAM3}neck\..*",
    r"(?:detector_model\.)?(?:text_encoder|text_projection|geometry_encoder|detr_encoder|detr_decoder)\..*",
    r"(?:detector_model\.)?(?:mask_decoder|dot_product_scoring)\..*",
    r"tracker_model\..*",
    r"tracker_neck\..*",
]


def _is_sam3(keys: Iterable[str]) -> bool:
    return any(re.fullmatch(_SAM3_KEY, k) for k in keys) and any(
        re.fullmatch(rf"{_SAM3_LAYER}layer_norm1\.weight", k) for k in keys
    )


def _from_transformers_sam3(state: StateDict, file: str) -> Converted:
    out = merge_qkv(_apply_rules(state, SAM3_RULES, SAM3_IGNORE, file=file, fmt="transformers (SAM 3)"), file=file)
    hints: dict[str, Any] = {"norm_eps": NORM_EPS["sam3"], "window_rope": True}
    return Converted(out, "transformers", hints, pos_mode="tile")


def _from_transformers(state: StateDict, file: str) -> Converted:
    if _is_sam3(state):
        return _from_transformers_sam3(state, file)
    if any(re.fullmatch(_SAPIENS2_KEY, k) for k in state):
        return _from_sapiens2(state, file)
    if any(re.fullmatch(_CLIP_PATCH_KEY, k) for k in state):
        return _from_transformers_clip(state, file)
    if any(re.fullmatch(_AIMV2_PATCH_KEY, k) for k in state):
        return _from_transformers_aimv2(state, file)
    if _APPLE_AIMV2_KEY in state:
        return _from_apple_aimv2(state, file)
    if any(re.fullmatch(_SAM_PATCH_KEY, k) for k in state):
        return _from_transformers_sam(state, file)
    if _DINOV3_PATCH_KEY in state:
        return _from_transformers_dinov3(state, file)
    out = merge_qkv(
        _q_and_v_biases(_apply_rules(state, TRANSFORMERS_RULES, TRANSFORMERS_IGNORE, file=file, fmt="transformers")),
        file=file,
    )
    out = _merge_gate(out, file=file)
    hints: dict[str, Any] = {"norm_eps": NORM_EPS["vit"]}
    if ("reg_token" in out or "blocks.0.ls1.gamma" in out) and not _is_beit(state):  # DINOv2, not BEiT's LayerScale
        hints["norm_eps"] = NORM_EPS["dinov2"]
    if "cls_token" in out and out["cls_token"].ndim == 3 and out["cls_token"].shape[1] > 1:
        _split_class_tokens(out, hints)
    elif "reg_token" in out and "pos_embed" in out and "cls_token" in out:
        _fold_class_position(out, hints)
    return Converted(out, "transformers", hints)


def _is_beit(state: StateDict) -> bool:
    """A transformers BEiT or data2vec-vision state dict (whose norms keep ViT's eps): its model
    prefix, a relative position table or its mean pooling's norm; its LayerScale (`lambda_1`) alone
    is InternViT's too."""
    return any(
        k.startswith(("beit.", "data2vec_vision.", "pooler.layernorm.")) or "relative_position_bias" in k for k in state
    )


def _split_class_tokens(out: StateDict, hints: dict[str, Any]) -> None:
    """Pixio's n class tokens (1, n, D), each with a position: vitzoo's class token and n - 1
    registers, the table covering them all (no_embed_class False, as the tokens keep their order)."""
    tokens = out.pop("cls_token")
    out["cls_token"], out["reg_token"] = tokens[:, :1], tokens[:, 1:]
    hints["no_embed_class"] = False


def _fold_class_position(out: StateDict, hints: dict[str, Any]) -> None:
    """Dinov2WithRegisters (and TIPS) add positions to [cls, patches] and then insert the registers
    (which get none). timm's equivalent (no_embed_class) adds positions to the patches only: the
    class token's position is constant, so it is folded into the class token itself."""
    pos = out["pos_embed"]
    out["cls_token"] = out["cls_token"] + pos[:, :1]
    out["pos_embed"] = pos[:, 1:]
    hints["no_embed_class"] = True


# TIPS / TIPSv2 (Google's release; transformers' Tipsv2VisionModel saves these names): timm's names,
# but registers as `register_tokens`, the MLP as `c_fc` / `c_proj` (SwiGLU: `w12`, gate then input,
# and `w3`), and a mask token; the positions cover [cls, patches] as Dinov2WithRegisters'.
_TIPS = r"(?:vision_encoder\.)?"  # the image tower of a whole Tipsv2Model
_TIPS_KEY = r"register_tokens"
_TIPS_BLOCK = rf"{_TIPS}blocks\.(\d+)\."
TIPS_RULES: list[Rule] = [
    (rf"{_TIPS}{_TIPS_KEY}", "reg_token"),
    (rf"{_TIPS_BLOCK}mlp\.(?:c_fc|w12)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
    (rf"{_TIPS_BLOCK}mlp\.(?:c_proj|w3)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
    (rf"{_TIPS_BLOCK}((?:norm[12]|attn\.qkv|attn\.proj)\.(?:weight|bias)|ls[12]\.gamma)", r"blocks.\1.\2"),
    (rf"{_TIPS}(cls_token|pos_embed|patch_embed\.proj\.(?:weight|bias)|norm\.(?:weight|bias))", r"\1"),
]
# the mask token of masked pre-training; a whole Tipsv2Model's text tower and temperature
TIPS_IGNORE = [rf"{_TIPS}mask_token", r"text_encoder\..*", r"temperature"]


def _from_tips(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, TIPS_RULES, TIPS_IGNORE, file=file, fmt="TIPS")
    hints: dict[str, Any] = {"norm_eps": NORM_EPS["tipsv2"]}
    if "pos_embed" in out and "cls_token" in out:
        _fold_class_position(out, hints)
    return Converted(out, "tips", hints)


def _from_transformers_clip(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, CLIP_RULES, CLIP_IGNORE, file=file, fmt="transformers (CLIP / SigLIP)")
    if "cls_token" in out:
        out["cls_token"] = out["cls_token"].reshape(1, 1, -1)
    if "pos_embed" in out:
        out["pos_embed"] = out["pos_embed"].unsqueeze(0)
    for kind in ("weight", "bias"):
        packed = out.pop(f"attn_pool.in_proj.{kind}", None)
        if packed is not None:  # q, k, v stacked: our kv Linear is k and v stacked the same way
            dim = packed.shape[0] // 3
            out[f"attn_pool.q.{kind}"], out[f"attn_pool.kv.{kind}"] = packed[:dim], packed[dim:]
    patch = out.get("patch_embed.proj.weight")
    if patch is not None and patch.dim() == 2:  # SigLIP 2 NaFlex: a Linear over flattened patches
        out["patch_embed.proj.weight"] = _linear_patch_kernel(patch, file=file)
    eps = NORM_EPS["clip" if "cls_token" in out else "siglip"]  # SigLIP has no class token
    # NaFlex resizes its table per image, bilinear and antialiased: at load, so does vitzoo
    mode = "bilinear" if patch is not None and patch.dim() == 2 else "bicubic"
    return Converted(merge_qkv(out, file=file), "transformers", {"norm_eps": eps}, pos_mode=mode)


def _linear_patch_kernel(w: torch.Tensor, *, file: str) -> torch.Tensor:
    """A NaFlex patch Linear (D, p * p * C) (SigLIP 2's, timm's NaFlexVit's), its input a patch's
    pixels in (row, column, channel) order, as the equivalent convolution kernel (D, C, p, p):
    three channels where the width allows a square patch of them, else one."""
    channels = 3 if w.dim() == 2 and w.shape[1] % 3 == 0 and math.isqrt(w.shape[1] // 3) ** 2 * 3 == w.shape[1] else 1
    side = math.isqrt(w.shape[1] // channels) if w.dim() == 2 else 0
    if w.dim() != 2 or side * side * channels != w.shape[1]:
        raise WeightsMismatchError(
            f"{file}: the patch projection has shape {tuple(w.shape)}; expected (D, p * p * channels), a square patch"
        )
    return w.reshape(w.shape[0], side, side, channels).permute(0, 3, 1, 2).contiguous()


# ----------------------------------------------------------------------------- RADIO
# NVIDIA's C-RADIO checkpoints (and transformers' RadioModel, which saves them so): timm's block
# names under a prefix; a Linear patch projection without bias over channel-major patches; the
# position table of the largest input (cropped at load, CPE); the summary tokens in one tensor.
_RADIO = "radio_model.model."
RADIO_RULES: list[Rule] = [
    (rf"{_RADIO}blocks\.(\d+)\.((?:norm[12]|attn\.qkv|attn\.proj|mlp\.fc[12])\.(?:weight|bias))", r"blocks.\1.\2"),
    (rf"{_RADIO}blocks\.(\d+)\.ls([12])\.(?:gamma|grandma)", r"blocks.\1.ls\2.gamma"),
    (rf"{_RADIO}blocks\.(\d+)\.layer_scale([12])\.lambda1", r"blocks.\1.ls\2.gamma"),  # transformers' save
    (rf"{_RADIO}patch_generator\.embedder\.weight", "patch_embed.proj.weight"),
    (rf"{_RADIO}patch_generator\.pos_embed", "pos_embed"),
    (rf"{_RADIO}patch_generator\.cls_token\.token", "summary_tokens"),
]
# The input normalisation (vitzoo's preprocessing does it), the summary indices (which tokens
# RADIO's summary concatenates: forward_features gives them all) and the teachers' adaptor heads.
RADIO_IGNORE = [r"radio_model\.input_conditioner\..*", r"radio_model\.summary_idxs", r"radio_model\.adaptors\..*"]


def _linear_patch_to_conv(weight: torch.Tensor, *, file: str) -> torch.Tensor:
    """RADIO's Linear patch projection (D, C * p * p), over channel-major patches, as the patch
    conv's (D, C, p, p)."""
    inputs = weight.shape[1]
    channels = 3 if inputs % 3 == 0 else 1
    patch = math.isqrt(inputs // channels)
    if channels * patch * patch != inputs:
        raise WeightsMismatchError(
            f"{file}: the patch projection has {inputs} inputs; expected channels x patch x patch (a square patch)"
        )
    return weight.reshape(weight.shape[0], channels, patch, patch)


def _from_radio(state: StateDict, file: str) -> Converted:
    out = _apply_rules(state, RADIO_RULES, RADIO_IGNORE, file=file, fmt="radio")
    weight = out.get("patch_embed.proj.weight")
    if weight is not None and weight.ndim == 2:
        out["patch_embed.proj.weight"] = _linear_patch_to_conv(weight, file=file)
        out["patch_embed.proj.bias"] = weight.new_zeros(weight.shape[0])  # timm's layout has one
    tokens = out.pop("summary_tokens", None)
    if tokens is not None:  # the first is the class token, the others registers (timm's reading)
        out["cls_token"] = tokens[None, :1]
        if tokens.shape[0] > 1:
            out["reg_token"] = tokens[None, 1:]
    return Converted(out, "radio", {"no_embed_class": True}, pos_mode="cpe")


# ----------------------------------------------------------------------------- torchvision
_TORCHVISION_LAYER = r"encoder\.layers\.encoder_layer_(\d+)\."
TORCHVISION_RULES: list[Rule] = [
    (r"class_token", "cls_token"),
    (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"encoder\.pos_embedding", "pos_embed"),
    (rf"{_TORCHVISION_LAYER}ln_1\.(weight|bias)", r"blocks.\1.norm1.\2"),
    (rf"{_TORCHVISION_LAYER}ln_2\.(weight|bias)", r"blocks.\1.norm2.\2"),
    # nn.MultiheadAttention packs q, k, v in one in_proj in the same order as our qkv Linear.
    (rf"{_TORCHVISION_LAYER}self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
    (rf"{_TORCHVISION_LAYER}self_attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
    (rf"{_TORCHVISION_LAYER}mlp\.(?:0|linear_1)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),  # MLPBlock v2 | v1 names
    (rf"{_TORCHVISION_LAYER}mlp\.(?:3|linear_2)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
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
    return Converted(merge_qkv(out, file=file), "npz", hints)


_CONVERTERS: dict[str, Callable[[StateDict, str], Converted]] = {
    "vitzoo": _from_vitzoo,
    "timm": _from_vitzoo,
    "transformers": _from_transformers,
    "tips": _from_tips,
    "radio": _from_radio,
    "torchvision": _from_torchvision,
    "npz": _from_npz,
}


# ----------------------------------------------------------------------------- vitzoo -> timm
def to_timm(state: StateDict, *, what: str = "model", eva: bool = False) -> StateDict:
    """Our state dict in timm's names (`eva`: its Eva's, whose LayerScale names differ). timm 1.x's
    VisionTransformer has no representation layer (timm drops `pre_logits.*` when loading), so a
    model that has one cannot be exported. A head
    without bias (CLIP's projection, head_bias=False) gets a zero bias, as timm's own CLIP
    converter gives its heads: timm's VisionTransformer always has one."""
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
    # a block's relative position bias back into its attention: BEiT's table, the relpos ViT's MLP
    out = {
        re.sub(r"^blocks\.(\d+)\.rel_pos\.(?=relative_position)", r"blocks.\1.attn.", k): v for k, v in state.items()
    }
    out = {re.sub(r"^blocks\.(\d+)\.rel_pos\.mlp\.", r"blocks.\1.attn.rel_pos.mlp.", k): v for k, v in out.items()}
    if "neck.0.weight" in out:  # SAM's encoder: timm's VisionTransformerSAM layout
        return _to_timm_sam(out, what)
    if eva:  # timm's Eva: LayerScale is gamma_1 / gamma_2 (EVA_RULES backwards)
        out = {re.sub(r"^blocks\.(\d+)\.ls([12])\.gamma$", r"blocks.\1.gamma_\2", k): v for k, v in out.items()}
    head = out.get("head.weight")
    if head is not None and "head.bias" not in out:
        out["head.bias"] = head.new_zeros(head.shape[0])
    return out
