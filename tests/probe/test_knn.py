"""Weighted kNN (DINO's) agrees with scikit-learn's KNeighborsClassifier given the same weighting."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vitzoo.probe.knn import knn_accuracy, knn_predict

from .conftest import clustered


def test_predictions_equal_scikit_learns_with_the_same_weighting():
    neighbors = pytest.importorskip("sklearn.neighbors")
    x, y, tx, ty = clustered()
    ours = knn_predict(x, y, tx, ks=(1, 10, 20), temperature=0.07)
    for k, predicted in ours.items():
        reference = neighbors.KNeighborsClassifier(
            n_neighbors=k, metric="cosine", algorithm="brute", weights=lambda d: np.exp((1 - d) / 0.07)
        ).fit(x.numpy(), y.numpy())
        expected = reference.predict(tx.numpy())
        assert (predicted.numpy() == expected).all(), k
        assert knn_accuracy(x, y, tx, ty, ks=(k,))[k] == pytest.approx(reference.score(tx.numpy(), ty.numpy()))
    assert 0.5 < knn_accuracy(x, y, tx, ty)[20] < 1  # a real task: far above chance (0.2), not trivial


def test_votes_are_weighted_by_exp_similarity_over_temperature():
    # one neighbour of class 0 at similarity 1, two of class 1 at similarity 0.9 (cos of the angle)
    angle = float(np.arccos(0.9))
    train = torch.tensor([[1.0, 0.0], [np.cos(angle), np.sin(angle)], [np.cos(angle), -np.sin(angle)]])
    labels = torch.tensor([0, 1, 1])
    test = torch.tensor([[1.0, 0.0]])
    # exp(1 / T) against 2 exp(0.9 / T): class 0 wins when T < 0.1 / ln 2 (0.144), class 1 above it
    assert knn_predict(train, labels, test, ks=(3,), temperature=0.07)[3].tolist() == [0]
    assert knn_predict(train, labels, test, ks=(3,), temperature=0.5)[3].tolist() == [1]


def test_bad_arguments_are_named():
    x, y, tx, _ = clustered(n_train=20, n_test=5)
    with pytest.raises(ValueError, match=r"ks: expected integers in \[1, 20\]"):
        knn_predict(x, y, tx, ks=(21,))
    with pytest.raises(ValueError, match="temperature: expected a value > 0"):
        knn_predict(x, y, tx, temperature=0.0)
    with pytest.raises(ValueError, match="features: expected"):
        knn_predict(x, y, tx[:, :3])
    with pytest.raises(ValueError, match="train_labels: expected shape"):
        knn_predict(x, y[:5], tx)
