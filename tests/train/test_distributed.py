"""vitzoo/train/distributed.py: two processes under torchrun (gloo on CPU) end with identical weights."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # subprocesses: `pytest -m "not slow"` skips them

HERE = Path(__file__).resolve().parent


def test_two_processes_train_in_lockstep(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}
    # Own session: on a timeout the launcher AND its workers are killed, none left behind.
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(HERE / "_worker.py"),
            "ddp",
            str(tmp_path),
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
