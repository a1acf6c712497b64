"""Fine-tuning an image-text model as a classifier: the head starts as the zero-shot classifier
(`vitzoo finetune ... --init-head zeroshot`), and the weight-space ensemble of the fine-tuned and
zero-shot models (WiSE-FT, Wortsman et al. 2022: `--wise-ft ALPHA`) keeps zero-shot robustness.

    vit = zero_shot_vit(model, classnames, templates)        # model.visual, classifier head folded in
    mixed = wise_ft(zero_shot_state, vit.state_dict(), 0.5)  # (1 - alpha) * zero-shot + alpha * fine-tuned

The zero-shot logits are exp(logit_scale) * <class embedding, f(x) / |f(x)|> (+ logit_bias); the
folded head computes |f(x)| times that (the bias once), a positive factor per image: the same
predictions, in an ordinary VisionTransformer that the training engine fine-tunes end to end.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..model import VisionTransformer
from ..pretrained_cfg import PretrainedCfg, attach_pretrained_cfg, pretrained_cfg_of
from .model import ImageTextModel


@torch.no_grad()
def zero_shot_vit(
    model: ImageTextModel, classnames: Sequence[str], templates: Sequence[str] | None = None
) -> VisionTransformer:
    """`model.visual` with a head of len(classnames) classes that predicts as zero-shot
    classification does (see the module docstring); its labels are `classnames`. The image
    tower is changed in place and returned."""
    visual = model.visual
    classes = model.class_embeddings(classnames, templates) * model.logit_scale.exp()  # (C, E)
    old = visual.head
    if isinstance(old, nn.Linear):  # CLIP: the projection to the joint space, folded in
        weight = classes @ old.weight
        bias = classes @ old.bias if old.bias is not None else classes.new_zeros(len(classnames))
    else:  # SigLIP: the pooled feature is the embedding
        weight, bias = classes, classes.new_zeros(len(classnames))
    if model.logit_bias is not None:
        bias = bias + model.logit_bias  # the same for every class: it moves no prediction
    visual.reset_classifier(len(classnames))
    head = visual.head
    assert isinstance(head, nn.Linear)
    head.weight.copy_(weight)
    if head.bias is not None:
        head.bias.copy_(bias)
    cfg = pretrained_cfg_of(visual) or PretrainedCfg()
    attach_pretrained_cfg(
        visual, cfg.replace(num_classes=len(classnames), label_names=tuple(classnames), label_set=None)
    )
    return visual


def wise_ft(
    zero_shot: Mapping[str, torch.Tensor], finetuned: Mapping[str, torch.Tensor], alpha: float
) -> dict[str, torch.Tensor]:
    """(1 - alpha) * zero_shot + alpha * finetuned, tensor by tensor (alpha 0: zero-shot, 1: fine-tuned).
    Integer tensors (counters) are the fine-tuned model's."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"wise_ft: alpha={alpha!r} is invalid; expected a number from 0 to 1")
    if set(zero_shot) != set(finetuned):
        differ = sorted(set(zero_shot) ^ set(finetuned))
        raise ValueError(f"wise_ft: the two models have different parameters: {', '.join(differ[:10])}")
    out: dict[str, torch.Tensor] = {}
    for key, ft in finetuned.items():
        zs = zero_shot[key]
        if zs.shape != ft.shape:
            raise ValueError(f"wise_ft: {key} has shape {tuple(zs.shape)} zero-shot and {tuple(ft.shape)} fine-tuned")
        if ft.is_floating_point():
            out[key] = torch.lerp(zs.to(ft.dtype).to(ft.device), ft, alpha)
        else:
            out[key] = ft.clone()
    return out
