"""vitzoo/data/hf.py: Hugging Face `datasets` image datasets (--data hf:...), read offline and
decoded by vitzoo into memory, from `vitzoo finetune` / `vitzoo eval` down to the stored tensors."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF

datasets = pytest.importorskip("datasets", reason="the [hf] extra (datasets) is not installed")

import vitzoo  # noqa: E402
from vitzoo.cli import main  # noqa: E402
from vitzoo.data import CorruptImageError, HFDataError, eval_geometry, load_data, load_hf_dataset  # noqa: E402

COLORS = {"red": (250, 20, 20), "blue": (20, 20, 250)}


def _photos(n: int) -> tuple[list[Image.Image], list[int]]:
    """n small images of alternating class, of different sizes (so resizing and cropping matter)."""
    images, labels = [], []
    for i in range(n):
        label = i % 2
        img = Image.new("RGB", (30 + 3 * i, 26 + i), COLORS["red" if label == 0 else "blue"])
        img.putpixel((i, i), (i * 10, 255 - i * 10, 128))  # no two images alike
        images.append(img)
        labels.append(label)
    return images, labels


def _dataset(n: int, **columns) -> datasets.Dataset:
    images, labels = _photos(n)
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(COLORS))})
    return datasets.Dataset.from_dict({"image": images, "label": labels, **columns}, features=features)


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """datasets' cache in tmp_path: a test never reads or fills the user's ~/.cache."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    return cache


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A DatasetDict (train: 12 images, test: 4) written by save_to_disk."""
    path = tmp_path / "colors"
    datasets.DatasetDict(train=_dataset(12), test=_dataset(4)).save_to_disk(str(path))
    return path


def test_finetune_then_eval_from_the_command_line(saved: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    common = ["--data", f"hf:{saved}"]
    argv = ["finetune", "vit_mnist_tiny", *common, "--epochs", "1", "--batch-size", "4", "--out", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["classes"] == ["red", "blue"] and run["train_images"] == 12 and run["val_images"] == 4
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    capsys.readouterr()

    assert main(["eval", "vit_mnist_tiny", "--weights", str(out / "best"), *common, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["classes"] == ["red", "blue"] and result["count"] == 4
    assert sum(map(sum, result["confusion"])) == 4
    assert result["accuracy"] == pytest.approx(last["val_acc"])


def test_evaluation_images_are_what_eval_transform_makes_of_the_images(saved: Path) -> None:
    model = vitzoo.create("deit_ti16", img_size=32, patch_size=8, embed_dim=16, depth=1, num_heads=2)
    splits = load_hf_dataset(str(saved), store_size=40, eval_for=model)
    images, labels = _photos(4)
    geometry = eval_geometry(model)
    expected = torch.stack([TF.pil_to_tensor(geometry(img)) for img in images])
    assert torch.equal(splits.val.images, expected)
    assert splits.val.labels.tolist() == labels and splits.classes == ("red", "blue")
    assert splits.train.images.shape == (12, 3, 40, 40) and splits.name == "hf" and splits.kind == "natural"
    # eval_train (feature extraction): the training images are made the evaluation way too
    both = load_hf_dataset(str(saved), store_size=40, eval_for=model, eval_train=True)
    train_images, _ = _photos(12)
    assert torch.equal(both.train.images, torch.stack([TF.pil_to_tensor(geometry(img)) for img in train_images]))
    assert torch.equal(both.val.images, expected)


def test_a_single_dataset_is_split_per_class_with_the_seed(tmp_path: Path) -> None:
    _dataset(20).save_to_disk(str(tmp_path / "one"))
    first = load_data("hf", path=tmp_path / "one", store_size=16, val_split=0.2, seed=3)
    again = load_data("hf", path=tmp_path / "one", store_size=16, val_split=0.2, seed=3)
    assert first.train.class_counts() == [8, 8] and first.val.class_counts() == [2, 2]
    assert torch.equal(first.val.images, again.val.images) and torch.equal(first.train.labels, again.train.labels)
    with pytest.raises(HFDataError, match="single Dataset without named splits"):
        load_hf_dataset(str(tmp_path / "one"), store_size=16, eval_split="test")


def test_dataset_files_and_a_name_in_the_cache_offline(tmp_path: Path, private_cache: Path, monkeypatch) -> None:
    """A folder of parquet files (a Hub repository downloaded as files) loads with load_dataset,
    which caches it; then its name alone finds it in the cache, without the network."""
    files = tmp_path / "tiny_colors" / "data"
    files.mkdir(parents=True)
    _dataset(12).to_parquet(str(files / "train-00000-of-00001.parquet"))
    _dataset(4).to_parquet(str(files / "validation-00000-of-00001.parquet"))
    from_files = load_hf_dataset(str(tmp_path / "tiny_colors"), store_size=16)
    assert len(from_files.train) == 12 and len(from_files.val) == 4 and "[validation]" in from_files.val.source

    shutil.rmtree(tmp_path / "tiny_colors")
    monkeypatch.chdir(tmp_path)
    by_name = load_hf_dataset("tiny_colors", store_size=16)
    assert torch.equal(by_name.train.images, from_files.train.images)
    assert torch.equal(by_name.val.labels, from_files.val.labels)


def test_unreadable_image_bytes_are_skipped_and_reported(tmp_path: Path) -> None:
    images, labels = _photos(6)
    cells: list[dict[str, bytes | None]] = []
    for img in images:
        buffer = io.BytesIO()
        img.save(buffer, format="PNG")
        cells.append({"bytes": buffer.getvalue(), "path": None})
    cells[2] = {"bytes": b"not an image at all", "path": None}
    features = datasets.Features({"image": datasets.Image(), "label": datasets.ClassLabel(names=list(COLORS))})
    dataset = datasets.Dataset.from_dict({"image": cells, "label": labels}, features=features)
    datasets.DatasetDict(train=dataset, test=_dataset(2)).save_to_disk(str(tmp_path / "bad"))

    with pytest.warns(UserWarning) as caught:
        splits = load_hf_dataset(str(tmp_path / "bad"), store_size=16)
    messages = [str(w.message) for w in caught]
    assert any(re.search(r"skipping unreadable image hf:.*\[train\] row 2: cannot identify image", m) for m in messages)
    assert any(m.endswith("[train]: skipped 1 unreadable image(s) of 6") for m in messages)
    assert len(splits.train) == 5 and splits.train.class_counts() == [2, 3]
    with pytest.raises(CorruptImageError, match=r"row 2: cannot identify image .*\(strict mode\)"):
        load_hf_dataset(str(tmp_path / "bad"), store_size=16, strict=True)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: datasets.Dataset.from_dict(
                {"photo": ["a.png", "b.png"], "label": [0, 1]},
                features=datasets.Features(
                    {"photo": datasets.Value("string"), "label": datasets.ClassLabel(names=list(COLORS))}
                ),
            ),
            r"no Image column for the image; columns: photo \(Value\), label \(ClassLabel\); cast",
        ),
        (
            lambda: _dataset(4).cast_column("label", datasets.Value("int64")),
            r"no ClassLabel column for the label; columns: image \(Image\), label \(Value\); cast",
        ),
    ],
    ids=["no-image-column", "no-label-column"],
)
def test_missing_columns_name_the_columns_there_are(tmp_path: Path, make, message: str) -> None:
    datasets.DatasetDict(train=make(), test=make()).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(HFDataError, match=message):
        load_hf_dataset(str(tmp_path / "d"), store_size=16)


def test_splits_are_checked_and_listed(saved: Path) -> None:
    with pytest.raises(HFDataError, match=r"has no split 'validation'; its splits: train, test"):
        load_hf_dataset(str(saved), store_size=16, eval_split="validation")
    everything = load_hf_dataset(str(saved), store_size=16, eval_split="none")  # test left out, train split
    assert len(everything.train) + len(everything.val) == 12


def test_missing_data_is_one_clear_error_on_the_command_line(tmp_path: Path, capsys) -> None:
    run = ["finetune", "vit_mnist_tiny", "--epochs", "1", "--out", str(tmp_path / "run")]
    assert main([*run, "--data", f"hf:{tmp_path / 'nowhere'}"]) != 0
    assert f"hf:{tmp_path / 'nowhere'}: {tmp_path / 'nowhere'} is not a directory" in capsys.readouterr().err

    assert main([*run, "--data", "hf:nobody/never-downloaded"]) != 0
    err = capsys.readouterr().err
    assert "dataset 'nobody/never-downloaded' is not in the local datasets cache" in err
    assert "offline" in err and err.count("\n") == 1  # one line, no traceback

    assert main([*run, "--data", "hf:"]) != 0
    assert "--data hf:PATH_OR_NAME takes one argument" in capsys.readouterr().err


def test_hf_data_is_not_streamed(saved: Path, tmp_path: Path, capsys) -> None:
    argv = ["finetune", "vit_mnist_tiny", "--data", f"hf:{saved}", "--stream", "--out", str(tmp_path / "run")]
    assert main(argv) != 0
    assert "--stream applies to --data folder PATH; hf is always decoded into memory" in capsys.readouterr().err


def test_a_dataset_too_large_for_memory_is_refused_with_the_way_out(saved: Path) -> None:
    with pytest.raises(HFDataError, match=r"16 images decoded would take .* use --data folder PATH"):
        load_hf_dataset(str(saved), store_size=16, memory_budget=1000)


def test_offline_mode_is_restored_afterwards(saved: Path) -> None:
    before = {
        name: getattr(datasets.config, name)
        for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
        if hasattr(datasets.config, name)
    }
    load_hf_dataset(str(saved), store_size=16)
    assert {name: getattr(datasets.config, name) for name in before} == before
