"""run_probes: the train / test choice and the report every method adds."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from vitzoo.probe import Features, FeaturesFileError
from vitzoo.probe.evaluate import report_rows, run_probes, train_test

from .conftest import clustered


def features(x, y, split, settings=None, classes=5) -> Features:
    return Features(
        features=x,
        labels=y,
        split=torch.full((len(y),), split, dtype=torch.uint8),
        index=torch.arange(len(y)),
        classes=tuple(str(c) for c in range(classes)),
        settings={"splits": ["train", "val"], "model": "m", "output": "cls", **(settings or {})},
        source="f",
    )


def test_one_file_with_both_splits_fits_on_train_and_tests_on_val():
    x, y, tx, ty = clustered(n_train=100, n_test=40)
    both = features(torch.cat([x, tx]), torch.cat([y, ty]), 0)
    both = replace(both, split=torch.cat([torch.zeros(100), torch.ones(40)]).to(torch.uint8))
    train, test = train_test(both)
    assert (len(train), len(test)) == (100, 40) and torch.equal(test.features, tx)
    report = run_probes(train, test, knn_ks=(10,), shots=(1, 5), draws=2)
    assert set(report) >= {"knn", "linear", "fewshot", "retrieval"}
    assert report["linear"]["converged"] is True and "not converged" not in report_rows(report)[1][1]
    assert [r[0] for r in report_rows(report)] == ["knn", "linear", "fewshot", "fewshot"] + ["retrieval"] * 3
    assert 0.4 < report["knn"]["accuracy"]["10"] <= 1 and report["fewshot"]["accuracy"]["5"]["std"] >= 0
    assert report["retrieval"]["recall"]["10"] >= report["retrieval"]["recall"]["1"]


def test_a_single_split_needs_a_test_file_of_the_same_model():
    x, y, tx, ty = clustered(n_train=30, n_test=10)
    train = features(x, y, 0)
    with pytest.raises(FeaturesFileError, match="holds only the train split; give a test set"):
        train_test(train)
    train2, test = train_test(train, features(tx, ty, 1))
    assert len(train2) == 30 and len(test) == 10
    with pytest.raises(FeaturesFileError, match="model 'other' differs"):
        train_test(train, features(tx, ty, 1, {"model": "other"}))
    with pytest.raises(FeaturesFileError, match="its classes differ"):
        train_test(train, features(tx, ty, 1, classes=6))
    with pytest.raises(FeaturesFileError, match="8-dim features"):
        train_test(train, features(tx[:, :8], ty, 1))
    with pytest.raises(ValueError, match=r"methods: \['svm'\] given"):
        run_probes(train, test, ["svm"])


def test_the_documented_python_workflow_runs_from_the_package(tmp_path):
    """docs/recipes.md's snippet, names imported from `vitzoo.probe` itself: extract to a file,
    split it, run the probes."""
    import vitzoo
    from vitzoo.data import load_mnist_sample
    from vitzoo.probe import extract_to_file, load_features
    from vitzoo.probe import run_probes as run_probes_public
    from vitzoo.probe import train_test as train_test_public

    torch.manual_seed(0)
    config = vitzoo.ViTConfig(img_size=28, patch_size=7, in_chans=1, embed_dim=16, depth=1, num_heads=2, num_classes=0)
    model = vitzoo.VisionTransformer(config).eval()
    sample = load_mnist_sample()
    splits = replace(sample, train=sample.train.subset(torch.arange(60)), val=sample.val.subset(torch.arange(20)))
    extract_to_file(model, splits, tmp_path / "f.safetensors", output="pooled", device="cpu", dtype="fp32")
    train, test = train_test_public(load_features(tmp_path / "f.safetensors"))
    assert (len(train), len(test)) == (60, 20)
    report = run_probes_public(train, test, methods=("knn", "linear"), knn_ks=(10,))
    assert {"knn", "linear"} <= set(report) and "fewshot" not in report
    assert 0 <= report["linear"]["accuracy"] <= 1 and report["linear"]["converged"]
