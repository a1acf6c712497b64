"""Few-shot prototypes: seeded draws of `shots` examples per class, nearest prototype by cosine."""

from __future__ import annotations

import pytest
import torch

from vitzoo.probe.fewshot import draw_support, fewshot_accuracy, prototype_predict

from .conftest import clustered


def test_the_same_seed_gives_the_same_draws_and_another_seed_others():
    x, y, tx, ty = clustered()
    first = fewshot_accuracy(x, y, tx, ty, shots=(1, 5), draws=4, seed=3)
    assert first == fewshot_accuracy(x, y, tx, ty, shots=(1, 5), draws=4, seed=3)
    assert first != fewshot_accuracy(x, y, tx, ty, shots=(1, 5), draws=4, seed=4)
    one, five = first
    assert (one.shots, five.shots, len(one.accuracies)) == (1, 5, 4)
    assert five.mean > one.mean > 0.2  # more shots help; both above chance
    assert one.std == pytest.approx(torch.tensor(one.accuracies).std().item())  # n - 1, over the draws


def test_a_draw_takes_shots_examples_of_every_class():
    labels = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    idx = draw_support(labels, 2, torch.Generator().manual_seed(0))
    assert torch.bincount(labels[idx]).tolist() == [2, 2, 2] and len(set(idx.tolist())) == 6
    with pytest.raises(ValueError, match="class 1 has 2 training example"):
        draw_support(labels, 3, torch.Generator().manual_seed(0))


def test_prototypes_are_means_of_normalised_embeddings():
    # class 0: a long and a short vector (normalised first, so the long one does not dominate)
    support = torch.tensor([[10.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    labels = torch.tensor([0, 0, 1])
    test = torch.tensor([[1.0, 0.9], [-1.0, 0.2], [0.1, 1.0]])
    assert prototype_predict(support, labels, test, num_classes=3).tolist() == [0, 1, 0]
