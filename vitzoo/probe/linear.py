"""A linear classifier fitted on cached embeddings: multinomial logistic regression with an L2
penalty, solved by full-batch L-BFGS (torch.optim.LBFGS with a strong Wolfe line search).

The objective is scikit-learn's LogisticRegression(C=c) (penalty "l2", multinomial, the intercept
not penalised), scaled by 1 / N:

    mean cross-entropy(W x + b, y) + ||W||^2 / (2 c N)

so both reach the same (unique) minimum and predict the same labels
(tests/probe/test_linear.py). The features are used as they are (no normalisation), as CLIP's
linear probes do: the objective, and so the optimum, is sklearn's for any C.

Embeddings are often badly conditioned (directions of almost no variance next to large ones), and
plain L-BFGS then crawls. The solver changes variables instead of the problem: with the features
centred (the unpenalised intercept absorbs the mean) and S = their covariance + I / (c N), it
optimises U where W = U S^(-1/2). The loss, penalty included, is the same function of W, so the
minimum is the same; only the curvature L-BFGS sees becomes close to the identity, and it
converges in tens of steps instead of thousands. On the CPU it is solved in float64; on a GPU in
float32. The fitted probe reports its steps, its final gradient and whether it converged (stopped by
the gradient tolerance, or by a loss step too small for the dtype); a fit stopped by `max_iter`
warns, as scikit-learn's ConvergenceWarning does.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_C = 1.0
MAX_ITER = 500
# On the gradient's largest entry in the preconditioned variables, as torch's LBFGS measures it.
TOLERANCE = {torch.float64: 1e-8, torch.float32: 1e-4}
# Multiply-adds per loss evaluation below which the CPU fit runs on one thread: OpenMP's barriers
# cost more than they save on a problem this small, and far more on a machine shared with other work.
ONE_THREAD_WORK = 1 << 24


@contextmanager
def _threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `count` inside the block (None: unchanged)."""
    before = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@dataclass(frozen=True)
class LinearProbe:
    weight: torch.Tensor  # (classes, D)
    bias: torch.Tensor  # (classes,)
    c: float  # scikit-learn's C
    iterations: int
    seconds: float
    converged: bool = True  # stopped by the tolerance or the dtype's precision, not by max_iter
    gradient: float = 0.0  # the final gradient's largest entry (preconditioned variables)

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        x = features.to(self.weight.device, self.weight.dtype)
        return (x @ self.weight.T + self.bias).argmax(dim=1).cpu()


def _preconditioner(x: torch.Tensor, ridge: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, P): the features' mean and P = (covariance + ridge I)^(-1/2), symmetric."""
    mean = x.mean(dim=0)
    centred = x - mean
    covariance = centred.T @ centred / len(x)
    covariance.diagonal().add_(ridge)
    values, vectors = torch.linalg.eigh(covariance)
    return mean, (vectors * values.clamp_min(ridge).rsqrt()) @ vectors.T


def _check(features: torch.Tensor, labels: torch.Tensor, c: float, max_iter: int) -> None:
    if features.ndim != 2 or labels.shape != (features.shape[0],) or not len(labels):
        raise ValueError(
            f"features: expected (N, D) with N labels, got {tuple(features.shape)} and {tuple(labels.shape)}"
        )
    if not c > 0:
        raise ValueError(f"c: expected a value > 0 (the inverse L2 strength, scikit-learn's C), got {c}")
    if max_iter < 1:
        raise ValueError(f"max_iter: expected at least 1, got {max_iter}")


def fit_linear(
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    c: float = DEFAULT_C,
    num_classes: int | None = None,
    max_iter: int = MAX_ITER,
    tolerance: float | None = None,
    device: str | torch.device = "cpu",
) -> LinearProbe:
    """Fit the classifier (see the module docstring); `num_classes` defaults to the largest label + 1,
    `tolerance` to TOLERANCE's for the dtype."""
    _check(features, labels, c, max_iter)
    device = torch.device(device)
    dtype = torch.float64 if device.type == "cpu" else torch.float32
    tolerance = TOLERANCE[dtype] if tolerance is None else tolerance
    x = features.to(device, dtype)
    y = labels.to(device).long()
    classes = num_classes or int(labels.max()) + 1
    started = time.perf_counter()
    strength = 1.0 / (2.0 * c * len(y))
    mean, precondition = _preconditioner(x, 2.0 * strength)  # the penalty's curvature
    z = (x - mean) @ precondition
    u = torch.zeros(classes, x.shape[1], dtype=dtype, device=device, requires_grad=True)
    b = torch.zeros(classes, dtype=dtype, device=device, requires_grad=True)
    solver = torch.optim.LBFGS(
        [u, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=tolerance,
        tolerance_change=10 * torch.finfo(dtype).eps,  # a loss step this small: as far as dtype can say
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        solver.zero_grad()
        loss = F.cross_entropy(z @ u.T + b, y) + strength * (u @ precondition).pow(2).sum()
        loss.backward()
        return loss

    small = device.type == "cpu" and len(y) * x.shape[1] * classes < ONE_THREAD_WORK
    with _threads(1 if small else None):
        solver.step(closure)
        closure()
    gradient = max(float(u.grad.abs().max()), float(b.grad.abs().max()))  # type: ignore[union-attr]
    state = solver.state[u]
    iterations = int(state.get("n_iter", 0))
    weight = (u @ precondition).detach()
    bias = (b - weight @ mean).detach()
    # Stopped by the tolerance, or by a loss that no longer changes in dtype: converged; stopped by
    # the step or evaluation budget first: not.
    max_eval = solver.param_groups[0]["max_eval"]
    converged = gradient <= tolerance or (iterations < max_iter and int(state.get("func_evals", 0)) < max_eval)
    if not converged:
        warnings.warn(
            f"linear probe: not converged after {iterations} L-BFGS steps (max_iter {max_iter}): gradient "
            f"{gradient:.2e} > tolerance {tolerance:.0e}",
            RuntimeWarning,
            stacklevel=2,
        )
    seconds = time.perf_counter() - started
    return LinearProbe(weight, bias, c, iterations, seconds, converged, gradient)


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
