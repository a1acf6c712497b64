"""vitzoo/train/optim.py: decay groups, layer-wise lr decay, linear probe, warmup + cosine."""

from __future__ import annotations

import pytest
import torch
from conftest import tiny_model

from vitzoo.train import WarmupCosine, freeze_backbone, param_groups, warmup_cosine


def _names(groups: list[dict], decay: bool) -> set[str]:
    return {n for g in groups if (g["weight_decay"] > 0) == decay for n in g["param_names"]}


def test_no_decay_for_norms_biases_tokens_and_pos_embed() -> None:
    model = tiny_model()
    groups = param_groups(model, weight_decay=0.05)
    no_decay, decay = _names(groups, False), _names(groups, True)
    assert {"cls_token", "pos_embed", "blocks.0.norm1.weight", "blocks.0.attn.qkv.bias", "head.bias"} <= no_decay
    assert {"patch_embed.proj.weight", "blocks.0.attn.qkv.weight", "blocks.1.mlp.fc2.weight", "head.weight"} <= decay
    assert no_decay | decay == {n for n, _ in model.named_parameters()} and not no_decay & decay


def test_layer_decay_scales() -> None:
    model = tiny_model()  # depth 2: embeddings 0, blocks 1..2, head 3
    groups = param_groups(model, weight_decay=0.05, layer_decay=0.5)
    scale = {n: g["lr_scale"] for g in groups for n in g["param_names"]}
    assert scale["head.weight"] == 1.0 and scale["norm.weight"] == 1.0
    assert scale["blocks.1.mlp.fc1.weight"] == 0.5 and scale["blocks.0.mlp.fc1.weight"] == 0.25
    assert scale["pos_embed"] == 0.125 and scale["patch_embed.proj.weight"] == 0.125


def test_linear_probe_freezes_all_but_head() -> None:
    model = tiny_model()
    trainable = freeze_backbone(model)
    assert trainable == model.head.weight.numel() + model.head.bias.numel()
    assert _names(param_groups(model, weight_decay=0.1), True) == {"head.weight"}
    with pytest.raises(ValueError, match="no head parameters"):
        freeze_backbone(tiny_model(num_classes=0))


def test_warmup_then_cosine() -> None:
    f = lambda s: warmup_cosine(s, warmup_steps=4, total_steps=14, min_lr_ratio=0.1)  # noqa: E731
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(9) == pytest.approx(0.55) and f(14) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)


def test_scheduler_sets_scaled_lrs_and_restores_from_state() -> None:
    model = tiny_model()
    groups = param_groups(model, weight_decay=0.05, layer_decay=0.5)
    opt = torch.optim.AdamW(groups, lr=1.0)
    sched = WarmupCosine(opt, peak_lr=0.01, warmup_steps=2, total_steps=10, min_lr_ratio=0.0)
    for _ in range(5):
        sched.step()
    lrs = [g["lr"] for g in opt.param_groups]
    assert sched.lr == pytest.approx(0.01 * warmup_cosine(5, warmup_steps=2, total_steps=10, min_lr_ratio=0.0))
    assert min(lrs) == pytest.approx(sched.lr * 0.125)
    other = WarmupCosine(
        torch.optim.AdamW(param_groups(model, weight_decay=0.05, layer_decay=0.5), lr=1.0),
        peak_lr=0.01,
        warmup_steps=2,
        total_steps=10,
        min_lr_ratio=0.0,
    )
    other.load_state_dict(sched.state_dict())
    assert [g["lr"] for g in other.optimizer.param_groups] == lrs
