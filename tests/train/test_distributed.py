"""vitzoo/train/distributed.py: two processes under torchrun (gloo on CPU) end with identical weights."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _worker import TINY
from safetensors.torch import load_file

import vitzoo

pytestmark = pytest.mark.slow  # subprocesses: `pytest -m "not slow"` skips them

HERE = Path(__file__).resolve().parent


def _torchrun(script: str, *args: str) -> None:
    """Run `script` in 2 processes under torchrun (gloo on CPU); fail with its output if it fails."""
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)  # the caller's vitzoo
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    # Own session: on a timeout the launcher AND its workers are killed, none left behind.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(HERE / script),
            *args,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError("torchrun with 2 processes did not finish in 120 s:\n" + output[-3000:]) from None
    assert proc.returncode == 0, output[-3000:]


def test_two_processes_train_in_lockstep(tmp_path: Path) -> None:
    _torchrun("_worker.py", "ddp", str(tmp_path), "lora")
    rank0, rank1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    assert rank0.keys() == rank1.keys()
    for key in rank0:  # rank 1 started from a different head: DDP broadcast rank 0's weights
        assert torch.equal(rank0[key], rank1[key]), key
    # only rank 0 wrote the run files, and its checkpoint holds the same weights
    checkpoint = load_file(tmp_path / "checkpoint.safetensors")
    assert all(torch.equal(checkpoint[f"model.{k}"], v) for k, v in rank0.items())
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # one record per epoch, not one per rank
    assert '"val_acc"' in lines[-1]
    # then LoRA in the same processes: DDP reduces the adapters' and the head's gradients only, and
    # the ranks end with the same adapters; the frozen weights are rank 0's initial ones on both
    lora0, lora1 = (load_file(tmp_path / "lora" / f"rank{r}.safetensors") for r in (0, 1))
    assert any("lora_B" in k for k in lora0) and lora0.keys() == lora1.keys()
    for key in lora0:
        assert torch.equal(lora0[key], lora1[key]), key
    torch.manual_seed(0)
    initial = vitzoo.create("vit_mnist", **TINY).state_dict()  # test_tiny_vit, as the worker built it
    frozen = [k for k in initial if not k.startswith("head.")]
    assert all(torch.equal(lora0[k], initial[k]) for k in frozen)
    assert not torch.equal(lora0["head.weight"], initial["head.weight"])


def test_two_processes_stream_a_folder_through_worker_processes(tmp_path: Path) -> None:
    """Under DDP each rank streams its DistributedSampler slice through 2 DataLoader workers; the
    ranks stay in lockstep and end where the same run without workers ends."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c, name in enumerate(("red", "green", "blue")):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(8):
            pixels = torch.randint(0, 90, (24 + i, 36 - i, 3), generator=g, dtype=torch.uint8)
            pixels[..., c] += 160
            Image.fromarray(pixels.numpy()).save(tmp_path / "photos" / name / f"{i}.jpg")
    _torchrun("_stream_worker.py", str(tmp_path / "photos"), str(tmp_path), "2", "0")  # both runs, one launch
    runs = {w: [load_file(tmp_path / f"workers{w}" / f"rank{r}.safetensors") for r in (0, 1)] for w in (2, 0)}
    for key, value in runs[2][0].items():
        assert torch.equal(value, runs[2][1][key]) and torch.equal(value, runs[0][0][key]), key
    metrics = (tmp_path / "workers2" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 2 and '"val_acc"' in metrics[-1]


def test_two_processes_train_naflex_batches_in_lockstep(tmp_path: Path) -> None:
    """NaFlex (vitzoo/data/naflex_train.py): each rank its share of the mixed-aspect images in batches
    of the shared token schedule; the ranks end with the same weights, rank 0 writes the run."""
    pytest.importorskip("skimage", reason="the photos are scikit-image's")
    from vitzoo.data.photo_crops import build_photo_crops

    crops = build_photo_crops(tmp_path / "crops", train=5, val=3, sides=(20, 48), seed=0)
    _torchrun("_naflex_worker.py", str(crops), str(tmp_path / "run"))
    rank0, rank1 = (load_file(tmp_path / "run" / f"rank{r}.safetensors") for r in (0, 1))
    for key in rank0:
        assert torch.equal(rank0[key], rank1[key]), key
    checkpoint = load_file(tmp_path / "run" / "checkpoint.safetensors")
    assert all(torch.equal(checkpoint[f"model.{k}"], v) for k, v in rank0.items())
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == 2
