"""Shape inference: the ViTConfig fields a state dict in vitzoo's names determines by its tensor
shapes alone (widths, depth, patch size, tokens, the position grid, which newer options it uses).

What no shape shows (the head count, the LayerNorm eps, the activation) comes from a config next to
the weights, the layout (keymaps.py's hints) or a named architecture (checkpoint.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from ..layers.resnetv2_stem import resnetv2_stride
from ..model import COCA_QUERIES, ViTConfig
from .errors import WeightsMismatchError
from .files import StateDict

# A checkpoint with LayerScale but no config stating its init value: any value creates the
# parameters, which the checkpoint's own values then replace (DINOv2's init, as timm builds it).
LAYER_SCALE_INIT = 1e-5


def position_prefix(pos_len: int, prefix: int, grid: tuple[int, int] | None = None) -> int | None:
    """How many of the `prefix` tokens (class, distillation, registers) a position embedding of
    `pos_len` positions covers: all of them, or none (timm's no_embed_class: positions for the
    patches only). With the patch `grid` known the answer is exact; without it, the count that
    leaves a square grid (the only grid a token count alone determines), all of them first.
    None when neither fits."""
    for covered in dict.fromkeys((prefix, 0)):
        n = pos_len - covered
        fits = n == grid[0] * grid[1] if grid is not None else n > 0 and math.isqrt(n) ** 2 == n
        if fits:
            return covered
    return None


# Block 0's query biases: fused qkv, EVA's q_bias, unfused q_proj, the parallel block's in_proj.
_QKV_BIASES = ("attn.qkv.bias", "attn.q_bias", "attn.q_proj.bias", "in_proj.bias")


def infer_config_fields(state: StateDict, *, file: str = "<state dict>") -> dict[str, Any]:
    """The ViTConfig fields a vitzoo-named state dict determines by its shapes. The head count is
    not among them (no tensor depends on it), nor the activation; callers get them from a config
    or the layout hints. The options of the newer families (LayerScale, registers, norm_pre, ...)
    appear only where the tensors show them, so an ordinary ViT's fields are the classic ones."""
    hybrid = hybrid_fields(state, file=file)
    try:
        proj = state["patch_embed.proj.weight"] if hybrid.get("hybrid_stem") != "mci" else hybrid.pop("_proj")
        pos = state.get("pos_embed")
    except KeyError as e:
        raise WeightsMismatchError(f"{file}: cannot infer the architecture, key {e} is missing") from None
    for key, tensor, ndim in (
        ("patch_embed.proj.weight", proj, 4),
        ("pos_embed", pos, 3),
        ("reg_token", state.get("reg_token"), 3),
    ):
        if tensor is not None and tensor.ndim != ndim:
            raise WeightsMismatchError(f"{file}: {key} has shape {tuple(tensor.shape)}; expected {ndim} dimensions")
    embed_dim, in_chans, ph, pw = proj.shape
    conv_stem, stem_fields = _conv_stem(state)
    if conv_stem:
        in_chans, ph, pw = stem_fields
    if hybrid:
        in_chans, ph, pw = hybrid.pop("in_chans"), hybrid["patch_size"], hybrid.pop("patch_size")
    depth = len({int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})
    class_token, distilled, fc_norm = "cls_token" in state, "dist_token" in state, "fc_norm.weight" in state
    fields: dict[str, Any] = dict(
        embed_dim=int(embed_dim),
        in_chans=int(in_chans),
        patch_size=(int(ph), int(pw)) if ph != pw else int(ph),
        depth=depth,
        class_token=class_token,
        distilled=distilled,
        # fc_norm: the final norm moved after the pooling; open_clip's CoCa: into its pool
        final_norm="norm.weight" in state or fc_norm or "attn_pool.norm.weight" in state,
        qkv_bias=any(f"blocks.0.{k}" in state for k in _QKV_BIASES) if depth else True,
        # timm pools MAE-style fine-tuned models (fc_norm) by averaging, even with a class token
        global_pool="token" if class_token and not fc_norm else "avg",
        conv_stem=conv_stem,
        **hybrid,
    )
    reg_tokens = int(state["reg_token"].shape[1]) if "reg_token" in state else 0
    options = _option_fields(state, int(embed_dim), fc_norm, reg_tokens)
    fields.update({k: v for k, v in options.items() if v != CLASSIC_FIELDS[k]})
    if "attn_pool.latent" in state:
        fields["global_pool"] = "map"
    if "attn_pool.query" in state:  # AIMv2's attention-pooling head (layers/aimv2_pool.py)
        fields["global_pool"] = "aimv2"
    fields.update(coca_fields(state, int(embed_dim)))
    if depth:
        fields.update(_block_fields(state, int(embed_dim)))
        fields.update(_pool_fields(state, int(embed_dim), fields.get("mlp_layer", "mlp")))
    if "pre_logits.fc.weight" in state:
        fields["representation_size"] = int(state["pre_logits.fc.weight"].shape[0])
    fields["num_classes"] = int(state["head.weight"].shape[0]) if "head.weight" in state else 0
    if pos is None:  # no learned table: sinusoids, or relative or rotary positions alone (their tensors show them)
        fields.update(_without_table(state, int(ph), int(pw)))
    else:
        prefix = int(class_token) + int(distilled) + reg_tokens
        covered = position_prefix(pos.shape[1], prefix)
        if covered is not None:
            if covered != prefix:
                fields["no_embed_class"] = True
            side = math.isqrt(pos.shape[1] - covered)
            fields["img_size"] = side * int(ph) if ph == pw else (side * int(ph), side * int(pw))
    return fields


def _option_fields(state: StateDict, embed_dim: int, fc_norm: bool, reg_tokens: int) -> dict[str, Any]:
    """The options of the newer families as the tensors show them (each compared with its classic value)."""
    return dict(
        init_values=LAYER_SCALE_INIT if "blocks.0.ls1.gamma" in state or "blocks.0.ls.gamma" in state else None,
        # Sapiens2: LayerScale on the attention branch only
        layer_scale_mlp="blocks.0.ls1.gamma" not in state or "blocks.0.ls2.gamma" in state,
        # a norm of q and k: over each head, or (InternViT-6B) over all of them (the same with one head)
        qk_norm=_qk_norm_scope(state, embed_dim),
        reg_tokens=reg_tokens,
        pre_norm="norm_pre.weight" in state,
        patch_bias="patch_embed.proj.bias" in state or f"{_HYBRID}2.conv.bias" in state,
        embed_norm="patch_embed.norm.weight" in state,  # AIMv2
        fc_norm=fc_norm,
        head_bias="head.bias" in state or "head.weight" not in state,
        # EVA's attention: separate projections; q and v biased but not k (fused: q_bias, v_bias)
        qkv_fused="blocks.0.attn.q_proj.weight" not in state,
        k_bias=not (
            "blocks.0.attn.q_bias" in state
            or ("blocks.0.attn.q_proj.bias" in state and "blocks.0.attn.k_proj.bias" not in state)
        ),
        rope="mixed" if "rope.freqs" in state else "",  # RoPE-Mixed's learned frequencies
        use_rel_pos="blocks.0.attn.rel_pos_h" in state,  # SAM's relative position tables, its conv neck's width
        neck_chans=int(state["neck.0.weight"].shape[0]) if "neck.0.weight" in state else 0,
        rel_pos_table=_REL_POS_KEY in state,  # BEiT's relative position bias
        **_rel_pos_mlp_fields(state),  # timm's relpos ViT
    )


_REL_POS_MLPS = (("shared_rel_pos.mlp.fc1.weight", True), ("blocks.0.rel_pos.mlp.fc1.weight", False))


def _rel_pos_mlp_fields(state: StateDict) -> dict[str, Any]:
    """A relative position bias MLP (layers/relpos_mlp.py): shared by the blocks or block 0's own,
    its hidden width fc1's."""
    for key, shared in _REL_POS_MLPS:
        fc1 = state.get(key)
        if fc1 is not None and fc1.ndim == 2:
            return {"rel_pos_mlp": int(fc1.shape[0]), "rel_pos_mlp_shared": shared}
    return {"rel_pos_mlp": 0, "rel_pos_mlp_shared": False}


def _conv_stem(state: StateDict) -> tuple[tuple[int, ...], tuple[int, int, int]]:
    """A convolutional stem's channels, by its conv weights at stem.0, stem.3, ... (conv, BatchNorm,
    ReLU per stage), with its input channels and the patch it strides; () without one."""
    stem = [state[f"patch_embed.stem.{3 * i}.weight"] for i in range(64) if f"patch_embed.stem.{3 * i}.weight" in state]
    if not stem:
        return (), (0, 0, 0)
    side = 2 ** (len(stem) + 1)
    return tuple(int(w.shape[0]) for w in stem), (int(stem[0].shape[1]), side, side)


def _qk_norm_scope(state: StateDict, embed_dim: int) -> str:
    """ViTConfig.qk_norm by block 0's q norm: none, over all channels (its width embed_dim), per head."""
    q_norm = state.get("blocks.0.attn.q_norm.weight")
    if q_norm is None:
        return ""
    return "full" if q_norm.shape[-1] == embed_dim else "head"


_REL_POS_KEY = "blocks.0.rel_pos.relative_position_bias_table"


def _without_table(state: StateDict, ph: int, pw: int) -> dict[str, Any]:
    """A model without a learned position table: its positions (none but relative or rotary ones,
    else sinusoids) and, from BEiT's relative position table, its input size."""
    if "pos_embed_y" in state and "pos_embed_x" in state:  # a row and a column table (timm's NaFlexVit)
        rows, cols = int(state["pos_embed_y"].shape[1]), int(state["pos_embed_x"].shape[1])
        size = (rows * ph, cols * pw)
        factorized = {"pos_embed": "factorized", "img_size": size[0] if size[0] == size[1] else size}
        return factorized | ({"no_embed_class": True} if "cls_token" in state or "reg_token" in state else {})
    relative = _REL_POS_KEY in state or any(key in state for key, _ in _REL_POS_MLPS)
    fields: dict[str, Any] = {"pos_embed": "none" if "rope.freqs" in state or relative else "sincos"}
    side = _rel_pos_side(state)
    if side is not None:
        fields["img_size"] = side * ph if ph == pw else (side * ph, side * pw)
    return fields


def _rel_pos_side(state: StateDict) -> int | None:
    """The side of the square grid BEiT's table of block 0 is for ((2 side - 1)^2 offsets and the
    class token's 3 rows), None without a table or for a table of no square grid."""
    table = state.get(_REL_POS_KEY)
    if table is None or table.ndim != 2:
        return None
    width = math.isqrt(max(int(table.shape[0]) - 3, 0))
    return (width + 1) // 2 if width * width == table.shape[0] - 3 and width % 2 else None


_HYBRID = "patch_embed.backbone."


def hybrid_fields(state: StateDict, *, file: str) -> dict[str, Any]:
    """A CNN stem's fields (ViTConfig.hybrid_stem, hybrid_layers; layers/hybrid_embed.py) from
    timm's `patch_embed.backbone.*` tensors, with the input channels and the token stride; {}
    without one. MobileCLIP's stem (three convs, `backbone.{0,1,2}.conv`) has no `proj`: its last
    conv is returned as `_proj` (its width is embed_dim)."""
    if not any(k.startswith(_HYBRID) for k in state):
        return {}
    mci = [w for i in range(3) if (w := state.get(f"{_HYBRID}{i}.conv.weight")) is not None and w.ndim == 4]
    if len(mci) == 3:
        return dict(hybrid_stem="mci", in_chans=int(mci[0].shape[1]), patch_size=16, _proj=mci[2])
    first = state.get(f"{_HYBRID}stem.conv.weight", state.get(f"{_HYBRID}conv.weight"))
    proj = state.get("patch_embed.proj.weight")
    if first is None or first.ndim != 4 or proj is None or proj.ndim != 4:
        raise WeightsMismatchError(
            f"{file}: patch_embed.backbone.* is no CNN stem vitzoo computes; expected BiT's ResNet "
            "(backbone.stem.conv or backbone.conv, and patch_embed.proj) or MobileCLIP's (backbone.0-2.conv)"
        )
    blocks: dict[int, set[int]] = {}
    for k in state:
        if m := re.match(rf"{re.escape(_HYBRID)}stages\.(\d+)\.blocks\.(\d+)\.", k):
            blocks.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    layers = tuple(len(blocks[i]) for i in sorted(blocks))
    patch = resnetv2_stride(layers) * int(proj.shape[2])
    return dict(hybrid_stem="resnetv2", hybrid_layers=layers, in_chans=int(first.shape[1]), patch_size=patch)


def mlp_kind(state: StateDict) -> str | None:
    """The MLP layout of block 0 (ViTConfig.mlp_layer) by its tensors: separate gate and input
    projections (`fc1_g`: "swiglu"), an fc1 twice as wide as fc2's input (gate and input packed:
    "swiglu_packed"), or fc1 -> fc2 ("mlp"); None when block 0 has no MLP weights."""
    if "blocks.0.mlp.fc1_g.weight" in state:
        return "swiglu"
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is None or fc2 is None or fc1.ndim != 2 or fc2.ndim != 2:
        return None
    return "swiglu_packed" if fc1.shape[0] == 2 * fc2.shape[1] else "mlp"


def _pool_fields(state: StateDict, embed_dim: int, mlp_layer: str) -> dict[str, Any]:
    """The attention pool's MLP as wide as the blocks' plain MLP, or of a ratio of its own (PE-Core-G)."""
    pool_fc1, block_fc1 = state.get("attn_pool.mlp.fc1.weight"), state.get("blocks.0.mlp.fc1.weight")
    if pool_fc1 is None or block_fc1 is None or mlp_layer != "mlp" or pool_fc1.shape[0] == block_fc1.shape[0]:
        return {}
    return {"attn_pool_mlp_ratio": pool_fc1.shape[0] / embed_dim}


COCA_QUERY = "attn_pool.caption.query"


def coca_fields(state: StateDict, embed_dim: int) -> dict[str, Any]:
    """CoCa's pool (layers/attn_pooler.py) as its tensors show it: its queries and width by the caption
    query, "parallel" or "cascade" by a contrastive pooler's key norm (the tokens' width or the
    pooler's; where the two are equal no tensor tells them apart, and "parallel" is assumed: a config
    states "cascade"); {} without it. The head count and pool_include_prefix are shown by none."""
    query = state.get(COCA_QUERY)
    if query is None or query.ndim != 2:
        return {}
    queries, dim = int(query.shape[0]), int(query.shape[1])
    fields: dict[str, Any] = {
        "global_pool": "coca",
        "coca_queries": None if queries == COCA_QUERIES else queries,
        "coca_dim": None if dim == embed_dim else dim,
    }
    keys = state.get("attn_pool.contrastive.ln_k.weight")
    if keys is not None:
        fields["coca_pool_type"] = "cascade" if keys.shape[-1] == dim != embed_dim else "parallel"
    return fields


def _block_fields(state: StateDict, embed_dim: int) -> dict[str, Any]:
    """What block 0's tensors show: the block (a parallel one's fused in_proj), differential attention
    (its lambdas), the MLP layout and width, its sub-norm and the attention's, RMSNorm (a norm with a
    scale and no bias). A gated MLP is SwiGLU (SiLU) in every release that has one, so the
    activation is "silu" unless a config says otherwise."""
    fields: dict[str, Any] = {}
    if "blocks.0.attn.lambda_q1" in state or "blocks.0.lambda_q1" in state:  # differential attention
        fields["attn_layer"] = "diff"
    if "blocks.0.in_proj.weight" in state:  # the parallel block: the MLP's hidden units lead in_proj
        fields["block_type"] = "parallel"
        fields["mlp_ratio"] = (state["blocks.0.in_proj.weight"].shape[0] - 3 * embed_dim) / embed_dim
        if "blocks.0.in_norm.weight" in state and "blocks.0.in_norm.bias" not in state:
            fields["norm_layer"] = "rmsnorm"
        return fields
    kind = mlp_kind(state)
    if kind is not None:  # missing MLP weights: the load names them
        fc1 = state["blocks.0.mlp.fc1_g.weight" if kind == "swiglu" else "blocks.0.mlp.fc1.weight"]
        fields["mlp_ratio"] = fc1.shape[0] / embed_dim
    if kind in ("swiglu", "swiglu_packed"):
        fields.update(mlp_layer=kind, act_layer="silu")
    if "blocks.0.mlp.norm.weight" in state:
        fields["mlp_norm"] = True
    if "blocks.0.attn.proj.weight" in state and "blocks.0.attn.proj.bias" not in state:
        fields["proj_bias"] = False  # AIMv2: no bias on the attention's output nor in the MLP
    if "blocks.0.attn.norm.weight" in state:  # the attention's sub-LN (BEiT-3, EVA-02-CLIP)
        fields["attn_norm"] = True
    if "blocks.0.norm1.weight" in state and "blocks.0.norm1.bias" not in state:
        fields["norm_layer"] = "rmsnorm"
    return fields


def _classic_fields() -> dict[str, Any]:
    """Every ViTConfig field's default (a factory's value where a field has one): a classic ViT.
    Read off the dataclass, not copied: an option inference leaves out is one at ViTConfig's
    default, so a copy that drifted would drop a value the tensors show."""
    return {
        f.name: f.default_factory() if f.default is dataclasses.MISSING and callable(f.default_factory) else f.default
        for f in dataclasses.fields(ViTConfig)
    }


# A classic ViT's value of every field: inferred fields leave out a newer option that has it
# (`_option_fields`), and verify.py compares a stated field with it where inference left it out.
CLASSIC_FIELDS: dict[str, Any] = _classic_fields()
