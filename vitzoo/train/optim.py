"""Optimizer parameter groups and the learning-rate schedule.

* Weight decay is off for parameters that are not weight matrices: biases, LayerNorm scales and
  shifts (all 1-D), and whatever the model lists in `no_weight_decay()` (class/distillation
  tokens, position embedding). Decaying them pulls norms towards 0 and tokens towards each other,
  which hurts and is what the ViT/DeiT recipes avoid.
* Layer-wise lr decay (pretrained fine-tuning): the head trains at the full lr, block i at
  lr * decay^(depth - i), the patch/position embeddings at lr * decay^(depth + 1): the earlier a
  layer, the more general its pretrained features, the less it should move.
* Schedule: linear warmup from ~0, then cosine down to `min_lr_ratio` of the peak, per step.
* The optimizer: AdamW, fused into one kernel per step where PyTorch has one (`make_optimizer`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from ..layers.lora import add_lora, is_lora_parameter

HEAD_PREFIXES = ("head", "head_dist", "pre_logits")
_EMBED_NAMES = ("patch_embed", "cls_token", "dist_token", "pos_embed")


def layer_id(name: str, depth: int) -> int:
    """0 for embeddings, i + 1 for blocks.i, depth + 1 for the final norm and the head(s)."""
    root = name.split(".")[0]
    if root in _EMBED_NAMES:
        return 0
    if root == "blocks":
        return int(name.split(".")[1]) + 1
    return depth + 1


def param_groups(model: nn.Module, *, weight_decay: float, layer_decay: float | None = None) -> list[dict]:
    """AdamW groups: (decay / no decay) x (layer, when layer_decay is set); frozen params skipped.
    Each group carries `lr_scale`, which the schedule multiplies into the lr."""
    skip = set(getattr(model, "no_weight_decay", lambda: set())())
    depth = len(getattr(model, "blocks", []))
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = param.ndim <= 1 or name in skip
        layer = layer_id(name, depth) if layer_decay is not None else depth + 1
        scale = layer_decay ** (depth + 1 - layer) if layer_decay is not None else 1.0
        key = (layer, no_decay)
        if key not in groups:
            groups[key] = {
                "params": [],
                "param_names": [],
                "weight_decay": 0.0 if no_decay else weight_decay,
                "lr_scale": scale,
            }
        groups[key]["params"].append(param)
        groups[key]["param_names"].append(name)
    if not groups:
        raise ValueError("the model has no trainable parameters (everything is frozen)")
    return [groups[k] for k in sorted(groups)]


def freeze_backbone(model: nn.Module) -> int:
    """Linear probe: only the classifier head(s) train. Returns the number of trainable params."""
    trainable = 0
    for name, param in model.named_parameters():
        param.requires_grad = name.split(".")[0] in HEAD_PREFIXES
        trainable += param.numel() if param.requires_grad else 0
    if trainable == 0:
        raise ValueError("linear probe: the model has no head parameters to train (num_classes=0?)")
    return trainable


def add_adapters(model: nn.Module, *, rank: int, alpha: float | None, targets: str, dropout: float) -> int:
    """LoRA (layers/lora.py): adapters on the targeted layers of the blocks; only they and the
    classifier head(s) train. Returns the number of trainable params."""
    add_lora(model, rank=rank, alpha=alpha, targets=targets, dropout=dropout)
    trainable = 0
    for name, param in model.named_parameters():
        param.requires_grad = is_lora_parameter(name) or name.split(".")[0] in HEAD_PREFIXES
        trainable += param.numel() if param.requires_grad else 0
    return trainable


def freeze_norm_statistics(model: nn.Module) -> None:
    """Put BatchNorm layers whose parameters are frozen in eval mode: a frozen backbone must not
    drift through its running statistics either (a conv stem has BatchNorm). Call after .train()."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not any(
            p.requires_grad for p in module.parameters()
        ):
            module.eval()


def warmup_cosine(step: int, *, warmup_steps: int, total_steps: int, min_lr_ratio: float) -> float:
    """The lr multiplier at optimizer step `step` (0-based)."""
    if warmup_steps > 0 and step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    progress = min(max(progress, 0.0), 1.0)
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


class WarmupCosine:
    """Sets every group's lr to peak * lr_scale * warmup_cosine(step). Its state is one int, so a
    checkpoint needs no pickled scheduler object."""

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        *,
        peak_lr: float,
        warmup_steps: int,
        total_steps: int,
        min_lr_ratio: float = 0.01,
    ) -> None:
        self.optimizer, self.peak_lr = optimizer, peak_lr
        self.warmup_steps, self.total_steps, self.min_lr_ratio = warmup_steps, total_steps, min_lr_ratio
        self.step_count = 0
        self._apply()

    def _apply(self) -> None:
        factor = warmup_cosine(
            self.step_count,
            warmup_steps=self.warmup_steps,
            total_steps=self.total_steps,
            min_lr_ratio=self.min_lr_ratio,
        )
        for group in self.optimizer.param_groups:
            group["lr"] = self.peak_lr * group.get("lr_scale", 1.0) * factor

    def step(self) -> None:
        self.step_count += 1
        self._apply()

    @property
    def lr(self) -> float:
        """The current lr of the head (the largest)."""
        return max(g["lr"] for g in self.optimizer.param_groups)

    def state_dict(self) -> dict[str, int]:
        return {"step_count": self.step_count}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.step_count = int(state["step_count"])
        self._apply()

    @staticmethod
    def state_problem(state: Any) -> str | None:
        """What makes `state` not one `state_dict` returns (a checkpoint's), or None."""
        if not isinstance(state, dict) or "step_count" not in state:
            return "step_count is missing; expected a whole number >= 0"
        count = state["step_count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return f"step_count is {count!r}; expected a whole number >= 0"
        return None


# torch < 2.4 has a fused AdamW on CUDA only (fused=True with CPU parameters raises RuntimeError).
_FUSED_ADAMW_DEVICES = (
    ("cpu", "cuda") if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4) else ("cuda",)
)


def make_optimizer(groups: list[dict], *, lr: float, device: torch.device) -> torch.optim.AdamW:
    """AdamW, fused into one kernel per step where PyTorch has one for the device (CPU and CUDA
    since torch 2.4): on CPU the default per-parameter loop is a measurable share of a small
    model's step (benchmarks/accuracy.py, speed; docs/measurements.md). Same update rule, same
    state dict, so checkpoints and --resume do not depend on it."""
    fused = device.type in _FUSED_ADAMW_DEVICES and all(
        p.dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64) for g in groups for p in g["params"]
    )
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), fused=fused or None)
