"""A linear classifier fitted on cached embeddings: multinomial logistic regression with an L2
penalty, solved by full-batch L-BFGS (torch.optim.LBFGS with a strong Wolfe line search).

The objective is scikit-learn's LogisticRegression(C=c) (penalty "l2", multinomial, the intercept
not penalised), scaled by 1 / N:

    mean cross-entropy(W x + b, y) + ||W||^2 / (2 c N)

so both reach the same (unique) minimum and predict the same labels
(tests/probe/test_linear.py). On the CPU it is solved in float64; on a GPU in float32. The
features are used as they are (no normalisation), as CLIP's linear probes do.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_C = 1.0
MAX_ITER = 1000
TOLERANCE = 1e-8  # on the gradient's largest entry, as torch's LBFGS measures it


@dataclass(frozen=True)
class LinearProbe:
    weight: torch.Tensor  # (classes, D)
    bias: torch.Tensor  # (classes,)
    c: float  # scikit-learn's C
    iterations: int
    seconds: float

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        x = features.to(self.weight.device, self.weight.dtype)
        return (x @ self.weight.T + self.bias).argmax(dim=1).cpu()


def fit_linear(
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    c: float = DEFAULT_C,
    num_classes: int | None = None,
    max_iter: int = MAX_ITER,
    tolerance: float = TOLERANCE,
    device: str | torch.device = "cpu",
) -> LinearProbe:
    """Fit the classifier (see the module docstring); `num_classes` defaults to the largest label + 1."""
    if features.ndim != 2 or labels.shape != (features.shape[0],) or not len(labels):
        raise ValueError(
            f"features: expected (N, D) with N labels, got {tuple(features.shape)} and {tuple(labels.shape)}"
        )
    if not c > 0:
        raise ValueError(f"c: expected a value > 0 (the inverse L2 strength, scikit-learn's C), got {c}")
    device = torch.device(device)
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    x = features.to(device, dtype)
    y = labels.to(device).long()
    classes = num_classes or int(labels.max()) + 1
    weight = torch.zeros(classes, x.shape[1], dtype=dtype, device=device, requires_grad=True)
    bias = torch.zeros(classes, dtype=dtype, device=device, requires_grad=True)
    strength = 1.0 / (2.0 * c * len(y))
    solver = torch.optim.LBFGS(
        [weight, bias],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tolerance,
        tolerance_change=10 * torch.finfo(dtype).eps,  # a loss step this small: converged as far as dtype can say
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        solver.zero_grad()
        loss = F.cross_entropy(x @ weight.T + bias, y) + strength * weight.pow(2).sum()
        loss.backward()
        return loss

    started = time.perf_counter()
    solver.step(closure)
    iterations = int(solver.state[weight].get("n_iter", 0))
    return LinearProbe(weight.detach(), bias.detach(), c, iterations, time.perf_counter() - started)


def linear_accuracy(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    **options: object,
) -> tuple[float, LinearProbe]:
    """(test accuracy, the fitted probe); `options` are fit_linear's."""
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    probe = fit_linear(train_features, train_labels, num_classes=classes, **options)  # type: ignore[arg-type]
    return int((probe.predict(test_features) == test_labels.cpu()).sum()) / len(test_labels), probe
