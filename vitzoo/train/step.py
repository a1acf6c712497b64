"""One optimizer step and the loss it minimises.

`LossSpec` says what the loss is (label smoothing; with a teacher, DeiT's distillation term and
its settings); `train_step` runs forward, loss, backward, clipping and the update with it. The
loop builds one LossSpec per run from its TrainConfig (`LossSpec.from_config`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .distill import distillation_loss

if TYPE_CHECKING:
    from .config import TrainConfig

Output = torch.Tensor | tuple[torch.Tensor, ...]  # a model's output (a DeiT's in training: both heads' logits)
Input = torch.Tensor | dict[str, torch.Tensor]  # images, or a NaFlex batch (data/naflex.py)


def merged_logits(output: Output) -> torch.Tensor:
    """The class logits of an output: a DeiT's two heads averaged, as it predicts in eval mode."""
    return (output[0] + output[1]) / 2 if isinstance(output, tuple) else output


def _cross_entropy(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    if target.is_floating_point():  # probabilities (Mixup/CutMix): smoothing is folded in already (mix.py)
        return F.cross_entropy(logits.float(), target)
    return F.cross_entropy(logits.float(), target, label_smoothing=smoothing)


def classification_loss(
    output: Output,
    target: torch.Tensor,
    smoothing: float,
    *,
    teacher_logits: torch.Tensor | None = None,
    distill: str = "hard",
    tau: float = 1.0,
    alpha: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training loss, and its distillation term alone (None without a teacher).

    `target` is class indices (B,), smoothed with `smoothing`, or probabilities (B, C) (Mixup /
    CutMix targets, which carry the smoothing already). A DeiT in training mode returns (class
    logits, dist logits). Without a teacher every head learns the labels (the mean of their
    losses). With `teacher_logits`, DeiT's objective: (1 - alpha) * CE(class head, target) +
    alpha * distillation(dist head, teacher) (distill.py); a student without a distillation head
    distils through its class head."""
    if teacher_logits is None:
        if isinstance(output, tuple):
            losses = [_cross_entropy(o, target, smoothing) for o in output]
            return torch.stack(losses).sum() / len(losses), None
        return _cross_entropy(output, target, smoothing), None
    class_logits, dist_logits = output[:2] if isinstance(output, tuple) else (output, output)
    distill_loss = distillation_loss(dist_logits, teacher_logits, mode=distill, tau=tau)
    return (1 - alpha) * _cross_entropy(class_logits, target, smoothing) + alpha * distill_loss, distill_loss


@dataclass(frozen=True)
class LossSpec:
    """What a step minimises: cross-entropy with `label_smoothing`; with a `teacher` (its logits
    for a batch), DeiT's objective with distillation mode `distill` ("hard" or "soft"),
    temperature `tau` and teacher weight `alpha` (see classification_loss)."""

    label_smoothing: float = 0.0
    teacher: Callable[[torch.Tensor], torch.Tensor] | None = None
    distill: str = "hard"
    tau: float = 1.0
    alpha: float = 0.5

    @classmethod
    def from_config(cls, config: TrainConfig, teacher: Callable[[torch.Tensor], torch.Tensor] | None) -> LossSpec:
        return cls(
            label_smoothing=config.label_smoothing,
            teacher=teacher,
            distill=config.distill or "hard",
            tau=config.distill_tau,
            alpha=config.distill_alpha,
        )

    def __call__(self, output: Output, target: torch.Tensor, x: Input) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The loss of `output` for the images `x` (which the teacher sees too) and its teacher term."""
        teacher_logits = None
        if self.teacher is not None:
            if not isinstance(x, torch.Tensor):
                raise ValueError(
                    "a distillation teacher takes square images, not a NaFlex batch; train without --teacher"
                )
            teacher_logits = self.teacher(x)
        return classification_loss(
            output,
            target,
            self.label_smoothing,
            teacher_logits=teacher_logits,
            distill=self.distill,
            tau=self.tau,
            alpha=self.alpha,
        )


class StepResult(NamedTuple):
    output: Output  # the model's output
    loss: torch.Tensor  # what the step minimised
    distill_loss: torch.Tensor | None  # its teacher term alone (None without a teacher)


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    params: list[torch.Tensor],
    x: Input,
    target: torch.Tensor,
    *,
    loss: LossSpec = LossSpec(),
    clip_grad: float | None = None,
    autocast: Callable[[], Any] = contextlib.nullcontext,
) -> StepResult:
    """One optimizer step: forward (and the teacher's, on the same images), `loss`, backward,
    gradient clipping of `params` to norm `clip_grad`, update. `target`: labels or probabilities
    (see classification_loss)."""
    with autocast():
        output = model(x)
        value, distill_loss = loss(output, target, x)
    optimizer.zero_grad(set_to_none=True)
    value.backward()
    if clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(params, clip_grad)
    optimizer.step()
    return StepResult(output, value, distill_loss)
