"""Weighted k-nearest-neighbour classification on embeddings, as the DINO papers evaluate them.

Both sides are L2-normalised; each test embedding takes its k most cosine-similar training
embeddings, each voting for its label with weight exp(similarity / temperature) (temperature 0.07,
k 10 and 20 in DINO and DINOv2); the class with the largest total wins (ties: the lowest class
index). This equals scikit-learn's KNeighborsClassifier(n_neighbors=k, metric="cosine",
algorithm="brute", weights=lambda d: exp((1 - d) / temperature)) (tests/probe/test_knn.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

DEFAULT_KS = (10, 20)
TEMPERATURE = 0.07
CHUNK = 1024  # test embeddings compared at once


def _check(train: torch.Tensor, labels: torch.Tensor, test: torch.Tensor) -> None:
    if train.ndim != 2 or test.ndim != 2 or train.shape[1] != test.shape[1]:
        raise ValueError(
            f"features: expected (N, D) train and (M, D) test, got {tuple(train.shape)} and {tuple(test.shape)}"
        )
    if labels.shape != (train.shape[0],):
        raise ValueError(f"train_labels: expected shape ({train.shape[0]},), got {tuple(labels.shape)}")


def knn_predict(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    temperature: float = TEMPERATURE,
    num_classes: int | None = None,
) -> dict[int, torch.Tensor]:
    """{k: predicted labels of the test embeddings (int64, M)} for each k in `ks`."""
    _check(train_features, train_labels, test_features)
    if not ks or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= len(train_labels) for k in ks):
        raise ValueError(f"ks: expected integers in [1, {len(train_labels)}] (the training set's size), got {ks!r}")
    if not temperature > 0:
        raise ValueError(f"temperature: expected a value > 0, got {temperature}")
    classes = num_classes or int(train_labels.max()) + 1
    train = torch.nn.functional.normalize(train_features.float(), dim=1)
    test = torch.nn.functional.normalize(test_features.float(), dim=1).to(train.device)
    labels = train_labels.to(train.device).long()
    out: dict[int, list[torch.Tensor]] = {k: [] for k in ks}
    for start in range(0, len(test), CHUNK):
        sim, idx = (test[start : start + CHUNK] @ train.T).topk(max(ks), dim=1)  # sorted, most similar first
        weights = (sim.double() / temperature).exp()
        neighbour_labels = labels[idx]
        for k in ks:
            votes = torch.zeros(len(idx), classes, dtype=torch.float64, device=train.device)
            votes.scatter_add_(1, neighbour_labels[:, :k], weights[:, :k])
            out[k].append(votes.argmax(dim=1).cpu())
    return {k: torch.cat(v) for k, v in out.items()}


def knn_accuracy(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    ks: Sequence[int] = DEFAULT_KS,
    temperature: float = TEMPERATURE,
) -> dict[int, float]:
    """{k: top-1 accuracy of weighted kNN} on the test embeddings."""
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    predicted = knn_predict(
        train_features, train_labels, test_features, ks=ks, temperature=temperature, num_classes=classes
    )
    return {k: int((p == test_labels.cpu()).sum()) / len(test_labels) for k, p in predicted.items()}
