"""Fitting a checkpoint (already in vitzoo's names) to a model that differs from it.

Three differences are adapted, each announced in a log line; anything else is an error:

* num_classes: the classifier head(s) are initialised afresh (or dropped for num_classes=0);
* img_size: the position embedding is resampled on its 2-D grid (bicubic), prefix tokens kept;
* in_chans: the patch projection is adapted (1 channel: sum over RGB; otherwise tile and rescale).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ..layers import crop_resample_pos_embed, resample_abs_pos_embed, tile_pos_embed
from .errors import WeightsMismatchError
from .files import StateDict

logger = logging.getLogger("vitzoo.weights")

HEAD_KEYS = ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias")


@dataclass
class FitReport:
    """What `fit_state_dict` changed, for logs, tests and the CLI."""

    adapted: list[str] = field(default_factory=list)  # human-readable notes, one per adaptation
    missing: list[str] = field(default_factory=list)  # model keys the checkpoint lacks (strict=False)
    unexpected: list[str] = field(default_factory=list)  # checkpoint keys the model lacks (strict=False)


def adapt_input_conv(weight: torch.Tensor, in_chans: int) -> torch.Tensor:
    """(D, C_src, ph, pw) -> (D, in_chans, ph, pw). One channel: the sum over the source channels,
    so a grey image x gives the response the RGB model gives to (x, x, x). More channels: the
    source channels repeated and scaled by C_src / in_chans, keeping the output's expected size."""
    src = weight.shape[1]
    if in_chans == 1:
        return weight.sum(dim=1, keepdim=True)
    repeats = math.ceil(in_chans / src)
    return weight.repeat(1, repeats, 1, 1)[:, :in_chans] * (src / in_chans)


def _new_head(shape: torch.Size, key: str, dtype: torch.dtype) -> torch.Tensor:
    # Same init as VisionTransformer.reset_classifier: truncated normal(0.02) weight, zero bias.
    t = torch.empty(shape, dtype=dtype)
    return nn.init.trunc_normal_(t, std=0.02) if key.endswith("weight") else t.zero_()


def fit_state_dict(
    state: StateDict,
    model: nn.Module,
    *,
    file: str,
    strict: bool = True,
    src_grid: tuple[int, int] | None = None,
    antialias: bool = True,
    dtype: torch.dtype | None = None,
    pos_mode: str = "bicubic",
) -> tuple[StateDict, FitReport]:
    """Return a state dict with exactly the model's keys and shapes (strict) built from `state`.

    `model` may live on the meta device: only its parameter names, shapes and dtypes are used.
    `src_grid` is the checkpoint's patch grid when known (needed for non-square source grids);
    `antialias` is how its position embedding is resampled (see vitzoo.layers.resample_abs_pos_embed),
    `pos_mode` "bilinear" (antialiased) or "cpe" (RADIO's table of its largest input, cropped:
    crop_resample_pos_embed) or "tile" (SAM 3's table repeated: tile_pos_embed) where the source's
    library resamples so;
    `dtype`, when given, is the one floating tensors are returned in instead of the model's."""
    target = model.state_dict()
    _check_dtypes(state, target, file)
    state = dict(state)
    report = FitReport()
    for note, level in [
        *_fit_head(state, target, file),
        *_fit_pos_embed(state, target, model, file, src_grid, antialias, pos_mode),
        *_fit_in_chans(state, target),
        *_drop_zero_qv_biases(state, target),
    ]:
        report.adapted.append(note)
        logger.log(level, "%s: %s", file, note)
    report.missing, report.unexpected = _check_keys_and_shapes(state, target, model, file, strict)
    out: StateDict = {}
    for k in target:
        if k in state:
            v = state[k]
            want = dtype if dtype is not None and target[k].is_floating_point() else target[k].dtype
            out[k] = v if v.dtype == want else v.to(want)
    return out, report


Notes = list[tuple[str, int]]  # (what was adapted, logging level)


def _check_dtypes(state: StateDict, target: StateDict, file: str) -> None:
    """Integer, bool or complex values for floating-point parameters are refused: casting them
    would load quantised (or unrelated) data as if it were the weights. Other floating precisions
    (fp16, bf16, fp64) are converted to the model's dtype as usual."""
    bad = [
        f"{k} ({str(v.dtype).removeprefix('torch.')})"
        for k, v in state.items()
        if k in target and target[k].is_floating_point() and not v.is_floating_point()
    ]
    if bad:
        raise WeightsMismatchError(
            f"{file}: tensor(s) of a non-floating dtype for floating-point parameters: {_listing(bad)}; "
            "expected floating-point values (a quantised checkpoint must be dequantised before loading)"
        )


def _fit_head(state: StateDict, target: StateDict, file: str) -> Notes:
    """A different number of classes means a new head (or none, for num_classes=0), not an error."""
    model_head, ckpt_head = target.get("head.weight"), state.get("head.weight")
    if model_head is not None and (ckpt_head is None or ckpt_head.shape[0] != model_head.shape[0]):
        if ckpt_head is not None and ckpt_head.shape[1:] != model_head.shape[1:]:
            raise WeightsMismatchError(
                f"{file}: head.weight has {ckpt_head.shape[1]} input features, the model's head expects "
                f"{model_head.shape[1]} (representation_size differs); expected shape {tuple(model_head.shape)}, "
                f"found {tuple(ckpt_head.shape)}"
            )
        found = ckpt_head.shape[0] if ckpt_head is not None else 0
        for key in HEAD_KEYS:
            if key in target:
                state[key] = _new_head(target[key].shape, key, target[key].dtype)
        note = f"classifier head re-initialised: checkpoint has {found} classes, model has {model_head.shape[0]}"
        return [(note, logging.WARNING)]
    if model_head is None and ckpt_head is not None:
        for key in HEAD_KEYS:
            state.pop(key, None)
        note = f"classifier head dropped: checkpoint has {ckpt_head.shape[0]} classes, model has num_classes=0"
        return [(note, logging.WARNING)]
    return []


def _fit_pos_embed(
    state: StateDict,
    target: StateDict,
    model: nn.Module,
    file: str,
    src_grid: tuple[int, int] | None,
    antialias: bool,
    pos_mode: str = "bicubic",
) -> Notes:
    """A position embedding on another patch grid is resampled; its prefix tokens must agree."""
    if "pos_embed" not in state or "pos_embed" not in target or state["pos_embed"].shape == target["pos_embed"].shape:
        return []
    old, new = state["pos_embed"], target["pos_embed"]
    reg = state.get("reg_token")
    prefix = int("cls_token" in state) + int("dist_token" in state) + (int(reg.shape[1]) if reg is not None else 0)
    model_prefix = getattr(model, "num_prefix_tokens", prefix)
    if prefix != model_prefix or old.shape[-1] != new.shape[-1]:
        raise WeightsMismatchError(
            f"{file}: key 'pos_embed' has shape {tuple(old.shape)} with {prefix} prefix token(s), the model "
            f"expects {tuple(new.shape)} with {model_prefix}; only the patch grid can be resampled"
        )
    config = getattr(model, "config", None)
    # With timm's no_embed_class the table has rows for the patches only (the checkpoint's
    # layout is the model's: a model that differs has other parameters and is refused elsewhere).
    covered = 0 if getattr(config, "no_embed_class", False) else prefix
    new_grid = tuple(config.grid_size) if config is not None else _square(new.shape[1] - covered, "model", file)
    old_grid = src_grid if src_grid is not None else _square(old.shape[1] - covered, "checkpoint", file)
    if old_grid[0] * old_grid[1] != old.shape[1] - covered:
        raise WeightsMismatchError(
            f"{file}: 'pos_embed' has {old.shape[1] - covered} grid positions, not the {old_grid} grid its config names"
        )
    if pos_mode == "cpe" and not covered:
        state["pos_embed"] = crop_resample_pos_embed(old, old_grid=old_grid, new_grid=new_grid)
        how = "RADIO's crop of its largest grid"
    elif pos_mode == "tile" and not covered:
        state["pos_embed"] = tile_pos_embed(old, old_grid=old_grid, new_grid=new_grid)
        how = "tiled, not interpolated, as SAM 3 does"
    else:
        bilinear = pos_mode == "bilinear"
        state["pos_embed"] = resample_abs_pos_embed(
            old,
            old_grid=old_grid,
            new_grid=new_grid,
            num_prefix_tokens=covered,
            antialias=antialias or bilinear,
            mode="bilinear" if bilinear else "bicubic",
        )
        how = "bicubic" if antialias else "bicubic, not antialiased, as the source's library does"
        how = "bilinear, antialiased, as the source's library does" if bilinear else how
    note = (
        f"position embedding resampled ({how}) from a {old_grid[0]}x{old_grid[1]} to a {new_grid[0]}x{new_grid[1]} grid"
    )
    return [(note, logging.INFO)]


def _fit_in_chans(state: StateDict, target: StateDict) -> Notes:
    """A first convolution for another number of input channels is adapted (see adapt_input_conv)."""
    firsts = (
        "patch_embed.stem.0.weight",
        *(f"patch_embed.backbone.{k}.weight" for k in ("stem.conv", "conv", "0.conv")),
    )
    key = next((k for k in firsts if k in target), "patch_embed.proj.weight")  # a stem's first conv, else the patch's
    if key not in state or key not in target:
        return []
    w, t = state[key], target[key]
    if not (
        w.ndim == 4
        and t.ndim == 4
        and w.shape[1] != t.shape[1]
        and (w.shape[0], *w.shape[2:]) == (t.shape[0], *t.shape[2:])
    ):
        return []
    state[key] = adapt_input_conv(w, t.shape[1])
    how = "summed over channels" if t.shape[1] == 1 else "tiled and rescaled"
    return [(f"{key} adapted from {w.shape[1]} to {t.shape[1]} input channels ({how})", logging.INFO)]


def _drop_zero_qv_biases(state: StateDict, target: StateDict) -> Notes:
    """q and v biases (attn.q_bias / v_bias) that are exactly zero, for a model whose attention has
    none: DINOv3's released weights carry such biases (transformers' query_bias / value_bias), and
    zeros compute what no bias computes. Any other value stays, for the key check to refuse."""
    dropped = []
    for key in [k for k in state if k.endswith((".attn.q_bias", ".attn.v_bias")) and k not in target]:
        block = key.rsplit(".", 1)[0]
        if f"{block}.qkv.weight" in target and f"{block}.qkv.bias" not in target and not state[key].count_nonzero():
            dropped.append(state.pop(key))
    if not dropped:
        return []
    return [(f"{len(dropped)} all-zero q/v bias tensor(s) dropped: the model's attention has no bias", logging.INFO)]


def _check_keys_and_shapes(
    state: StateDict, target: StateDict, model: nn.Module, file: str, strict: bool
) -> tuple[list[str], list[str]]:
    """Whatever still differs is an error (keys only when strict; shapes always). Returns the
    missing and unexpected keys that strict=False lets through."""
    missing = sorted(k for k in target if k not in state)
    unexpected = sorted(k for k in state if k not in target)
    if strict and (missing or unexpected):
        parts = []
        if missing:
            parts.append(f"missing key(s) the model needs: {_listing(missing)}")
        if unexpected:
            parts.append(f"unexpected key(s) the model does not have: {_listing(unexpected)}")
        raise WeightsMismatchError(
            f"{file} does not fit {type(model).__name__}: "
            + "; ".join(parts)
            + " (pass strict=False to load the keys that do fit)"
        )
    bad = [
        f"{k}: expected {tuple(target[k].shape)}, found {tuple(state[k].shape)}"
        for k in target
        if k in state and tuple(state[k].shape) != tuple(target[k].shape)
    ]
    if bad:
        raise WeightsMismatchError(f"{file}: tensor(s) of the wrong shape: " + "; ".join(bad[:20]))
    return missing, unexpected


def _square(n: int, what: str, file: str) -> tuple[int, int]:
    side = round(math.sqrt(n))
    if side * side != n:
        raise WeightsMismatchError(
            f"{file}: the {what}'s position embedding has {n} grid positions, which is not a square grid; "
            "its img_size must be known (a config.json next to the weights) to resample it"
        )
    return side, side


def _listing(keys: list[str], limit: int = 20) -> str:
    return ", ".join(keys[:limit]) + (f" ... ({len(keys)} in all)" if len(keys) > limit else "")
