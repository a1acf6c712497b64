"""`vitzoo probe`: the table, --json, and the choice of test set, in-process."""

from __future__ import annotations

import json

import pytest
import torch

from vitzoo.probe import Features, save_features

from .helpers import run

pytestmark = pytest.mark.usefixtures("one_thread")


def write(path, splits, seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(3, 8, generator=g)
    y = torch.arange(len(splits)) % 3
    x = centres[y] + 0.8 * torch.randn(len(splits), 8, generator=g)
    feats = Features(
        features=x,
        labels=y,
        split=torch.tensor(splits, dtype=torch.uint8),
        index=torch.arange(len(splits)),
        classes=("a", "b", "c"),
        settings={"splits": ["train", "val"], "model": "vit_x", "weights": "w", "output": "cls"},
    )
    return str(save_features(path, feats))


def test_table_and_json(capsys, tmp_path):
    both = write(tmp_path / "f.safetensors", [0] * 60 + [1] * 30)
    code, out, err = run(capsys, "probe", both, "--k", "5,10", "--shots", "1,3", "--draws", "2")
    assert code == 0, err
    assert "vit_x (w), cls features; train" in out
    for row in ("k=5, T=0.07", "k=10", "C=1", "1-shot, 2 draws", "3-shot", "recall@1", "recall@10"):
        assert row in out, row
    code, out, _ = run(capsys, "probe", both, "--method", "knn", "linear", "--json", "--C", "0.5")
    report = json.loads(out)
    assert set(report) == {"train", "test", "settings", "knn", "linear"}
    assert report["train"]["count"] == 60 and report["test"]["count"] == 30 and report["linear"]["C"] == 0.5
    assert 0 <= report["knn"]["accuracy"]["20"] <= 1


def test_a_single_split_needs_test(capsys, tmp_path):
    train = write(tmp_path / "train.safetensors", [0] * 40)
    code, _, err = run(capsys, "probe", train, "--method", "knn")
    assert code == 1 and "holds only the train split; give a test set (--test FILE)" in err
    test = write(tmp_path / "test.safetensors", [1] * 20, seed=0)
    code, out, err = run(capsys, "probe", train, "--test", test, "--method", "fewshot", "--json", "--shots", "2")
    assert code == 0, err
    assert json.loads(out)["test"]["count"] == 20
    code, _, err = run(capsys, "probe", train, "--k", "0")
    assert code == 2 and "expected positive integers" in err


def _rewritten(path, **changes):
    """A copy of the features file `path` with some tensors replaced, as another tool might write it."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(path, framework="pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    tensors.update(changes)
    out = f"{path}.changed.safetensors"
    save_file(tensors, out, metadata=metadata)
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # 1 stored as the float just below it: truncated, it would be class 0
        (lambda t: {"labels": t["labels"].float() - t["labels"].clamp(max=1) * 6e-8}, "tensor 'labels' is float32"),
        (lambda t: {"split": torch.where(t["index"] == 3, -1, t["split"].long())}, "tensor 'split' holds -1"),
        (lambda t: {"features": t["features"][:, :0].contiguous()}, "tensor 'features' has no columns"),
    ],
)
def test_a_file_with_bad_tensors_is_refused_naming_file_and_tensor(capsys, tmp_path, change, message):
    from safetensors.torch import load_file

    good = write(tmp_path / "f.safetensors", [0] * 12 + [1] * 6)
    bad = _rewritten(good, **change(load_file(good)))
    code, _, err = run(capsys, "probe", bad, "--method", "knn", "--k", "3")
    assert code == 1 and message in err and bad in err and "Traceback" not in err, err
