"""Every evaluation of cached features in one call (the engine of `vitzoo probe`).

    train, test = train_test(load_features("feats.safetensors"))     # its train and val splits
    report = run_probes(train, test, methods=("knn", "linear"))      # a JSON-ready dict

Without a second file the features file must hold both splits (`vitzoo features` writes both by
default): the probes fit on its train split and are measured on its val split, the dataset's own
(or, for a folder without val/, the seeded split `vitzoo features --seed` made). With a second
file, the first is the training set and the second the test set, whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .featurefile import Features, FeaturesFileError
from .fewshot import DEFAULT_DRAWS, DEFAULT_SHOTS, fewshot_accuracy
from .knn import DEFAULT_KS, TEMPERATURE, knn_accuracy
from .linear import DEFAULT_C, linear_accuracy
from .retrieval import DEFAULT_KS as RECALL_KS
from .retrieval import recall_by_label

METHODS = ("knn", "linear", "fewshot", "retrieval")
_SAME = ("model", "weights", "output", "block")  # settings the two files must share


def train_test(features: Features, test: Features | None = None) -> tuple[Features, Features]:
    """(training set, test set): the train and val splits of `features`, or the two files."""
    if test is None:
        present = features.present_splits()
        if "train" not in present or "val" not in present:
            raise FeaturesFileError(
                f"{features.source}: holds only the {', '.join(present) or 'no'} split; give a test set "
                "(--test FILE) or extract both splits (vitzoo features ... --split all)"
            )
        return features.split_of("train"), features.split_of("val")
    if features.features.shape[1] != test.features.shape[1]:
        raise FeaturesFileError(
            f"{test.source}: {test.features.shape[1]}-dim features, {features.source} {features.features.shape[1]}-dim"
        )
    if features.classes != test.classes:
        raise FeaturesFileError(f"{test.source}: its classes differ from those of {features.source}")
    for key in _SAME:
        if features.settings.get(key) != test.settings.get(key):
            raise FeaturesFileError(
                f"{test.source}: {key} {test.settings.get(key)!r} differs from {features.source}'s "
                f"{features.settings.get(key)!r}; compare features of the same model and output"
            )
    return features, test


def run_probes(
    train: Features,
    test: Features,
    methods: Sequence[str] = METHODS,
    *,
    knn_ks: Sequence[int] = DEFAULT_KS,
    temperature: float = TEMPERATURE,
    c: float = DEFAULT_C,
    shots: Sequence[int] = DEFAULT_SHOTS,
    draws: int = DEFAULT_DRAWS,
    seed: int = 0,
    recall_ks: Sequence[int] = RECALL_KS,
    device: str = "cpu",
) -> dict[str, Any]:
    """The results of `methods` (any of METHODS) as a JSON-ready dict, accuracies as fractions.
    kNN, the linear probe and retrieval compute on `device` (few-shot, small, on the CPU)."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: {unknown or 'none'} given; expected some of {', '.join(METHODS)}")
    data = (train.features, train.labels, test.features, test.labels)
    report: dict[str, Any] = {
        "train": {"source": train.source, "count": len(train)},
        "test": {"source": test.source, "count": len(test)},
        "settings": {k: train.settings.get(k) for k in ("model", "weights", "output", "block", "dtype")},
    }
    placed = tuple(t.to(device) for t in data)  # kNN and retrieval compare on `device`
    if "knn" in methods:
        accuracy = knn_accuracy(*placed, ks=knn_ks, temperature=temperature)
        report["knn"] = {"temperature": temperature, "accuracy": {str(k): v for k, v in accuracy.items()}}
    if "linear" in methods:
        value, probe = linear_accuracy(*data, c=c, device=device)
        report["linear"] = {
            "C": c,
            "accuracy": value,
            "iterations": probe.iterations,
            "converged": probe.converged,
            "seconds": probe.seconds,
        }
    if "fewshot" in methods:
        results = fewshot_accuracy(*data, shots=shots, draws=draws, seed=seed)
        report["fewshot"] = {
            "draws": draws,
            "seed": seed,
            "accuracy": {str(r.shots): {"mean": r.mean, "std": r.std, "draws": list(r.accuracies)} for r in results},
        }
    if "retrieval" in methods:
        recall = recall_by_label(placed[2], placed[3], placed[0], placed[1], recall_ks)
        report["retrieval"] = {"query": "test", "keys": "train", "recall": {str(k): v for k, v in recall.items()}}
    return report


def report_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(method, setting, result in percent) rows of a run_probes report, for a table."""
    rows = []
    for k, v in report.get("knn", {}).get("accuracy", {}).items():
        rows.append(("knn", f"k={k}, T={report['knn']['temperature']:g}", f"{100 * v:.2f}"))
    if "linear" in report:
        linear = report["linear"]
        rows.append(
            (
                "linear",
                f"C={linear['C']:g}, {linear['iterations']} L-BFGS steps"
                + ("" if linear.get("converged", True) else ", not converged"),
                f"{100 * linear['accuracy']:.2f}",
            )
        )
    for shots, r in report.get("fewshot", {}).get("accuracy", {}).items():
        rows.append(
            (
                "fewshot",
                f"{shots}-shot, {report['fewshot']['draws']} draws",
                f"{100 * r['mean']:.2f} ± {100 * r['std']:.2f}",
            )
        )
    for k, v in report.get("retrieval", {}).get("recall", {}).items():
        rows.append(("retrieval", f"recall@{k}", f"{100 * v:.2f}"))
    return rows
