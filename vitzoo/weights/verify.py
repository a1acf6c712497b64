"""Verification: a checkpoint is data, not trusted code.

Before a model is built, every field a config.json states is type-checked and compared with what
the tensors say (`check_stated`: widths, depth, patch size, channels, classes, tokens, position
grid); sizes no tensor confirms are bounded (`check_bounds`), so a hostile config cannot make
vitzoo allocate memory it sizes. `check_shown` is the comparison itself, for any table of fields
and the tensors that show them (the text towers' table, vitzoo/text/transformer.py, uses it too).
Before a checkpoint is loaded into a model, what no tensor shape shows (the head count, the
activation) must match the model (`check_fits`): the weights would load and compute something else
than they were trained to.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from ..checks import check_image_bounds, check_types
from ..layers import to_2tuple
from ..layers.swiglu import mlp_hidden_dim
from ..model import COCA_QUERIES, ViTConfig
from .checkpoint import UNSHOWN_FIELDS, Checkpoint
from .errors import WeightsFileError, WeightsMismatchError
from .files import StateDict
from .shapes import CLASSIC_FIELDS, COCA_QUERY, position_prefix

# The fields a checkpoint's tensors state, each with the tensor (shape) that states it. A config
# that disagrees describes some other model: building it would allocate for the config's sizes
# (new heads, adapted convolutions, sinusoid tables) before the shapes could object.
_STATED_BY: dict[str, str] = {
    "embed_dim": "patch_embed.proj.weight",
    "in_chans": "patch_embed.proj.weight",
    "patch_size": "patch_embed.proj.weight",
    "conv_stem": "patch_embed.stem.*.weight",
    "hybrid_stem": "patch_embed.backbone.*",
    "hybrid_layers": "patch_embed.backbone.stages.<i>.blocks.<j>.*",
    "patch_bias": "patch_embed.proj.bias",
    "embed_norm": "patch_embed.norm.weight",
    "depth": "blocks.<i>.*",
    "num_classes": "head.weight",
    "head_bias": "head.bias",
    "representation_size": "pre_logits.fc.weight",
    "class_token": "cls_token",
    "distilled": "dist_token",
    "reg_tokens": "reg_token",
    "pre_norm": "norm_pre.weight",
    "final_norm": "norm.weight",
    "fc_norm": "fc_norm.weight",
    "qkv_bias": "blocks.0.attn.qkv.bias",
    "mlp_layer": "blocks.0.mlp.fc1_g.weight, or the widths of blocks.0.mlp.fc1 and fc2",
    "mlp_norm": "blocks.0.mlp.norm.weight",
    "attn_norm": "blocks.0.attn.norm.weight",
    "norm_layer": "blocks.0.norm1.bias",
    "qkv_fused": "blocks.0.attn.q_proj.weight",
    "k_bias": "blocks.0.attn.q_bias / k_proj.bias",
    "proj_bias": "blocks.0.attn.proj.bias",
}
_BLOCK_FIELDS = (
    "qkv_bias",
    "mlp_layer",
    "mlp_norm",
    "attn_norm",
    "norm_layer",
    "qkv_fused",
    "k_bias",
    "proj_bias",
)  # shown by block 0's tensors only


def check_stated(
    stated: dict[str, Any], inferred: dict[str, Any], state: StateDict, *, config: str, weights: str
) -> None:
    """Raise WeightsFileError for a stated field of the wrong type or out of bounds, and
    WeightsMismatchError for one that disagrees with the tensors in `weights`."""
    try:
        check_types(stated, ViTConfig.field_types())
    except TypeError as e:
        raise WeightsFileError(f"{config!r}: {e}") from e

    def mismatch(name: str, value: Any, tensors: str, found: Any) -> WeightsMismatchError:
        return _stated_mismatch(config, f"{name}={value!r}", name, found, tensors, weights)

    stem = "patch_embed.stem.0.weight" in state
    hybrid = inferred.get("hybrid_stem", "")
    depth = inferred["depth"]
    # infer_config_fields leaves out the newer options where they have a classic ViT's value
    shown = {name: inferred.get(name, CLASSIC_FIELDS.get(name)) for name in _STATED_BY}
    if not depth:  # the block fields are shown by block 0 alone
        shown = {k: v for k, v in shown.items() if k not in _BLOCK_FIELDS}
    if "head.weight" not in state:
        shown.pop("head_bias")
    stated_by = {**_STATED_BY, "in_chans": "patch_embed.stem.0.weight"} if stem else _STATED_BY
    if hybrid:  # a CNN stem's first conv shows the channels, its last conv (or proj) the width
        stated_by = {**_STATED_BY, "in_chans": "patch_embed.backbone.*", "patch_size": "patch_embed.backbone.*"}
    values = {k: v for k, v in stated.items() if k in shown}
    check_shown(values, shown, stated_by, config=config, weights=weights, same={"patch_size": _same_patch})
    # init_values is LayerScale's start (blocks.0.ls1.gamma). A post-norm block has no LayerScale: its
    # norms' starting weight (postnorm_init) is shown by no tensor, and an init_values stated with it is
    # that weight under its old name (timm's too; ViTConfig.from_dict reads it as postnorm_init).
    layer_scale = stated.get("block_type") != "postnorm"
    if (
        "init_values" in stated
        and layer_scale
        and depth
        and (stated["init_values"] is None) != ("init_values" not in inferred)
    ):
        found = "a number (LayerScale)" if "init_values" in inferred else None
        raise mismatch("init_values", stated["init_values"], "blocks.0.ls1.gamma", found)
    for pool, tensor in (("map", "attn_pool.latent"), ("coca", COCA_QUERY), ("aimv2", "attn_pool.query")):
        if "global_pool" in stated and (stated["global_pool"] == pool) != (inferred["global_pool"] == pool):
            raise mismatch("global_pool", stated["global_pool"], tensor, inferred["global_pool"])
    if (
        inferred["global_pool"] == "coca"
    ):  # CoCa's pooler: its query table's rows and width (None: COCA_QUERIES, embed_dim)
        for name, unset in (("coca_queries", COCA_QUERIES), ("coca_dim", inferred["embed_dim"])):
            if name in stated and (stated[name] or unset) != (inferred[name] or unset):
                raise mismatch(name, stated[name], COCA_QUERY, inferred[name] or unset)
    if "norm_eps" in stated and not stated["norm_eps"] > 0:
        raise WeightsFileError(f"{config!r}: norm_eps={stated['norm_eps']!r} is invalid; expected a positive number")
    _check_mlp_width(stated, inferred, state, mismatch)
    if "rope" in stated and (stated["rope"] == "mixed") != ("rope.freqs" in state):
        raise mismatch("rope", stated["rope"], "rope.freqs", "mixed" if "rope.freqs" in state else "not 'mixed'")
    pos = state.get("pos_embed")
    factorized = "pos_embed_y" in state
    if (stated.get("pos_embed") == "factorized") != factorized and "pos_embed" in stated:
        raise mismatch("pos_embed", stated["pos_embed"], "pos_embed_y", "factorized" if factorized else None)
    if stated.get("pos_embed") in ("sincos", "none") and pos is not None:
        raise mismatch("pos_embed", stated["pos_embed"], "pos_embed", "learned")
    if stated.get("pos_embed") == "learned" and pos is None:
        raise mismatch("pos_embed", "learned", "no pos_embed tensor", "sincos")
    if "img_size" not in stated:
        return
    img, patch = to_2tuple(stated["img_size"], "img_size"), to_2tuple(inferred["patch_size"], "patch_size")
    # whole patches (a size past the last one is dropped, drop_remainder); a conv stem pads
    grid = (-(-img[0] // patch[0]), -(-img[1] // patch[1])) if stem else (img[0] // patch[0], img[1] // patch[1])
    if pos is not None:
        prefix = int(inferred["class_token"]) + int(inferred["distilled"]) + inferred.get("reg_tokens", 0)
        if stated.get("no_embed_class") is not None:  # the config says which: only that layout fits
            prefix = 0 if stated["no_embed_class"] else prefix
        covered = position_prefix(pos.shape[1], prefix, grid)
        if covered is None:
            raise WeightsMismatchError(
                f"{config!r} states img_size={stated['img_size']!r}, a {grid[0]}x{grid[1]} grid of "
                f"patch_size {inferred['patch_size']!r}, but pos_embed in {weights} has shape {tuple(pos.shape)}: "
                f"{pos.shape[1] - prefix} grid positions; expected the config to describe these weights"
            )
    else:
        check_bounds(img, grid, config)


def _same_patch(a: Any, b: Any) -> bool:
    return to_2tuple(a, "patch_size") == to_2tuple(b, "patch_size")


def _stated_mismatch(config: str, says: str, name: str, found: Any, tensors: str, weights: str) -> WeightsMismatchError:
    """The error for a config that says `says` (e.g. "depth=12") where the tensors show `name`=`found`."""
    return WeightsMismatchError(
        f"{config!r} states {says}, but the weights in {weights} have {name}={found!r} "
        f"(from {tensors}); expected the config to describe these weights"
    )


def check_shown(
    stated: Mapping[str, Any],
    shown: Mapping[str, Any],
    shown_by: Mapping[str, str],
    *,
    config: str,
    weights: str,
    says: Mapping[str, str] | None = None,
    same: Mapping[str, Callable[[Any, Any], bool]] | None = None,
) -> None:
    """Raise WeightsMismatchError for the first field of `shown_by` (field -> the tensors that show
    it) whose value in `stated` (what the config at `config` builds) differs from the tensors'
    (`shown`), or that no tensor shows. `says`: how the config states a field, where that is not
    "field=value" (a config in another library's terms); `same`: comparisons other than ==."""
    for name, tensors in shown_by.items():
        if name not in stated:
            continue
        said = (says or {}).get(name, f"{name}={stated[name]!r}")
        if name not in shown:
            raise WeightsMismatchError(
                f"{config!r} states {said}, but the weights in {weights} have no {tensors} (of the expected "
                "rank) to show it; expected the config to describe these weights"
            )
        equal = (same or {}).get(name, operator.eq)
        if not equal(stated[name], shown[name]):
            raise _stated_mismatch(config, said, name, shown[name], tensors, weights)


def _check_mlp_width(stated: dict[str, Any], inferred: dict[str, Any], state: StateDict, mismatch: Any) -> None:
    """The MLP width a config states (mlp_ratio, mlp_align) against block 0's first projection."""
    kind = inferred.get("mlp_layer", "mlp")
    key = "blocks.0.mlp.fc1_g.weight" if kind == "swiglu" else "blocks.0.mlp.fc1.weight"
    if "mlp_ratio" not in stated or not inferred["depth"] or key not in state:
        return
    dim, width = inferred["embed_dim"], int(state[key].shape[0])
    expected = mlp_hidden_dim(kind, dim, stated["mlp_ratio"], stated.get("mlp_align", 0) if kind == "swiglu" else 0)
    if kind == "swiglu_packed":
        expected *= 2  # fc1 holds gate and input
    if expected != width:
        raise mismatch("mlp_ratio", stated["mlp_ratio"], key, width / dim)


def check_bounds(img: tuple[int, int], grid: tuple[int, int], config: str) -> None:
    try:
        check_image_bounds(img, grid)
    except ValueError as e:
        raise WeightsFileError(f"{config!r}: {e} (an image size that no tensor confirms is bounded)") from e


def check_fits(model: nn.Module, ckpt: Checkpoint) -> None:
    """Raise WeightsMismatchError when `ckpt` states a head count or activation other than the model's."""
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "num_heads") and "num_heads" in ckpt.declared:
        if ckpt.config["num_heads"] != config.num_heads:
            # No tensor shape depends on the head count: loading would "work" and compute garbage.
            raise WeightsMismatchError(
                f"{ckpt.file}: the checkpoint was trained with num_heads={ckpt.config['num_heads']}, the model "
                f"has num_heads={config.num_heads}; expected equal head counts"
            )
    for name in UNSHOWN_FIELDS:
        stated = _plain(ckpt.config.get(name))
        if config is not None and name in ckpt.declared and stated != getattr(config, name, None):
            raise WeightsMismatchError(
                f"{ckpt.file}: the checkpoint was trained with {name}={ckpt.config[name]!r}, the model has "
                f"{name}={getattr(config, name, None)!r}; expected the same {name} (no tensor shows it)"
            )
    act = ckpt.config.get("act_layer")
    if config is not None and hasattr(config, "act_layer") and "act_layer" in ckpt.declared and act != config.act_layer:
        # Like the head count, the activation shapes no tensor: the weights would load and compute
        # something else than they were trained to.
        raise WeightsMismatchError(
            f"{ckpt.file}: the checkpoint was trained with act_layer={act!r}, the model has "
            f"act_layer={config.act_layer!r}; expected the same activation (build the model with act_layer={act!r})"
        )


def check_named_args(model: nn.Module, ckpt: Checkpoint, args: dict[str, Any], named: str) -> None:
    """Raise WeightsMismatchError where `ckpt` contradicts the fields `args` that the weights tag
    `named` ("name.tag") builds `model` with: a value its files state or its tensors show otherwise
    (the image size: its position grid). What the registry itself told the checkpoint is not counted."""
    config = getattr(model, "config", None)
    if not isinstance(config, ViTConfig):
        return
    for key in args:
        if key not in ckpt.config or key in ckpt.named or not hasattr(config, key):
            continue
        theirs, ours = ckpt.config[key], getattr(config, key)
        if key == "img_size":  # whole patches: a grid is what a position table shows
            same = config.replace(img_size=_plain(theirs)).grid_size == config.grid_size
        else:
            same = _plain(theirs) == _plain(ours)
        if not same:
            how = "its config states" if key in ckpt.declared else "its tensors show"
            raise WeightsMismatchError(
                f"{ckpt.file}: {how} {key}={_plain(theirs)!r}, but the weights tag {named!r} builds {key}={ours!r}; "
                f"expected the weights {named!r} names (name the model without the tag, or pass {key}= to build another)"
            )


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value  # JSON has no tuples
