"""What timm's files state, in vitzoo's terms, and "timm:<name>" sources read through timm itself.

A timm hub repository (or a directory saved by timm's `save_for_hf`) has a config.json naming its
`architecture` (a timm name, optionally with a tag), the `model_args` it was built with and its
`pretrained_cfg` (preprocessing, labels). What the architecture name means is the registry's to
say: it is returned here as a name (see checkpoint.py), never looked up.

"timm:<name>" sources are read by timm's own loader (timm is optional: `require_timm`), their
config fields taken from the model timm builds.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

import torch
from torch import nn

from ..layers.naflex import RULES as TABLE_RULES
from ..pretrained_cfg import CROP_MODES, imagenet_label_set
from .checkpoint import Checkpoint
from .errors import WeightsFileError, WeightsMismatchError, WeightsNotFoundError
from .files import checked_pretrained
from .hub import TIMM_PREFIX, require_timm
from .keymaps import to_vitzoo
from .shapes import infer_config_fields
from .timm_modules import POST_NORM_BLOCKS, TIMM_POOLS, TIMM_ROPES, check_timm_model, timm_on_meta

logger = logging.getLogger("vitzoo.weights")

# The ViTConfig fields timm's VisionTransformer takes under the same name (its model_args).
TIMM_MODEL_ARGS = (
    "img_size",
    "patch_size",
    "in_chans",
    "embed_dim",
    "depth",
    "num_heads",
    "mlp_ratio",
    "qkv_bias",
    "class_token",
    "global_pool",
    "init_values",
    "reg_tokens",
    "no_embed_class",
    "pre_norm",
    "fc_norm",
    "act_layer",
)
# timm's activation names (timm.layers.get_act_layer) that vitzoo computes, -> ViTConfig.act_layer.
_TIMM_ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_tanh": "gelu_tanh",
    "quick_gelu": "quick_gelu",
    "silu": "silu",
    "swish": "silu",
}


def timm_config(cfg: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any], str, tuple[int, int] | None]:
    """timm's config: the architecture fields its model_args state, its preprocessing and labels,
    its architecture name (without tag), and the image size its preprocessing names (which is not
    an architecture fact: timm keeps a pretrained cfg's input_size when img_size is overridden)."""
    name = cfg["architecture"]
    if not isinstance(name, str):
        raise WeightsFileError(f"{where!r}: architecture={name!r} is invalid; expected a string")
    args, pcfg = cfg.get("model_args") or {}, cfg.get("pretrained_cfg") or {}
    for key, value in (("model_args", args), ("pretrained_cfg", pcfg)):
        if not isinstance(value, dict):
            raise WeightsFileError(f"{where!r}: {key}={value!r} is invalid; expected a JSON object")
    fields: dict[str, Any] = {}
    for key in TIMM_MODEL_ARGS:
        if args.get(key) is not None:  # timm's None means "the architecture's default"
            value = args[key]
            fields[key] = tuple(value) if isinstance(value, list) else value
    if "act_layer" in fields:
        act = fields["act_layer"]
        if act not in _TIMM_ACTIVATIONS:
            raise WeightsFileError(
                f"{where!r}: model_args act_layer={act!r} is not supported; expected one of "
                + ", ".join(map(repr, _TIMM_ACTIVATIONS))
            )
        fields["act_layer"] = _TIMM_ACTIVATIONS[act]
    if cfg.get("global_pool") in TIMM_POOLS and cfg["global_pool"]:
        fields["global_pool"] = cfg["global_pool"]
    if name.startswith("naflexvit_"):
        fields.update(naflex_model_args(args, where))
    pretrained = timm_pretrained(pcfg, where)
    if "label_names" not in pretrained and cfg.get("label_names"):
        pretrained["label_names"] = cfg["label_names"]
    pretrained = checked_pretrained(pretrained, where)
    size = pretrained.get("input_size")
    return fields, pretrained, name.split(".")[0], (size[1], size[2]) if size is not None else None


_TIMM_KEEP = (
    "input_size",
    "mean",
    "std",
    "interpolation",
    "crop_pct",
    "crop_mode",
    "num_classes",
    "label_names",
    "license",
)


def timm_pretrained(pcfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The PretrainedCfg fields of timm's pretrained cfg. A crop mode vitzoo does not implement
    (timm's "border") is left out with a warning: the weights still load, preprocessed "center"."""
    pretrained = {k: pcfg[k] for k in _TIMM_KEEP if pcfg.get(k) is not None}
    mode = pretrained.get("crop_mode")
    if mode is not None and mode not in CROP_MODES:
        logger.warning("%s: crop_mode %r is not one vitzoo implements (%s); using 'center'", where, mode, CROP_MODES)
        del pretrained["crop_mode"]
    return pretrained


# timm's NaFlexVit: its rotary kinds (NaFlexVitCfg.rope_type) -> ViTConfig.rope, and how its table
# is resized (pos_embed_interp_mode, pos_embed_ar_preserving) -> ViTConfig.pos_resample.
_NAFLEX_ROPES = {"": "", "none": "", "axial": "cat", "mixed": "mixed", "dinov3": "dinov3"}
# (interp mode, aspect-preserving, antialias, align_corners) -> ViTConfig.pos_resample (layers/naflex.py RULES)
_NAFLEX_RESAMPLE = {
    (rule.mode, rule.square, rule.antialias, rule.align_corners): name for name, rule in TABLE_RULES.items()
}
_NAFLEX_TABLE_ARGS = (
    "pos_embed_interp_mode",
    "pos_embed_ar_preserving",
    "pos_embed_antialias",
    "pos_embed_align_corners",
    "pos_embed_use_grid_sample",
)
_NAFLEX_ROPE_ARGS = ("rope_temperature", "rope_grid_indexing", "rope_grid_offset", "rope_rotate_half")


def naflex_model_args(args: dict[str, Any], where: str) -> dict[str, Any]:
    """The ViTConfig fields of NaFlexVitCfg's model_args that a timm NaFlexVit config may state:
    its rotary embedding, a missing table, the table's resizing rule and grid."""
    fields: dict[str, Any] = {}
    rope = args.get("rope_type")
    if rope is not None:
        if rope not in _NAFLEX_ROPES:
            raise WeightsFileError(
                f"{where!r}: model_args rope_type={rope!r} is not supported; expected one of "
                + ", ".join(map(repr, _NAFLEX_ROPES))
            )
        fields["rope"] = _NAFLEX_ROPES[rope]
        fields.update({k: args[k] for k in _NAFLEX_ROPE_ARGS if args.get(k) is not None})
    if args.get("pos_embed") in ("none", ""):
        fields["pos_embed"] = "none"
    if args.get("pos_embed") == "factorized":  # linear per axis (layers/pos_factorized.py)
        fields["pos_embed"] = "factorized"
        square = args.get("pos_embed_ar_preserving")
        if square is not None:
            fields["pos_resample"] = "timm_square" if square else "timm"
    elif any(k in args for k in _NAFLEX_TABLE_ARGS):  # else the architecture's rule
        fields.update(_naflex_table_fields(args, where))
    grid, patch = args.get("pos_embed_grid_size"), args.get("patch_size", 16)
    if isinstance(grid, list | tuple) and len(grid) == 2 and isinstance(patch, int):
        fields["img_size"] = grid[0] * patch if grid[0] == grid[1] else (grid[0] * patch, grid[1] * patch)
    return fields


def _naflex_table_fields(settings: dict[str, Any], where: str) -> dict[str, Any]:
    """pos_resample from NaFlexVitCfg's table settings (_NAFLEX_TABLE_ARGS)."""
    fields: dict[str, Any] = {}
    key = (
        settings.get("pos_embed_interp_mode", "bicubic"),
        bool(settings.get("pos_embed_ar_preserving", False)),
        bool(settings.get("pos_embed_antialias", True)),
        bool(settings.get("pos_embed_align_corners", False)),
    )
    if key not in _NAFLEX_RESAMPLE or settings.get("pos_embed_use_grid_sample"):
        raise WeightsFileError(
            f"{where!r}: NaFlexVit's table resizing {key[0]!r} (aspect-preserving {key[1]}, antialias "
            f"{key[2]}, align_corners {key[3]}, grid_sample {settings.get('pos_embed_use_grid_sample', False)}) "
            "is not one vitzoo computes; expected one of (mode, aspect-preserving, antialias, align_corners) "
            + ", ".join(map(str, _NAFLEX_RESAMPLE))
            + " without grid_sample"
        )
    fields["pos_resample"] = _NAFLEX_RESAMPLE[key]
    return fields


def _naflex_factorized_fields(embeds: Any, label: str) -> dict[str, Any]:
    """A NaFlexVit with pos_embed='factorized' (layers/pos_factorized.py): its tables resample
    linearly without antialiasing whatever its interpolation settings say, except grid_sample."""
    if getattr(embeds, "pos_embed_use_grid_sample", False):
        raise WeightsMismatchError(
            f"{label}: NaFlexVit's factorized table sampled by grid_sample is not one vitzoo computes; "
            "expected pos_embed_use_grid_sample=False"
        )
    rows, cols = embeds.pos_embed_grid_size
    patch = embeds.patch_size
    return {
        "pos_embed": "factorized",
        "pos_resample": "timm_square" if embeds.pos_embed_ar_preserving else "timm",
        "img_size": (rows * patch[0], cols * patch[1]),
        "dynamic_img_size": True,
        "no_embed_class": True,
    }


def _naflex_timm_fields(model: nn.Module, label: str) -> dict[str, Any]:
    """What a timm NaFlexVit holds outside its tensors' shapes, as ViTConfig fields."""
    embeds: Any = model.embeds
    if not getattr(embeds, "channels_last", True):
        raise WeightsMismatchError(f"{label}: NaFlexVit with channel-major patches is not one vitzoo computes")
    if embeds.pos_embed_type == "factorized":  # linear per axis; aspect-preserving or not
        return _naflex_factorized_fields(embeds, label)
    settings = {
        "pos_embed_interp_mode": embeds.pos_embed_interp_mode,
        "pos_embed_ar_preserving": embeds.pos_embed_ar_preserving,
        "pos_embed_antialias": embeds.pos_embed_antialias,
        "pos_embed_align_corners": getattr(embeds, "pos_embed_align_corners", False),
        "pos_embed_use_grid_sample": getattr(embeds, "pos_embed_use_grid_sample", False),
    }
    fields = _naflex_table_fields(settings, label)
    grid, patch = embeds.pos_embed_grid_size, embeds.patch_size
    if grid is not None:
        fields["img_size"] = (grid[0] * patch[0], grid[1] * patch[1])
    fields["dynamic_img_size"] = True
    fields["no_embed_class"] = True  # its table covers the patches only
    if embeds.pos_embed is None:
        fields["pos_embed"] = "none"
    return fields


# model_args of a timm config that the reader reads (TIMM_MODEL_ARGS, NaFlexVit's), or that change
# nothing the weights compute (the class count the head shows, dropout rates).
_READ_ARGS = frozenset(
    {
        *TIMM_MODEL_ARGS,
        *_NAFLEX_TABLE_ARGS,
        *_NAFLEX_ROPE_ARGS,
        "rope_type",
        "pos_embed",
        "pos_embed_grid_size",
        "num_classes",
        "dynamic_img_size",
        "drop_rate",
        "pos_drop_rate",
        "patch_drop_rate",
        "proj_drop_rate",
        "attn_drop_rate",
        "drop_path_rate",
    }
)


_FEATURE_ARGS = ("features_only", "feature_cls", "feature_cfg", "out_indices")


def check_timm_architecture(ckpt: Checkpoint, *, registered: bool) -> None:
    """The architecture a timm config names, built by timm with the config's model_args on the meta
    device and checked part by part (timm_modules.check_timm_model), unless the caller's registry
    knows it (`registered`) and the model_args are all ones the reader reads: weights whose blocks
    hold the same tensors as a pre-norm ViT's (timm's post-norm ones) load only into what they are.
    Where timm is absent or cannot build the name, the weights load as their tensors and config
    say, with a warning that nothing checked the rest."""
    name = ckpt.timm_architecture
    if name is None or (registered and set(ckpt.timm_model_args) <= _READ_ARGS):
        return
    label = f"{ckpt.file} (its config names timm's {name!r})"
    try:
        import timm
    except ImportError:
        logger.warning(
            "%s: timm is not installed, so nothing checked that vitzoo computes this architecture "
            "exactly; install vitzoo[timm] to have it checked",
            label,
        )
        return
    # the architecture's arguments only: none that loads weights or files, or makes a feature model
    loading = {*inspect.signature(timm.create_model).parameters, *_FEATURE_ARGS}
    args = {k: v for k, v in ckpt.timm_model_args.items() if k not in loading}
    try:
        model = timm_on_meta(timm, name, **args)
    except Exception as e:  # timm's builders fail in many ways on a name or argument they do not take
        logger.warning(
            "%s: timm %s cannot build it (%s), so nothing checked that vitzoo computes it exactly",
            label,
            timm.__version__,
            e,
        )
        return
    check_timm_model(model, label)
    timm_position_and_pool_fields(model, label)  # refuses a rotary embedding vitzoo does not compute
    _check_block_type(model, ckpt, label)


def _check_block_type(model: nn.Module, ckpt: Checkpoint, label: str) -> None:
    """The blocks timm builds with the config's model_args (use_post_norm, block_fn): the block_type
    of an architecture vitzoo does not register, else checked against the registered one's (the
    tensors cannot tell pre-norm from post-norm blocks)."""
    blocks = getattr(model, "blocks", None)
    cls = type(blocks[0]).__name__ if blocks is not None and len(blocks) else None
    if cls is None or ckpt.config.get("block_type") == "parallel":  # a parallel block shows itself
        return
    built = "postnorm" if cls in POST_NORM_BLOCKS else "prenorm"
    if ckpt.architecture is None and "block_type" not in ckpt.declared:
        ckpt.config["block_type"] = built
        ckpt.declared.add("block_type")
        return
    block_type = ckpt.config.get("block_type", "prenorm")
    if built != block_type:
        raise WeightsMismatchError(
            f"{label}: timm builds blocks.0 as {cls} (block_type={built!r}: where its model_args put the norms), "
            f"but the architecture it loads as has block_type={block_type!r}; expected the architecture's own "
            "model_args"
        )


def read_timm(name: str) -> Checkpoint:
    """Take the weights from timm's own loader (it downloads through huggingface_hub too)."""
    timm = require_timm(f"{TIMM_PREFIX}{name}")

    try:
        model = timm.create_model(name, pretrained=True)
    except RuntimeError as e:
        raise WeightsNotFoundError(f"timm:{name}: timm could not create or load it ({e})") from e
    label = f"timm:{name}"
    state, fields, declared = timm_model_fields(model, label)
    pretrained = timm_pretrained(dict(model.pretrained_cfg), label)
    pretrained["source"] = label
    data = Checkpoint(state, label, "timm", fields, declared, checked_pretrained(pretrained, label))
    label_set = imagenet_label_set(fields.get("num_classes", 0))
    if label_set is not None and "label_names" not in pretrained:
        data.implied["label_set"] = label_set
    naflex = hasattr(model, "embeds")  # timm's NaFlexVit
    data.src_grid = tuple(model.embeds.pos_embed_grid_size) if naflex else tuple(model.patch_embed.grid_size)
    return data


def timm_model_fields(model: Any, label: str) -> tuple[dict[str, torch.Tensor], dict[str, Any], set[str]]:
    """A live timm model (on any device, meta too) as vitzoo sees it: its state in vitzoo's names,
    the ViTConfig fields it determines, and which of them no tensor shows (`declared`). Refuses
    (WeightsMismatchError) a model with parts vitzoo does not compute."""
    check_timm_model(model, label)
    converted = to_vitzoo(dict(model.state_dict()), file=label)
    fields = infer_config_fields(converted.state, file=label)
    blocks = getattr(model, "blocks", None)
    if blocks is not None and len(blocks):
        block = blocks[0]
        parallel = hasattr(block, "in_proj")  # timm's (Diff)ParallelScalingBlock: no attn / mlp submodules
        fields["num_heads"] = int(block.num_heads if parallel else block.attn.num_heads)
        fields["norm_eps"] = float(block.in_norm.eps if parallel else block.norm1.eps)
        fields["act_layer"] = _timm_activation(block.mlp_act if parallel else block.mlp.act, label)
        if not parallel:
            fields.update(_timm_attention_fields(blocks))
        if type(block).__module__.endswith(".beit") and isinstance(getattr(block, "init_values", None), float):
            # BEiT's blocks state their LayerScale init (0.1 for BEiT-B, 1e-5 for the others)
            fields["init_values"] = float(block.init_values)
        if type(block).__name__ in POST_NORM_BLOCKS:
            fields["block_type"] = "postnorm"
            if getattr(block, "init_values", None) is not None:  # ResPostBlock: its norms' initial weight
                fields["postnorm_init"] = float(block.init_values)
    fields["global_pool"] = getattr(model, "global_pool", "token") or "token"
    fields["no_embed_class"] = bool(getattr(model, "no_embed_class", False))
    unshown = timm_position_and_pool_fields(model, label)
    if type(model).__name__ == "VisionTransformerSAM":
        unshown.update(_sam_timm_fields(model))
    if hasattr(model, "embeds"):  # timm's NaFlexVit
        unshown.update(_naflex_timm_fields(model, label))
        img = unshown.pop("img_size", fields.get("img_size"))
    else:
        img = tuple(model.patch_embed.img_size)
        if any(size % patch for size, patch in zip(img, model.patch_embed.patch_size)):
            fields["drop_remainder"] = True  # timm's conv ignores the pixels past the last whole patch
    fields["img_size"] = img
    fields.update(unshown)
    declared: set[str] = {
        k
        for k in (
            "num_heads",
            "norm_eps",
            "act_layer",
            "num_kv_heads",
            "qk_norm",
            "init_values",
            "postnorm_init",
            "block_type",
        )
        if k in fields
    }
    declared |= {"global_pool", "no_embed_class", "img_size", *unshown} | ({"drop_remainder"} & set(fields))
    return converted.state, fields, declared


def _timm_attention_fields(blocks: Any) -> dict[str, Any]:
    """What no tensor shape of timm's blocks shows about their attention: grouped-query attention's
    key/value heads (ViTConfig.num_kv_heads: one int when every block has the same count, one per
    block otherwise) and that its qk-norm is per head (timm_modules refuses any other)."""
    fields: dict[str, Any] = {}
    heads = int(blocks[0].attn.num_heads)
    kv = tuple(int(getattr(b.attn, "num_kv_heads", None) or heads) for b in blocks)
    if any(h != heads for h in kv):
        fields["num_kv_heads"] = kv[0] if len(set(kv)) == 1 else kv
    if not isinstance(getattr(blocks[0].attn, "q_norm", None), nn.Identity | None):
        fields["qk_norm"] = "head"
    return fields


def _sam_timm_fields(model: Any) -> dict[str, Any]:
    """What no tensor of timm's SAM encoder shows: which blocks attend within windows, and how large."""
    windows = [int(block.window_size) for block in model.blocks]
    window = max(windows, default=0)
    return {
        "window_size": window,
        "global_attn_indexes": tuple(i for i, w in enumerate(windows) if w == 0) if window else (),
    }


# The attributes of timm's rotary embeddings that hold each setting.
_TIMM_ROPE_ATTRS = {
    "rope_grid_indexing": "grid_indexing",
    "rope_grid_offset": "grid_offset",
    "rope_ref_feat_shape": "ref_feat_shape",
    "rope_rotate_half": "rotate_half",
    "rope_min_period": "min_period",
    "rope_max_period": "max_period",
    "rope_normalize_coords": "normalize_coords",
    "rope_shift_coords": "shift_coords",
    "rope_jitter_coords": "jitter_coords",
    "rope_rescale_coords": "rescale_coords",
}


def timm_position_and_pool_fields(model: nn.Module, label: str) -> dict[str, Any]:
    """What no tensor of a timm model shows about its positions and pooling: its rotary embedding
    (timm's Eva: EVA-02, PE, RoPE-ViT, DINOv3), a missing position table, and how its attention
    pool attends (Eva's attends over every token)."""
    fields: dict[str, Any] = {}
    if hasattr(model, "pos_embed") and model.pos_embed is None:  # no learned table (RoPE-ViT, DINOv3)
        fields["pos_embed"] = "none"
    pool = getattr(model, "attn_pool", None)
    if pool is not None:
        fields["attn_pool_num_heads"] = int(pool.num_heads)
        fields["pool_include_prefix"] = bool(getattr(model, "pool_include_prefix", type(model).__name__ == "Eva"))
    rope = getattr(model, "rope", None)
    if rope is None:
        return fields
    kind = TIMM_ROPES.get(type(rope).__name__)
    if kind is None or getattr(rope, "in_pixels", False):
        raise WeightsMismatchError(
            f"{label}: the rotary embedding {type(rope).__name__} is not one vitzoo computes; expected one of "
            f"{', '.join(TIMM_ROPES)} (RotaryEmbeddingCat with in_pixels=False)"
        )
    fields["rope"] = kind
    if getattr(rope, "temperature", None) is not None:
        fields["rope_temperature"] = float(rope.temperature)
    for name, attr in _TIMM_ROPE_ATTRS.items():
        value = getattr(rope, attr, None)
        if value is not None:
            fields[name] = tuple(int(v) for v in value) if name == "rope_ref_feat_shape" else value
    return fields


def _timm_activation(act: nn.Module, label: str) -> str:
    """The ViTConfig.act_layer of a timm MLP's activation module."""
    name = type(act).__name__
    if isinstance(act, nn.GELU):
        return "gelu_tanh" if act.approximate == "tanh" else "gelu"
    if name in ("GELUTanh", "QuickGELU"):  # timm.layers.activations
        return {"GELUTanh": "gelu_tanh", "QuickGELU": "quick_gelu"}[name]
    if name == "GELU":  # timm's own GELU module (exact)
        return "gelu"
    if isinstance(act, nn.SiLU) or name == "Swish":  # the gate of timm's SwiGLU MLPs
        return "silu"
    raise WeightsMismatchError(
        f"{label}: the MLP activation {name} is not one vitzoo computes; expected GELU, its tanh "
        "approximation, QuickGELU or SiLU"
    )
