"""`vitzoo finetune --naflex` through the command line: flags that do not go together are refused
before anything is written, and a tiny ViT trained on a folder of mixed-aspect crops of photos
learns (its loss falls, its accuracy ends well above chance) and records the NaFlex settings; a
run killed with SIGKILL and resumed ends with the weights of an uninterrupted one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vitzoo import cli
from vitzoo.train.checkpoint import read_checkpoint_meta

from .training import TRAIN_TESTS as HERE
from .training import finetune

pytest.importorskip("skimage", reason="the photos are scikit-image's")
pytestmark = pytest.mark.usefixtures("tiny_models", "one_thread")


@pytest.fixture(scope="module")
def crops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of 4 photos' crops, aspect ratios 1:3 to 3:1, 20 to 48 px on the longer side."""
    from vitzoo.data.photo_crops import build_photo_crops

    return build_photo_crops(tmp_path_factory.mktemp("naflex") / "crops", train=12, val=6, sides=(20, 48), seed=0)


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["--max-patches", "16"], 1, r"--max-patches without --naflex: add --naflex"),
        (["--naflex", "--teacher", "deit_ti16"], 1, r"--naflex and --teacher: a distillation teacher takes square"),
        (["--naflex", "--in-memory"], 1, r"--naflex and --in-memory: NaFlex reads each file at its own size"),
        (
            ["--naflex", "--seq-lens", "8,0"],
            2,
            r"argument --seq-lens: '8,0': expected comma-separated sequence lengths",
        ),
        (["--naflex", "--max-tokens", "0"], 2, r"argument --max-tokens: expected an int >= 1 \(patches per batch"),
    ],
)
def test_flags_that_do_not_go_together_are_refused(
    argv: list[str], code: int, message: str, crops: Path, tmp_path: Path, capsys
) -> None:
    out = tmp_path / "run"
    assert cli.main(["finetune", "test_tiny_rgb", "--data", "folder", str(crops), *argv, "--out", str(out)]) == code
    assert re.search(message, capsys.readouterr().err)
    assert not out.exists()


def test_a_tiny_vit_learns_the_photos_from_mixed_aspect_crops(crops: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    argv = ["--data", "folder", str(crops), "--naflex", "--seq-lens", "4,8,16", "--epochs", "4", "--batch-size", "8"]
    argv += ["--lr", "3e-3", "--warmup-epochs", "1", "--seed", "0", "--threads", "1", "--out", str(out)]
    assert finetune("test_tiny_rgb", *argv, "--no-progress") == 0
    command = re.search(r"evaluate with  (vitzoo eval .*)", capsys.readouterr().out).group(1).split()
    assert command[-3:] == ["--naflex", "--max-patches", "16"]  # as the run evaluated: the model's grid
    assert cli.main(command[1:]) == 0
    best = max(json.loads(line)["val_acc"] for line in (out / "metrics.jsonl").read_text().splitlines())
    assert f"{100 * best:.2f}%" in capsys.readouterr().out  # best/ evaluates as the run did
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(history) == 4
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert max(r["val_acc"] for r in history) >= 0.5  # 4 classes: chance is 0.25
    run = json.loads((out / "run.json").read_text())
    assert run["streamed"] is True and run["train_images"] == 48
    assert run["train_config"]["naflex"] is True and run["train_config"]["seq_lens"] == "4,8,16"


def test_naflex_trains_on_tar_shards_of_the_folder(crops: Path, tmp_path: Path, capsys) -> None:
    """`vitzoo shards` of the crops, then `--data wds:` with `--naflex`: each sample read by offset
    from its shard at its own size; the same images train as from the folder."""
    shards = tmp_path / "shards"
    assert cli.main(["shards", str(crops / "train"), str(shards)]) == 0
    out = tmp_path / "run"
    argv = ["--data", f"wds:{shards}", "--naflex", "--seq-lens", "4,8", "--epochs", "1", "--batch-size", "8"]
    assert finetune("test_tiny_rgb", *argv, "--seed", "0", "--threads", "1", "--no-progress", "--out", str(out)) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["train_config"]["naflex"] is True
    assert run["train_images"] + run["val_images"] == 48  # the folder's training crops, a share held out


@pytest.mark.slow
def test_kill_9_then_resume_ends_with_the_weights_of_an_uninterrupted_run(crops: Path, tmp_path: Path, capsys) -> None:
    common = ["--data", "folder", str(crops), "--naflex", "--seq-lens", "4,8,16", "--max-tokens", "32"]
    common += ["--mixup", "0.8", "--cutmix", "1.0", "--erase", "0.5", "--epochs", "6", "--seed", "3"]
    common += ["--threads", "1", "--no-progress"]
    killed = tmp_path / "killed"
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)  # the caller's vitzoo
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_worker.py"), "cli", "test_tiny_rgb", *common, "--out", str(killed)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None and not (killed / "checkpoint.safetensors").is_file():
        time.sleep(0.01)
    time.sleep(0.3)  # land somewhere inside a later epoch (or inside a checkpoint write)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert 1 <= read_checkpoint_meta(killed / "checkpoint.safetensors")["state"]["epoch"] < 6

    assert finetune("test_tiny_rgb", *common, "--out", str(killed), "--resume") == 0
    reference = tmp_path / "reference"
    assert finetune("test_tiny_rgb", *common, "--out", str(reference)) == 0
    a, b = load_file(killed / "checkpoint.safetensors"), load_file(reference / "checkpoint.safetensors")
    model_keys = [k for k in a if k.startswith("model.")]
    assert model_keys and all(torch.equal(a[k], b[k]) for k in model_keys)
    assert [json.loads(line)["val_acc"] for line in (killed / "metrics.jsonl").read_text().splitlines()] == [
        json.loads(line)["val_acc"] for line in (reference / "metrics.jsonl").read_text().splitlines()
    ]
