"""`vitzoo predict MODEL DIR... --output FILE`: streaming a folder tree of photos to CSV / JSON lines
(vitzoo/predict.py behind the CLI)."""

from __future__ import annotations

import csv
import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from skimage import data as skdata

import vitzoo
from vitzoo import cli, predict
from vitzoo.data import eval_transform

LABELS = tuple(f"class_{c}" for c in "abcdefghij")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    model = vitzoo.create("vit_mnist_tiny").eval()
    model.pretrained_cfg = model.pretrained_cfg.replace(label_names=LABELS)
    path = tmp_path_factory.mktemp("weights") / "w"
    model.save_pretrained(path)
    return path, model


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> tuple[Path, list[str], Path]:
    """root/ with nested folders of small real photos (PNG and JPEG, RGB and gray) and one corrupt
    file; returns (root, the readable image paths sorted, the corrupt one)."""
    root = tmp_path_factory.mktemp("photos")
    pictures = {
        "astronaut": skdata.astronaut(),
        "coffee": skdata.coffee(),
        "chelsea": skdata.chelsea(),
        "camera": skdata.camera(),
        "rocket": skdata.rocket(),
    }
    layout = [
        ("astronaut", "a/astronaut.png"),
        ("coffee", "a/b/coffee.jpg"),
        ("chelsea", "a/b/c/chelsea.jpeg"),
        ("camera", "camera.png"),
        ("rocket", "z/rocket.JPG"),
        ("chelsea", "z/deep/er/chelsea_small.png"),
    ]
    paths = []
    for name, rel in layout:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        img = Image.fromarray(pictures[name])
        img.thumbnail((48, 48))
        img.save(path)
        paths.append(str(path))
    (root / "a" / "notes.txt").write_text("not an image, not listed")
    corrupt = root / "a" / "b" / "broken.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    return root, sorted(paths), corrupt


def expected_probs(model: torch.nn.Module, paths: list[str]) -> torch.Tensor:
    tf = eval_transform(model)
    with torch.no_grad():
        return model(torch.stack([tf(Image.open(p)) for p in paths])).softmax(-1)


def test_folder_to_csv(tmp_path, capsys, weights, photos):
    wdir, model = weights
    root, readable, corrupt = photos
    out_file = tmp_path / "preds.csv"
    code, out, err = run(
        capsys, "predict", "vit_mnist_tiny", str(root), "--weights", str(wdir), "--output", str(out_file), "--topk", "3"
    )
    assert code == 0, err
    assert out.strip() == f"wrote 6 prediction(s) to {out_file} (csv); skipped 1 unreadable image(s)"
    # One warning line, with the count and the file, and the progress bar on stderr.
    warning = [line for line in err.splitlines() if line.startswith("vitzoo: warning:")]
    assert len(warning) == 1 and "skipped 1 unreadable image(s) of 7" in warning[0] and str(corrupt) in warning[0]
    assert "predict" in err and "img" in err

    with open(out_file, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    header = ["image"] + [f"top{r}_{c}" for r in (1, 2, 3) for c in ("index", "label", "prob")]
    assert rows[0] == header
    assert [r[0] for r in rows[1:]] == readable  # sorted, nested folders included, the corrupt one left out
    probs = expected_probs(model, readable)
    for row, p in zip(rows[1:], probs):
        top = p.topk(3)
        assert [int(row[i]) for i in (1, 4, 7)] == top.indices.tolist()
        assert [row[i] for i in (2, 5, 8)] == [LABELS[i] for i in top.indices.tolist()]
        got = [float(row[i]) for i in (3, 6, 9)]
        assert got == pytest.approx(top.values.tolist(), abs=1e-5)
        assert got == sorted(got, reverse=True) and sum(got) <= 1 + 1e-6
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # the temporary file was renamed


def test_folder_to_jsonl_full_softmax(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    root, readable, _ = photos
    out_file = tmp_path / "preds.jsonl"
    code, out, err = run(
        capsys, "predict", "vit_mnist_tiny", str(root), "--weights", str(wdir), "--output", str(out_file),
        "--topk", "50", "--json", "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out) == {"output": str(out_file), "format": "jsonl", "images": 6, "skipped": [str(photos[2])]}
    assert "predict:" not in err  # --no-progress
    records = [json.loads(line) for line in out_file.read_text().splitlines()]
    assert [r["image"] for r in records] == readable
    for r in records:
        preds = r["predictions"]
        assert len(preds) == 10  # top-k capped at the number of classes: the full softmax
        assert sum(p["probability"] for p in preds) == pytest.approx(1.0, abs=1e-5)
        assert sorted(p["index"] for p in preds) == list(range(10))
        assert all(p["label"] == LABELS[p["index"]] for p in preds)


def test_strict_makes_an_unreadable_image_an_error(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    root, _, corrupt = photos
    out_file = tmp_path / "preds.csv"
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(root), "--weights", str(wdir), "--output", str(out_file), "--strict",
        "--no-progress",
    )  # fmt: skip
    assert code == 1
    assert len(err.splitlines()) == 1 and err.startswith(f"vitzoo: error: cannot read image {str(corrupt)!r}: ")
    assert err.rstrip().endswith("(--strict)")
    assert not out_file.exists() and not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_strict_raises_the_readers_unreadable_image_error(weights, photos):
    """One class for an unreadable image: the reader's (vitzoo.data.folder), raised here naming the file."""
    from vitzoo.data.folder import UnreadableImageError

    wdir, _ = weights
    _, _, corrupt = photos
    assert predict.UnreadableImageError is UnreadableImageError and issubclass(UnreadableImageError, ValueError)
    model = vitzoo.create("vit_mnist_tiny", weights=str(wdir))
    with pytest.raises(UnreadableImageError, match=rf"cannot read image {str(corrupt)!r}: .* \(--strict\)"):
        list(predict.predict_images(model, [str(corrupt)], strict=True, progress=False))


def test_workers_and_batch_size_do_not_change_results(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    root, _, _ = photos
    outputs = []
    for workers, batch in [("0", "1"), ("0", "4"), ("2", "4"), ("2", "1")]:
        out_file = tmp_path / f"w{workers}_b{batch}.jsonl"
        code, _, err = run(
            capsys, "predict", "vit_mnist_tiny", str(root), "--weights", str(wdir), "--output", str(out_file),
            "--workers", workers, "--batch-size", batch, "--topk", "3", "--no-progress",
        )  # fmt: skip
        assert code == 0, err
        outputs.append([json.loads(line) for line in out_file.read_text().splitlines()])
    # Same images in the same order and the same top-3 classes; probabilities equal to float rounding
    # (a batch of 1 and a batch of 4 may take different matmul kernels).
    for other in outputs[1:]:
        assert [r["image"] for r in other] == [r["image"] for r in outputs[0]]
        for a, b in zip(outputs[0], other):
            assert [p["index"] for p in a["predictions"]] == [p["index"] for p in b["predictions"]]
            assert [p["probability"] for p in a["predictions"]] == pytest.approx(
                [p["probability"] for p in b["predictions"]], abs=1e-6
            )
    assert outputs[2] == outputs[1] and outputs[3] == outputs[0]  # workers alone change nothing, bit for bit


def test_files_and_folders_mixed_format_option(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    root, readable, _ = photos
    out_file = tmp_path / "preds.txt"
    argv = ["predict", "vit_mnist_tiny", str(root / "z"), readable[0], "--weights", str(wdir), "--no-progress"]
    code, _, err = run(capsys, *argv, "--output", str(out_file))
    assert code == 2 and "cannot tell the format of output" in err and "--format" in err
    code, _, err = run(capsys, *argv, "--output", str(out_file), "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(out_file.open(newline="")))
    assert [r[0] for r in rows[1:]] == sorted([readable[0], *(p for p in readable if "/z/" in p)])


def test_symlinks_are_not_followed_out_of_the_folder(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    _, readable, _ = photos
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8), np.uint8)).save(tree / "sub" / "own.png")
    (tree / "loop").symlink_to(tree)  # a loop
    (tree / "outside.png").symlink_to(readable[0])  # a file out of the folder
    (tree / "inside.png").symlink_to(tree / "sub" / "own.png")  # kept
    out_file = tmp_path / "p.jsonl"
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(tree), "--weights", str(wdir), "--output", str(out_file),
        "--no-progress",
    )  # fmt: skip
    assert code == 0, err
    images = [json.loads(line)["image"] for line in out_file.read_text().splitlines()]
    assert images == [str(tree / "inside.png"), str(tree / "sub" / "own.png")]
    assert "skipped 2 symbolic link(s)" in err and "loop" in err and "outside.png" in err


def test_bad_arguments(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    root, _, _ = photos
    base = ["predict", "vit_mnist_tiny", str(root), "--weights", str(wdir)]
    code, _, err = run(capsys, *base, "--batch-size", "0", "--output", str(tmp_path / "p.csv"))
    assert code == 2 and "--batch-size must be >= 1" in err
    code, _, err = run(capsys, *base, "--workers", "-1", "--output", str(tmp_path / "p.csv"))
    assert code == 2 and "--workers must be >= 0" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run(
        capsys, "predict", "vit_mnist_tiny", str(tmp_path / "empty"), "--output", str(tmp_path / "p.csv")
    )
    assert code == 1 and f"folder {str(tmp_path / 'empty')!r} holds no images" in err
    # Without --output a folder prints the table; an unreadable image there is an error, as before.
    code, _, err = run(capsys, *base)
    assert code == 1 and "cannot read image" in err and "broken.png" in err
    code, out, err = run(capsys, "predict", "vit_mnist_tiny", str(root / "z"), "--weights", str(wdir), "--json")
    assert code == 0, err
    assert [r["image"] for r in json.loads(out)] == sorted(str(p) for p in (root / "z").rglob("*.*"))


def test_dtype_bf16_predicts_like_fp32_and_auto_says_what_it_picked(capsys, weights, photos, tmp_path, monkeypatch):
    from vitzoo import precision

    path, _ = weights
    root, _, _ = photos
    outs = {}
    for dtype in ("fp32", "bf16"):
        out = tmp_path / f"{dtype}.jsonl"
        code, _, err = run(
            capsys,
            "predict",
            "vit_mnist_tiny",
            str(root),
            "--weights",
            str(path),
            "--output",
            str(out),
            "--dtype",
            dtype,
            "--workers",
            "0",
            "--no-progress",
            "--topk",
            "1",
        )
        assert code == 0, err
        outs[dtype] = [json.loads(line) for line in out.read_text().splitlines()]
    fp32, bf16 = outs["fp32"], outs["bf16"]
    assert [r["image"] for r in bf16] == [r["image"] for r in fp32]
    # bf16 keeps about 3 significant digits: the top class holds unless two were nearly tied
    for a, b in zip(fp32, bf16):
        pa, pb = a["predictions"][0], b["predictions"][0]
        assert pa["index"] == pb["index"] or abs(pa["probability"] - pb["probability"]) < 0.02
    monkeypatch.setattr(precision, "native_bf16_flags", lambda: ())
    code, _, err = run(
        capsys,
        "predict",
        "vit_mnist_tiny",
        str(root),
        "--weights",
        str(path),
        "--output",
        str(tmp_path / "auto.jsonl"),
        "--dtype",
        "auto",
        "--workers",
        "0",
        "--no-progress",
    )
    assert code == 0 and "predicting in fp32: " in err and "no native bf16" in err


def test_default_workers_use_only_the_cores_torch_leaves_free(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(2)), raising=False)
    assert predict.default_workers() == 0  # every core already runs a torch thread
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert predict.default_workers() == 4  # spare cores decode, at most 4 processes


def _strict_json(line: str):
    """json.loads that refuses NaN / Infinity, as every JSON parser but Python's does."""

    def refuse(name: str):
        raise ValueError(f"{name} is not JSON")

    return json.loads(line, parse_constant=refuse)


def test_non_finite_probabilities_are_null_in_json_lines(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    broken = vitzoo.from_pretrained(wdir)
    with torch.no_grad():
        broken.head.weight[0, 0] = float("nan")  # one NaN weight: every probability is NaN
    broken.eval()
    image = photos[1][0]
    # `vitzoo predict` refuses such weights (tests/commands/test_predict.py); the writer still gets
    # NaN from the Python API, or from a computation that overflows.
    for suffix, written in ((".jsonl", "null"), (".csv", "nan")):
        out_file = tmp_path / f"preds{suffix}"
        records = predict.predict_images(broken, [image], topk=2, workers=0, progress=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert predict.write_predictions(records, out_file, topk=2) == 1
        warning = [str(w.message) for w in caught if "not finite" in str(w.message)]
        assert len(warning) == 1 and "1 of 1 image(s)" in warning[0] and f"written as {written}" in warning[0]
    (record,) = [_strict_json(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert record["image"] == image and [p["probability"] for p in record["predictions"]] == [None, None]
    with open(tmp_path / "preds.csv", newline="", encoding="utf-8") as f:
        assert list(csv.reader(f))[1][3] == "nan"


@pytest.mark.skipif(os.name != "posix", reason="file names of arbitrary bytes")
def test_file_names_that_are_not_utf8_are_written_escaped(tmp_path, capsys, weights, photos):
    wdir, _ = weights
    folder = tmp_path / "photos"
    folder.mkdir()
    raw = os.fsencode(folder) + b"/caf\xe9.png"  # Latin-1 e-acute: not UTF-8
    try:
        with open(raw, "wb") as f:
            f.write(Path(photos[1][0]).read_bytes())
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    for suffix in (".csv", ".jsonl"):
        out_file = tmp_path / f"preds{suffix}"
        code, out, err = run(
            capsys, "predict", "vit_mnist_tiny", str(folder), "--weights", str(wdir),
            "--output", str(out_file), "--no-progress",
        )  # fmt: skip
        assert code == 0, err
        assert out.strip() == f"wrote 1 prediction(s) to {out_file} ({suffix[1:]})"
    (record,) = [_strict_json(line) for line in (tmp_path / "preds.jsonl").read_text(encoding="utf-8").splitlines()]
    assert os.fsencode(record["image"]) == raw  # the JSON string is the name, escaped: its very bytes
    with open(tmp_path / "preds.csv", newline="", encoding="utf-8") as f:  # valid UTF-8
        assert list(csv.reader(f))[1][0] == str(folder) + "/caf\\xe9.png"


def test_sigmoid_activation_scores_each_class_on_its_own(weights, photos):
    """activation="sigmoid" (SigLIP's zero-shot): each probability is sigmoid(logit), not a share."""
    _, model = weights
    _, readable, _ = photos
    records = list(
        predict.predict_images(model, readable[:2], topk=10, workers=0, progress=False, activation="sigmoid")
    )
    tf = eval_transform(model)
    with torch.no_grad():
        logits = model(torch.stack([tf(Image.open(p)) for p in readable[:2]]))
    for record, row in zip(records, logits.sigmoid()):
        for p in record["predictions"]:
            assert p["probability"] == pytest.approx(float(row[p["index"]]), abs=1e-6)
    with pytest.raises(ValueError, match="activation"):
        next(predict.predict_images(model, readable[:1], activation="tanh"))
