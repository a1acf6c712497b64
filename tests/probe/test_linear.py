"""The L-BFGS linear probe reaches scikit-learn's LogisticRegression optimum: same predictions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitzoo.probe.linear import fit_linear, linear_accuracy

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
