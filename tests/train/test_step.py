"""vitzoo/train/step.py: the loss specification and one optimizer step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitzoo.train import LossSpec, TrainConfig, classification_loss, train_step


def test_loss_spec_from_config_is_the_configured_objective() -> None:
    config = TrainConfig(label_smoothing=0.2, teacher="teacher", distill="soft", distill_tau=2.0, distill_alpha=0.3)
    seen = []

    def teacher(x: torch.Tensor) -> torch.Tensor:
        seen.append(x)
        return x[:, :3] * 2

    spec = LossSpec.from_config(config, teacher)
    g = torch.Generator().manual_seed(0)
    x, output, target = torch.randn(4, 5, generator=g), torch.randn(4, 3, generator=g), torch.tensor([0, 1, 2, 0])
    loss, term = spec(output, target, x)
    want, want_term = classification_loss(
        output, target, 0.2, teacher_logits=x[:, :3] * 2, distill="soft", tau=2.0, alpha=0.3
    )
    assert len(seen) == 1 and seen[0] is x  # the teacher sees the step's images
    assert term is not None and want_term is not None
    assert torch.equal(loss, want) and torch.equal(term, want_term)
    plain, none = LossSpec.from_config(TrainConfig(label_smoothing=0.2), None)(output, target, x)
    assert none is None and torch.equal(plain, classification_loss(output, target, 0.2)[0])


def test_train_step_minimises_the_spec_and_clips_the_gradient() -> None:
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    x, y = torch.randn(8, 5), torch.randint(0, 3, (8,))
    expected = classification_loss(model(x), y, 0.1)[0].detach()
    result = train_step(
        model, optimizer, list(model.parameters()), x, y, loss=LossSpec(label_smoothing=0.1), clip_grad=1e-3
    )
    assert result.distill_loss is None and torch.equal(result.loss.detach(), expected)
    moved = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters(), strict=True)])
    assert moved.norm().item() == pytest.approx(1e-3, rel=1e-3)  # SGD with lr 1 moves by the clipped gradient
