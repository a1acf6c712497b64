"""The L-BFGS linear probe reaches scikit-learn's LogisticRegression optimum: same predictions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vitzoo.probe.linear import MAX_ITER, fit_linear, linear_accuracy

from .conftest import clustered


@pytest.mark.parametrize("c", [0.05, 1.0])
def test_agrees_with_scikit_learns_logistic_regression(c):
    linear_model = pytest.importorskip("sklearn.linear_model")
    x, y, tx, ty = clustered()
    probe = fit_linear(x, y, c=c)
    reference = linear_model.LogisticRegression(C=c, tol=1e-10, max_iter=10_000).fit(x.double().numpy(), y.numpy())
    assert (probe.predict(tx).numpy() == reference.predict(tx.double().numpy())).all()
    np.testing.assert_allclose(probe.weight.numpy(), reference.coef_, atol=1e-5)
    # the softmax ignores a shift of all biases together: compare them centred
    bias = probe.bias.numpy()
    np.testing.assert_allclose(bias - bias.mean(), reference.intercept_ - reference.intercept_.mean(), atol=1e-4)
    accuracy, _ = linear_accuracy(x, y, tx, ty, c=c)
    assert accuracy == pytest.approx(reference.score(tx.double().numpy(), ty.numpy()))


def test_a_smaller_c_shrinks_the_weights():
    x, y, _, _ = clustered(n_train=200, n_test=1)
    assert fit_linear(x, y, c=0.01).weight.norm() < fit_linear(x, y, c=1.0).weight.norm()


def test_bad_arguments_are_named():
    x, y, _, _ = clustered(n_train=20, n_test=1)
    with pytest.raises(ValueError, match="c: expected a value > 0"):
        fit_linear(x, y, c=0)
    with pytest.raises(ValueError, match="features: expected"):
        fit_linear(x, torch.zeros(3, dtype=torch.long))


def badly_conditioned(seed: int = 0):
    """Overlapping class clusters seen through a linear map whose singular values span four decades, off
    centre: how a backbone's embeddings look to a linear model (most variance in a few directions)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (1300,), generator=g)
    points = 0.4 * torch.randn(10, 48, generator=g)[y] + torch.randn(1300, 48, generator=g)  # classes overlap
    x, tx, y, ty = points[:1000], points[1000:], y[:1000], y[1000:]
    basis, _ = torch.linalg.qr(torch.randn(48, 48, generator=g))
    mix = basis * torch.logspace(-3, 1, 48)
    shift = 3 * torch.randn(48, generator=g)
    return x @ mix + shift, y, tx @ mix + shift, ty


def test_converges_on_badly_conditioned_features_at_the_defaults():
    x, y, _, _ = badly_conditioned()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fit that stops at max_iter warns
        probe = fit_linear(x, y)
    assert probe.converged and probe.gradient < 1e-6
    assert probe.iterations < MAX_ITER // 2
    # the optimum of the objective itself (sklearn's, in the original variables): its gradient vanishes
    weight, bias = probe.weight.clone().requires_grad_(), probe.bias.clone().requires_grad_()
    loss = F.cross_entropy(x.double() @ weight.T + bias, y) + weight.pow(2).sum() / (2 * len(y))
    loss.backward()
    assert weight.grad.abs().max() < 1e-6 and bias.grad.abs().max() < 1e-6


def test_a_fit_stopped_by_max_iter_says_so():
    x, y, _, _ = badly_conditioned()
    with pytest.warns(RuntimeWarning, match="linear probe: not converged after"):
        probe = fit_linear(x, y, max_iter=2)
    assert not probe.converged and probe.iterations <= 2
