"""The end of the model: the final norm on the tokens (or, with `fc_norm`, after the pooling: MAE
fine-tuning), the representation layer (Linear + Tanh, ImageNet-21k ViT) and the classifier or
projection head, a second one for DeiT's distillation token."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from ..checks import check_fields
from .part import Part, linear, norm_params

if TYPE_CHECKING:
    from .fields import ViTFields


class Head(Part):
    name = "head"

    def check(self, config: ViTFields) -> None:
        c = config
        check_fields(
            c,
            [
                (c.num_classes >= 0, "num_classes", "an int >= 0"),
                (
                    c.representation_size is None or c.representation_size > 0,
                    "representation_size",
                    "None or an int > 0",
                ),
            ],
        )
        if c.distilled and c.fc_norm:
            raise ValueError("distilled=True cannot be combined with fc_norm=True; expected fc_norm=False")
        if c.fc_norm and not c.final_norm:
            raise ValueError(
                "fc_norm=True moves the final LayerNorm after the pooling, so it needs final_norm=True; "
                "expected fc_norm=False for a model without a final norm"
            )

    def params(self, config: ViTFields) -> int:
        c, d = config, config.embed_dim
        total = norm_params(c, d) * (int(final_norm_on_tokens(c)) + int(c.fc_norm))
        if c.representation_size:
            total += linear(d, c.representation_size)
        if c.num_classes > 0:
            heads = 2 if c.distilled else 1
            total += heads * linear(c.representation_size or c.pool_dim, c.num_classes, c.head_bias)
        return total

    def flops(self, config: ViTFields) -> dict[str, int]:
        """One pooled feature per classifier (two with a distillation token), or every token without
        pooling; the classifier takes the representation layer's width, else the pool's."""
        c, d = config, config.embed_dim
        tokens = c.grid_size[0] * c.grid_size[1] + c.num_prefix_tokens
        heads = tokens if c.global_pool == "" else 2 if c.distilled else 1
        rep = c.representation_size
        total = heads * 2 * d * rep if rep else 0
        if c.num_classes > 0:
            total += heads * 2 * (rep or c.pool_dim) * c.num_classes
        return {"head": total}


HEAD = Head()


def final_norm_on_tokens(config: ViTFields) -> bool:
    """Whether the final norm is the tokens' (`norm`): not after the pooling (fc_norm), not in CoCa's
    pool (open_clip's released CoCa: ln_post after its pooler, config.norm_in_pool)."""
    return config.final_norm and not config.fc_norm and not config.norm_in_pool


def new_pre_logits(config: ViTFields) -> nn.Module:
    """The representation layer, `pre_logits.fc` (an Identity without one)."""
    if not config.representation_size:
        return nn.Identity()
    pre_logits = nn.Sequential()
    pre_logits.add_module("fc", nn.Linear(config.embed_dim, config.representation_size))
    pre_logits.add_module("act", nn.Tanh())
    return pre_logits
