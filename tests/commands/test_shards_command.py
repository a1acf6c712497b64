"""`vitzoo shards FOLDER OUT` (vitzoo/commands/shards.py), and `vitzoo finetune --data wds:OUT` on what it wrote."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from PIL import Image

from vitzoo.cli import main

from .training import finetune


def _folder(root: Path) -> Path:
    for split, count in (("train", 6), ("val", 2)):
        for c, colour in enumerate([(250, 20, 20), (20, 20, 250)]):
            (root / split / f"class{c}").mkdir(parents=True)
            for i in range(count):
                Image.new("RGB", (30 + i, 28), colour).save(root / split / f"class{c}" / f"{i}.jpg")
    return root


def test_shards_writes_bounded_atomic_shards_and_finetune_reads_them(
    tmp_path: Path, capsys, tiny_models, one_thread
) -> None:
    folder, out = _folder(tmp_path / "imgs"), tmp_path / "shards"
    assert main(["shards", str(folder), str(out), "--max-size", "12KB", "--json"]) == 0
    summaries = json.loads(capsys.readouterr().out)
    assert [(s["split"], s["samples"]) for s in summaries] == [("train", 12), ("val", 4)]
    for s in summaries:
        assert len(s["shards"]) > 1 and all(Path(p).stat().st_size <= 12000 for p in s["shards"])
        with tarfile.open(s["shards"][0]) as tar:
            names = tar.getnames()
        assert names[0].endswith(".jpg") and names[1] == names[0].replace(".jpg", ".cls")
    assert (out / "classes.txt").read_text() == "class0\nclass1\n"
    assert not [p for p in out.rglob("*") if p.is_file() and not p.name.endswith((".tar", ".txt"))]  # no temporaries
    # a non-empty OUT is refused unless asked
    assert main(["shards", str(folder), str(out)]) == 1
    assert "is not empty; choose a new output folder or pass --overwrite" in capsys.readouterr().err
    assert main(["shards", str(folder), str(out), "--overwrite", "--max-count", "100"]) == 0
    assert sorted(p.name for p in (out / "train").iterdir()) == ["shard-000000.tar"]
    capsys.readouterr()
    run = tmp_path / "run"
    args = ["--data", f"wds:{out}", "--epochs", "1", "--batch-size", "4", "--workers", "0", "--no-progress"]
    assert finetune("test_tiny_vit", *args, "--out", str(run)) == 0
    record = json.loads((run / "run.json").read_text())
    assert (record["train_images"], record["val_images"], record["streamed"]) == (12, 4, True)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["step"] == 3  # 12 samples, every one once, in batches of 4


def test_shards_refuses_what_it_cannot_write(tmp_path: Path, capsys) -> None:
    assert main(["shards", str(tmp_path / "nothing"), str(tmp_path / "out")]) == 1
    assert "image folder" in capsys.readouterr().err
    assert main(["shards", str(tmp_path), str(tmp_path / "out"), "--max-size", "1x"]) == 2
    assert "expected a size such as 1GB, 500MB or 64MiB, got '1x'" in capsys.readouterr().err


def test_shards_refuses_an_output_inside_its_input(tmp_path: Path, capsys) -> None:
    folder = _folder(tmp_path / "imgs")
    assert main(["shards", str(folder), str(folder / "inside")]) == 1
    err = capsys.readouterr().err
    assert f"output folder {folder / 'inside'} and image folder {folder} are the same or one holds the other" in err
    assert not (folder / "inside").exists()


def test_shards_refuses_a_max_size_out_of_range_naming_the_range(tmp_path: Path, capsys) -> None:
    for size in ("9" * 400, "2TB", "1KB"):
        assert main(["shards", str(tmp_path), str(tmp_path / "out"), "--max-size", size]) == 2
        err = capsys.readouterr().err
        assert "argument --max-size: expected a size in bytes in [10240, 1e+12] (one tar record to 1TB" in err
        assert "Traceback" not in err
