"""Few-shot classification by prototypes: from `shots` training embeddings per class (drawn with a
seed), each class's prototype is the mean of its L2-normalised embeddings; a test embedding takes
the class of the most cosine-similar prototype. Repeated over `draws` seeded draws, reported as
mean and standard deviation (of the draws' accuracies, n - 1 in the denominator)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..data.loader import mix_seeds

DEFAULT_SHOTS = (1, 5, 10)
DEFAULT_DRAWS = 5


@dataclass(frozen=True)
class FewShotResult:
    shots: int
    accuracies: tuple[float, ...]  # one per draw

    @property
    def mean(self) -> float:
        return statistics.fmean(self.accuracies)

    @property
    def std(self) -> float:
        return statistics.stdev(self.accuracies) if len(self.accuracies) > 1 else 0.0


def draw_support(labels: torch.Tensor, shots: int, generator: torch.Generator) -> torch.Tensor:
    """`shots` indices of each class present in `labels`, drawn without replacement."""
    chosen = []
    for c in torch.unique(labels).tolist():
        members = (labels == c).nonzero().flatten()
        if len(members) < shots:
            raise ValueError(f"class {c} has {len(members)} training example(s); {shots}-shot needs {shots}")
        chosen.append(members[torch.randperm(len(members), generator=generator)[:shots]])
    return torch.cat(chosen)


def prototype_predict(
    support: torch.Tensor, support_labels: torch.Tensor, test: torch.Tensor, num_classes: int
) -> torch.Tensor:
    """Labels of `test` by the nearest class prototype (cosine)."""
    normed = torch.nn.functional.normalize(support.float(), dim=1)
    prototypes = torch.zeros(num_classes, normed.shape[1]).index_add_(0, support_labels, normed)
    present = torch.bincount(support_labels, minlength=num_classes) > 0
    sim = torch.nn.functional.normalize(test.float(), dim=1) @ torch.nn.functional.normalize(prototypes, dim=1).T
    return sim.masked_fill(~present, float("-inf")).argmax(dim=1)


def fewshot_accuracy(
    train_features: torch.Tensor,
    train_labels: torch.Tensor,
    test_features: torch.Tensor,
    test_labels: torch.Tensor,
    *,
    shots: Sequence[int] = DEFAULT_SHOTS,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
) -> list[FewShotResult]:
    """One FewShotResult per entry of `shots`; the same seed gives the same draws."""
    if not shots or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shots):
        raise ValueError(f"shots: expected positive integers, got {shots!r}")
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws: expected an integer >= 1, got {draws!r}")
    classes = int(max(train_labels.max(), test_labels.max())) + 1
    results = []
    for n in shots:
        accuracies = []
        for d in range(draws):
            generator = torch.Generator().manual_seed(mix_seeds(seed, n, d))
            idx = draw_support(train_labels, n, generator)
            predicted = prototype_predict(train_features[idx], train_labels[idx], test_features, classes)
            accuracies.append(int((predicted == test_labels).sum()) / len(test_labels))
        results.append(FewShotResult(n, tuple(accuracies)))
    return results
